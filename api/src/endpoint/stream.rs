//! Stream endpoints: `ucp_stream_send_nbx` and `ucp_stream_recv_nbx` (with and without
//! `UCP_STREAM_RECV_FLAG_WAITALL`).

use zcx_dataplane::proto::wire::{Op, STREAM_HEADER};
use zcx_dataplane::Payload;

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::Endpoint;
use crate::request::{CancelTarget, OpInfo, ReqCell, Request, RequestParams};
use crate::status::Result;
use crate::worker::state::StreamRecv;
use crate::worker::state::{send_on_ep, send_ready, usable_in, BulkJob, Core, FragKind, OutKind};
use crate::worker::stream::take_buffered;

impl Endpoint {
    /// `ucp_stream_send_nbx`: appends `buf` to the endpoint's byte stream.
    pub fn stream_send<B: SendBuf>(&self, buf: B, params: RequestParams) -> Result<Request<B>> {
        let bytes = buf.as_bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        if let Some(direct) = self.direct() {
            if len <= direct.max_payload
                && len < direct.rndv_thresh
                && direct.lane.send_stream(&STREAM_HEADER, bytes)
            {
                return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
            }
        }
        let shared = self.shared();
        let mut guard = shared.lock();
        let Core { tl, st } = &mut *guard;
        let (rndv_thresh, max_payload) = (st.rndv_thresh, st.max_payload);
        let (ep, connecting) = usable_in(&mut st.eps, self.id())?;
        // Behind a stream send still in fragments, a small one joins the fragments' queue: sent at
        // once, it would overtake them.
        if len <= max_payload && len < rndv_thresh && ep.stream_jobs == 0 {
            if !connecting {
                send_ready(tl, ep, &STREAM_HEADER, Payload::Copy(bytes))?;
                self.offer_direct(tl, st);
                return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
            }
            let cell = ReqCell::new(shared, buf, params.callback);
            let op = st.add_op(self.id(), cell.clone(), OutKind::Queued);
            // SAFETY: `SendBuf` guarantees the bytes did not move when the buffer moved into the cell.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            if let Err(status) = send_on_ep(tl, st, self.id(), &Op::Stream, Payload::Copy(bytes), Some(op)) {
                st.ops.remove(&op);
                return Err(status);
            }
            return Ok(Request::pending(cell));
        }
        let cell = ReqCell::new(shared, buf, params.callback);
        let op = st.add_op(
            self.id(),
            cell.clone(),
            OutKind::Send { ptr, len, sent: 0, frag: FragKind::Stream, acked: true },
        );
        if let Some(ep) = st.eps.get_mut(&self.id()) {
            ep.bulk.push_back(BulkJob::Send { op, stream: true });
            ep.hold_streams();
        }
        st.bulk_active.insert(self.id());
        crate::worker::rndv::run_bulk(&mut guard);
        Ok(Request::pending(cell))
    }

    /// `ucp_stream_recv_nbx`: receives into `buf`. With `waitall` it completes only when `buf` is
    /// full; otherwise as soon as any bytes are there (the completion's `length` says how many).
    pub fn stream_recv<B: RecvBuf>(
        &self,
        mut buf: B,
        waitall: bool,
        params: RequestParams,
    ) -> Result<Request<B>> {
        let dst = buf.as_mut_bytes();
        let (ptr, cap) = (dst.as_mut_ptr(), dst.len());
        let shared = self.shared();
        let mut guard = shared.lock();
        let st = &mut guard.st;
        // Taken before the endpoint is borrowed, so the receive looks its endpoint up once; an
        // id a receive completed at once leaves unused costs nothing.
        let id = st.new_id();
        let (ep, _) = usable_in(&mut st.eps, self.id())?;
        let (filled, done) = take_buffered(&mut ep.stream, &st.pool, ptr, cap, waitall);
        if done {
            return Ok(Request::ready(buf, OpInfo { length: filled, ..OpInfo::default() }));
        }
        let cell = ReqCell::new(shared, buf, params.callback);
        ep.stream.posted.push_back(StreamRecv { id, sink: cell.clone(), ptr, cap, filled, waitall });
        cell.set_cancel(st.held(), CancelTarget::StreamRecv { ep: self.id(), id });
        Ok(Request::pending(cell))
    }
}
