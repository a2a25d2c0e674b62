//! Photon's buffer rendezvous: `photon_post_recv_buffer_rdma` / `_post_send_buffer_rdma`,
//! `photon_wait_recv_buffer_rdma` / `_wait_send_buffer_rdma`, `photon_get_buffer_remote`,
//! `photon_send_FIN` / `photon_wait_any`-style FIN waits.
//!
//! One side posts a registered buffer to a peer: zcx sends the buffer's address, size, private
//! keys and packed rkey as a tag message in a reserved tag space. The other side waits for it and
//! gets a [`PhotonRequest`]; [`get_buffer_remote`] then returns the peer's buffer, with a remote
//! key bound to the endpoint, so the program can put into (or get from) it, and signal the end with
//! a FIN.

use zcx_control::{Reader, Writer};

use crate::endpoint::{Endpoint, EpRkey};
use crate::photon::{BufferPriv, Registry};
use crate::request::RequestParams;
use crate::status::{fail_with, Result, Status};
use crate::TagSendParams;

/// Reserved tag space: `0x5048_0000_0000_0000 | kind << 32 | user tag` ("PH").
const TAG_SPACE: u64 = 0x5048 << 48;
const KIND_RECV_BUFFER: u64 = 1;
const KIND_SEND_BUFFER: u64 = 2;
const KIND_FIN: u64 = 3;
const MAX_DESCRIPTOR: usize = 4096;

fn photon_tag(kind: u64, tag: u32) -> u64 {
    TAG_SPACE | kind << 32 | u64::from(tag)
}

/// A peer's registered buffer learned through the rendezvous (`photon_buffer_t`).
#[derive(Debug)]
pub struct RemoteBuffer {
    /// The buffer's address in the peer.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its private keys (`photon_buffer_priv_t`).
    pub priv_keys: BufferPriv,
    /// A remote key for RMA on it, bound to the endpoint the descriptor came on.
    pub rkey: EpRkey,
}

/// `photon_rid` of a completed wait: identifies the peer's buffer.
#[derive(Debug)]
pub struct PhotonRequest {
    tag: u32,
    remote: RemoteBuffer,
}

impl PhotonRequest {
    /// The rendezvous tag.
    pub fn tag(&self) -> u32 {
        self.tag
    }
}

/// `photon_get_buffer_remote`: the peer's buffer behind `request`.
pub fn get_buffer_remote(request: &PhotonRequest) -> &RemoteBuffer {
    &request.remote
}

fn post(registry: &Registry, ep: &Endpoint, kind: u64, addr: *mut u8, size: usize, tag: u32) -> Result<()> {
    let priv_keys = registry.get_buffer_private(addr, size)?;
    let rkey = registry.with_handle(addr, size, |memh| memh.rkey_pack())??;
    let mut writer = Writer::new();
    writer.u64(addr as u64);
    writer.u64(size as u64);
    writer.u64(priv_keys.key0);
    writer.u64(priv_keys.key1);
    writer.bytes(rkey.as_bytes());
    let descriptor = writer.into_inner();
    let request = ep.tag_send(descriptor, photon_tag(kind, tag), TagSendParams::default())?;
    request.wait().map(|_| ())
}

/// `photon_post_recv_buffer_rdma`: offers the registered buffer `[addr, addr + size)` to the peer
/// of `ep`, to put into. The buffer must be registered exactly (`register_buffer`).
pub fn post_recv_buffer(
    registry: &Registry,
    ep: &Endpoint,
    addr: *mut u8,
    size: usize,
    tag: u32,
) -> Result<()> {
    post(registry, ep, KIND_RECV_BUFFER, addr, size, tag)
}

/// `photon_post_send_buffer_rdma`: offers the registered buffer to the peer, to get from.
pub fn post_send_buffer(
    registry: &Registry,
    ep: &Endpoint,
    addr: *mut u8,
    size: usize,
    tag: u32,
) -> Result<()> {
    post(registry, ep, KIND_SEND_BUFFER, addr, size, tag)
}

fn wait_buffer(ep: &Endpoint, kind: u64, tag: u32) -> Result<PhotonRequest> {
    let worker = ep.worker();
    let request = worker.tag_recv(
        vec![0u8; MAX_DESCRIPTOR],
        photon_tag(kind, tag),
        u64::MAX,
        RequestParams::default(),
    )?;
    let done = request.wait()?;
    let bytes = &done.buf[..done.info.length];
    let bad = |what: &str| fail_with(Status::InvalidParam, format!("photon descriptor: {what}"));
    let mut reader = Reader::new(bytes);
    let addr = reader.u64().map_err(|_| bad("truncated"))?;
    let size = reader.u64().map_err(|_| bad("truncated"))?;
    let key0 = reader.u64().map_err(|_| bad("truncated"))?;
    let key1 = reader.u64().map_err(|_| bad("truncated"))?;
    let packed = reader.bytes(reader.remaining()).map_err(|_| bad("truncated"))?;
    let rkey = ep.rkey_unpack(packed)?;
    let wire = rkey.remote_key();
    if addr < wire.base() || addr.checked_add(size).is_none_or(|end| end > wire.base() + wire.length()) {
        return Err(bad("buffer outside its key"));
    }
    Ok(PhotonRequest { tag, remote: RemoteBuffer { addr, size, priv_keys: BufferPriv { key0, key1 }, rkey } })
}

/// `photon_wait_recv_buffer_rdma`: waits for the peer's posted receive buffer with `tag`.
pub fn wait_recv_buffer(ep: &Endpoint, tag: u32) -> Result<PhotonRequest> {
    wait_buffer(ep, KIND_RECV_BUFFER, tag)
}

/// `photon_wait_send_buffer_rdma`: waits for the peer's posted send buffer with `tag`.
pub fn wait_send_buffer(ep: &Endpoint, tag: u32) -> Result<PhotonRequest> {
    wait_buffer(ep, KIND_SEND_BUFFER, tag)
}

/// `photon_send_FIN`: tells the peer the RMA on its buffer `tag` is done (after a flush, so the
/// data is in place when the FIN arrives).
pub fn send_fin(ep: &Endpoint, tag: u32) -> Result<()> {
    ep.flush()?.wait()?;
    ep.tag_send(Vec::new(), photon_tag(KIND_FIN, tag), TagSendParams::default())?.wait().map(|_| ())
}

/// Waits for the peer's FIN for buffer `tag`.
pub fn wait_fin(ep: &Endpoint, tag: u32) -> Result<()> {
    let request =
        ep.worker().tag_recv(Vec::new(), photon_tag(KIND_FIN, tag), u64::MAX, RequestParams::default())?;
    request.wait().map(|_| ())
}
