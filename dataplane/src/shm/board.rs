//! The board: one shared page per shm transport on which its peers mark the receive rings they
//! published into, so that a quiet worker with many links looks at a few words instead of at
//! every ring.
//!
//! Without it, a worker's empty poll reads the next record slot of every receive ring: one cache
//! line per link, so the time a message waits to be noticed grows with the number of links. With
//! it, the sender of a ring sets the ring's bit after each record it publishes, and the receiver
//! reads the words of the board (one line per 512 links) and then only the rings whose bit is
//! set.
//!
//! Setting the bit is a locked read-modify-write on a line other senders write too, which a link
//! of a worker with few links should not pay for: the receiver offers the board only to the
//! links it accepts or opens once it has [`BOARD_MIN_LINKS`] others, and the earlier links keep
//! their own doorbells.
//!
//! **The offer**, per ring, sits in the segment's control line of that ring (see
//! [`super::segment::Segment::board_offer`]): the ring's consumer writes the board's descriptor
//! number, device, inode and the ring's slot on it, or that it offers none; the ring's producer
//! maps the board through `/proc/<pid>/fd/<fd>` of the link's peer (checked as a peer's memory
//! region is: same file, sealed, large enough) and answers that it rings it, or that it could
//! not. Only then does the consumer watch that ring through the board instead of its own
//! doorbell, after looking at the ring once (records published before the answer carry no bit).
//!
//! **Ordering.** The producer sets the bit with a locked instruction after the record's header
//! store, so the record is visible before the bit. The consumer leaves a bit set while the ring
//! holds a record, and when it finds the ring empty it clears the bit (a locked instruction too)
//! and looks at the ring again: a record published before the clear is seen by that second look,
//! and one published after it sets the bit again.
//!
//! **A hostile peer** can write the board's words, and the offer and answer in the segment: all
//! of it is a hint. A bit set for nothing costs a look at a ring; a bit never set delays only
//! that peer's own messages, to the worker's periodic full poll, which reads every ring; an
//! offer that names another file fails its checks and the producer answers that it could not.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::segment::map_shared;
use crate::os_error::last_errno as errno;

/// Bytes of a board: one page.
pub const BOARD_LEN: usize = 4096;
/// The first line holds the sleep word (see [`Board::announce_sleep`]); the bits start on the
/// second.
const FIRST_WORD: usize = 64 / 8;
/// Words of bits on a board.
const WORDS: usize = BOARD_LEN / 8 - FIRST_WORD;
/// Receive rings one board can mark (slots `0..BOARD_SLOTS` of the transport's link table).
pub const BOARD_SLOTS: usize = WORDS * 64;
/// Links a transport keeps before it offers the board to the next ones.
pub const BOARD_MIN_LINKS: usize = 8;

/// The states of a ring's board offer word (see [`super::segment::Segment::board_offer`]).
pub mod offer {
    /// The consumer has not decided yet (a fresh segment).
    pub const UNDECIDED: u64 = 0;
    /// The consumer offers no board: the producer never rings one.
    pub const NONE: u64 = 1;
    /// The consumer's descriptor, device, inode and slot are written: the producer may map it.
    pub const OFFERED: u64 = 2;
    /// The producer rings the board after each record (written by the producer).
    pub const RINGING: u64 = 3;
    /// The producer could not map the board (written by the producer).
    pub const REFUSED: u64 = 4;
}

/// A board's page mapped into this process; unmapped when the last holder lets go.
pub struct BoardMap {
    base: *mut u8,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access through it is
// an atomic on a word inside it, which any thread may make.
unsafe impl Send for BoardMap {}
// SAFETY: as for `Send`.
unsafe impl Sync for BoardMap {}

impl Drop for BoardMap {
    fn drop(&mut self) {
        // SAFETY: `base..base + BOARD_LEN` is the mapping made for this value, unmapped only here.
        unsafe { libc::munmap(self.base.cast(), BOARD_LEN) };
    }
}

impl BoardMap {
    /// The word holding slot `slot`'s bit, and the bit.
    fn word(&self, slot: usize) -> (&AtomicU64, u64) {
        debug_assert!(slot < BOARD_SLOTS);
        // SAFETY: `FIRST_WORD + slot / 64 < BOARD_LEN / 8` for every slot below BOARD_SLOTS, so the
        // word lies inside the page-aligned mapping, 8-byte aligned, alive as long as `self`.
        let word = unsafe { &*(self.base.cast::<AtomicU64>().add(FIRST_WORD + slot / 64)) };
        (word, 1u64 << (slot % 64))
    }

    /// The consumer's sleep announcement, on a line of its own: set while it may sleep, taken
    /// back (to 0) by the producer that wakes it.
    fn sleeping(&self) -> &AtomicU64 {
        // SAFETY: the first word of the page-aligned mapping, alive as long as `self`, only ever
        // accessed atomically.
        unsafe { &*self.base.cast::<AtomicU64>() }
    }

    /// Clears slot `slot`'s bit, its ring having been found empty, and looks at the ring once
    /// more with `waiting`: a record published just before the clear set no new bit, so the bit
    /// is set again when one is found. True when a record waits.
    #[inline]
    pub fn clear_unless_waiting(&self, slot: usize, waiting: impl Fn() -> bool) -> bool {
        let (word, bit) = self.word(slot);
        word.fetch_and(!bit, Ordering::AcqRel);
        let found = waiting();
        if found {
            word.fetch_or(bit, Ordering::AcqRel);
        }
        found
    }

    /// The words of the first `slots` slots (rounded up to whole words).
    pub fn words(&self, slots: usize) -> &[AtomicU64] {
        let n = slots.div_ceil(64).min(WORDS);
        // SAFETY: words `FIRST_WORD..FIRST_WORD + n` lie inside the mapping (n <= WORDS), which
        // lives as long as `self`; they are only ever accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base.cast::<AtomicU64>().add(FIRST_WORD), n) }
    }
}

/// This transport's own board: the page its peers mark, and the descriptor they open it by.
pub struct Board {
    map: Arc<BoardMap>,
    fd: OwnedFd,
    dev: u64,
    inode: u64,
}

impl Board {
    /// Creates a sealed one-page memfd and maps it. `Err` is the errno of the call that failed.
    pub fn create() -> Result<Board, i32> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated literal name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"zcx-shm-board".as_ptr(), flags) };
        if raw < 0 {
            return Err(errno());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), BOARD_LEN as libc::off_t) } != 0 {
            return Err(errno());
        }
        // Sealed against shrinking, so no peer's mapping of it can fault.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our descriptor with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(errno());
        }
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is a valid out-pointer for one `stat` and `fd` is open.
        if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(errno());
        }
        // SAFETY: fstat returned 0, so it initialised `st`.
        let st = unsafe { st.assume_init() };
        let base = map_shared(&fd, BOARD_LEN)?;
        Ok(Board { map: Arc::new(BoardMap { base }), fd, dev: st.st_dev, inode: st.st_ino })
    }

    /// The mapping, to read the words through.
    pub fn map(&self) -> &Arc<BoardMap> {
        &self.map
    }

    /// What a peer needs to open it: descriptor number, device and inode.
    pub fn locator(&self) -> (i32, u64, u64) {
        (self.fd.as_raw_fd(), self.dev, self.inode)
    }

    /// Announces that this side may sleep, for the rings of the first `slots` slots watched
    /// through the board: true when one of them is marked (do not sleep). A producer that marks
    /// a ring afterwards finds the announcement and wakes us (see [`BoardBit::ring`]); both sides'
    /// accesses are sequentially consistent, so one of them sees the other's.
    pub fn announce_sleep(&self, slots: usize) -> bool {
        self.map.sleeping().store(1, Ordering::SeqCst);
        self.map.words(slots).iter().any(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Withdraws a sleep announcement; one load when there is none.
    pub fn awake(&self) {
        let sleeping = self.map.sleeping();
        if sleeping.load(Ordering::Relaxed) != 0 {
            sleeping.store(0, Ordering::Relaxed);
        }
    }

    /// Sets slot `slot`'s bit, as a producer would: the consumer then looks at that ring.
    pub fn mark(&self, slot: usize) {
        if slot < BOARD_SLOTS {
            let (word, bit) = self.map.word(slot);
            word.fetch_or(bit, Ordering::AcqRel);
        }
    }
}

/// A producer's bit on its peer's board: rung after each record it publishes.
pub struct BoardBit {
    word: *const AtomicU64,
    bit: u64,
    _map: Arc<BoardMap>,
}

// SAFETY: `word` points into the mapping `_map` keeps alive, and is only used atomically.
unsafe impl Send for BoardBit {}

impl std::fmt::Debug for BoardBit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoardBit").field("bit", &self.bit).finish()
    }
}

impl BoardBit {
    /// The bit of `slot` on the board mapped by `map`; `None` when the slot has none.
    pub fn new(map: Arc<BoardMap>, slot: usize) -> Option<BoardBit> {
        if slot >= BOARD_SLOTS {
            return None;
        }
        let (word, bit) = map.word(slot);
        let word: *const AtomicU64 = word;
        Some(BoardBit { word, bit, _map: map })
    }

    /// Sets the bit. A locked instruction: the record published before it is visible first.
    /// True when the consumer had announced sleep and this call took the announcement back: the
    /// caller must wake it.
    #[inline]
    pub fn ring(&self) -> bool {
        // SAFETY: `word` lies in the mapping `_map` keeps alive.
        unsafe { &*self.word }.fetch_or(self.bit, Ordering::SeqCst);
        let sleeping = self._map.sleeping();
        sleeping.load(Ordering::SeqCst) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0
    }
}

/// Maps the board a peer offered: descriptor `fd` of process `pid`, which must be the file of
/// device `dev` and inode `inode`, sealed against shrinking and at least [`BOARD_LEN`] long.
pub fn map_peer_board(pid: u32, fd: i32, dev: u64, inode: u64) -> Result<Arc<BoardMap>, String> {
    let boot_id = zcx_control::local_boot_id().ok_or("no boot id")?;
    let pid_start_time = zcx_control::process_start_time(pid).ok_or("the peer process is gone")?;
    let locator = zcx_control::ShmLocator {
        boot_id,
        pid,
        pid_start_time,
        fd,
        inode,
        dev,
        map_offset: 0,
        map_len: BOARD_LEN as u64,
        page_size: zcx_control::PAGE_SIZE_4K,
    };
    let file = super::domain::open_peer_memfd(&locator).map_err(|e| e.to_string())?;
    let base = map_shared(&file, BOARD_LEN).map_err(|e| std::io::Error::from_raw_os_error(e).to_string())?;
    Ok(Arc::new(BoardMap { base }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bit_rung_through_a_peer_mapping_shows_on_the_owners_words() {
        let board = Board::create().expect("board");
        let (fd, dev, inode) = board.locator();
        let peer = map_peer_board(std::process::id(), fd, dev, inode).expect("map by /proc");
        let last = BOARD_SLOTS - 1;
        for slot in [0, 63, 64, 700, last] {
            BoardBit::new(Arc::clone(&peer), slot).expect("a slot on the board").ring();
        }
        assert!(BoardBit::new(Arc::clone(&peer), BOARD_SLOTS).is_none(), "past the last slot");
        let words = board.map().words(BOARD_SLOTS);
        assert_eq!(words.len(), WORDS);
        let set: Vec<usize> = (0..BOARD_SLOTS)
            .filter(|&s| words[s / 64].load(Ordering::Relaxed) & (1 << (s % 64)) != 0)
            .collect();
        assert_eq!(set, vec![0, 63, 64, 700, last]);
        assert_eq!(board.map().words(65).len(), 2, "words of the first 65 slots");
    }

    #[test]
    fn a_ring_after_a_sleep_announcement_wakes_once_and_a_mark_before_it_keeps_the_consumer_up() {
        let board = Board::create().expect("board");
        let bit = BoardBit::new(Arc::clone(board.map()), 5).expect("slot 5");
        assert!(!board.announce_sleep(64), "nothing marked");
        assert!(bit.ring(), "the first ring after the announcement wakes the consumer");
        assert!(!bit.ring(), "and only the first");
        assert!(board.announce_sleep(64), "a marked ring keeps the consumer up");
        board.map().words(64)[0].store(0, Ordering::Relaxed);
        board.awake();
        assert!(!bit.ring(), "no wake once the consumer is awake again");
        // Marks past the slots a consumer watches do not keep it up.
        board.map().words(64)[0].store(0, Ordering::Relaxed);
        BoardBit::new(Arc::clone(board.map()), 200).expect("slot 200").ring();
        assert!(!board.announce_sleep(64));
    }

    #[test]
    fn an_offer_naming_another_file_or_a_bad_descriptor_is_refused() {
        let board = Board::create().expect("board");
        let (fd, dev, inode) = board.locator();
        let me = std::process::id();
        assert!(map_peer_board(me, fd, dev, inode + 1).is_err(), "another inode");
        assert!(map_peer_board(me, 1 << 20, dev, inode).is_err(), "no such descriptor");
        // An unsealed memfd of the right size: it could shrink under the mapping.
        // SAFETY: a NUL-terminated literal name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor nobody else owns.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own descriptor.
        assert_eq!(unsafe { libc::ftruncate(unsealed.as_raw_fd(), BOARD_LEN as libc::off_t) }, 0);
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a valid out-pointer and an open descriptor.
        assert_eq!(unsafe { libc::fstat(unsealed.as_raw_fd(), st.as_mut_ptr()) }, 0);
        // SAFETY: fstat returned 0.
        let st = unsafe { st.assume_init() };
        assert!(map_peer_board(me, unsealed.as_raw_fd(), st.st_dev, st.st_ino).is_err(), "unsealed");
    }
}
