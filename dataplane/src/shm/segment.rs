//! The shared segment of one shm link: a sealed memfd holding a small header and two rings.
//!
//! ```text
//! 0        header (256 bytes): magic, version, ring capacity, segment length, creator pid,
//!          heartbeat word (each on its own cache line where it is written)
//! 256      ring 0: connector → acceptor   (RING_HEADER + capacity bytes)
//! 256 + r  ring 1: acceptor → connector
//! ```
//!
//! The connector creates it (`memfd_create`, trying 2 MiB huge pages first), sizes it, seals it
//! against shrinking and growing (so the acceptor can never take a SIGBUS from a truncated
//! mapping), maps it and passes the descriptor over the link's Unix socket. The acceptor checks
//! the descriptor (a sealed regular file of exactly the announced size) and the header before it
//! trusts any offset. The mapping lives as long as the [`Segment`]; the descriptor is closed as
//! soon as it is mapped (and passed on).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::ring::{ring_bytes, valid_capacity};

/// "ZCXSHM\0\x01" read as a little-endian u64.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"ZCXSHM\0\x01");
/// Layout version of the segment and the hello.
pub const SEGMENT_VERSION: u32 = 5;
/// Bytes of the segment header.
pub const SEGMENT_HEADER: usize = 256;
/// Huge page size tried first.
const HUGE_PAGE: usize = 2 << 20;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_CAPACITY: usize = 16;
const OFF_LEN: usize = 24;
const OFF_PID: usize = 32;
/// The creator's heartbeat word, on its own cache line (reserved: peer death is detected through
/// the Unix socket today, which needs no polling of the segment).
pub const OFF_HEARTBEAT: usize = 64;
/// The control lines of ring 0 and ring 1: each holds the "placed buffers revoked" word of the
/// ring's producer (see [`Segment::revoked`]), the claim and done words of put help (see
/// [`Segment::help_words`]) and the ring's board offer (see [`Segment::board_offer`]).
const OFF_REVOKED: [usize; 2] = [128, 192];
/// Offsets of the help words within a control line.
const OFF_HELP_CLAIM: usize = 8;
const OFF_HELP_DONE: usize = 16;
/// Offsets of the board offer within a control line: descriptor and slot, device, inode, state.
const OFF_BOARD: usize = 24;

/// Why a segment could not be created or attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentError {
    /// A system call failed (errno).
    Os(&'static str, i32),
    /// The descriptor or its contents are not a segment we accept.
    Invalid(&'static str),
}

impl std::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentError::Os(call, errno) => {
                write!(f, "{call}: {}", std::io::Error::from_raw_os_error(*errno))
            }
            SegmentError::Invalid(why) => write!(f, "invalid segment: {why}"),
        }
    }
}

impl std::error::Error for SegmentError {}

use crate::os_error::last_errno as errno;

/// The length of a segment with two rings of `capacity` bytes (before huge page rounding).
pub fn segment_len(capacity: usize) -> usize {
    SEGMENT_HEADER + 2 * ring_bytes(capacity)
}

/// A mapped segment. Unmapped on drop.
#[derive(Debug)]
pub struct Segment {
    base: *mut u8,
    map_len: usize,
    capacity: usize,
    huge: bool,
}

// SAFETY: the mapping is process-wide memory owned by this value; nothing about it is tied to a
// thread.
unsafe impl Send for Segment {}
// SAFETY: shared access only hands out raw pointers and atomics into the mapping; the value
// itself never changes after creation.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates, seals and maps a fresh segment with two rings of `capacity` bytes (a power of two).
    /// Returns the segment and its descriptor (to pass to the peer; drop it afterwards).
    pub fn create(capacity: usize, try_huge: bool) -> Result<(Segment, OwnedFd), SegmentError> {
        if !valid_capacity(capacity) {
            return Err(SegmentError::Invalid("ring capacity is not a power of two in range"));
        }
        if try_huge {
            match Segment::create_with(capacity, true) {
                Ok(made) => return Ok(made),
                Err(err) => tracing::trace!(%err, "huge page segment unavailable, using normal pages"),
            }
        }
        Segment::create_with(capacity, false)
    }

    fn create_with(capacity: usize, huge: bool) -> Result<(Segment, OwnedFd), SegmentError> {
        let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        let mut len = segment_len(capacity);
        if huge {
            flags |= libc::MFD_HUGETLB | libc::MFD_HUGE_2MB;
            len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        }
        // SAFETY: the name is a NUL-terminated literal; the result is checked.
        let raw = unsafe { libc::memfd_create(c"zcx-shm".as_ptr(), flags) };
        if raw < 0 {
            return Err(SegmentError::Os("memfd_create", errno()));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain ftruncate on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(SegmentError::Os("ftruncate", errno()));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our descriptor with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(SegmentError::Os("F_ADD_SEALS", errno()));
        }
        let seg = Segment::map(&fd, len, capacity, huge)?;
        // SAFETY: the header is inside the fresh (zero-filled) mapping, 8-byte aligned.
        unsafe {
            let b = seg.base;
            (b.add(OFF_MAGIC) as *mut u64).write(SEGMENT_MAGIC);
            (b.add(OFF_VERSION) as *mut u64).write(u64::from(SEGMENT_VERSION));
            (b.add(OFF_CAPACITY) as *mut u64).write(capacity as u64);
            (b.add(OFF_LEN) as *mut u64).write(len as u64);
            (b.add(OFF_PID) as *mut u64).write(u64::from(std::process::id()));
        }
        Ok((seg, fd))
    }

    fn map(fd: &OwnedFd, len: usize, capacity: usize, huge: bool) -> Result<Segment, SegmentError> {
        let base = map_shared(fd, len).map_err(|errno| SegmentError::Os("mmap", errno))?;
        Ok(Segment { base, map_len: len, capacity, huge })
    }

    /// Checks a descriptor received from a peer and maps it: it must be a sealed (no shrink, no
    /// grow) regular file of exactly `len` bytes whose header names `capacity`. Never trusts the
    /// peer beyond that: all offsets used later derive from `capacity`, checked against `len`.
    pub fn attach(fd: &OwnedFd, capacity: usize, len: usize) -> Result<Segment, SegmentError> {
        if !valid_capacity(capacity) {
            return Err(SegmentError::Invalid("ring capacity is not a power of two in range"));
        }
        if len < segment_len(capacity) || len > segment_len(capacity) + HUGE_PAGE {
            return Err(SegmentError::Invalid("segment length does not match the ring capacity"));
        }
        // SAFETY: fstat into a zeroed stat buffer we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `fd` is a live descriptor.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(SegmentError::Os("fstat", errno()));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(SegmentError::Invalid("descriptor is not a regular file"));
        }
        if st.st_size as u64 != len as u64 {
            return Err(SegmentError::Invalid("descriptor size differs from the announced length"));
        }
        // SAFETY: fcntl query on a live descriptor.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(SegmentError::Invalid("descriptor is not a sealable memfd"));
        }
        if seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) {
            return Err(SegmentError::Invalid("memfd is not sealed against resizing"));
        }
        let seg = Segment::map(fd, len, capacity, false)?;
        // SAFETY: the header lies inside the mapping (len >= SEGMENT_HEADER); volatile because
        // the peer may write it.
        let (magic, version, cap, seg_len) = unsafe {
            let b = seg.base;
            (
                (b.add(OFF_MAGIC) as *const u64).read_volatile(),
                (b.add(OFF_VERSION) as *const u64).read_volatile(),
                (b.add(OFF_CAPACITY) as *const u64).read_volatile(),
                (b.add(OFF_LEN) as *const u64).read_volatile(),
            )
        };
        if magic != SEGMENT_MAGIC || version != u64::from(SEGMENT_VERSION) {
            return Err(SegmentError::Invalid("bad segment magic or version"));
        }
        if cap != capacity as u64 || seg_len != len as u64 {
            return Err(SegmentError::Invalid("segment header disagrees with the hello"));
        }
        Ok(seg)
    }

    /// The mapped length.
    pub fn len(&self) -> usize {
        self.map_len
    }

    /// Always false: a segment holds at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The capacity of each ring.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True when the segment is backed by huge pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// The base of ring `which` (0: connector → acceptor, 1: acceptor → connector).
    pub fn ring_base(&self, which: usize) -> *mut u8 {
        assert!(which < 2);
        // SAFETY: both rings lie inside the mapping: len >= segment_len(capacity).
        unsafe { self.base.add(SEGMENT_HEADER + which * ring_bytes(self.capacity)) }
    }

    /// The heartbeat word (reserved for liveness without a socket).
    pub fn heartbeat(&self) -> &AtomicU64 {
        // SAFETY: inside the header, 8-byte aligned, alive as long as `self`.
        unsafe { &*(self.base.add(OFF_HEARTBEAT) as *const AtomicU64) }
    }

    /// The word by which the producer of ring `which` says it no longer keeps its placed payloads
    /// (it force-closed the link and reported them cancelled, so their memory may be reused). A
    /// reader copying one of them checks it after the copy and before reporting success: set
    /// means the bytes may be garbage.
    pub fn revoked(&self, which: usize) -> &AtomicU64 {
        // SAFETY: inside the header, 8-byte aligned, alive as long as `self`.
        unsafe { &*(self.base.add(OFF_REVOKED[which]) as *const AtomicU64) }
    }

    /// The claim and done words of put help on ring `which` (its producer is the initiator; see
    /// [`super::put_help`]). Zero in a fresh segment, which no job uses (jobs start at 1).
    pub fn help_words(&self, which: usize) -> (&AtomicU64, &AtomicU64) {
        let line = OFF_REVOKED[which];
        // SAFETY: inside the header, 8-byte aligned, alive as long as `self`.
        unsafe {
            (
                &*(self.base.add(line + OFF_HELP_CLAIM) as *const AtomicU64),
                &*(self.base.add(line + OFF_HELP_DONE) as *const AtomicU64),
            )
        }
    }

    /// The board offer of ring `which` (see [`super::board`]): four words, written by the ring's
    /// consumer (descriptor number in the low half and slot in the high half of the first, then
    /// device, inode, and the state, [`super::board::offer`]) and answered in the state word by
    /// its producer. Zero in a fresh segment: undecided.
    pub fn board_offer(&self, which: usize) -> &[AtomicU64; 4] {
        let at = OFF_REVOKED[which] + OFF_BOARD;
        // SAFETY: `at..at + 32` lies inside the header's control line (24 + 32 <= 64), 8-byte
        // aligned, alive as long as `self`; the words are only accessed atomically.
        unsafe { &*(self.base.add(at) as *const [AtomicU64; 4]) }
    }

    /// Bumps the heartbeat word.
    pub fn beat(&self) {
        self.heartbeat().fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value made; nothing borrows it any more (rings
        // built on it are owned by the same link and dropped with it).
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

/// Maps the first `len` bytes of `fd` shared and read-write at an address the kernel picks; the
/// errno when it cannot. The caller unmaps it (`munmap` of `len` bytes).
pub(crate) fn map_shared(fd: &impl AsRawFd, len: usize) -> Result<*mut u8, i32> {
    // SAFETY: a fresh shared mapping; the kernel picks the address, so no existing memory is
    // affected. The result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(p.cast())
}
