//! Stream endpoints: `ucp_stream_send_nbx` and `ucp_stream_recv_nbx` (with and without
//! `UCP_STREAM_RECV_FLAG_WAITALL`).

use zcx_dataplane::proto::wire::STREAM_HEADER;
use zcx_engine::{SendBuffer, Sent, Start};

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::tag::recv_into;
use crate::endpoint::Endpoint;
use crate::request::{OpInfo, Request, RequestParams};
use crate::status::Result;
use crate::worker::state::Core;

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
        // SAFETY: `SendBuf` keeps the bytes in place while the buffer moves into the request
        // cell, which owns it until the operation completes.
        let send_buf = unsafe { SendBuffer::new(ptr, len) };
        let (send_buf, offered) = st.offer_pull(self.id(), send_buf, ptr);
        let started = if st.stalled.is_empty() {
            st.engine.stream_send_now(self.id(), send_buf)?
        } else {
            st.engine.stream_send(self.id(), send_buf).map(Sent::Queued)?
        };
        if let Sent::Queued(started) = &started {
            st.hold_pull(offered, started);
        }
        match started {
            Sent::Now(transmit) => {
                self.send_now(tl, st, &transmit, bytes)?;
                Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }))
            }
            Sent::NowAwaiting(..) => unreachable!("only a synchronous tag send awaits an answer"),
            Sent::Queued(started) => {
                if let Start::Pending(op) = started {
                    // Small stream sends must not overtake it on the endpoint's lane.
                    if let Some(ep) = st.eps.get_mut(&self.id()) {
                        ep.hold_streams();
                        st.stream_sends.insert(op, self.id());
                    }
                }
                let request = st.request_for(shared, started, buf, params.callback);
                guard.drain();
                request
            }
        }
    }

    /// `ucp_stream_recv_data_nb`: the next piece of the stream as it arrived (for example one
    /// sender's message), owned by the caller, or `None` when none is readable now. A receive
    /// posted with [`Endpoint::stream_recv`] is served first.
    pub fn stream_recv_data(&self) -> Result<Option<Vec<u8>>> {
        self.worker().progress();
        let mut core = self.shared().lock();
        core.st.engine.stream_recv_data(self.id())
    }

    /// `ucp_stream_recv_nbx`: receives into `buf`. With `waitall` it completes only when `buf` is
    /// full; otherwise as soon as any bytes are there (the completion's `length` says how many).
    pub fn stream_recv<B: RecvBuf>(
        &self,
        buf: B,
        waitall: bool,
        params: RequestParams,
    ) -> Result<Request<B>> {
        let ep = self.id();
        recv_into(self.shared(), buf, params.callback, |engine, recv_buf| {
            engine.stream_recv(ep, recv_buf, waitall)
        })
    }
}

impl crate::worker::Worker {
    /// `ucp_stream_worker_poll`: up to `max` endpoints with stream bytes to read, each reported
    /// once per arrival (an endpoint comes back only after more bytes arrived on it). Makes no
    /// progress; call [`crate::Worker::progress`] for bytes to arrive.
    pub fn stream_poll(&self, max: usize) -> Vec<Endpoint> {
        let mut ready = Vec::new();
        self.shared.lock().st.engine.stream_poll(max, &mut ready);
        ready.into_iter().map(|id| Endpoint::attach(&self.shared, id)).collect()
    }
}
