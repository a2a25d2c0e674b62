//! `ucp_am_send_nbx`: active messages with a user header and eager or rendezvous data.

use zcx_dataplane::proto::wire::Op;
use zcx_engine::{AmProtocol, SendBuffer, Start};

use crate::buffer::SendBuf;
use crate::endpoint::Endpoint;
use crate::request::{OpInfo, ReqCell, Request, RequestParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::state::{op_info, Core};

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
        let st = &mut guard.st;
        let cookie = st.sinks.reserve();
        // SAFETY: `SendBuf` keeps the bytes in place while the buffer moves into the request
        // cell, which owns it until the operation completes.
        let data = unsafe { SendBuffer::new(ptr, len) }.with_cookie(cookie);
        let started = st.engine.am_send_with(self.id(), id, header, data, params.reply, protocol);
        let result = match started {
            Err(status) => {
                st.sinks.unreserve(cookie);
                if status == Status::InvalidParam && params.proto == AmProto::Eager {
                    Err(fail_with(Status::InvalidParam, "eager AM larger than one frame".into()))
                } else {
                    Err(status)
                }
            }
            Ok(Start::Done(status, info)) => {
                st.sinks.unreserve(cookie);
                match status {
                    Status::Ok => Ok(Request::ready(buf, op_info(info))),
                    failure => Err(failure),
                }
            }
            Ok(Start::Pending(_)) => {
                let cell = ReqCell::new(shared, buf, params.request.callback);
                st.sinks.fill(cookie, cell.clone());
                Ok(Request::pending(cell))
            }
        };
        guard.drain();
        if result.as_ref().is_ok_and(Request::completed_at_once) {
            let Core { tl, st } = &mut *guard;
            self.offer_direct(tl, st);
        }
        result
    }
}
