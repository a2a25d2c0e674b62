//! Two cores on one large put: the target's polling worker copies part of it.
//!
//! A put over shared memory is one CPU copy by the initiator, bound by what one core copies (about
//! 48 GB/s here, and UCX's posix transport copies the same way). A large put has the whole copy
//! on the initiator's core while the target's worker often spins on its doorbells with nothing to
//! do. So for a put above a threshold, the initiator announces it (`Op::PutHelp`, with the source
//! region's key) and then copies it in chunks, taking each chunk from a shared counter; the target,
//! once it sees the announcement, takes chunks from the same counter and copies them out of the
//! initiator's memory mapped in its own address space. Each chunk is copied by exactly one side.
//! Measured with two threads on this machine's two cores: 1 MiB in 128 KiB chunks at 81 GB/s
//! against 47 GB/s for one core.
//!
//! The counters live in the link's segment, on the control line of the ring the initiator
//! produces into ([`Segment::help_words`]): the claim word holds the job's sequence number and the
//! next chunk; the done word the job's sequence number and the chunks the target finished. The
//! initiator owns the job: it starts it (both words to its new sequence number), claims chunks as
//! the target does, then closes it and waits until every chunk the target claimed is done. A
//! target that claimed nothing costs nothing; one that claimed a chunk is waited for, as its copy
//! is part of the put, and the put fails rather than hangs when it never finishes (see
//! [`HelpJob::finish`]). The target only ever writes its own memory, after checking the range
//! against its remote-access table like any put, so a lying initiator can only garble bytes it
//! could have put anyway, and a lying target only its own memory or the initiator's put status.
//!
//! A large get is the same job the other way (`Op::GetHelp`): the initiator copies chunks out of
//! the target's memory mapped here, the target copies chunks of its own memory into the
//! initiator's destination, mapped there through the key the announcement carries. The target
//! checks its range for reading like any get, and writes only the destination the initiator named
//! in its own region, so a lying initiator can only have its own memory written, and a lying
//! target only garble bytes it could have given as the get's data.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::segment::Segment;

/// Bytes per chunk as a power of two: 128 KiB, the smallest that kept two threads near their
/// best (81 GB/s for 1 MiB; 80 at 64 KiB, 86 at 256 KiB but with only four chunks to share).
pub const CHUNK_SHIFT: u8 = 17;
/// The smallest and largest chunk sizes a target accepts in an announcement.
pub const CHUNK_SHIFTS: std::ops::RangeInclusive<u8> = 12..=30;
/// The most chunks one job may have (the claim word keeps the next chunk in 32 bits).
pub const MAX_CHUNKS: u64 = u32::MAX as u64;

/// How long the initiator waits for the target's last chunks before it gives the put up: far
/// beyond a chunk's copy (microseconds) even on a loaded host, short of a hang.
const FINISH_TIMEOUT: Duration = Duration::from_secs(2);

/// Next-chunk value that closes a job: no side claims after it.
const CLOSED: u32 = u32::MAX;

fn word(seq: u32, count: u32) -> u64 {
    (u64::from(seq) << 32) | u64::from(count)
}

fn split(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// The two help words of one direction of a link, kept mapped by the segment they lie in.
#[derive(Clone)]
pub struct HelpWords {
    segment: Arc<Segment>,
    which: usize,
}

impl std::fmt::Debug for HelpWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelpWords").field("which", &self.which).finish()
    }
}

impl HelpWords {
    /// The words of the ring `which` of `segment` (the ring the initiator produces into).
    pub fn new(segment: Arc<Segment>, which: usize) -> HelpWords {
        HelpWords { segment, which }
    }

    fn claim_word(&self) -> &AtomicU64 {
        self.segment.help_words(self.which).0
    }

    fn done_word(&self) -> &AtomicU64 {
        self.segment.help_words(self.which).1
    }

    /// Claims the next chunk of job `seq` of `chunks` chunks: `None` once all are taken, the job
    /// closed or replaced. Either side calls it.
    #[inline]
    pub fn claim(&self, seq: u32, chunks: u32) -> Option<u32> {
        let claim = self.claim_word();
        let mut current = claim.load(Ordering::Acquire);
        loop {
            let (at_seq, next) = split(current);
            if at_seq != seq || next >= chunks || next == CLOSED {
                return None;
            }
            match claim.compare_exchange_weak(
                current,
                word(seq, next + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(next),
                Err(seen) => current = seen,
            }
        }
    }

    /// The target finished a chunk it claimed for job `seq`: counted only while the job is still
    /// `seq`, which the initiator keeps it until every claimed chunk is done.
    pub fn chunk_done(&self, seq: u32) {
        // Release: the chunk's bytes are written before the initiator sees the count.
        let done = self.done_word();
        let mut current = done.load(Ordering::Relaxed);
        loop {
            let (at_seq, count) = split(current);
            if at_seq != seq {
                return;
            }
            match done.compare_exchange_weak(
                current,
                word(seq, count + 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }
}

/// The initiator's side of a link's help words: one job at a time (a second large put on the
/// link while one is helped is copied alone), numbered in sequence. It holds no reference to the
/// segment: each job does, from its start to its end, so a link that goes keeps nothing mapped
/// past its last job.
#[derive(Debug, Default)]
pub struct HelpLane {
    busy: AtomicBool,
    next_seq: AtomicU32,
    /// A job the target never finished (it hung or died mid-chunk): the words may still be
    /// written by it, so the link offers no more jobs.
    spoiled: AtomicBool,
    /// Chunks the target copied over the lane's life.
    helped: AtomicU64,
}

impl HelpLane {
    /// A lane that has run no job.
    pub fn new() -> HelpLane {
        HelpLane::default()
    }

    /// Chunks the target copied for this link's puts so far.
    pub fn helped_chunks(&self) -> u64 {
        self.helped.load(Ordering::Relaxed)
    }

    /// Starts a job of `chunks` chunks on `words` (the link's, for the ring it sends on), or
    /// `None` when another is running on the link (or the link's words are spoiled). Announce it
    /// to the target only after this.
    pub fn start(&self, words: HelpWords, chunks: u32) -> Option<HelpJob<'_>> {
        if chunks == 0 || self.spoiled.load(Ordering::Relaxed) {
            return None;
        }
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        // Jobs are numbered from 1: the words of a fresh segment (zero) name no job.
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
        // The done word first: a chunk claimed under the new claim word is counted in it.
        words.done_word().store(word(seq, 0), Ordering::Relaxed);
        words.claim_word().store(word(seq, 0), Ordering::Release);
        Some(HelpJob { lane: self, words, seq, chunks, mine: 0 })
    }
}

/// A running job on the initiator's side; closes (not finishes) on drop.
#[derive(Debug)]
pub struct HelpJob<'a> {
    lane: &'a HelpLane,
    /// The link's words, kept mapped for the job.
    words: HelpWords,
    seq: u32,
    chunks: u32,
    /// Chunks this side claimed.
    mine: u32,
}

impl HelpJob<'_> {
    /// The job's sequence number, for the announcement.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Claims the next chunk for the initiator.
    #[inline]
    pub fn claim(&mut self) -> Option<u32> {
        let chunk = self.words.claim(self.seq, self.chunks)?;
        self.mine += 1;
        Some(chunk)
    }

    /// Closes the job (no more claims) and waits until the target finished every chunk it
    /// claimed; returns how many that was. `Err` when it did not within the timeout or
    /// `peer_alive` says it is gone: its chunks may be missing, and the link's help words are
    /// left to it for good.
    pub fn finish(mut self, mut peer_alive: impl FnMut() -> bool) -> Result<u32, u32> {
        let mine = self.mine;
        let words = &self.words;
        let claim = words.claim_word();
        // Closing fixes the count: a chunk is the target's if it claimed it before this swap.
        let last = claim.swap(word(self.seq, CLOSED), Ordering::AcqRel);
        self.mine = self.chunks.max(self.mine);
        let (seq, next) = split(last);
        let Some(theirs) = (seq == self.seq).then(|| next.min(self.chunks).checked_sub(mine)).flatten()
        else {
            // Only the target writes the word besides us: it broke the protocol.
            self.lane.spoiled.store(true, Ordering::Relaxed);
            return Err(0);
        };
        let finished = || {
            let (seq, done) = split(words.done_word().load(Ordering::Acquire));
            let done = seq == self.seq && done >= theirs;
            if done {
                self.lane.helped.fetch_add(u64::from(theirs), Ordering::Relaxed);
            }
            done
        };
        if theirs == 0 || finished() {
            return Ok(theirs);
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if finished() {
                return Ok(theirs);
            }
            std::hint::spin_loop();
            spins += 1;
            if spins % 1024 == 0 && (start.elapsed() > FINISH_TIMEOUT || !peer_alive()) {
                if finished() {
                    return Ok(theirs);
                }
                self.lane.spoiled.store(true, Ordering::Relaxed);
                return Err(theirs);
            }
        }
    }
}

impl Drop for HelpJob<'_> {
    fn drop(&mut self) {
        // `finish` leaves nothing for the target to claim; a job dropped before it (an
        // announcement that could not be sent) is closed here so nothing more is claimed.
        if self.mine < self.chunks {
            self.words.claim_word().store(word(self.seq, CLOSED), Ordering::Release);
        }
        self.lane.busy.store(false, Ordering::Release);
    }
}

/// The byte range of chunk `index` of a job of `len` bytes in chunks of `1 << shift` bytes.
pub fn chunk_range(index: u32, shift: u8, len: u64) -> (u64, u64) {
    let start = u64::from(index) << shift;
    (start, (start + (1u64 << shift)).min(len))
}

/// Copies chunk `index` of a job of `len` bytes in chunks of `1 << shift` bytes from the job's
/// source at `src` to its destination at `dst`: what each side does with a chunk it claimed.
///
/// # Safety
/// `src..src + len` is readable and `dst..dst + len` writable, and the two do not overlap.
#[inline]
pub unsafe fn copy_chunk(src: *const u8, dst: *mut u8, index: u32, shift: u8, len: u64) {
    let (start, end) = chunk_range(index, shift, len);
    if start >= end {
        return;
    }
    // SAFETY: `start < end <= len`, inside both ranges of the caller's contract.
    unsafe {
        crate::copy::copy_bytes(src.add(start as usize), dst.add(start as usize), (end - start) as usize)
    };
}

/// Chunks of `1 << shift` bytes in a job of `len` bytes, or `None` above [`MAX_CHUNKS`] or for
/// a shift outside [`CHUNK_SHIFTS`].
pub fn chunk_count(len: u64, shift: u8) -> Option<u32> {
    if !CHUNK_SHIFTS.contains(&shift) {
        return None;
    }
    let chunks = len.div_ceil(1u64 << shift);
    (chunks < MAX_CHUNKS).then_some(chunks as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> HelpWords {
        let (segment, _fd) = Segment::create(4096, false).expect("segment");
        HelpWords::new(Arc::new(segment), 0)
    }

    /// Both sides claim concurrently: every chunk is claimed exactly once, the initiator's
    /// `finish` counts the target's claims, and it returns only after the target marked them
    /// done.
    #[test]
    fn every_chunk_is_claimed_once_and_finish_waits_for_the_targets() {
        let lane = HelpLane::new();
        let words = words();
        for round in 0..200u32 {
            let chunks = 1 + round % 37;
            let mut job = lane.start(words.clone(), chunks).expect("idle lane");
            let seq = job.seq();
            let words = words.clone();
            let target_done = Arc::new(AtomicU32::new(0));
            let done_by_target = Arc::clone(&target_done);
            let target = std::thread::spawn(move || {
                let mut mine = Vec::new();
                while let Some(chunk) = words.claim(seq, chunks) {
                    mine.push(chunk);
                    std::thread::yield_now();
                    done_by_target.fetch_add(1, Ordering::SeqCst);
                    words.chunk_done(seq);
                }
                mine
            });
            let mut ours = Vec::new();
            while let Some(chunk) = job.claim() {
                ours.push(chunk);
            }
            let theirs = job.finish(|| true).expect("the target finishes");
            assert_eq!(
                target_done.load(Ordering::SeqCst),
                theirs,
                "finish returned before the target's chunks"
            );
            let mut all = target.join().expect("target");
            assert_eq!(all.len() as u32, theirs);
            all.extend(ours);
            all.sort_unstable();
            assert_eq!(all, (0..chunks).collect::<Vec<_>>(), "round {round}");
        }
    }

    /// A target that claimed a chunk and never finishes it fails the put instead of hanging it,
    /// and the link offers no more jobs; a late claim after the close gets nothing.
    #[test]
    fn a_target_that_never_finishes_fails_the_put_and_spoils_the_lane() {
        let lane = HelpLane::new();
        let words = words();
        let job = lane.start(words.clone(), 4).expect("idle lane");
        let seq = job.seq();
        assert_eq!(words.claim(seq, 4), Some(0), "the target claims one");
        let mut dead = false;
        assert_eq!(
            job.finish(|| {
                dead = true;
                false
            }),
            Err(1)
        );
        assert!(dead, "the peer's liveness was asked");
        assert!(lane.start(words, 4).is_none(), "a spoiled lane starts no job");
    }

    /// A stale target (an old job's number) claims nothing and counts nothing, and one job at a
    /// time runs per lane.
    #[test]
    fn claims_and_counts_are_for_the_running_job_only() {
        let lane = HelpLane::new();
        let words = words();
        let mut first = lane.start(words.clone(), 2).expect("idle lane");
        let old = first.seq();
        assert!(lane.start(words.clone(), 2).is_none(), "one job at a time");
        assert_eq!(first.claim(), Some(0));
        assert_eq!(first.claim(), Some(1));
        assert_eq!(first.claim(), None);
        assert_eq!(first.finish(|| true), Ok(0));
        let job = lane.start(words.clone(), 3).expect("idle again");
        assert_ne!(job.seq(), old);
        assert_eq!(words.claim(old, 3), None, "an old job's number");
        words.chunk_done(old);
        assert_eq!(split(words.done_word().load(Ordering::SeqCst)), (job.seq(), 0));
        drop(job);
        assert_eq!(words.claim(old + 1, 3), None, "a dropped job is closed");
    }

    #[test]
    fn chunk_ranges_cover_the_job_and_bad_shapes_are_refused() {
        assert_eq!(chunk_count(1 << 20, 17), Some(8));
        assert_eq!(chunk_count((1 << 20) + 1, 17), Some(9));
        assert_eq!(chunk_range(8, 17, (1 << 20) + 1), (1 << 20, (1 << 20) + 1));
        assert_eq!(chunk_count(1 << 20, 11), None);
        assert_eq!(chunk_count(1 << 20, 31), None);
        assert_eq!(chunk_count(u64::MAX, 12), None);
    }
}
