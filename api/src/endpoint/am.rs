//! `ucp_am_send_nbx`: active messages with a user header and eager or rendezvous data.

use zcx_dataplane::proto::wire::Op;
use zcx_engine::{AmProtocol, Phase, SendBuffer, Sent};

use std::sync::Arc;

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::tag::recv_into;
use crate::endpoint::Endpoint;
use crate::request::{OpInfo, Request, RequestParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::am::{AmDesc, AmMessage};
use crate::worker::state::Core;
use crate::worker::{Worker, WorkerShared};

/// Largest AM user header (UCP guarantees at least 64 bytes; zcx allows 4 KiB).
pub const MAX_AM_HEADER: usize = 4096;

/// How the data travels (`UCP_AM_SEND_FLAG_EAGER` / `_RNDV`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AmProto {
    /// Eager below the rendezvous threshold, rendezvous above.
    #[default]
    Auto,
    /// Always eager (fails with INVALID_PARAM when the message does not fit one frame).
    Eager,
    /// Always rendezvous: the receiver's handler fetches the data with `recv_data`.
    Rndv,
}

/// Parameters of an AM send.
#[derive(Debug, Default)]
pub struct AmSendParams {
    /// `UCP_AM_SEND_FLAG_REPLY`: the handler gets a reply endpoint.
    pub reply: bool,
    /// Protocol choice.
    pub proto: AmProto,
    /// Completion callback and the like.
    pub request: RequestParams,
}

impl Endpoint {
    /// `ucp_am_send_nbx`: runs the peer's handler for `id` with `header` and `buf`'s bytes.
    pub fn am_send<B: SendBuf>(
        &self,
        id: u16,
        header: &[u8],
        buf: B,
        params: AmSendParams,
    ) -> Result<Request<B>> {
        if header.len() > MAX_AM_HEADER {
            return Err(fail_with(
                Status::InvalidParam,
                format!("AM header of {} bytes exceeds {MAX_AM_HEADER}", header.len()),
            ));
        }
        let bytes = buf.as_bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        let header_len = header.len() as u16;
        if let Some(direct) = self.direct() {
            let whole = header.len() + len;
            let eager = match params.proto {
                AmProto::Auto => whole < direct.rndv_thresh,
                AmProto::Eager => whole <= direct.max_payload,
                AmProto::Rndv => false,
            };
            let frame = Op::am_eager_header(id, params.reply, header_len);
            let sent = eager
                && if header.is_empty() {
                    direct.lane.send(&frame, bytes)
                } else {
                    direct.lane.send_parts(&[&frame, header, bytes])
                };
            if sent {
                return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
            }
        }
        let protocol = match params.proto {
            AmProto::Auto => AmProtocol::Auto,
            AmProto::Eager => AmProtocol::Eager,
            AmProto::Rndv => AmProtocol::Rendezvous,
        };
        let shared = self.shared();
        let mut guard = shared.lock();
        let Core { tl, st } = &mut *guard;
        // SAFETY: `SendBuf` keeps the bytes in place while the buffer moves into the request
        // cell, which owns it until the operation completes.
        let data = unsafe { SendBuffer::new(ptr, len) };
        let (data, offered) = st.offer_pull(self.id(), data, ptr);
        let started = if st.stalled.is_empty() {
            st.engine.am_send_now(self.id(), id, header, data, params.reply, protocol)
        } else {
            st.engine.am_send_with(self.id(), id, header, data, params.reply, protocol).map(Sent::Queued)
        };
        if let Ok(Sent::Queued(started)) = &started {
            st.hold_pull(offered, started);
        }
        let started = started.map_err(|status| {
            if status == Status::InvalidParam && params.proto == AmProto::Eager {
                fail_with(Status::InvalidParam, "eager AM larger than one frame".into())
            } else {
                status
            }
        })?;
        match started {
            Sent::Now(transmit) => {
                if header.is_empty() {
                    self.send_now(tl, st, &transmit, bytes)?;
                } else {
                    // One frame of the user header and the data, joined in a copy (the
                    // transport copies an eager frame anyway).
                    let mut frame_payload = std::mem::take(&mut st.am_scratch);
                    frame_payload.clear();
                    frame_payload.extend_from_slice(header);
                    frame_payload.extend_from_slice(bytes);
                    let sent = self.send_now(tl, st, &transmit, &frame_payload);
                    st.am_scratch = frame_payload;
                    sent?;
                }
                Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }))
            }
            Sent::NowAwaiting(..) => unreachable!("only a synchronous tag send awaits an answer"),
            Sent::Queued(started) => {
                let request = st.request_for(shared, started, buf, params.request.callback);
                guard.drain();
                if request.as_ref().is_ok_and(Request::completed_at_once) {
                    let Core { tl, st } = &mut *guard;
                    if let Some(link) = st.engine.link_of(self.id()) {
                        self.offer_direct(tl, st, link);
                    }
                }
                request
            }
        }
    }
}

impl AmMessage<'_> {
    /// `ucp_am_recv_data_nbx` from inside the handler: receives the data into `buf`.
    pub fn recv_data<B: RecvBuf>(&mut self, buf: B) -> Result<Request<B>> {
        let (worker, desc) =
            self.take_for_recv().ok_or_else(|| fail_with(Status::NoElem, "AM data already taken".into()))?;
        am_recv_data(worker, desc, buf, RequestParams::default())
    }
}

impl Worker {
    /// `ucp_am_recv_data_nbx`: receives a kept message's data into `buf`. Eager data is copied at
    /// once; rendezvous data is fetched from the sender. A buffer shorter than the data →
    /// `MESSAGE_TRUNCATED`.
    pub fn am_recv_data<B: RecvBuf>(&self, desc: AmDesc, buf: B) -> Result<Request<B>> {
        am_recv_data(&self.shared, desc, buf, RequestParams::default())
    }

    /// [`Worker::am_recv_data`] with a completion callback (`ucp_am_recv_data_nbx`'s
    /// `UCP_OP_ATTR_FIELD_CALLBACK`), run from progress if the data does not arrive at once.
    pub fn am_recv_data_with<B: RecvBuf>(
        &self,
        desc: AmDesc,
        buf: B,
        params: RequestParams,
    ) -> Result<Request<B>> {
        am_recv_data(&self.shared, desc, buf, params)
    }
}

/// Receives `desc`'s data into `buf` through `shared`: eager data copied at once, rendezvous
/// data fetched from the sender.
fn am_recv_data<B: RecvBuf>(
    shared: &Arc<WorkerShared>,
    mut desc: AmDesc,
    mut buf: B,
    params: RequestParams,
) -> Result<Request<B>> {
    let Some((ep, op)) = desc.take_rndv(shared) else {
        let data = desc.data().unwrap_or(&[]);
        let dst = buf.as_mut_bytes();
        if data.len() > dst.len() {
            return Err(Status::MessageTruncated);
        }
        dst[..data.len()].copy_from_slice(data);
        let length = data.len();
        return Ok(Request::ready(buf, OpInfo { length, ..OpInfo::default() }));
    };
    recv_into(shared, buf, params.callback, |engine, recv_buf| {
        // The data went with its endpoint: the endpoint's status says why.
        match engine.phase(ep) {
            None => Err(Status::NotConnected),
            Some(Phase::Dead(status)) => Err(status),
            Some(_) => engine.am_recv_data(op, recv_buf),
        }
    })
}
