//! Doorbells: words in shared memory a worker may read without its lock to learn that a
//! transport has something to read.
//!
//! A busy-polling worker spends most of its polls finding nothing, and a full poll (the worker's
//! lock, every transport, the worker's own queues) costs far more than looking at the one cache
//! line where the next record would appear. While a transport is quiet (nothing queued, nothing
//! in flight, no link being set up or torn down) its doorbells say everything that can change
//! without the worker's own calls: the worker then skips full polls until one rings, and still
//! makes a full poll every few calls (timers, listeners, peer death).
//!
//! A doorbell keeps the memory it watches mapped (it holds the mapping's owner), so it can be
//! read after its link is gone; it then just never rings, or rings falsely, and a false ring only
//! costs one full poll. The peer writes the memory, so what it reads is a hint, never trusted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::shm::board::BoardMap;
use crate::shm::ring;
use crate::transport::LinkId;

/// What a worker watches while quiet: one receive ring, or a board of rings (see
/// [`crate::shm::board`]). It names the link whose ring rang, so that a rung doorbell leads to
/// that link alone ([`crate::Transport::take_rung_frame`]).
pub struct Doorbell {
    kind: Kind,
}

enum Kind {
    Ring(RingBell),
    Board(BoardBell),
}

/// One watched ring: rings when a record is waiting at its consumer's position.
struct RingBell {
    base: *const u8,
    capacity: usize,
    link: LinkId,
    _keep: Arc<dyn Send + Sync>,
}

/// The rings whose producers mark the board: a set bit sends the look to its ring.
struct BoardBell {
    map: Arc<BoardMap>,
    /// By board slot: the ring of that slot, if it is watched through the board.
    slots: Box<[Option<RingBell>]>,
    /// The word the next look starts at: the one that rang last, so that a busy ring at the
    /// front does not hide the others.
    start: AtomicUsize,
}

// SAFETY: `base` points into memory that `_keep` keeps mapped for the bell's whole life, and it
// is only ever read with atomic loads, which any thread may do.
unsafe impl Send for RingBell {}
// SAFETY: as for `Send`; reading through a shared reference changes nothing.
unsafe impl Sync for RingBell {}

impl RingBell {
    #[inline]
    fn rang(&self) -> bool {
        // SAFETY: `Doorbell::new`'s contract: the ring is mapped while `self` lives.
        unsafe { ring::record_waiting(self.base, self.capacity) }
    }
}

impl BoardBell {
    /// The link of a marked ring holding a record. A bit stays set while its ring holds one; a
    /// ring found empty has its bit cleared and is looked at once more, since its producer may
    /// have published just before the clear (and so not set the bit again).
    fn rung(&self) -> Option<LinkId> {
        let words = self.map.words(self.slots.len());
        let n = words.len();
        let from = self.start.load(Ordering::Relaxed).min(n);
        for w in (from..n).chain(0..from) {
            let mut bits = words[w].load(Ordering::Acquire);
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let slot = w * 64 + bit;
                let ring = self.slots.get(slot).and_then(Option::as_ref);
                let rang = || ring.is_some_and(RingBell::rang);
                // A bit of a slot not watched here is cleared too (the closure finds nothing).
                if rang() || self.map.clear_unless_waiting(slot, rang) {
                    if let Some(ring) = ring {
                        self.start.store(w, Ordering::Relaxed);
                        return Some(ring.link);
                    }
                }
            }
        }
        None
    }
}

impl Doorbell {
    /// A doorbell on the ring at `base` of `capacity` data bytes, the receive ring of `link`.
    ///
    /// # Safety
    /// `base..base + ring::ring_bytes(capacity)` must be a mapped, 64-byte aligned ring that
    /// stays mapped as long as `keep` lives, and `capacity` must be a valid ring capacity.
    pub unsafe fn new(
        base: *const u8,
        capacity: usize,
        link: LinkId,
        keep: Arc<dyn Send + Sync>,
    ) -> Doorbell {
        Doorbell { kind: Kind::Ring(RingBell { base, capacity, link, _keep: keep }) }
    }

    /// A doorbell on the board `map`, over the rings of `rings`: ring doorbells (made by
    /// [`Doorbell::new`]) by their board slot. Other kinds and slots past the board are left out.
    pub fn board(map: Arc<BoardMap>, rings: Vec<(usize, Doorbell)>) -> Doorbell {
        let len = rings.iter().map(|(slot, _)| slot + 1).max().unwrap_or(0);
        let len = len.min(crate::shm::board::BOARD_SLOTS);
        let mut slots: Vec<Option<RingBell>> = (0..len).map(|_| None).collect();
        for (slot, bell) in rings {
            if let (Some(entry), Kind::Ring(ring)) = (slots.get_mut(slot), bell.kind) {
                *entry = Some(ring);
            }
        }
        Doorbell { kind: Kind::Board(BoardBell { map, slots: slots.into(), start: AtomicUsize::new(0) }) }
    }

    /// The link of a ring that holds a record (a false positive is possible, never a fault).
    #[inline]
    pub fn rung(&self) -> Option<LinkId> {
        match &self.kind {
            Kind::Ring(ring) => ring.rang().then_some(ring.link),
            Kind::Board(board) => board.rung(),
        }
    }

    /// True when a record may be waiting (see [`Doorbell::rung`]).
    #[inline]
    pub fn rang(&self) -> bool {
        self.rung().is_some()
    }

    /// True for a board's doorbell (see [`Doorbell::board`]).
    pub fn is_board(&self) -> bool {
        matches!(self.kind, Kind::Board(_))
    }

    /// The links this doorbell watches the rings of, as the transport that gave it names them.
    pub fn links(&self) -> Vec<LinkId> {
        match &self.kind {
            Kind::Ring(ring) => vec![ring.link],
            Kind::Board(board) => board.slots.iter().flatten().map(|r| r.link).collect(),
        }
    }

    /// Names the links as a transport that contains the giving one does (see
    /// [`crate::TransportSet`]).
    pub(crate) fn rename_links(&mut self, rename: impl Fn(LinkId) -> LinkId) {
        match &mut self.kind {
            Kind::Ring(ring) => ring.link = rename(ring.link),
            Kind::Board(board) => {
                for ring in board.slots.iter_mut().flatten() {
                    ring.link = rename(ring.link);
                }
            }
        }
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Ring(ring) => f
                .debug_struct("Doorbell")
                .field("capacity", &ring.capacity)
                .field("link", &ring.link)
                .finish(),
            Kind::Board(board) => {
                f.debug_struct("Doorbell").field("board_slots", &board.slots.len()).finish()
            }
        }
    }
}
