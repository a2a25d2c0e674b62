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
//! A record is `[len: u32][kind: u32][len bytes]`, padded to a multiple of 64 bytes, so a record of
//! up to 56 payload bytes is exactly one cache line and records never share a line. A record never
//! wraps: when it does not fit before the end of the data area, the producer writes a
//! [`KIND_SKIP`] record there and starts again at offset 0; so a record is always contiguous and
//! the consumer lends it to the callback in place.
//!
//! The producer publishes `head` with a Release store after writing the record; the consumer reads
//! it with an Acquire load, and releases space by storing `tail` (Release) after it is done with
//! the bytes. Each side keeps its own index privately and caches the other's, reloading it only
//! when the cached value says the ring is empty (consumer) or full (producer), so the fast path
//! touches the remote line at most once.
//!
//! The peer is never trusted: the consumer checks every loaded `head` against its own `tail` and
//! the capacity, and every record's kind and length against what was published, the record's
//! room before the end of the data area and the frame size limit; anything else is
//! [`RingError`], which the transport turns into a link failure. No check ever reads outside the
//! ring. The producer checks the peer's `tail` the same way.
//!
//! Wakeups: a consumer about to sleep sets `sleeping` and then looks at `head` once more; the
//! producer stores `head` and then looks at `sleeping`. Both sides use sequentially consistent
//! accesses, so at least one of them sees the other (no lost wakeup): either the consumer finds
//! the record and does not sleep, or the producer finds the flag, clears it and reports through
//! [`Producer::take_wake`] that the peer must be woken (the transport writes a byte to the link
//! socket). While nobody sleeps, the flag's line stays shared in both caches: the producer's
//! check is a cache hit.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes before the data area: the producer, consumer and sleep cache lines.
pub const RING_HEADER: usize = 192;
/// Record alignment: one cache line.
pub const RECORD_ALIGN: usize = 64;
/// Bytes of a record header (`len` and `kind`).
pub const RECORD_HEADER: usize = 8;

/// Record kind: padding up to the end of the data area; the next record is at offset 0.
pub const KIND_SKIP: u32 = 0x5348_0001;
/// Record kind: a frame of the transport.
pub const KIND_FRAME: u32 = 0x5348_0002;
/// Record kind: the descriptor of a placed payload the receiver reads from the sender's memory.
pub const KIND_PLACED: u32 = 0x5348_0003;
/// Record kind: the receiver is done with the oldest placed payload (release it).
pub const KIND_PLACE_DONE: u32 = 0x5348_0004;

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
    /// An index moved backwards or further than the capacity allows.
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
        let mem = RingMem { base, capacity };
        let head = mem.head().load(Ordering::Relaxed);
        let cached_tail = mem.tail().load(Ordering::Acquire);
        Producer { mem, head, cached_tail, max_payload: max_record_payload(capacity), wake: false }
    }

    /// The largest payload one record may carry.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Free bytes, as far as the last loaded tail says.
    fn free_cached(&self) -> usize {
        self.mem.capacity - (self.head - self.cached_tail) as usize
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
        if len > self.max_payload {
            return Err(RingError::BadLength);
        }
        let need = record_len(len);
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
        let data = self.mem.data();
        if skip > 0 {
            // SAFETY: `pos` is 64-aligned inside the data area and the 8 header bytes fit before
            // its end; the space between tail and head + capacity is ours to write.
            unsafe { write_header(data.add(pos), 0, KIND_SKIP) };
            self.head += skip as u64;
        }
        let pos = (self.head as usize) & (cap - 1);
        // SAFETY: `pos..pos + need` lies inside the data area (checked above: it fits before the
        // end, or we skipped to 0 and need <= cap / 2) and is free space the consumer does not
        // read until the head store below.
        unsafe {
            let rec = data.add(pos);
            write_header(rec, len as u32, kind);
            let mut at = rec.add(RECORD_HEADER);
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
        }
        self.head += need as u64;
        // SeqCst (a Release store that is also ordered before the flag load below): see the
        // module docs on wakeups.
        self.mem.head().store(self.head, Ordering::SeqCst);
        if self.mem.sleeping().load(Ordering::SeqCst) != 0
            && self.mem.sleeping().swap(0, Ordering::SeqCst) != 0
        {
            self.wake = true;
        }
        Ok(true)
    }

    /// True (once) when a push found the consumer asleep: the caller must wake it.
    pub fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.wake)
    }

    /// True when the consumer has released everything we published (as last seen).
    pub fn is_drained(&mut self) -> bool {
        if self.head != self.cached_tail && self.reload_tail().is_err() {
            return false;
        }
        self.head == self.cached_tail
    }
}

/// # Safety
/// `rec..rec + 8` must be writable.
unsafe fn write_header(rec: *mut u8, len: u32, kind: u32) {
    let word = u64::from(len) | (u64::from(kind) << 32);
    // SAFETY: the caller vouches for the 8 bytes; records are 64-aligned, so this is aligned.
    unsafe { (rec as *mut u64).write(word.to_le()) };
}

/// The consuming end of a ring.
#[derive(Debug)]
pub struct Consumer {
    mem: RingMem,
    /// Our tail: bytes consumed so far, including records read but not yet released.
    tail: u64,
    /// The tail last stored in the shared line (space released to the producer).
    released: u64,
    /// The producer's head as last loaded (and validated).
    cached_head: u64,
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
        let mem = RingMem { base, capacity };
        let tail = mem.tail().load(Ordering::Relaxed);
        Consumer {
            mem,
            tail,
            released: tail,
            cached_head: tail,
            max_payload: max_payload.min(max_record_payload(capacity)),
        }
    }

    fn reload_head(&mut self) -> Result<(), RingError> {
        let head = self.mem.head().load(Ordering::Acquire);
        if head < self.cached_head || head - self.released > self.mem.capacity as u64 {
            return Err(RingError::BadIndex);
        }
        self.cached_head = head;
        Ok(())
    }

    /// True when a record is published and not yet read (loads the producer's head when the cached
    /// one says empty; a corrupt head counts as "something to do", so the caller finds the error).
    pub fn has_data(&mut self) -> bool {
        self.tail != self.cached_head || self.reload_head().map_or(true, |_| self.tail != self.cached_head)
    }

    /// True when the producer's head (loaded now) is past our tail; never changes our state.
    pub fn peek(&self) -> bool {
        self.tail != self.mem.head().load(Ordering::Acquire)
    }

    /// Announces that the consumer may sleep, then checks for data once more: true when a record
    /// is waiting (do not sleep). Otherwise the producer's next push asks for a wakeup.
    pub fn announce_sleep(&self) -> bool {
        self.mem.sleeping().store(1, Ordering::SeqCst);
        self.tail != self.mem.head().load(Ordering::SeqCst)
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
    /// record, and a hostile one can only change what we read, not where.
    pub fn next_record(&mut self) -> Result<Option<(u32, &[u8])>, RingError> {
        loop {
            if self.tail == self.cached_head {
                self.reload_head()?;
                if self.tail == self.cached_head {
                    return Ok(None);
                }
            }
            let cap = self.mem.capacity;
            let pos = (self.tail as usize) & (cap - 1);
            let avail = (self.cached_head - self.tail) as usize;
            // `pos` is 64-aligned (the tail only moves by multiples of 64 and is validated), so
            // the 8 header bytes are inside the data area.
            if pos % RECORD_ALIGN != 0 || avail < RECORD_ALIGN || avail % RECORD_ALIGN != 0 {
                return Err(RingError::BadIndex);
            }
            // SAFETY: `pos + 8 <= cap`: header read inside the data area; volatile because the
            // peer may write it.
            let word = u64::from_le(unsafe { (self.mem.data().add(pos) as *const u64).read_volatile() });
            let (len, kind) = ((word & 0xFFFF_FFFF) as usize, (word >> 32) as u32);
            let to_end = cap - pos;
            match kind {
                KIND_SKIP => {
                    if to_end > avail {
                        return Err(RingError::BadLength);
                    }
                    self.tail += to_end as u64;
                }
                KIND_FRAME | KIND_PLACED | KIND_PLACE_DONE => {
                    if len > self.max_payload {
                        return Err(RingError::BadLength);
                    }
                    let rec = record_len(len);
                    if rec > avail || rec > to_end {
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

    /// Gives every record read so far back to the producer (one Release store, if anything moved).
    pub fn release(&mut self) {
        if self.released != self.tail {
            self.released = self.tail;
            self.mem.tail().store(self.tail, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte aligned heap area standing in for shared memory.
    struct Area {
        buf: Vec<u64>,
    }

    impl Area {
        fn new(capacity: usize) -> Area {
            Area { buf: vec![0u64; ring_bytes(capacity) / 8 + 8] }
        }

        fn base(&mut self) -> *mut u8 {
            let p = self.buf.as_mut_ptr() as usize;
            ((p + 63) & !63) as *mut u8
        }
    }

    fn pair(area: &mut Area, cap: usize) -> (Producer, Consumer) {
        let base = area.base();
        // SAFETY: the area outlives both ends in every test, and each end is unique.
        unsafe { (Producer::new(base, cap), Consumer::new(base, cap, usize::MAX)) }
    }

    #[test]
    fn wraps_with_skip_records_and_keeps_order() {
        let cap = 4096;
        let mut area = Area::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let mut next_expected = 0u32;
        let mut sent = 0u32;
        for round in 0..2000u32 {
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
        let mut area = Area::new(cap);
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

    #[test]
    fn full_ring_refuses_then_accepts_after_release() {
        let cap = 4096;
        let mut area = Area::new(cap);
        let (mut p, mut c) = pair(&mut area, cap);
        let mut n = 0;
        while p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap() {
            n += 1;
        }
        // An 8-byte frame takes exactly one cache line.
        assert_eq!(n, cap / RECORD_ALIGN);
        assert!(c.next_record().unwrap().is_some());
        // Read but not released: still no room.
        assert!(!p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap());
        c.release();
        assert!(p.push(KIND_FRAME, &[&[7u8; 8]]).unwrap());
    }

    #[test]
    fn hostile_producer_garbage_is_an_error() {
        let cap = 4096;
        let mut area = Area::new(cap);
        let base = area.base();
        // SAFETY: the area outlives the consumer.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        let head = |v: u64| {
            // SAFETY: writes the head word of the area, as a hostile producer would.
            unsafe { (base as *mut u64).write(v) }
        };
        let rec = |off: usize, len: u32, kind: u32| {
            // SAFETY: inside the area's data part.
            unsafe { write_header(base.add(RING_HEADER + off), len, kind) }
        };
        // Head beyond capacity.
        head(cap as u64 + 64);
        assert_eq!(c.next_record(), Err(RingError::BadIndex));
        // Length beyond what was published.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        head(64);
        rec(0, 100, KIND_FRAME);
        assert_eq!(c.next_record(), Err(RingError::BadLength));
        // Length beyond the frame limit.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        head(2048);
        rec(0, 1500, KIND_FRAME);
        assert_eq!(c.next_record(), Err(RingError::BadLength));
        // Unknown kind.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        rec(0, 1, 0xDEAD);
        assert_eq!(c.next_record(), Err(RingError::BadKind));
        // Unaligned head.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        head(13);
        assert_eq!(c.next_record(), Err(RingError::BadIndex));
        // A skip that claims more than was published.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        head(64);
        rec(0, 0, KIND_SKIP);
        assert_eq!(c.next_record(), Err(RingError::BadLength));
        // Head moving backwards.
        let mut c = unsafe { Consumer::new(base, cap, 1024) };
        head(128);
        rec(0, 0, KIND_FRAME);
        rec(64, 0, KIND_FRAME);
        assert!(c.next_record().unwrap().is_some());
        head(0);
        assert!(c.next_record().unwrap().is_some());
        assert_eq!(c.next_record(), Err(RingError::BadIndex));
    }

    #[test]
    fn a_push_after_a_sleep_announcement_asks_for_a_wakeup() {
        let cap = 4096;
        let mut area = Area::new(cap);
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

    #[test]
    fn hostile_consumer_tail_is_an_error() {
        let cap = 4096;
        let mut area = Area::new(cap);
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
            let mut area = Area::new(cap);
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
                match c.next_record() {
                    Ok(Some((_, bytes))) => { proptest::prop_assert!(bytes.len() <= 2000); }
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }
}
