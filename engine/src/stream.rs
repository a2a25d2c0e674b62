//! Stream endpoints (`ucp_stream_send_nbx`, `ucp_stream_recv_nbx`): an ordered byte stream per
//! endpoint, handed to receives in the order they were posted.
//!
//! Small sends are one `Stream` frame; large ones are `Stream` fragments pushed by the sender
//! (behind any earlier stream fragments of the endpoint, so bytes stay in order), or on a
//! receiver-pull link a `StreamRtsPull` whose bytes the receiver reads with an RMA get: straight
//! into the waiting receive they complete when there is one and nothing is buffered ahead, or
//! else into an engine buffer that takes the request's place in the stream (bytes that arrive
//! after it wait behind it until the get is done).

use std::collections::VecDeque;

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::LinkId;

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::caps::BulkMode;
use crate::engine::{Engine, Frag, OpKind, Operation, Phase, Sent, Start};
use crate::ids::{EndpointId, OpId};
use crate::output::{Completion, Event, Header, OpInfo, Payload, Placement, RmaKind, RmaRequest, Transmit};
use crate::Status;

/// A stream receive waiting for bytes.
pub(crate) struct StreamRecv {
    pub op: OpId,
    pub buf: RecvBuffer,
    pub filled: usize,
    pub waitall: bool,
}

/// Bytes of the stream not taken yet: a copy, or a pull still reading.
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    /// The pull operation reading into `bytes`; the chunk is not readable until it is done.
    pulling: Option<OpId>,
}

/// The receive side of one endpoint's stream.
#[derive(Default)]
pub(crate) struct StreamRx {
    pub posted: VecDeque<StreamRecv>,
    chunks: VecDeque<Chunk>,
    /// Bytes of the front chunk already taken.
    head: usize,
    /// Bytes arrived since the last [`Engine::stream_poll`] reported this endpoint.
    fresh: bool,
}

impl StreamRx {
    /// The stream of an endpoint merged into this one's: its bytes (which arrived first) come
    /// before any of ours, and our waiting receives after any of its.
    pub(crate) fn absorb(&mut self, mut earlier: StreamRx) {
        earlier.chunks.extend(std::mem::take(&mut self.chunks));
        if self.head != 0 {
            debug_assert!(false, "a connecting endpoint has read no stream bytes");
        }
        earlier.posted.extend(std::mem::take(&mut self.posted));
        earlier.fresh |= self.fresh;
        *self = earlier;
    }

    /// Whether [`Engine::stream_poll`] reports the endpoint: bytes arrived since it last did,
    /// and some are still unread. Either way, the next report waits for new bytes.
    fn take_ready(&mut self) -> bool {
        let ready = self.fresh && self.unread() > 0;
        self.fresh = false;
        ready
    }

    /// Unread bytes that arrived (pulls in progress not counted).
    pub(crate) fn unread(&self) -> usize {
        self.chunks.iter().filter(|c| c.pulling.is_none()).map(|c| c.bytes.len()).sum::<usize>() - self.head
    }

    /// The waiting receive a pull of `total` bytes can be read straight into, taken from the
    /// queue: the first one, with no bytes buffered ahead of it, that the pull completes (a
    /// waitall receive it fills exactly, any other it fits in). Bytes after the pull's then go
    /// to the receives after it, so the stream keeps its order while the read is out.
    fn take_for_pull(&mut self, total: usize) -> Option<StreamRecv> {
        if !self.chunks.is_empty() || total == 0 {
            return None;
        }
        let recv = self.posted.front()?;
        if recv.buf.len() - recv.filled >= total && recv.completed_by(total) {
            self.posted.pop_front()
        } else {
            None
        }
    }

    /// The waiting receive a placed fragment of `len` bytes can be written straight into, taken
    /// from the queue: the first one, with no bytes buffered ahead of it, if it has room.
    fn take_for_place(&mut self, len: usize) -> Option<StreamRecv> {
        if !self.chunks.is_empty() {
            return None;
        }
        let recv = self.posted.front()?;
        if recv.buf.len() - recv.filled >= len {
            self.posted.pop_front()
        } else {
            None
        }
    }

    /// Fills waiting receives straight from a frame's bytes (nothing is buffered ahead of them),
    /// queuing the completions of those it fills into `events`; returns the bytes no receive
    /// took.
    fn serve_frame<'a>(&mut self, mut data: &'a [u8], events: &mut crate::output::Events) -> &'a [u8] {
        while let Some(recv) = self.posted.front_mut() {
            let n = data.len().min(recv.buf.len() - recv.filled);
            recv.buf.write(recv.filled, &data[..n]);
            recv.filled += n;
            data = &data[n..];
            if !recv.is_done() {
                break;
            }
            let recv = self.posted.pop_front().expect("front exists");
            events.complete(recv.done(Status::Ok));
        }
        data
    }

    /// Fills `recv` from readable chunks; the spent chunks' buffers go to `spent`.
    fn fill(&mut self, recv: &mut StreamRecv, spent: &mut Vec<Vec<u8>>) {
        while recv.filled < recv.buf.len() {
            let Some(chunk) = self.chunks.front().filter(|c| c.pulling.is_none()) else { break };
            let available = &chunk.bytes[self.head..];
            let n = available.len().min(recv.buf.len() - recv.filled);
            recv.buf.write(recv.filled, &available[..n]);
            recv.filled += n;
            self.head += n;
            if self.head == chunk.bytes.len() {
                let chunk = self.chunks.pop_front().expect("front exists");
                spent.push(chunk.bytes);
                self.head = 0;
            }
        }
    }

    /// Fills waiting receives from readable chunks, in order, queuing the completions of those
    /// it fills into `events`; a receive takes every readable byte it has room for, then
    /// completes when full (or, without waitall, when it got any).
    fn serve(&mut self, events: &mut crate::output::Events, spent: &mut Vec<Vec<u8>>) {
        while let Some(mut recv) = self.posted.pop_front() {
            self.fill(&mut recv, spent);
            if !recv.is_done() {
                self.posted.push_front(recv);
                return;
            }
            events.push_back(recv.completion(Status::Ok));
        }
    }
}

impl StreamRecv {
    /// Whether `len` more bytes complete it.
    fn completed_by(&self, len: usize) -> bool {
        if self.waitall {
            self.filled + len == self.buf.len()
        } else {
            self.filled + len > 0
        }
    }

    /// Full, or (without waitall) holding any bytes.
    fn is_done(&self) -> bool {
        self.filled == self.buf.len() || (!self.waitall && self.filled > 0)
    }

    /// The receive's completion with `status`, its bytes so far as its length.
    pub(crate) fn completion(&self, status: Status) -> Event {
        Event::Completion(self.done(status))
    }

    /// [`StreamRecv::completion`] as the completion itself.
    #[inline]
    pub(crate) fn done(&self, status: Status) -> Completion {
        let info = OpInfo { length: self.filled, ..OpInfo::default() };
        Completion { op: self.op, status, info, cookie: self.buf.cookie() }
    }
}

impl Engine {
    /// `ucp_stream_send_nbx` for a caller that sends at once, as [`Engine::tag_send_now`] is
    /// for tag messages: a small send on a ready endpoint with an empty outbox and no stream
    /// fragments of its own still to send comes back as its frame ([`Sent::Now`]); anything else
    /// goes as [`Engine::stream_send`] sends it.
    #[inline]
    pub fn stream_send_now(&mut self, ep_id: EndpointId, buf: SendBuffer) -> Result<Sent, Status> {
        if self.transmits.is_empty() {
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                let len = buf.len();
                let eager = len < ep.caps.rndv_threshold && len <= ep.caps.max_payload();
                // Fragments of any kind queued on the endpoint: `stream_send` sorts out which.
                if ep.phase == Phase::Ready && ep.answered && eager && ep.bulk.is_empty() {
                    ep.tx_seen = true;
                    let payload = Payload::Inline { ptr: buf.at(0), len };
                    let header = Header::of(&Op::Stream);
                    return Ok(Sent::Now(Transmit { link: ep.link, header, payload, placed: false }));
                }
            }
        }
        self.stream_send(ep_id, buf).map(Sent::Queued)
    }

    /// `ucp_stream_send_nbx`: appends `buf` to the endpoint's stream. A small send is done at
    /// once ([`Payload::Inline`]); a large one when its bytes are sent (pushed) or read by the
    /// peer (pulled).
    pub fn stream_send(&mut self, ep_id: EndpointId, buf: SendBuffer) -> Result<Start, Status> {
        let ep = self.usable(ep_id)?;
        let caps = ep.caps;
        let len = buf.len();
        let behind_fragments = ep.bulk.iter().any(|op| {
            self.ops.get(op).is_some_and(|op| matches!(op.kind, OpKind::Push { frag: Frag::Stream, .. }))
        });
        if len < caps.rndv_threshold && len <= caps.max_payload() && !behind_fragments {
            self.send_eager(ep_id, Header::of(&Op::Stream), buf.at(0), len)?;
            return Ok(self.eager_start(ep_id, len, buf.cookie()));
        }
        if len >= caps.rndv_threshold
            && caps.bulk == BulkMode::ReceiverPull
            && caps.native_get
            && !behind_fragments
        {
            if let Some(key) = buf.key().cloned() {
                let op = self.new_op(Some(ep_id), OpKind::AwaitPullDone { len }, buf.cookie());
                let rts = Op::StreamRtsPull { sender_req: op.raw(), total_len: len as u64, addr: buf.addr() };
                self.send(ep_id, &rts, Payload::Owned(key.to_vec()), false);
                return Ok(Start::Pending(op));
            }
        }
        let cookie = buf.cookie();
        let op = self.new_op(Some(ep_id), OpKind::Push { buf, len, sent: 0, frag: Frag::Stream }, cookie);
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.bulk.push_back(op);
        }
        self.bulk_active.insert(ep_id);
        Ok(Start::Pending(op))
    }

    /// `ucp_stream_recv_nbx`: receives into `buf`; with `waitall` only a full buffer completes
    /// it, otherwise any bytes do (the completion's length says how many).
    pub fn stream_recv(
        &mut self,
        ep_id: EndpointId,
        buf: RecvBuffer,
        waitall: bool,
    ) -> Result<Start, Status> {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return Err(Status::NotConnected) };
        match ep.phase {
            Phase::Dead(status) if ep.stream.unread() == 0 => return Err(status),
            Phase::Dead(status) => {
                // Bytes that arrived before the endpoint went down are still the stream's: a
                // receive they satisfy completes, as if they had been taken in time.
                let op = OpId::from_raw(self.op_ids.next());
                let mut recv = StreamRecv { op, buf, filled: 0, waitall };
                let mut spent = Vec::new();
                ep.stream.fill(&mut recv, &mut spent);
                let (done, filled) = (recv.is_done(), recv.filled);
                for bytes in spent {
                    self.recycle(bytes);
                }
                return if done {
                    Ok(Start::Done(Status::Ok, OpInfo { length: filled, ..OpInfo::default() }))
                } else {
                    Err(status)
                };
            }
            Phase::Closing => return Err(Status::Canceled),
            Phase::Connecting | Phase::Ready => {}
        }
        let op = OpId::from_raw(self.op_ids.next());
        let mut recv = StreamRecv { op, buf, filled: 0, waitall };
        // A waiting receive ahead of this one took every readable byte it had room for and still
        // waits: nothing is readable for this one. Otherwise it takes what is there first, and
        // completes at once when that is enough. A waiting receive has no record besides its
        // place in the endpoint's queue, so completing it removes nothing else.
        if ep.stream.posted.is_empty() && !ep.stream.chunks.is_empty() {
            let mut spent = Vec::new();
            ep.stream.fill(&mut recv, &mut spent);
            let (done, filled) = (recv.is_done(), recv.filled);
            if !done {
                ep.stream.posted.push_back(recv);
            }
            for bytes in spent {
                self.recycle(bytes);
            }
            if done {
                return Ok(Start::Done(Status::Ok, OpInfo { length: filled, ..OpInfo::default() }));
            }
            return Ok(Start::Pending(op));
        }
        ep.stream.posted.push_back(recv);
        Ok(Start::Pending(op))
    }

    /// `ucp_stream_recv_data_nb`: the endpoint's next received piece of the stream, as it
    /// arrived (one frame's bytes, or what is left of it), or `None` when no bytes are readable
    /// or a posted receive is waiting for them (it comes first).
    pub fn stream_recv_data(&mut self, ep_id: EndpointId) -> Result<Option<Vec<u8>>, Status> {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return Err(Status::NotConnected) };
        if let Phase::Dead(status) = ep.phase {
            if ep.stream.unread() == 0 {
                return Err(status);
            }
        }
        let rx = &mut ep.stream;
        if !rx.posted.is_empty() || rx.chunks.front().is_none_or(|c| c.pulling.is_some()) {
            return Ok(None);
        }
        let chunk = rx.chunks.pop_front().expect("front exists");
        let head = std::mem::take(&mut rx.head);
        if head == 0 {
            return Ok(Some(chunk.bytes));
        }
        let rest = chunk.bytes[head..].to_vec();
        self.recycle(chunk.bytes);
        Ok(Some(rest))
    }

    /// Bytes of a `Stream` frame for the caller that takes its completion straight
    /// ([`Engine::handle_frame_direct`]) while no event waits: when nothing is buffered and the
    /// first waiting receive takes the whole frame, this is the whole of it (`Ok`, with the
    /// receive's completion once it is done); `Err` leaves the frame to [`Engine::on_stream`].
    #[inline(always)]
    pub(crate) fn stream_direct(&mut self, ep_id: EndpointId, data: &[u8]) -> Result<Option<Completion>, ()> {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return Ok(None) };
        let rx = &mut ep.stream;
        if !rx.chunks.is_empty() || data.is_empty() {
            return Err(());
        }
        let Some(recv) = rx.posted.front_mut() else { return Err(()) };
        if data.len() > recv.buf.len() - recv.filled {
            return Err(());
        }
        recv.buf.write(recv.filled, data);
        recv.filled += data.len();
        if !recv.is_done() {
            return Ok(None);
        }
        let recv = rx.posted.pop_front().expect("front exists");
        Ok(Some(recv.done(Status::Ok)))
    }

    /// Bytes of a `Stream` frame arrived on `ep_id`.
    pub(crate) fn on_stream(&mut self, ep_id: EndpointId, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        // Nothing buffered ahead of these bytes: waiting receives take them straight from the
        // frame, and only what they leave is copied.
        let rest =
            if ep.stream.chunks.is_empty() { ep.stream.serve_frame(data, &mut self.events) } else { data };
        if !rest.is_empty() {
            let copy = self.pooled_copy(rest);
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                ep.stream.chunks.push_back(Chunk { bytes: copy, pulling: None });
                ep.stream.fresh = true;
            }
        }
    }

    pub(crate) fn serve_stream(&mut self, ep_id: EndpointId) {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        let mut spent = Vec::new();
        ep.stream.serve(&mut self.events, &mut spent);
        for bytes in spent {
            self.recycle(bytes);
        }
    }

    /// A receiver-pull stream send: read its bytes into the stream at this point.
    pub(crate) fn on_stream_pull(
        &mut self,
        ep_id: EndpointId,
        sender_req: u64,
        total_len: u64,
        addr: u64,
        key: &[u8],
    ) {
        let Some(ep) = self.eps.get(&ep_id) else { return };
        let link = ep.link;
        let total = match usize::try_from(total_len) {
            Ok(total) if total <= self.config.max_stream_pull && ep.caps.native_get => total,
            _ => {
                tracing::warn!(%ep_id, total_len, "stream pull this endpoint cannot take; closing the link");
                self.protocol_violation(link);
                return;
            }
        };
        if let Some(recv) = self.eps.get_mut(&ep_id).and_then(|ep| ep.stream.take_for_pull(total)) {
            // Straight into the receive these bytes complete: one copy, as a tag pull makes.
            let local = recv.buf.ptr().wrapping_add(recv.filled);
            let kind = OpKind::StreamPullInto { sender_req, length: recv.filled + total };
            self.set_op(recv.op, ep_id, kind, 1, recv.buf.cookie());
            self.rmas.push_back(RmaRequest {
                link,
                token: recv.op,
                kind: RmaKind::Get,
                local,
                len: total,
                remote_addr: addr,
                remote_key: key.into(),
            });
            return;
        }
        let (op, local) = self.stream_buffer(ep_id, total, Some(sender_req));
        self.rmas.push_back(RmaRequest {
            link,
            token: op,
            kind: RmaKind::Get,
            local,
            len: total,
            remote_addr: addr,
            remote_key: key.into(),
        });
    }

    /// An engine buffer for `len` stream bytes still to be written, in the stream's place at its
    /// end (bytes that arrive later wait behind it); returns its operation and where to write.
    fn stream_buffer(&mut self, ep_id: EndpointId, len: usize, sender_req: Option<u64>) -> (OpId, *mut u8) {
        let mut bytes = self.large_spare(len);
        let dest = bytes.as_mut_ptr();
        let op = self.new_op(Some(ep_id), OpKind::StreamPull { bytes: Vec::new(), sender_req }, None);
        if let Some(record) = self.ops.get_mut(&op) {
            // Moving the vector leaves its heap buffer, where `dest` points, in place.
            record.kind = OpKind::StreamPull { bytes, sender_req };
            record.tokens = 1;
        }
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.stream.chunks.push_back(Chunk { bytes: Vec::new(), pulling: Some(op) });
        }
        (op, dest)
    }

    /// A placed `Stream` fragment of `len` bytes arrived on `link`: where its payload goes.
    /// Straight into the first waiting receive when nothing is buffered ahead of it and it has
    /// room (one copy, as a placed rendezvous fragment makes), else into an engine buffer. Bytes
    /// that arrive while it is written wait behind it, unless it completes that receive: they
    /// are the next receives' then, so a transport may have the next fragment's header in hand
    /// before this one is written and still place it straight.
    pub(crate) fn place_stream(&mut self, link: LinkId, len: usize) -> Option<Placement> {
        let ep_id = self.receiving_ep(link)?;
        if len == 0 {
            return None;
        }
        if len > self.config.max_stream_pull {
            tracing::warn!(%ep_id, len, "placed stream fragment this endpoint cannot take; closing the link");
            self.protocol_violation(link);
            return None;
        }
        let ep = self.eps.get_mut(&ep_id)?;
        if let Some(recv) = ep.stream.take_for_place(len) {
            let (op, dest, cookie) = (recv.op, recv.buf.ptr().wrapping_add(recv.filled), recv.buf.cookie());
            if !recv.completed_by(len) {
                // The receive takes more after these bytes: what arrives meanwhile waits.
                ep.stream.chunks.push_back(Chunk { bytes: Vec::new(), pulling: Some(op) });
            }
            self.set_op(op, ep_id, OpKind::StreamPlaceInto { recv, len }, 1, cookie);
            return Some(Placement { dest, token: op });
        }
        let (token, dest) = self.stream_buffer(ep_id, len, None);
        Some(Placement { dest, token })
    }

    /// A placed `Stream` fragment was written (`Ok`) or failed to be.
    pub(crate) fn stream_place_done(&mut self, op_id: OpId, status: Status) {
        let Some(op) = self.ops.get_mut(&op_id) else { return };
        if matches!(op.kind, OpKind::StreamPull { .. }) {
            self.stream_pull_done(op_id, status);
            return;
        }
        op.tokens = op.tokens.saturating_sub(1);
        let ep_id = op.ep.expect("stream placements have an endpoint");
        if self.eps.get(&ep_id).is_none_or(|ep| matches!(ep.phase, Phase::Dead(_))) {
            // The endpoint's failure already gave the receive its status: it completes now
            // that nothing writes into its buffer.
            self.finish_op(op_id, status, OpInfo::default());
            return;
        }
        if status != Status::Ok {
            self.finish_op(op_id, status, OpInfo::default());
            // The stream lost bytes in its middle: nothing after them can be delivered in order.
            self.fail_ep(ep_id, status, true);
            return;
        }
        let Some(Operation { kind: OpKind::StreamPlaceInto { mut recv, len }, .. }) = self.ops.remove(&op_id)
        else {
            return;
        };
        recv.filled += len;
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if let Some(at) = ep.stream.chunks.iter().position(|c| c.pulling == Some(op_id)) {
            ep.stream.chunks.remove(at);
        }
        if recv.is_done() {
            self.events.push_back(recv.completion(Status::Ok));
        } else {
            // Still first in the stream's order: the receives behind it came after it.
            ep.stream.posted.push_front(recv);
        }
        self.serve_stream(ep_id);
    }

    /// The get of a stream pull finished: the bytes join the stream, the sender hears it is done.
    pub(crate) fn stream_pull_done(&mut self, op_id: OpId, status: Status) {
        let Some(op) = self.ops.get_mut(&op_id) else { return };
        op.tokens = 0;
        let ep_id = op.ep.expect("stream pulls have an endpoint");
        let (bytes, sender_req) = match &mut op.kind {
            OpKind::StreamPull { bytes, sender_req } => (std::mem::take(bytes), *sender_req),
            _ => return,
        };
        self.ops.remove(&op_id);
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if matches!(ep.phase, Phase::Dead(_)) {
            self.forget_if_done(ep_id);
            return;
        }
        if let Some(sender_req) = sender_req {
            let code = status.code().clamp(-100, 0) as i8;
            self.send(ep_id, &Op::PullDone { sender_req, status: code }, Payload::None, false);
        }
        if status != Status::Ok {
            // The stream lost bytes in its middle: nothing after them can be delivered in order.
            self.fail_ep(ep_id, status, true);
            return;
        }
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if let Some(chunk) = ep.stream.chunks.iter_mut().find(|c| c.pulling == Some(op_id)) {
            chunk.pulling = None;
            chunk.bytes = bytes;
            ep.stream.fresh = true;
        }
        self.serve_stream(ep_id);
    }

    /// The get of a stream pull into a receive finished: the receive completes, the sender
    /// hears it is done.
    pub(crate) fn stream_pull_into_done(&mut self, op_id: OpId, status: Status) {
        let Some(op) = self.ops.get_mut(&op_id) else { return };
        op.tokens = op.tokens.saturating_sub(1);
        let OpKind::StreamPullInto { sender_req, length } = op.kind else { return };
        let ep_id = op.ep.expect("stream pulls have an endpoint");
        if self.eps.get(&ep_id).is_none_or(|ep| matches!(ep.phase, Phase::Dead(_))) {
            // The endpoint's failure already gave the receive its status: it completes now
            // that the read no longer writes into its buffer.
            self.finish_op(op_id, status, OpInfo::default());
            return;
        }
        let code = status.code().clamp(-100, 0) as i8;
        self.send(ep_id, &Op::PullDone { sender_req, status: code }, Payload::None, false);
        if status != Status::Ok {
            self.finish_op(op_id, status, OpInfo::default());
            // The stream lost bytes in its middle: nothing after them can be delivered in order.
            self.fail_ep(ep_id, status, true);
            return;
        }
        self.finish_op(op_id, Status::Ok, OpInfo { length, ..OpInfo::default() });
    }

    /// `ucp_stream_worker_poll`: up to `max` endpoints with unread stream bytes, each reported
    /// once per arrival: an endpoint comes back only after more bytes arrived on it. Appended to
    /// `out`. A scan of the endpoints: for a poll, not for a per-message path.
    pub fn stream_poll(&mut self, max: usize, out: &mut Vec<EndpointId>) {
        for (id, ep) in self.eps.iter_mut() {
            if out.len() >= max {
                return;
            }
            if ep.stream.take_ready() {
                out.push(id);
            }
        }
    }

    /// Withdraws a waiting stream receive; true if it was waiting (it completes CANCELED).
    pub(crate) fn cancel_stream_recv(&mut self, ep_id: EndpointId, op: OpId) -> bool {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return false };
        let Some(pos) = ep.stream.posted.iter().position(|r| r.op == op) else { return false };
        let recv = ep.stream.posted.remove(pos).expect("position is valid");
        self.events.push_back(recv.completion(Status::Canceled));
        true
    }
}
