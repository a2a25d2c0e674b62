//! Native one-sided operations: what a transport can do to a peer's memory without the peer's
//! CPU ([`RmaCaps`]), and how it is asked to ([`crate::Transport::rma`] with an [`RmaOp`], a
//! [`LocalMem`] and a [`RemoteMem`]).
//!
//! A transport that cannot (a socket, a NIC without RDMA) says so in its caps and refuses `rma`
//! with `Unsupported`; the protocol layer then emulates the operation with messages the target
//! executes (`proto::rma_exec`). Over shared memory an operation completes inside the call
//! ([`RmaOutcome::Done`]); over verbs it completes later, with a `TlEvent::RmaDone` carrying the
//! caller's token ([`RmaOutcome::Pending`]).

use crate::proto::AtomicOp;

/// Every [`AtomicOp`], in wire order.
const ALL_OPS: [AtomicOp; 6] =
    [AtomicOp::Add, AtomicOp::Swap, AtomicOp::Cswap, AtomicOp::And, AtomicOp::Or, AtomicOp::Xor];

/// A set of atomic operations of one operand size, each in its plain and its fetching form
/// (`add` and `fadd`, `and` and `fand`, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicOps(u16);

impl AtomicOps {
    /// No atomic at all.
    pub const NONE: AtomicOps = AtomicOps(0);

    /// Every op, plain and fetching.
    pub const ALL: AtomicOps = AtomicOps((1 << (2 * ALL_OPS.len())) - 1);

    /// The bit of `op` in its plain (`fetch` false) or fetching form.
    fn bit(op: AtomicOp, fetch: bool) -> u16 {
        1 << (2 * op as u16 + u16::from(fetch))
    }

    /// This set and `op` in the given form.
    pub fn with(self, op: AtomicOp, fetch: bool) -> AtomicOps {
        AtomicOps(self.0 | AtomicOps::bit(op, fetch))
    }

    /// True when `op` in the given form is in the set.
    pub fn contains(self, op: AtomicOp, fetch: bool) -> bool {
        self.0 & AtomicOps::bit(op, fetch) != 0
    }

    /// The ops in both sets.
    pub fn intersection(self, other: AtomicOps) -> AtomicOps {
        AtomicOps(self.0 & other.0)
    }

    /// True for the empty set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The ops in the set, each with its form (`true`: fetching).
    pub fn iter(self) -> impl Iterator<Item = (AtomicOp, bool)> {
        ALL_OPS
            .into_iter()
            .flat_map(|op| [(op, false), (op, true)])
            .filter(move |&(op, fetch)| self.contains(op, fetch))
    }
}

/// The native one-sided operations of a transport ([`crate::Transport::rma`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RmaCaps {
    /// Writes into a peer's registered memory.
    pub put: bool,
    /// Reads from a peer's registered memory.
    pub get: bool,
    /// Atomics on a 32-bit operand.
    pub atomic32: AtomicOps,
    /// Atomics on a 64-bit operand.
    pub atomic64: AtomicOps,
    /// The largest single put or get, in bytes; 0 without native put and get.
    pub max_rma: usize,
}

impl RmaCaps {
    /// No native one-sided operation: everything is emulated with messages.
    pub const NONE: RmaCaps =
        RmaCaps { put: false, get: false, atomic32: AtomicOps::NONE, atomic64: AtomicOps::NONE, max_rma: 0 };

    /// The atomics of an operand of `size` bytes (4 or 8); none for any other size.
    pub fn atomics(&self, size: usize) -> AtomicOps {
        match size {
            4 => self.atomic32,
            8 => self.atomic64,
            _ => AtomicOps::NONE,
        }
    }

    /// What both can do.
    pub fn intersection(&self, other: &RmaCaps) -> RmaCaps {
        RmaCaps {
            put: self.put && other.put,
            get: self.get && other.get,
            atomic32: self.atomic32.intersection(other.atomic32),
            atomic64: self.atomic64.intersection(other.atomic64),
            max_rma: self.max_rma.min(other.max_rma),
        }
    }
}

/// One native one-sided operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaOp {
    /// Writes the local bytes to the remote range (`ucp_put_nbx`).
    Put,
    /// Reads the remote range into the local bytes (`ucp_get_nbx`).
    Get,
    /// An atomic on the remote operand, whose size is the remote range's length (4 or 8 bytes,
    /// naturally aligned); the local memory is not used (`ucp_atomic_op_nbx`).
    Atomic {
        /// What to do.
        op: AtomicOp,
        /// The caller wants the old value (`fadd`, `fand`, ...); swap and compare-and-swap
        /// always yield it when asked.
        fetch: bool,
        /// The operand (for a 4-byte operand, its low 32 bits).
        value: u64,
        /// The compare value of [`AtomicOp::Cswap`]; ignored otherwise.
        compare: u64,
    },
}

/// The local side of a put (read from) or a get (written to).
#[derive(Debug)]
pub struct LocalMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only used under `LocalMem::new`'s contract, which holds whichever thread
// progresses the transport.
unsafe impl Send for LocalMem {}

impl LocalMem {
    /// No local memory: for an atomic.
    pub const NONE: LocalMem = LocalMem { ptr: std::ptr::null_mut(), len: 0 };

    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// For a put, `ptr..ptr + len` must be readable; for a get, writable. Nobody else may write
    /// (for a get: read or write) the range, nor free it, until the operation completes: when
    /// `rma` returns [`RmaOutcome::Done`] or an error, or when `TlEvent::RmaDone` reports its
    /// token after [`RmaOutcome::Pending`].
    pub unsafe fn new(ptr: *mut u8, len: usize) -> LocalMem {
        LocalMem { ptr, len }
    }

    /// The start of the local range.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The length of the local range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The remote side of an operation: a range of a region the peer registered, as its remote key
/// names it.
///
/// The caller passes only a key the region's owner vouched for (see `Op::KeyCheck` and
/// `RemoteAccessTable::vouch` in [`crate::access`]): the transport trusts `region_base` and
/// `region_len` as the owner's record, and still refuses any range outside them or outside what
/// `key` lets it map, before touching a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMem<'a> {
    /// The remote address of the region's first byte, as registered by its owner.
    pub region_base: u64,
    /// The region's length in bytes.
    pub region_len: u64,
    /// The remote address of the range's first byte.
    pub addr: u64,
    /// The range's length in bytes (an atomic's operand size).
    pub len: usize,
    /// The transport's own entry for the region in the packed remote key (its memory domain's
    /// key): over shm the encoded memfd locator (`zcx_control::ShmLocator`), over verbs the
    /// rkey.
    pub key: &'a [u8],
}

/// How an accepted one-sided operation stands when `rma` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaOutcome {
    /// Complete: the bytes are in place (put), in the local memory (get), or the atomic is done;
    /// `fetched` is an atomic's old value when it asked for one, 0 otherwise. No event follows.
    Done {
        /// The old value of a fetching atomic; 0 otherwise.
        fetched: u64,
    },
    /// In flight: `TlEvent::RmaDone` with the caller's token follows exactly once, also when the
    /// link fails first.
    Pending,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_and_form_has_its_own_bit() {
        let mut seen = AtomicOps::NONE;
        for op in ALL_OPS {
            for fetch in [false, true] {
                assert!(!seen.contains(op, fetch), "{op:?} {fetch} shares a bit");
                seen = seen.with(op, fetch);
                assert!(seen.contains(op, fetch));
            }
        }
        assert_eq!(seen, AtomicOps::ALL);
        assert_eq!(AtomicOps::ALL.iter().count(), 12);
        assert!(AtomicOps::NONE.is_empty() && AtomicOps::NONE.iter().next().is_none());
    }

    #[test]
    fn a_fetching_form_is_not_its_plain_form() {
        let fadd = AtomicOps::NONE.with(AtomicOp::Add, true);
        assert!(fadd.contains(AtomicOp::Add, true));
        assert!(!fadd.contains(AtomicOp::Add, false));
        assert_eq!(fadd.iter().collect::<Vec<_>>(), vec![(AtomicOp::Add, true)]);
    }

    #[test]
    fn intersection_keeps_what_both_do() {
        let mut full = RmaCaps {
            put: true,
            get: true,
            atomic32: AtomicOps::ALL,
            atomic64: AtomicOps::ALL,
            max_rma: 1 << 30,
        };
        assert_eq!(full.intersection(&RmaCaps::NONE), RmaCaps::NONE);
        full.atomic64 = AtomicOps::NONE.with(AtomicOp::Xor, false);
        let both = full.intersection(&RmaCaps { max_rma: 4096, ..full });
        assert_eq!(both.max_rma, 4096);
        assert_eq!(both.atomics(8), AtomicOps::NONE.with(AtomicOp::Xor, false));
        assert_eq!(both.atomics(4), AtomicOps::ALL);
        assert_eq!(both.atomics(2), AtomicOps::NONE);
    }
}
