//! The target's side of a large shared-memory put or get copied by both sides (see
//! `zcx_dataplane::shm::put_help` for the protocol, `endpoint::put_help` for the initiator's).
//!
//! An announcement (`Op::PutHelp`, `Op::GetHelp`) is checked in three steps. The frame's
//! dispatch, under the transport's poll, only notes it. After the poll, the worker checks it:
//! - our range against the remote-access table, as any put's (get's);
//! - the key of the initiator's side, which must name a memfd of the link's own peer process (its
//!   pid as the kernel reported it for the link's socket), so an initiator cannot have this
//!   process read or write another's memory for it, and must claim the protection the copy
//!   needs there (`REMOTE_READ` for a put's source, `REMOTE_WRITE` for a get's destination);
//! - the initiator's range, which must lie inside that key's region, mapped here.
//!
//! Only then is a copy job queued. The job runs after the worker's lock is released, like a
//! handler, under the remote-access table's read lock, so our region cannot be unmapped while the
//! job copies. It takes chunks until none is left. An announcement that fails a check is dropped:
//! the initiator then copies every chunk itself. The initiator's mapped regions are kept per
//! endpoint (a few, the most recent) until the endpoint goes.

use std::sync::Arc;

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::shm::put_help::{chunk_count, copy_chunk, HelpWords};
use zcx_dataplane::{LinkId, RemoteAccess, SameHostFastPath as _, TransportSet};

use crate::context::ContextInner;
use crate::mem::Prot;
use crate::rkey::RemoteKey;
use crate::worker::state::{Deferred, State};

/// The initiator's regions kept mapped per endpoint.
const REGIONS_PER_EP: usize = 4;
/// Announcements noted in one poll beyond which more are dropped (copied by their initiator).
const PENDING_MAX: usize = 8;

/// The initiator's regions kept mapped for one endpoint, with the packed keys that named them.
pub(crate) type KeptRegions = Vec<(Box<[u8]>, Arc<RemoteKey>)>;

/// An announcement as the frame's dispatch noted it: the link and endpoint it came from, the
/// `Op::PutHelp` or `Op::GetHelp` and its payload (the packed key of the initiator's side).
pub(crate) struct Announcement {
    link: LinkId,
    ep: zcx_engine::EndpointId,
    op: Op,
    packed: Box<[u8]>,
}

/// A checked job: copy chunks between the peer's mapped region and ours.
pub(crate) struct HelpCopy {
    words: HelpWords,
    seq: u32,
    chunks: u32,
    chunk_shift: u8,
    len: u64,
    /// What the copy does to our region: a put writes it, a get reads it.
    access: RemoteAccess,
    /// Where the initiator's first byte is mapped here, kept mapped by `peer_region`.
    peer: *mut u8,
    peer_region: Arc<RemoteKey>,
    region: u64,
    key: [u8; 16],
    addr: u64,
}

// SAFETY: `peer` points into the mapping `peer_region` owns and keeps alive; plain bytes any
// thread may access.
unsafe impl Send for HelpCopy {}

/// Notes an announcement (`op`, an `Op::PutHelp` or `Op::GetHelp` with its `payload`) from `ep`
/// on `link` for the worker to check after the poll.
pub(crate) fn on_announce(st: &mut State, link: LinkId, ep: zcx_engine::EndpointId, op: Op, payload: &[u8]) {
    if st.help_announced.len() < PENDING_MAX {
        st.help_announced.push(Announcement { link, ep, op, packed: payload.into() });
    }
}

/// Checks the announcements of the last poll and queues a copy job for each that passes.
pub(crate) fn check_announced(tl: &TransportSet, st: &mut State) {
    for announcement in std::mem::take(&mut st.help_announced) {
        if let Some(job) = check(tl, st, announcement) {
            st.deferred.push(Deferred::Help(job));
        }
    }
}

fn check(tl: &TransportSet, st: &mut State, a: Announcement) -> Option<HelpCopy> {
    // Our side is written by a put and read by a get; the initiator's the other way round.
    let (seq, chunk_shift, len, local, region, key, addr, access, theirs_needs) = match a.op {
        Op::PutHelp { seq, chunk_shift, len, src, region, key, addr } => {
            (seq, chunk_shift, len, src, region, key, addr, RemoteAccess::Write, Prot::REMOTE_READ)
        }
        Op::GetHelp { seq, chunk_shift, len, dst, region, key, addr } => {
            (seq, chunk_shift, len, dst, region, key, addr, RemoteAccess::Read, Prot::REMOTE_WRITE)
        }
        _ => return None,
    };
    let chunks = chunk_count(len, chunk_shift).filter(|_| len > 0)?;
    let (words, peer_pid) = tl.peer_help_words(a.link)?;
    st.ctx.remote_access.check(region, &key, addr, len, access).ok()?;
    let peer_region = peer_key(st, a.ep, &a.packed)?;
    if peer_region.shm_pid() != Some(peer_pid) {
        tracing::debug!(ep = %a.ep, "copy help with a region of another process; ignored");
        return None;
    }
    if !peer_region.prot().contains(theirs_needs) {
        tracing::debug!(ep = %a.ep, "copy help with a region its owner does not share so; ignored");
        return None;
    }
    let last = local.checked_add(len - 1)?;
    let peer = peer_region.ptr(local).ok()?;
    // The region is one mapping: its first and last bytes inside it put the whole range inside.
    peer_region.ptr(last).ok()?;
    Some(HelpCopy { words, seq, chunks, chunk_shift, len, access, peer, peer_region, region, key, addr })
}

/// The initiator's region named by `packed`, mapped here: kept from an earlier announcement of
/// `ep`, or unpacked (and kept) now.
fn peer_key(st: &mut State, ep: zcx_engine::EndpointId, packed: &[u8]) -> Option<Arc<RemoteKey>> {
    let kept = st.help_mappings.entry(ep).or_default();
    if let Some(at) = kept.iter().position(|(bytes, _)| **bytes == *packed) {
        return Some(Arc::clone(&kept[at].1));
    }
    let key = Arc::new(RemoteKey::unpack_in(&st.ctx, packed).ok()?);
    if kept.len() >= REGIONS_PER_EP {
        kept.remove(0);
    }
    kept.push((packed.into(), Arc::clone(&key)));
    Some(key)
}

/// Runs a job without the worker's lock: copies chunks until the initiator has taken the rest.
/// Nothing is copied when our region went since the check.
pub(crate) fn run(ctx: &ContextInner, job: HelpCopy) {
    let HelpCopy { words, seq, chunks, chunk_shift, len, access, peer, peer_region, region, key, addr } = job;
    let copied = ctx.remote_access.with_access(region, &key, addr, len, access, |ours| {
        let (src, dst) = match access {
            RemoteAccess::Write => (peer.cast_const(), ours),
            _ => (ours.cast_const(), peer),
        };
        while let Some(chunk) = words.claim(seq, chunks) {
            // SAFETY: our `[addr, addr + len)` passed the access check, whose read lock keeps it
            // mapped for this closure; the initiator's `[peer, peer + len)` lies in
            // `peer_region`'s mapping (checked when the job was made), which `peer_region`
            // keeps. The two are different mappings.
            unsafe { copy_chunk(src, dst, chunk, chunk_shift, len) };
            words.chunk_done(seq);
        }
    });
    if copied.is_err() {
        tracing::debug!(region, "copy help for a region unmapped since; left to the initiator");
    }
    drop(peer_region);
}
