//! A single-producer/single-consumer ring of variable-length records in shared memory.
//!
//! Layout of one ring (all offsets from the ring's base, which is 64-byte aligned):
//!
//! ```text
//! 0    producer line: head (u64, bytes ever published)
//! 64   consumer line: tail (u64, bytes ever released)
//! 128  sleep line: `sleeping` (u64, 1 while the consumer may block on its event fd)
//! 192  data: `capacity` bytes (a power of two, a multiple of 64)
//! ```
//!
//! A record is `[len: u32][kind: u16][lap: u16][len bytes]`, padded to a multiple of 64 bytes, so a
//! record of up to 56 payload bytes is exactly one cache line and records never share a line. A
//! record never wraps: when it does not fit before the end of the data area, the producer writes
//! a [`KIND_SKIP`] record there and starts again at offset 0; so a record is always contiguous and
//! the consumer lends it to the callback in place.
//!
//! `lap` is how many times the producer had gone round the data area when it wrote the record,
//! plus one (mod 2^16; fresh zeroes are no record). The producer writes the payload first and the header last, with one Release store
//! of its 8 bytes; the consumer polls the header at its tail with an Acquire load and takes the
//! record once the lap is the one its tail is on. Until then the slot holds zeroes: an earlier
//! lap may have left payload bytes there (records of other sizes put line starts inside
//! payloads), and those could read as a header of the coming lap, so the producer clears the
//! slot after each record before it publishes that record, and the slot at offset 0 before a
//! skip. That slot must be free, so the producer never fills the last line of the ring. So an
//! 8-byte message costs the consumer one cache line from the other
//! core, header and payload together, which is the floor for any shared-memory transport; a
//! separate index line would cost a second transfer on every message. The producer still
//! publishes `head` with each record (just before writing it), for the sleep protocol only.
//!
//! The consumer releases space by storing `tail` (Release) after it is done with the bytes. The
//! producer caches the consumer's tail and reloads it only when the cached value says the ring is
//! full.
//!
//! The peer is never trusted: the consumer checks every record's kind and length against the
//! record's room before the end of the data area and the frame size limit, and a record claiming
//! more is [`RingError`], which the transport turns into a link failure. No check ever reads
//! outside the ring. The producer checks the peer's `tail` against its own head and the capacity.
//!
//! Wakeups: a consumer about to sleep sets `sleeping` and then compares `head` with its tail once
//! more; the producer stores `head` (before it writes the record, so that its full barrier never
//! waits for the record's cache line) and then looks at `sleeping`. Both sides use sequentially consistent
//! accesses, so at least one of them sees the other (no lost wakeup): either the consumer finds
//! the record and does not sleep, or the producer finds the flag, clears it and reports through
//! [`Producer::take_wake`] that the peer must be woken (the transport writes a byte to the link
//! socket). While nobody sleeps, the flag's line stays shared in both caches: the producer's
//! check is a cache hit.

use std::sync::atomic::{AtomicU64, Ordering};

use super::board::BoardBit;

/// Bytes before the data area: the producer, consumer and sleep cache lines.
pub const RING_HEADER: usize = 192;
/// Record alignment: one cache line.
pub const RECORD_ALIGN: usize = 64;
/// Bytes of a record header (`len`, `kind` and `lap`).
pub const RECORD_HEADER: usize = 8;

/// Record kind: padding up to the end of the data area; the next record is at offset 0.
pub const KIND_SKIP: u32 = 0x5301;
/// Record kind: a frame of the transport.
pub const KIND_FRAME: u32 = 0x5302;
/// Record kind: the descriptor of a placed payload the receiver reads from the sender's memory.
pub const KIND_PLACED: u32 = 0x5303;
/// Record kind: the receiver is done with the oldest placed payload (release it).
pub const KIND_PLACE_DONE: u32 = 0x5304;

/// How far ahead of the newest record the producer keeps line starts cleared (see
/// `Producer::clear_ahead`): one line past the slot the consumer looks at next. Measured with a
/// two-thread ring ping-pong of one-line records (CPUs 0 and 1): 64 (the next slot only, cleared
/// before each publish) 92 ns one-way; 128 and 192 about 64 ns; 512 about 73 ns; 1024 about
/// 78 ns. A clear far ahead lands on lines the consumer's cache still holds from the last lap
/// (or fetched ahead), so it costs an ownership transfer on the record's path; the line right
/// after the record is one the producer owns already.
const CLEAR_AHEAD: usize = 128;

/// Smallest data area a ring may have.
pub const MIN_CAPACITY: usize = 4096;
/// Largest data area a ring may have.
pub const MAX_CAPACITY: usize = 1 << 30;

/// The bytes one ring takes in shared memory for a data area of `capacity` bytes.
pub const fn ring_bytes(capacity: usize) -> usize {
    RING_HEADER + capacity
}

/// The room a record with `len` payload bytes takes in the data area.
pub const fn record_len(len: usize) -> usize {
    (RECORD_HEADER + len + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// The largest payload one record may carry in a ring of `capacity` bytes: half the data area
/// (less the header), so that a record always fits after a skip once the consumer caught up.
pub const fn max_record_payload(capacity: usize) -> usize {
    capacity / 2 - RECORD_HEADER
}

/// The peer broke the ring protocol (or the memory is garbage): the link is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// An index moved backwards or further than the capacity allows, or is not record-aligned.
    BadIndex,
    /// A record has an unknown kind.
    BadKind,
    /// A record's length overruns what was published, the data area or the frame limit.
    BadLength,
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for RingError {}

/// Checks that `capacity` is a valid data area size.
pub fn valid_capacity(capacity: usize) -> bool {
    capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity)
}

/// The shared part of a ring: base pointer and capacity. Both ends build one over the same memory.
#[derive(Debug, Clone, Copy)]
struct RingMem {
    base: *mut u8,
    capacity: usize,
    /// log2 of `capacity` (a power of two): laps are a shift, not a division, on every record.
    lap_shift: u32,
}

impl RingMem {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: `new`'s contract: base is 64-aligned and the ring header is live mapped memory
        // for the ring's lifetime; AtomicU64 has the layout of u64.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as for `head`; the consumer line starts 64 bytes in.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }

    fn sleeping(&self) -> &AtomicU64 {
        // SAFETY: as for `head`; the sleep line starts 128 bytes in.
        unsafe { &*(self.base.add(128) as *const AtomicU64) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data area follows the header inside the mapping.
        unsafe { self.base.add(RING_HEADER) }
    }

    /// The header word of the record slot at data offset `pos` (64-aligned, inside the area).
    fn header(&self, pos: usize) -> &AtomicU64 {
        debug_assert!(pos % RECORD_ALIGN == 0 && pos < self.capacity);
        // SAFETY: `pos` is a 64-aligned offset inside the data area (the callers keep indices
        // record-aligned and mask them with the capacity), so the 8 bytes are aligned, mapped
        // and live for the ring's lifetime.
        unsafe { &*(self.data().add(pos) as *const AtomicU64) }
    }

    /// The lap stamp of a byte index, as record headers carry it: the lap plus one, so that the
    /// zeroes of a fresh segment are never a record of the first lap.
    fn lap(&self, index: u64) -> u16 {
        ((index >> self.lap_shift) as u16).wrapping_add(1)
    }
}

/// Whether a record may be waiting in the ring at `base` for its consumer, judged from the
/// consumer's released tail (as of its last poll) and the header at that position, without the
/// consumer itself. Every read is masked into the ring and aligned, so a peer scribbling on the
/// ring can only make the answer wrong, never make it read elsewhere.
///
/// # Safety
/// `base..base + ring_bytes(capacity)` is a mapped, 64-byte aligned ring of valid `capacity`.
#[inline]
pub unsafe fn record_waiting(base: *const u8, capacity: usize) -> bool {
    let mem = RingMem { base: base as *mut u8, capacity, lap_shift: capacity.trailing_zeros() };
    let tail = mem.tail().load(Ordering::Relaxed);
    let pos = (tail as usize) & (capacity - 1) & !(RECORD_ALIGN - 1);
    let word = mem.header(pos).load(Ordering::Acquire);
    (word >> 48) as u16 == mem.lap(tail)
}

/// A record header word.
fn header_word(len: u32, kind: u32, lap: u16) -> u64 {
    u64::from(len) | (u64::from(kind as u16) << 32) | (u64::from(lap) << 48)
}

/// The producing end of a ring.
#[derive(Debug)]
pub struct Producer {
    mem: RingMem,
    /// Our head: bytes published so far (we are the only writer of the shared copy).
    head: u64,
    /// The consumer's tail as last loaded.
    cached_tail: u64,
    max_payload: usize,
    /// The consumer announced sleep and we cleared the flag: it needs a wakeup.
    wake: bool,
    /// Every line start from `head` up to this index (exclusive) is cleared: the slots the
    /// consumer will look at next hold zeroes until a record is published there.
    cleared: u64,
    /// The consumer's board bit, set after each record once the consumer watches this ring
    /// through its board (see [`super::board`]).
    board: Option<BoardBit>,
}

// SAFETY: the producer only touches shared memory through its raw pointer, which stays valid for
// the ring's lifetime (the owner keeps the mapping alive); moving it between threads is fine.
unsafe impl Send for Producer {}

impl Producer {
    /// The producing end of the ring at `base`, starting from the indices found there (zero in a
    /// fresh segment).
    ///
    /// # Safety
    /// `base..base + ring_bytes(capacity)` must be mapped, writable, 64-byte aligned, and stay so
    /// while the producer lives; nobody else may produce into this ring.
    pub unsafe fn new(base: *mut u8, capacity: usize) -> Producer {
        debug_assert!(valid_capacity(capacity) && base as usize % 64 == 0);
        let mem = RingMem { base, capacity, lap_shift: capacity.trailing_zeros() };
        let head = mem.head().load(Ordering::Relaxed);
        let cached_tail = mem.tail().load(Ordering::Acquire);
        Producer {
            mem,
            head,
            cached_tail,
            max_payload: max_record_payload(capacity),
            wake: false,
            cleared: head,
            board: None,
        }
    }

    /// From now on, sets `bit` on the consumer's board after each record.
    pub fn ring_board(&mut self, bit: BoardBit) {
        self.board = Some(bit);
    }

    /// The largest payload one record may carry.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Free bytes a record may take, as far as the last loaded tail says: all but one line,
    /// the slot after the newest record, which the producer keeps cleared (see `push_with`).
    fn free_cached(&self) -> usize {
        (self.mem.capacity - (self.head - self.cached_tail) as usize).saturating_sub(RECORD_ALIGN)
    }

    fn reload_tail(&mut self) -> Result<(), RingError> {
        let tail = self.mem.tail().load(Ordering::Acquire);
        if tail < self.cached_tail || tail > self.head {
            return Err(RingError::BadIndex);
        }
        self.cached_tail = tail;
        Ok(())
    }

    /// Writes one record of `kind` holding `parts` concatenated. `Ok(false)` when the ring has no
    /// room now (nothing written); `Err` when the peer corrupted its index. Records larger than
    /// [`Producer::max_payload`] are refused with `BadLength` (a caller bug, checked first).
    pub fn push(&mut self, kind: u32, parts: &[&[u8]]) -> Result<bool, RingError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // SAFETY: `at` has room for `len` bytes, the parts' total.
        self.push_with(kind, len, |mut at| unsafe {
            for part in parts {
                crate::copy::copy_bytes(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
        })
    }

    /// [`Producer::push`] of a record holding `head` then `body`: the frame path's two parts
    /// (protocol header, payload) without a slice of slices to walk and sum.
    #[inline]
    pub fn push2(&mut self, kind: u32, head: &[u8], body: &[u8]) -> Result<bool, RingError> {
        // SAFETY: `at` has room for `head.len() + body.len()` bytes.
        self.push_with(kind, head.len() + body.len(), |at| unsafe {
            crate::copy::copy_bytes(head.as_ptr(), at, head.len());
            crate::copy::copy_bytes(body.as_ptr(), at.add(head.len()), body.len());
        })
    }

    /// Writes a record of `kind` and `len` payload bytes, which `write` copies to the pointer it
    /// is given (`len` writable bytes inside the data area, not yet visible to the consumer).
    #[inline(always)]
    fn push_with(&mut self, kind: u32, len: usize, write: impl FnOnce(*mut u8)) -> Result<bool, RingError> {
        if len > self.max_payload {
            return Err(RingError::BadLength);
        }
        let need = record_len(len);
        let cap = self.mem.capacity;
        let pos = (self.head as usize) & (cap - 1);
        // The usual case, checked inline: the record fits before the end of the data area and in
        // the space the cached tail already frees.
        if (need > cap - pos || need > self.free_cached()) && !self.make_room(need)? {
            return Ok(false);
        }
        // Copies of the fields in locals: the stores into the ring below would otherwise make
        // the compiler load them again after each one.
        let (mem, head) = (self.mem, self.head);
        let pos = (head as usize) & (cap - 1);
        let next = head + need as u64;
        // The sleep handshake comes before the record, not after it. `head` only tells a consumer
        // about to sleep that a record is published or about to be (see `announce_sleep`), so it
        // may run ahead of the record's header. The SeqCst store is a full barrier on x86: made
        // after the record, it would hold this thread until the record's line came back from the
        // consumer's cache (a cross-core round trip on every message); made here, it only waits
        // for the stores of earlier pushes, long since done.
        mem.head().store(next, Ordering::SeqCst);
        if mem.sleeping().load(Ordering::SeqCst) != 0 {
            self.claim_wake();
        }
        // SAFETY: `pos..pos + need` lies inside the data area (checked above or by `make_room`:
        // it fits before the end, or we skipped to 0 and need <= cap / 2) and is free space: the
        // consumer does not read its payload before the header store below makes the record
        // current.
        write(unsafe { mem.data().add(pos + RECORD_HEADER) });
        // The slot after this record is where the consumer looks next. It may still hold payload
        // bytes of an earlier lap that read as a header of the coming lap: it must be cleared
        // before this record is published. Usually `clear_ahead` did that after an earlier push;
        // otherwise now (it is free: `free_cached` keeps that line out of reach).
        if self.cleared < next + RECORD_ALIGN as u64 {
            mem.header((next as usize) & (cap - 1)).store(0, Ordering::Relaxed);
            self.cleared = next + RECORD_ALIGN as u64;
        }
        // Release: the payload and the cleared next slot are visible before the header says the
        // record is there.
        mem.header(pos).store(header_word(len as u32, kind, mem.lap(head)), Ordering::Release);
        if let Some(board) = &self.board {
            if board.ring() {
                self.wake = true;
            }
        }
        let head = next;
        self.head = head;
        // After the record is out: these stores cannot delay its visibility (stores become
        // visible in order), and the next pushes find their following slot cleared already.
        if self.cleared < head + CLEAR_AHEAD as u64 {
            self.clear_ahead();
        }
        Ok(true)
    }

    /// Clears the line starts of the free space after `head`, up to [`CLEAR_AHEAD`] bytes ahead.
    #[inline(never)]
    fn clear_ahead(&mut self) {
        let cap = self.mem.capacity;
        // Free space ends where the consumer's released tail (as last loaded) plus a lap is.
        let end = (self.head + CLEAR_AHEAD as u64).min(self.cached_tail + cap as u64);
        let mut at = self.cleared.max(self.head);
        while at < end {
            self.mem.header((at as usize) & (cap - 1)).store(0, Ordering::Relaxed);
            at += RECORD_ALIGN as u64;
        }
        self.cleared = self.cleared.max(at);
    }

    /// Makes `need` contiguous bytes free at the head when the inline check found too few:
    /// reloads the consumer's tail and, when the record does not fit before the end of the data
    /// area, pads to the end with a skip record. `Ok(false)`: no room now, nothing written.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, need: usize) -> Result<bool, RingError> {
        let cap = self.mem.capacity;
        let pos = (self.head as usize) & (cap - 1);
        let to_end = cap - pos;
        let skip = if need > to_end { to_end } else { 0 };
        if skip + need > self.free_cached() {
            self.reload_tail()?;
            if skip + need > self.free_cached() {
                return Ok(false);
            }
        }
        if skip > 0 {
            // The consumer goes on at offset 0, which may hold stale bytes of an earlier lap:
            // cleared first (free: the record that follows fits there).
            self.mem.header(0).store(0, Ordering::Relaxed);
            // The skip's header is its only content: published at once.
            let lap = self.mem.lap(self.head);
            self.mem.header(pos).store(header_word(0, KIND_SKIP, lap), Ordering::Release);
            self.head += skip as u64;
        }
        Ok(true)
    }

    /// The consumer announced sleep: clear its flag (once, if it is still set) and remember to
    /// wake it.
    #[cold]
    #[inline(never)]
    fn claim_wake(&mut self) {
        if self.mem.sleeping().swap(0, Ordering::SeqCst) != 0 {
            self.wake = true;
        }
    }

    /// True (once) when a push found the consumer asleep: the caller must wake it.
    #[inline]
    pub fn take_wake(&mut self) -> bool {
        // Stores only when set: the usual answer is a single load.
        if self.wake {
            self.wake = false;
            return true;
        }
        false
    }

    /// True when the consumer has released everything we published (as last seen).
    pub fn is_drained(&mut self) -> bool {
        if self.head != self.cached_tail && self.reload_tail().is_err() {
            return false;
        }
        self.head == self.cached_tail
    }
}

/// The consuming end of a ring.
#[derive(Debug)]
pub struct Consumer {
    mem: RingMem,
    /// Our tail: bytes consumed so far, including records read but not yet released.
    tail: u64,
    /// The tail last stored in the shared line (space released to the producer).
    released: u64,
    max_payload: usize,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

impl Consumer {
    /// The consuming end of the ring at `base`, accepting records of at most `max_payload` bytes
    /// (clamped to what the ring can hold).
    ///
    /// # Safety
    /// As for [`Producer::new`]; nobody else may consume from this ring.
    pub unsafe fn new(base: *mut u8, capacity: usize, max_payload: usize) -> Consumer {
        debug_assert!(valid_capacity(capacity) && base as usize % 64 == 0);
        let mem = RingMem { base, capacity, lap_shift: capacity.trailing_zeros() };
        let tail = mem.tail().load(Ordering::Relaxed);
        Consumer { mem, tail, released: tail, max_payload: max_payload.min(max_record_payload(capacity)) }
    }

    /// The header at our tail, if the producer has written the record there on our lap.
    fn current(&self, order: Ordering) -> Result<Option<u64>, RingError> {
        let pos = (self.tail as usize) & (self.mem.capacity - 1);
        if pos % RECORD_ALIGN != 0 {
            return Err(RingError::BadIndex);
        }
        let word = self.mem.header(pos).load(order);
        Ok(((word >> 48) as u16 == self.mem.lap(self.tail)).then_some(word))
    }

    /// True when a record is written and not yet read (a corrupt state counts as "something to
    /// do", so the caller finds the error).
    pub fn has_data(&mut self) -> bool {
        self.peek()
    }

    /// True when a record is written and not yet read; never changes our state.
    pub fn peek(&self) -> bool {
        self.current(Ordering::Acquire).map_or(true, |w| w.is_some())
    }

    /// Announces that the consumer may sleep, then checks for data once more: true when a record
    /// is waiting (do not sleep). Otherwise the producer's next push asks for a wakeup.
    pub fn announce_sleep(&self) -> bool {
        self.mem.sleeping().store(1, Ordering::SeqCst);
        // The producer stores `head` just before it writes a record: a head past our tail means a
        // record we have not read, or one being written, whose header we are about to see.
        self.tail != self.mem.head().load(Ordering::SeqCst) || self.peek()
    }

    /// Withdraws a sleep announcement (the consumer is polling again); one cheap load when none.
    pub fn awake(&self) {
        if self.mem.sleeping().load(Ordering::Relaxed) != 0 {
            self.mem.sleeping().store(0, Ordering::Relaxed);
        }
    }

    /// Reads the next record (skipping padding): `Ok(None)` when the ring is empty. The bytes are
    /// lent until [`Consumer::release`]; the record counts as consumed at once.
    ///
    /// The bytes live in memory the peer can write; a well-behaved peer never writes a published
    /// record, and a hostile one can only change what we read, not where. The header word is
    /// loaded once: the kind, the length checked against the ring and the slice's length all
    /// come from that one load, and nothing here reads it again, so rewriting it afterwards
    /// moves neither the slice's end nor our tail. The bytes themselves may still change: see
    /// [`crate::TlEvent::Frame`] for how a reader treats them.
    pub fn next_record(&mut self) -> Result<Option<(u32, &[u8])>, RingError> {
        loop {
            let Some(word) = self.current(Ordering::Acquire)? else { return Ok(None) };
            let cap = self.mem.capacity;
            let pos = (self.tail as usize) & (cap - 1);
            let (len, kind) = ((word & 0xFFFF_FFFF) as usize, u32::from((word >> 32) as u16));
            let to_end = cap - pos;
            match kind {
                KIND_SKIP => self.tail += to_end as u64,
                KIND_FRAME | KIND_PLACED | KIND_PLACE_DONE => {
                    if len > self.max_payload {
                        return Err(RingError::BadLength);
                    }
                    let rec = record_len(len);
                    if rec > to_end {
                        return Err(RingError::BadLength);
                    }
                    self.tail += rec as u64;
                    // SAFETY: `pos + 8 + len <= pos + rec <= cap`: inside the data area, which is
                    // mapped as long as `self` (and so the borrow) lives.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(self.mem.data().add(pos + RECORD_HEADER), len) };
                    return Ok(Some((kind, bytes)));
                }
                _ => return Err(RingError::BadKind),
            }
        }
    }

    /// The record at our tail when it is a well-formed frame: its bytes and the room it takes
    /// (for [`Consumer::consume_peeked`]). Reads without consuming: `None` for an empty ring and
    /// for anything [`Consumer::next_record`] must look at (padding, other kinds, a bad index or
    /// length), which then reports it as usual. As there, the header is loaded once: the length
    /// and room returned are the ones checked, whatever the peer writes there later.
    // Always inlined: it is most of a rung take, whose caller it would otherwise cost a call.
    #[inline(always)]
    pub fn peek_frame(&self) -> Option<(&[u8], usize)> {
        let word = self.current(Ordering::Acquire).ok()??;
        let cap = self.mem.capacity;
        let pos = (self.tail as usize) & (cap - 1);
        let (len, kind) = ((word & 0xFFFF_FFFF) as usize, u32::from((word >> 32) as u16));
        let room = record_len(len);
        if kind != KIND_FRAME || len > self.max_payload || room > cap - pos {
            return None;
        }
        // SAFETY: `pos + 8 + len <= pos + room <= cap`: inside the data area, mapped as long as
        // `self` (and so the borrow) lives.
        Some((unsafe { std::slice::from_raw_parts(self.mem.data().add(pos + RECORD_HEADER), len) }, room))
    }

    /// Consumes the frame [`Consumer::peek_frame`] just returned (`room` as it said). Like a
    /// record [`Consumer::next_record`] read, its bytes stay lent until [`Consumer::release`].
    #[inline]
    pub fn consume_peeked(&mut self, room: usize) {
        self.tail += room as u64;
    }

    /// Gives every record read so far back to the producer (one Release store, if anything moved).
    pub fn release(&mut self) {
        if self.released != self.tail {
            self.released = self.tail;
            self.mem.tail().store(self.tail, Ordering::Release);
        }
    }
}

/// Memory for one ring outside shared memory, for a ring between threads of one process (the
/// ring's own tests and benchmark, `zcx probe --ring`): zeroed as a fresh segment is, with room
/// for [`ring_bytes`] from a 64-byte boundary on.
pub struct RingArea {
    words: Vec<u64>,
}

impl RingArea {
    /// An area for a ring of `capacity` data bytes.
    pub fn new(capacity: usize) -> RingArea {
        RingArea { words: vec![0u64; ring_bytes(capacity) / 8 + 8] }
    }

    /// The ring's first byte, at the area's first 64-byte boundary: what [`Producer::new`] and
    /// [`Consumer::new`] take.
    pub fn base(&mut self) -> *mut u8 {
        // Moved up to the next line start by offset, not rebuilt from an integer, so the pointer
        // keeps the vector's provenance and Miri checks every access through it.
        let p = self.words.as_mut_ptr().cast::<u8>();
        p.wrapping_add(p.addr().wrapping_neg() & 63)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds of the long wrap-around tests: fewer under Miri, which runs them some thousand
    /// times slower; a hundred records of up to 900 bytes still wrap a 4 KiB ring a dozen times.
    const ROUNDS: u32 = if cfg!(miri) { 120 } else { 2000 };

    fn pair(area: &mut RingArea, cap: usize) -> (Producer, Consumer) {
        let base = area.base();
        // SAFETY: the area outlives both ends in every test, and each end is unique.
        unsafe { (Producer::new(base, cap), Consumer::new(base, cap, usize::MAX)) }
    }

    #[test]
    fn wraps_with_skip_records_and_keeps_order() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let mut next_expected = 0u32;
        let mut sent = 0u32;
        for round in 0..ROUNDS {
            let len = ((round * 37) % 900) as usize;
            let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ sent) as u8).collect();
            while !p.push(KIND_FRAME, &[&sent.to_le_bytes(), &payload]).unwrap() {
                // Full: drain one record.
                let (kind, bytes) = c.next_record().unwrap().expect("full ring has data");
                assert_eq!(kind, KIND_FRAME);
                let seq = u32::from_le_bytes(bytes[..4].try_into().unwrap());
                assert_eq!(seq, next_expected);
                assert!(bytes[4..].iter().enumerate().all(|(i, &b)| b == (i as u32 ^ seq) as u8));
                next_expected += 1;
                c.release();
            }
            sent += 1;
        }
        while let Some((_, bytes)) = c.next_record().unwrap() {
            assert_eq!(u32::from_le_bytes(bytes[..4].try_into().unwrap()), next_expected);
            next_expected += 1;
        }
        c.release();
        assert_eq!(next_expected, sent);
        assert!(p.is_drained());
    }

    #[test]
    fn zero_length_and_max_length_records() {
        let cap = 8192;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let max = p.max_payload();
        assert_eq!(max, cap / 2 - RECORD_HEADER);
        assert!(p.push(KIND_FRAME, &[]).unwrap());
        assert_eq!(c.next_record().unwrap(), Some((KIND_FRAME, &[][..])));
        c.release();
        let big = vec![0x5Au8; max];
        for _ in 0..5 {
            assert!(p.push(KIND_FRAME, &[&big]).unwrap());
            assert_eq!(c.next_record().unwrap(), Some((KIND_FRAME, &big[..])));
            c.release();
        }
        assert_eq!(p.push(KIND_FRAME, &[&big, &[1]]), Err(RingError::BadLength));
    }

    /// Payload bytes of an earlier lap at a line where a later lap puts a record start must not
    /// be taken for that record while the consumer waits there: here a payload of lap 0 carries,
    /// at each line start, a well-formed header stamped for lap 1.
    #[test]
    fn stale_payload_bytes_are_never_taken_for_a_record_of_a_later_lap() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let fake = header_word(8, KIND_FRAME, 2).to_le_bytes();
        let mut payload = vec![0u8; 200];
        for line in [64usize, 128, 192] {
            payload[line - RECORD_HEADER..line].copy_from_slice(&fake);
        }
        assert!(p.push(KIND_FRAME, &[&payload]).unwrap());
        assert_eq!(c.next_record().unwrap().unwrap().1, &payload[..]);
        c.release();
        // One-line records to the end of lap 0 and into lap 1, where they start at offset 0.
        let small = [7u8; 56];
        while p.head < cap as u64 + 64 {
            assert!(p.push(KIND_FRAME, &[&small]).unwrap());
            assert_eq!(c.next_record().unwrap().unwrap().1, &small[..]);
            c.release();
        }
        // The consumer now waits at offset 64 of lap 1, where lap 0 left the fake header.
        assert_eq!(c.next_record().unwrap(), None, "stale bytes read as a record");
        assert!(p.push(KIND_FRAME, &[&small]).unwrap());
        assert_eq!(c.next_record().unwrap().unwrap().1, &small[..]);
    }

    #[test]
    fn push2_writes_head_then_body_and_wraps_like_push() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let mut expected: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
        for round in 0..ROUNDS * 3 / 2 {
            let head = round.to_le_bytes();
            let body: Vec<u8> = (0..(round * 13) % 300).map(|i| (i ^ round) as u8).collect();
            // Keep up to a few records in flight so that full rings and skips both happen.
            while !p.push2(KIND_FRAME, &head, &body).unwrap() {
                let (_, bytes) = c.next_record().unwrap().expect("a full ring has data");
                assert_eq!(bytes, &expected.pop_front().unwrap()[..]);
                c.release();
            }
            expected.push_back([&head[..], &body[..]].concat());
            if round % 7 == 0 {
                while let Some((_, bytes)) = c.next_record().unwrap() {
                    assert_eq!(bytes, &expected.pop_front().unwrap()[..]);
                }
                c.release();
            }
        }
        while let Some((_, bytes)) = c.next_record().unwrap() {
            assert_eq!(bytes, &expected.pop_front().unwrap()[..]);
        }
        c.release();
        assert!(expected.is_empty());
        assert!(p.is_drained());
        let big = vec![0u8; p.max_payload()];
        assert_eq!(p.push2(KIND_FRAME, &big, &[1]), Err(RingError::BadLength));
    }

    /// `peek_frame` offers frames only, changes nothing until `consume_peeked`, and leaves
    /// padding and other kinds to `next_record`.
    #[test]
    fn peeked_frames_are_consumed_only_when_asked() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        assert_eq!(c.peek_frame(), None, "empty ring");
        let mut sent = 0u32;
        let mut read = 0u32;
        // Enough rounds to wrap several times, so skips come up at the tail (three times under
        // Miri, dozens natively).
        for round in 0..if cfg!(miri) { 40 } else { 400 } {
            let len = ((round * 53) % 700) as usize;
            let kind = if round % 5 == 4 { KIND_PLACED } else { KIND_FRAME };
            let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ sent) as u8).collect();
            assert!(p.push(kind, &[&sent.to_le_bytes(), &payload]).unwrap(), "the consumer keeps up");
            sent += 1;
            loop {
                let tail = c.tail;
                match c.peek_frame() {
                    Some((bytes, room)) => {
                        assert_eq!(u32::from_le_bytes(bytes[..4].try_into().unwrap()), read);
                        assert_eq!(c.peek_frame().map(|(b, r)| (b.len(), r)), Some((bytes.len(), room)));
                        assert_eq!(c.tail, tail, "a peek consumed");
                        c.consume_peeked(room);
                        assert_eq!(c.tail, tail + room as u64);
                        c.release();
                        read += 1;
                    }
                    None => match c.next_record().unwrap() {
                        // Not a frame, or a frame behind padding (which `next_record` skipped).
                        Some((kind, bytes)) => {
                            let (len, seq) =
                                (bytes.len(), u32::from_le_bytes(bytes[..4].try_into().unwrap()));
                            let skipped = c.tail - tail > record_len(len) as u64;
                            assert!(kind == KIND_PLACED || skipped, "peek passed over a frame");
                            assert_eq!(seq, read);
                            read += 1;
                            c.release();
                        }
                        None => break,
                    },
                }
            }
            assert!(p.is_drained(), "round {round}: consumed space not released");
        }
        assert_eq!(read, sent);
    }

    #[test]
    fn full_ring_refuses_then_accepts_after_release() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let mut n = 0;
        while p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap() {
            n += 1;
        }
        // An 8-byte frame takes exactly one cache line, and the last line stays free (the
        // cleared slot the consumer looks at next).
        assert_eq!(n, cap / RECORD_ALIGN - 1);
        assert!(c.next_record().unwrap().is_some());
        // Read but not released: still no room.
        assert!(!p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap());
        c.release();
        assert!(p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap());
    }

    #[test]
    fn hostile_producer_garbage_is_an_error() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let base = area.base();
        // Writes a record header of the first lap at data offset `off`, as a hostile producer would.
        let rec = |off: usize, len: u32, kind: u32| {
            // SAFETY: inside the area's data part, 64-aligned.
            unsafe { (base.add(RING_HEADER + off) as *mut u64).write(header_word(len, kind, 1)) }
        };
        // A length beyond the frame limit.
        // SAFETY: (every consumer below) the area outlives it.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        rec(0, 1500, KIND_FRAME);
        assert_eq!(c.next_record(), Err(RingError::BadLength));
        // A length running past the end of the data area.
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base, cap, usize::MAX) };
        rec(0, 0, KIND_FRAME);
        assert!(c.next_record().unwrap().is_some());
        rec(64, (cap - 64) as u32, KIND_FRAME);
        assert_eq!(c.next_record(), Err(RingError::BadLength));
        // An unknown kind.
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        rec(0, 1, 0xDEAD);
        assert_eq!(c.next_record(), Err(RingError::BadKind));
        // A record stamped with another lap is not there yet: no error, nothing read.
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        // SAFETY: as above.
        unsafe { (base.add(RING_HEADER) as *mut u64).write(header_word(8, KIND_FRAME, 7)) };
        assert_eq!(c.next_record(), Ok(None));
        assert!(!c.peek());
        // An unaligned tail (the shared tail is only read at start) is refused.
        // SAFETY: writes the tail word of the area.
        unsafe { (base.add(64) as *mut u64).write(13) };
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        assert_eq!(c.next_record(), Err(RingError::BadIndex));
    }

    /// A hostile peer rewrites a record's header after the consumer read it, claiming a length
    /// that runs far past the record: the bytes handed out keep the length that was checked
    /// (under Miri, reading them all proves no access past the record), and the consumer's next
    /// record is the one after the real record. Both for a peeked frame and a read record.
    #[test]
    fn a_length_rewritten_after_the_read_moves_neither_the_slice_nor_the_tail() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let base = area.base();
        let (mut p, mut c) = pair(&mut area, cap);
        for part in [&b"first record"[..], b"second", b"third record", b"fourth"] {
            assert!(p.push(KIND_FRAME, &[part]).unwrap());
        }
        // Rewrites the header of the record at data offset `at` (first lap) as the peer could.
        let rewrite = |at: usize| {
            let header = base.wrapping_add(RING_HEADER + at).cast::<u64>();
            // SAFETY: the header word of a record inside the area's data part, 64-aligned; no
            // reference to it is alive (the bytes handed out start after it).
            unsafe { header.write_volatile(header_word((cap - 64) as u32, KIND_FRAME, 1)) };
        };
        let (bytes, room) = c.peek_frame().expect("a frame waits");
        rewrite(0);
        assert_eq!(bytes, b"first record", "the slice kept the checked length");
        c.consume_peeked(room);
        let (kind, bytes) = c.next_record().unwrap().expect("the second record");
        assert_eq!((kind, bytes), (KIND_FRAME, &b"second"[..]), "the tail moved by the checked room");
        let (_, bytes) = c.next_record().unwrap().expect("the third record");
        rewrite(128);
        assert_eq!(bytes, b"third record");
        assert_eq!(c.next_record().unwrap(), Some((KIND_FRAME, &b"fourth"[..])));
        assert_eq!(c.next_record().unwrap(), None);
    }

    #[test]
    fn fresh_zeroes_are_no_record_and_laps_tell_old_from_new() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        assert_eq!(c.next_record(), Ok(None));
        // Fill and drain the ring for three laps with one-line records: each slot's old record
        // (previous lap) must never be read again.
        for i in 0..3 * (cap / 64) as u32 {
            assert!(p.push(KIND_FRAME, &[&i.to_le_bytes()]).unwrap());
            let (_, bytes) = c.next_record().unwrap().expect("the record just pushed");
            assert_eq!(bytes, i.to_le_bytes());
            assert_eq!(c.next_record(), Ok(None), "a stale record was read after {i}");
            c.release();
        }
    }

    #[test]
    fn a_push_after_a_sleep_announcement_asks_for_a_wakeup() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        assert!(p.push(KIND_FRAME, &[b"x"]).unwrap());
        assert!(!p.take_wake());
        // Data waiting: the consumer must not sleep.
        assert!(c.announce_sleep());
        c.awake();
        assert!(c.next_record().unwrap().is_some());
        c.release();
        assert!(!c.announce_sleep());
        assert!(p.push(KIND_FRAME, &[b"y"]).unwrap());
        assert!(p.take_wake());
        assert!(!p.take_wake(), "one wakeup per announcement");
        assert!(p.push(KIND_FRAME, &[b"z"]).unwrap());
        assert!(!p.take_wake());
    }

    /// The wakeup handshake between two threads: a consumer that drains the ring and then sleeps
    /// (here: waits for the producer's wakeup flag) whenever `announce_sleep` lets it, against a
    /// producer pushing with pauses of varying length. A lost wakeup leaves the consumer asleep
    /// with records waiting, which the deadline catches; every record arrives, in order.
    #[test]
    fn no_wakeup_is_lost_between_two_threads() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        // Fewer under Miri, which runs this some thousand times slower: a few hundred records
        // still see the consumer sleep and wake many times.
        const RECORDS: u32 = if cfg!(miri) { 400 } else { 20_000 };
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let woken = Arc::new(AtomicBool::new(false));
        let bell = Arc::clone(&woken);
        let producer = std::thread::scope(|scope| {
            let producer = scope.spawn(move || {
                let mut wakeups = 0u32;
                for i in 0..RECORDS {
                    // A consumer that failed stops draining: give up rather than hang the test.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !p.push(KIND_FRAME, &[&i.to_le_bytes()]).unwrap() {
                        if Instant::now() > deadline {
                            return wakeups;
                        }
                        std::hint::spin_loop();
                    }
                    if p.take_wake() {
                        wakeups += 1;
                        bell.store(true, Ordering::SeqCst);
                    }
                    // Pauses of 0 to 127 spins, so the consumer goes to sleep at every phase of
                    // a push.
                    for _ in 0..(i.wrapping_mul(2_654_435_761) >> 25) {
                        std::hint::spin_loop();
                    }
                }
                wakeups
            });
            let mut expected = 0u32;
            let mut sleeps = 0u32;
            while expected < RECORDS {
                while let Some((_, bytes)) = c.next_record().unwrap() {
                    assert_eq!(bytes, expected.to_le_bytes());
                    expected += 1;
                }
                c.release();
                if expected == RECORDS || c.announce_sleep() {
                    c.awake();
                    continue;
                }
                sleeps += 1;
                let deadline = Instant::now() + Duration::from_secs(5);
                while !woken.swap(false, Ordering::SeqCst) {
                    assert!(Instant::now() < deadline, "asleep with record {expected} unseen: a lost wakeup");
                    std::hint::spin_loop();
                }
                c.awake();
            }
            (producer.join().unwrap(), sleeps)
        });
        let (wakeups, sleeps) = producer;
        // Every sleep was ended by a wakeup (a wakeup may come for an announcement the consumer
        // then withdrew, so there may be more of them).
        assert!(wakeups >= sleeps, "{wakeups} wakeups for {sleeps} sleeps");
        assert!(sleeps > 0, "the consumer never slept: the test did not test anything");
    }

    #[test]
    fn hostile_consumer_tail_is_an_error() {
        let cap = 4096;
        let mut area = RingArea::new(cap);
        let base = area.base();
        // SAFETY: the area outlives the producer.
        let mut p = unsafe { Producer::new(base, cap) };
        while p.push(KIND_FRAME, &[&[1u8; 100]]).unwrap() {}
        // A tail ahead of the head.
        // SAFETY: writes the tail word, as a hostile consumer would.
        unsafe { (base.add(64) as *mut u64).write(1 << 40) };
        assert_eq!(p.push(KIND_FRAME, &[&[1u8; 100]]), Err(RingError::BadIndex));
    }

    proptest::proptest! {
        #[test]
        fn random_ring_contents_never_panic(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..600),
            head in proptest::prelude::any::<u64>(),
            tail in 0u64..1 << 20,
            kinds in proptest::collection::vec(0usize..5, 0..64),
        ) {
            let cap = 4096;
            let mut area = RingArea::new(cap);
            let base = area.base();
            // SAFETY: fills the area (header and data) with random words, within its bounds.
            unsafe {
                let n = words.len().min(ring_bytes(cap) / 8);
                std::ptr::copy_nonoverlapping(words.as_ptr(), base as *mut u64, n);
                // Sprinkle plausible kinds so the parser goes deeper than `BadKind`.
                let known = [KIND_SKIP, KIND_FRAME, KIND_PLACED, KIND_PLACE_DONE, 7];
                for (i, k) in kinds.iter().enumerate() {
                    let off = RING_HEADER + (i * 64) % cap;
                    let word = (base.add(off) as *mut u64).read();
                    (base.add(off) as *mut u64).write((word & 0x3FFF) | (u64::from(known[*k]) << 32));
                }
                (base.add(64) as *mut u64).write(tail & !63);
                (base as *mut u64).write(if head % 3 == 0 { (tail & !63) + (head % 8192) } else { head });
            }
            // SAFETY: the area outlives the consumer.
            let mut c = unsafe { Consumer::new(base, cap, 2000) };
            for _ in 0..200 {
                // A frame `peek_frame` offers is exactly the record `next_record` reads next.
                let peeked = c.peek_frame().map(|(bytes, room)| (bytes.as_ptr(), bytes.len(), room));
                let tail = c.tail;
                match c.next_record() {
                    Ok(Some((kind, bytes))) => {
                        proptest::prop_assert!(bytes.len() <= 2000);
                        if let Some((ptr, len, room)) = peeked {
                            proptest::prop_assert_eq!((kind, bytes.as_ptr(), bytes.len()), (KIND_FRAME, ptr, len));
                            proptest::prop_assert_eq!(c.tail, tail + room as u64);
                        }
                    }
                    Ok(None) | Err(_) => {
                        proptest::prop_assert!(peeked.is_none(), "peek offered what next_record refused");
                        break;
                    }
                }
            }
        }
    }
}
