//! The receive side of stream endpoints (`ucp_stream_recv_nbx`): an ordered byte stream per
//! endpoint, handed to receives in the order they were posted.

use std::sync::Mutex;

use crate::request::OpInfo;
use crate::worker::state::{State, StreamRx};

/// Bytes of a `Stream` frame arrived on endpoint `ep`: fill waiting receives, keep the rest.
/// Each completed receive completes as soon as it is full, so a frame that fills one receive (a
/// ping-pong's) costs one endpoint lookup and no list of completions; the worker's buffer pool
/// is borrowed, not reference counted, so no atomic read-modify-write is spent on it.
pub(crate) fn deliver_stream(st: &mut State, ep: u64, mut data: &[u8]) {
    while !data.is_empty() {
        let Some(state) = st.eps.get_mut(&ep) else { return };
        let rx = &mut state.stream;
        let Some(recv) = rx.posted.front_mut() else {
            let mut chunk = st.pool.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default();
            chunk.clear();
            chunk.extend_from_slice(data);
            rx.chunks.push_back(chunk);
            return;
        };
        let n = (recv.cap - recv.filled).min(data.len());
        // SAFETY: `recv.ptr..+cap` is the buffer of a posted receive, owned by its request until
        // the sink completes; `filled + n <= cap`.
        unsafe { zcx_dataplane::copy::copy_bytes(data.as_ptr(), recv.ptr.add(recv.filled), n) };
        recv.filled += n;
        data = &data[n..];
        if recv.filled == recv.cap || !recv.waitall {
            let recv = rx.posted.pop_front().expect("front exists");
            // Completing may change the endpoint table: the next round looks the endpoint up again.
            st.complete_sink(
                &recv.sink,
                crate::Status::Ok,
                OpInfo { length: recv.filled, ..OpInfo::default() },
            );
        }
    }
}

/// The first step of a stream receive of `cap` bytes at `ptr`: takes bytes already buffered
/// (only when no earlier receive waits, to keep order). Returns the bytes taken and whether the
/// receive is complete (all of `cap` with `waitall`, anything otherwise).
pub(crate) fn take_buffered(
    rx: &mut StreamRx,
    pool: &Mutex<Vec<Vec<u8>>>,
    ptr: *mut u8,
    cap: usize,
    waitall: bool,
) -> (usize, bool) {
    let mut filled = 0;
    if !rx.posted.is_empty() {
        return (0, false);
    }
    while filled < cap {
        let Some(chunk) = rx.chunks.front() else { break };
        let available = &chunk[rx.head_offset..];
        let n = available.len().min(cap - filled);
        // SAFETY: `ptr..ptr+cap` is the caller's receive buffer (owned by its request); `filled + n <= cap`.
        unsafe { zcx_dataplane::copy::copy_bytes(available.as_ptr(), ptr.add(filled), n) };
        filled += n;
        rx.head_offset += n;
        if rx.head_offset == chunk.len() {
            let chunk = rx.chunks.pop_front().expect("front exists");
            rx.head_offset = 0;
            State::recycle(pool, chunk);
        }
    }
    (filled, filled == cap || (!waitall && filled > 0))
}

/// Withdraws a waiting stream receive (`ucp_request_cancel`); true if it was still waiting.
pub(crate) fn cancel_stream_recv(st: &mut State, ep: u64, id: u64) -> bool {
    let Some(state) = st.eps.get_mut(&ep) else { return false };
    let Some(pos) = state.stream.posted.iter().position(|r| r.id == id) else { return false };
    let recv = state.stream.posted.remove(pos).expect("position is valid");
    st.complete_sink(
        &recv.sink,
        crate::Status::Canceled,
        OpInfo { length: recv.filled, ..OpInfo::default() },
    );
    true
}
