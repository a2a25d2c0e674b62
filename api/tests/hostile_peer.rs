//! A peer that lies: forged keys, accesses outside a region or without its protection, and raw
//! garbage on the wire. Each fails with a status; the target's memory is unchanged and its worker
//! keeps serving honest peers.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::net::{collecting_listener, wait, AcceptedAll};
use common::raw::{op_frame, raw_frame};
use proptest::prelude::*;
use zcx::{
    AtomicOp, AtomicSize, Context, Endpoint, EpParams, Features, MemHandle, MemMapParams, Prot,
    RequestParams, Status, TagSendParams, Worker, WorkerParams,
};
use zcx_control::RkeyWire;
use zcx_dataplane::proto::wire::Op;

struct Target {
    ctx: Context,
    server: Worker,
    client: Worker,
    ep: Endpoint,
    listener: zcx::Listener,
    _server_eps: AcceptedAll,
}

fn target() -> Target {
    let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AMO64).unwrap();
    let server = ctx.create_worker(&WorkerParams::default()).unwrap();
    let client = ctx.create_worker(&WorkerParams::default()).unwrap();
    let (listener, eps) = collecting_listener(&server);
    let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
    Target { ctx, server, client, ep, listener, _server_eps: eps }
}

fn region(ctx: &Context, prot: Prot) -> MemHandle {
    let memh = ctx.mem_map(&MemMapParams::alloc(1 << 16).prot(prot)).unwrap();
    // SAFETY: 64 KiB mapped by the handle.
    unsafe { std::ptr::write_bytes(memh.address(), 0x5A, 1 << 16) };
    memh
}

fn snapshot(memh: &MemHandle) -> Vec<u8> {
    // SAFETY: the handle's bytes are mapped.
    unsafe { std::slice::from_raw_parts(memh.address(), memh.length()) }.to_vec()
}

const RW: Prot = Prot::LOCAL_READ.union(Prot::LOCAL_WRITE).union(Prot::REMOTE_READ).union(Prot::REMOTE_WRITE);

#[test]
fn forged_key_is_refused_and_touches_nothing() {
    let t = target();
    let memh = region(&t.ctx, RW);
    let before = snapshot(&memh);
    let mut wire = RkeyWire::decode(&memh.rkey_pack().unwrap()).unwrap();
    wire.access_key[0] ^= 1;
    let forged = t.ep.rkey_unpack(&wire.encode()).unwrap();
    let base = memh.address() as u64;
    let both = [&t.client, &t.server];
    let put = t.ep.put(vec![1u8; 64], base, &forged, RequestParams::default()).unwrap();
    assert_eq!(wait(&both, put).unwrap_err(), Status::InvalidParam);
    let get = t.ep.get(vec![0u8; 64], base, &forged, RequestParams::default()).unwrap();
    assert_eq!(wait(&both, get).unwrap_err(), Status::InvalidParam);
    let amo =
        t.ep.atomic(AtomicOp::Add, AtomicSize::U64, 1, 0, base, &forged, RequestParams::default()).unwrap();
    assert_eq!(wait(&both, amo).unwrap_err(), Status::InvalidParam);
    // A forged region id with the right key is the same error: ids cannot be probed.
    let mut wire = RkeyWire::decode(&memh.rkey_pack().unwrap()).unwrap();
    wire.region_id ^= 0x55;
    let other = t.ep.rkey_unpack(&wire.encode()).unwrap();
    let put = t.ep.put(vec![1u8; 8], base, &other, RequestParams::default()).unwrap();
    assert_eq!(wait(&both, put).unwrap_err(), Status::InvalidParam);
    assert!(snapshot(&memh) == before);
}

#[test]
fn out_of_bounds_and_missing_protection_are_refused() {
    let t = target();
    let both = [&t.client, &t.server];
    let read_only = region(&t.ctx, Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ);
    let before = snapshot(&read_only);
    let rkey = t.ep.rkey_unpack(&read_only.rkey_pack().unwrap()).unwrap();
    let base = read_only.address() as u64;
    // Refused by the target, or at once where the key itself shows the access is not allowed.
    let put = outcome(&both, t.ep.put(vec![1u8; 8], base, &rkey, RequestParams::default()));
    assert_eq!(put.unwrap_err(), Status::InvalidParam, "put without REMOTE_WRITE");
    let amo = t.ep.atomic(AtomicOp::Swap, AtomicSize::U64, 1, 0, base, &rkey, RequestParams::default());
    assert_eq!(outcome(&both, amo).unwrap_err(), Status::InvalidParam, "atomic without REMOTE_WRITE");
    // Reading is allowed.
    let got = wait(&both, t.ep.get(vec![0u8; 16], base, &rkey, RequestParams::default()).unwrap()).unwrap();
    assert_eq!(got.buf, vec![0x5A; 16]);
    assert!(snapshot(&read_only) == before);

    let rw = region(&t.ctx, RW);
    let before = snapshot(&rw);
    let rkey = t.ep.rkey_unpack(&rw.rkey_pack().unwrap()).unwrap();
    let base = rw.address() as u64;
    let len = rw.length() as u64;
    for (addr, n) in [(base + len, 1usize), (base - 1, 2), (base + len - 4, 8), (u64::MAX - 2, 8), (0, 8)] {
        let put = outcome(&both, t.ep.put(vec![9u8; n], addr, &rkey, RequestParams::default()));
        assert_eq!(put.unwrap_err(), Status::InvalidAddr, "put of {n} at {addr:#x}");
        let get = outcome(&both, t.ep.get(vec![0u8; n], addr, &rkey, RequestParams::default()));
        assert_eq!(get.unwrap_err(), Status::InvalidAddr, "get of {n} at {addr:#x}");
    }
    // A large put straddling the end: refused before any fragment lands.
    assert!(outcome(&both, t.ep.put(vec![7u8; 1 << 20], base, &rkey, RequestParams::default())).is_err());
    assert!(snapshot(&rw)[..] == before[..], "refused put modified the region");
    // After unmap the key is dead.
    let rkey_bytes = rw.rkey_pack().unwrap();
    drop(rw);
    let dead = t.ep.rkey_unpack(&rkey_bytes).unwrap();
    let put = t.ep.put(vec![1u8; 8], base, &dead, RequestParams::default()).unwrap();
    assert_eq!(wait(&both, put).unwrap_err(), Status::InvalidParam);
}

/// How an operation ends: refused at once (the initiator's own checks, or a direct access over
/// shared memory with a key the owner vouched for) or by the target.
fn outcome<B: Send + 'static>(
    workers: &[&Worker],
    issued: zcx::Result<zcx::Request<B>>,
) -> Result<(), Status> {
    wait(workers, issued?).map(drop)
}

/// Writes one placed frame (the form rendezvous data takes): flagged length word, payload length,
/// header, then the payload.
fn raw_placed(stream: &mut TcpStream, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
    let mut framed = ((4 + header.len()) as u32 | 1 << 31).to_le_bytes().to_vec();
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    framed.extend_from_slice(header);
    framed.extend_from_slice(payload);
    stream.write_all(&framed)
}

/// After the garbage, an honest client still gets through.
fn still_serves(t: &Target) {
    let recv = t.server.tag_recv(vec![0u8; 5], 77, u64::MAX, RequestParams::default()).unwrap();
    t.ep.tag_send(b"still".to_vec(), 77, TagSendParams::default()).unwrap();
    let got = wait(&[&t.client, &t.server], recv).unwrap();
    assert_eq!(got.buf, b"still");
}

#[test]
fn rma_frames_before_the_handshake_are_refused() {
    let t = target();
    let memh = region(&t.ctx, RW);
    let before = snapshot(&memh);
    let wire = RkeyWire::decode(&memh.rkey_pack().unwrap()).unwrap();
    // Even with the real key, a connection that never completed the handshake may not write.
    let mut raw = TcpStream::connect(t.listener.sockaddr()).unwrap();
    let put = Op::Put {
        req: 1,
        region: wire.region_id,
        key: wire.access_key,
        addr: wire.base,
        len: 32,
        offset: 0,
        ack: true,
    };
    raw_frame(&mut raw, &op_frame(&put, &[0xEE; 32])).unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        t.server.progress();
    }
    assert!(snapshot(&memh) == before);
    still_serves(&t);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random frames, ordinary or placed, and random frames after a valid-looking op header,
    /// never crash the worker or touch registered memory.
    #[test]
    fn garbage_frames_never_crash_the_worker(
        with_hello in any::<bool>(),
        frames in proptest::collection::vec(
            (any::<bool>(), 0u8..0x15, proptest::collection::vec(any::<u8>(), 0..96)),
            1..8,
        ),
    ) {
        let t = target();
        let memh = region(&t.ctx, RW);
        let before = snapshot(&memh);
        let mut raw = TcpStream::connect(t.listener.sockaddr()).unwrap();
        if with_hello {
            // A proper connection request first, so the garbage reaches an accepted endpoint.
            let hello = zcx_control::HandshakeWire::ConnRequest {
                client_id: 1,
                ep_name: "liar".into(),
                err_mode_peer: false,
                client_address: zcx_control::WorkerAddressWire::decode(t.client.address()).unwrap(),
                client_ep_id: 1,
                pair_token: 0,
            };
            raw_frame(&mut raw, &op_frame(&Op::Hello, &hello.encode())).unwrap();
        }
        for (placed, code, body) in &frames {
            let mut frame = vec![*code];
            frame.extend_from_slice(body);
            let sent = if *placed {
                // Header and payload split at a point the body picks.
                let cut = body.first().map_or(0, |b| usize::from(*b) % frame.len());
                raw_placed(&mut raw, &frame[..cut], &frame[cut..])
            } else {
                raw_frame(&mut raw, &frame)
            };
            if sent.is_err() {
                break;
            }
        }
        let deadline = Instant::now() + Duration::from_millis(50);
        while Instant::now() < deadline {
            t.server.progress();
        }
        prop_assert!(snapshot(&memh) == before);
        still_serves(&t);
    }
}
