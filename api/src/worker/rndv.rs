//! Rendezvous and paced bulk transfer.
//!
//! A message above the rendezvous threshold is announced (`TagRts`/`AmRts`) and its bytes stay in
//! the sender's buffer until the receiver has a buffer for them and says so (`Rtr`). Then the bytes
//! go out in fragments straight from the sender's buffer (zero-copy where the transport can), at
//! most [`FRAGMENT_WINDOW`] fragments per operation in the transport at once, so a small message
//! sent meanwhile waits behind a few fragments at most, never behind the whole transfer. Large
//! streams, puts and get replies use the same pacing.
//!
//! Rendezvous fragments and get replies go out as *placed* frames where the transport can: the
//! receiver sees the header first and has the payload written straight into the request's
//! buffer (one copy less on a stream transport). Puts and streams stay ordinary frames: their
//! destination is only known, or only safe to touch, when the whole fragment is there.

use std::sync::Arc;
use zcx_dataplane::Transport as _;

use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::{LinkId, Payload, RemoteAccess, SendOutcome, TlError, ZcopyPayload};

use crate::request::{OpInfo, OpSink};
use crate::status::Status;
use crate::worker::state::{status_of, BulkJob, Core, FragKind, OutKind, Phase, State, FRAGMENT_WINDOW};

/// The receiver matched a rendezvous request to a buffer of `cap` bytes at `ptr`: asks the sender
/// for as many bytes as fit, and completes at once when none will come.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_recv(
    st: &mut State,
    link: LinkId,
    ep: u64,
    recv_req: u64,
    sender_req: u64,
    total_len: u64,
    sink: Arc<dyn OpSink>,
    ptr: *mut u8,
    cap: usize,
    sender_tag: u64,
) {
    let total = usize::try_from(total_len).unwrap_or(usize::MAX);
    let accept = total.min(cap);
    st.reply(link, &Op::Rtr { sender_req, recv_req, accept_len: accept as u64 }, None);
    if accept == 0 {
        let status = if total > 0 { Status::MessageTruncated } else { Status::Ok };
        st.complete_sink(&sink, status, OpInfo { length: 0, sender_tag, value: 0 });
        return;
    }
    st.insert_op(recv_req, ep, sink, OutKind::RndvRecv { ptr, accept, total, received: 0, sender_tag });
}

/// Feeds every endpoint's bulk jobs to the transport, as far as the windows allow.
#[inline]
pub(crate) fn run_bulk(core: &mut Core) {
    if !core.st.bulk_active.is_empty() {
        run_active_bulk(core);
    }
}

/// [`run_bulk`] with work to do: out of line, so every progress call does not pay for its frame.
#[inline(never)]
fn run_active_bulk(core: &mut Core) {
    let eps: Vec<u64> = core.st.bulk_active.drain().collect();
    for ep in eps {
        // Nothing of a connecting endpoint leaves before the server's answer: the answer may move
        // the endpoint to another link (a shared-memory lane). Becoming ready reactivates it.
        if core.st.eps.get(&ep).is_some_and(|state| state.phase == Phase::Connecting) {
            continue;
        }
        run_ep_bulk(core, ep);
        if core.st.eps.get(&ep).is_some_and(|state| !state.bulk.is_empty()) {
            core.st.bulk_active.insert(ep);
        }
    }
}

enum Step {
    /// The front job is done; go on with the next.
    Next,
    /// The window is full or the transport pushes back; resume later.
    Wait,
}

fn run_ep_bulk(core: &mut Core, ep: u64) {
    loop {
        let Some(state) = core.st.eps.get(&ep) else { return };
        let link = state.link;
        let step = match state.bulk.front() {
            None => return,
            Some(BulkJob::Send { op, .. }) => {
                let op = *op;
                send_fragments(core, link, op)
            }
            Some(&BulkJob::GetReply { req, region, key, addr, len, offset }) => {
                get_reply(core, ep, link, req, region, key, addr, len, offset)
            }
        };
        match step {
            Step::Next => {
                if let Some(state) = core.st.eps.get_mut(&ep) {
                    if let Some(BulkJob::Send { stream: true, .. }) = state.bulk.pop_front() {
                        state.release_streams();
                    }
                }
            }
            Step::Wait => return,
        }
    }
}

fn send_fragments(core: &mut Core, link: LinkId, op_id: u64) -> Step {
    let Core { tl, st } = core;
    // The link's transport's own threshold (dpdk's is ZCX_DPDK_ZCOPY_THRESH, and it sends
    // zero-copy only from memory registered with DPDK, copying the rest).
    let zcopy_threshold = tl.link_caps(link).zcopy_threshold;
    loop {
        let Some(op) = st.ops.get_mut(&op_id) else { return Step::Next };
        let OutKind::Send { ptr, len, sent, frag, .. } = &mut op.kind else { return Step::Next };
        if op.result.is_some() {
            return Step::Next;
        }
        if *sent >= *len {
            let (len, is_put) = (*len, matches!(frag, FragKind::Put { .. }));
            if !is_put {
                st.finish_op(op_id, Status::Ok, OpInfo { length: len, ..OpInfo::default() });
            }
            return Step::Next;
        }
        if op.tokens >= FRAGMENT_WINDOW {
            return Step::Wait;
        }
        let placed = matches!(frag, FragKind::Rndv { .. }) && st.max_placed > 0;
        let n = (*len - *sent).min(if placed { st.max_placed } else { st.max_payload });
        let header = match *frag {
            FragKind::Rndv { recv_req } => Op::RndvData { recv_req, offset: *sent as u64 },
            FragKind::Stream => Op::Stream,
            FragKind::Put { region, key, addr } => Op::Put {
                req: op_id,
                region,
                key,
                addr,
                len: *len as u64,
                offset: *sent as u64,
                ack: *sent + n == *len,
            },
        };
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let hdr_len = header.encode(&mut hdr);
        // SAFETY: `ptr..ptr+len` is the operation's buffer, owned by its request cell, which this
        // record keeps alive; `sent + n <= len`.
        let start = unsafe { ptr.add(*sent) };
        let result = if n >= zcopy_threshold {
            // SAFETY: the buffer stays alive and unchanged until the token returns: the operation
            // completes only once `tokens` is back to 0.
            let z = unsafe { ZcopyPayload::new(start, n, op_id) };
            send_fragment(tl, link, &hdr[..hdr_len], Payload::Zcopy(z), placed)
        } else {
            // SAFETY: as above; the bytes are copied before `send` returns.
            let bytes = unsafe { std::slice::from_raw_parts(start, n) };
            send_fragment(tl, link, &hdr[..hdr_len], Payload::Copy(bytes), placed)
        };
        match result {
            Ok(outcome) => {
                *sent += n;
                if outcome == SendOutcome::InFlight {
                    op.tokens += 1;
                }
            }
            Err(TlError::NoResource) => return Step::Wait,
            Err(e) => {
                st.finish_op(op_id, status_of(e), OpInfo::default());
                return Step::Next;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn get_reply(
    core: &mut Core,
    ep: u64,
    link: LinkId,
    req: u64,
    region: u64,
    key: [u8; 16],
    addr: u64,
    len: u64,
    mut offset: u64,
) -> Step {
    let Core { tl, st } = core;
    if tl.has_pending_sends(link) && offset > 0 {
        return Step::Wait;
    }
    let placed = st.max_placed > 0;
    let max_payload = if placed { st.max_placed } else { st.max_payload } as u64;
    let mut hdr = [0u8; MAX_HEADER_LEN];
    for _ in 0..FRAGMENT_WINDOW {
        if offset >= len {
            break;
        }
        let n = (len - offset).min(max_payload);
        let hdr_len = Op::GetData { req, offset }.encode(&mut hdr);
        // Checked again for every fragment: the region may have been unmapped since the request.
        let sent =
            st.ctx.remote_access.with_access(region, &key, addr + offset, n, RemoteAccess::Read, |ptr| {
                // SAFETY: the table vouched for `[ptr, ptr + n)` as live registered memory and holds its
                // lock, so the region cannot be removed (and unmapped) during the copy into the transport.
                let bytes = unsafe { std::slice::from_raw_parts(ptr.cast_const(), n as usize) };
                send_fragment(tl, link, &hdr[..hdr_len], Payload::Copy(bytes), placed)
            });
        match sent {
            Ok(Ok(_)) => offset += n,
            Ok(Err(TlError::NoResource)) => break,
            Ok(Err(_)) => return Step::Next,
            Err(err) => {
                let status = zcx_dataplane::proto::rma_exec::status_of(err);
                send_now(tl, link, &Op::RmaAck { req, status, value: 0 });
                return Step::Next;
            }
        }
    }
    if offset >= len {
        send_now(tl, link, &Op::RmaAck { req, status: 0, value: 0 });
        return Step::Next;
    }
    if let Some(BulkJob::GetReply { offset: o, .. }) = st.eps.get_mut(&ep).and_then(|e| e.bulk.front_mut()) {
        *o = offset;
    }
    Step::Wait
}

fn send_fragment(
    tl: &mut zcx_dataplane::TransportSet,
    link: LinkId,
    header: &[u8],
    payload: Payload<'_>,
    placed: bool,
) -> Result<SendOutcome, TlError> {
    if placed {
        tl.send_placed(link, header, payload)
    } else {
        tl.send(link, header, payload)
    }
}

fn send_now(tl: &mut zcx_dataplane::TransportSet, link: LinkId, op: &Op) {
    let mut hdr = [0u8; MAX_HEADER_LEN];
    let n = op.encode(&mut hdr);
    if let Err(e) = tl.send(link, &hdr[..n], Payload::None) {
        tracing::debug!(?link, %e, "reply not sent");
    }
}
