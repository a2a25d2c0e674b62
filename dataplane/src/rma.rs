//! Native one-sided operations: what a transport can do to a peer's memory without the peer's
//! CPU ([`RmaCaps`]).
//!
//! A transport that cannot (a socket, a NIC without RDMA) says so here, and the protocol layer
//! emulates the operation with messages the target executes (`proto::rma_exec`).

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
