//! `ucp_am_send_nbx`: active messages with a user header and eager or rendezvous data.

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::Payload;

use crate::buffer::SendBuf;
use crate::endpoint::Endpoint;
use crate::request::{OpInfo, ReqCell, Request, RequestParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::state::{send_on_ep, send_ready, usable_in, Core, OutKind};

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
        let shared = self.shared();
        let mut guard = shared.lock();
        let Core { tl, st } = &mut *guard;
        let (rndv_thresh, max_payload) = (st.rndv_thresh, st.max_payload);
        let (ep, connecting) = usable_in(&mut st.eps, self.id())?;
        let whole = header.len() + len;
        let eager = match params.proto {
            AmProto::Auto => whole < rndv_thresh,
            AmProto::Eager => {
                if whole > max_payload {
                    return Err(fail_with(Status::InvalidParam, "eager AM larger than one frame".into()));
                }
                true
            }
            AmProto::Rndv => false,
        };
        if eager && !connecting {
            let frame = Op::am_eager_header(id, params.reply, header_len);
            if header.is_empty() {
                // The payload is the data alone: sent from the caller's buffer, no joining copy.
                send_ready(tl, ep, &frame, Payload::Copy(bytes))?;
            } else {
                // The AM header and the data travel as one payload, joined in the scratch buffer.
                let mut scratch = std::mem::take(&mut st.scratch);
                scratch.clear();
                scratch.extend_from_slice(header);
                scratch.extend_from_slice(bytes);
                let sent = send_ready(tl, ep, &frame, Payload::Copy(&scratch));
                st.scratch = scratch;
                sent?;
            }
            self.offer_direct(tl, st);
            return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
        }
        if eager {
            let mut scratch = std::mem::take(&mut st.scratch);
            scratch.clear();
            scratch.extend_from_slice(header);
            scratch.extend_from_slice(bytes);
            let frame = Op::AmEager { am_id: id, reply: params.reply, header_len };
            let cell = ReqCell::new(shared, buf, params.request.callback);
            let op = st.add_op(self.id(), cell.clone(), OutKind::Queued);
            let result = send_on_ep(tl, st, self.id(), &frame, Payload::Copy(&scratch), Some(op))
                .map(|_| Request::pending(cell))
                .inspect_err(|_| {
                    st.ops.remove(&op);
                });
            st.scratch = scratch;
            return result;
        }
        let cell = ReqCell::new(shared, buf, params.request.callback);
        let op = st.add_op(self.id(), cell.clone(), OutKind::AwaitRtr { ptr, len });
        let frame =
            Op::AmRts { am_id: id, reply: params.reply, header_len, sender_req: op, total_len: len as u64 };
        if let Err(status) = send_on_ep(tl, st, self.id(), &frame, Payload::Copy(header), None) {
            st.ops.remove(&op);
            return Err(status);
        }
        Ok(Request::pending(cell))
    }
}
