//! The engine's records of operations in progress, by [`OpId`].
//!
//! Ids come from one counter, so the operations alive at one time usually have ids close
//! together: a record sits in the slot its id names modulo [`SLOTS`], found with one compare,
//! and only an id whose slot an older operation still holds goes to a hash map beside it. A
//! lookup by an id a peer sent back (a `SyncAck`'s request, a rendezvous answer's) reads one
//! slot and finds the record only when the slot holds exactly that id.

use crate::engine::Operation;
use crate::ids::OpId;
use zcx_dataplane::FastMap;

/// Slots of the direct part: more than the operations a worker usually has in flight at once,
/// few enough that the table stays a handful of pages.
const SLOTS: usize = 128;

/// Operations by id: a direct-mapped array and, for ids whose slot is taken, a map.
pub(crate) struct OpTable {
    slots: Box<[Option<(OpId, Operation)>]>,
    overflow: FastMap<OpId, Operation>,
    len: usize,
}

impl Default for OpTable {
    fn default() -> OpTable {
        OpTable { slots: (0..SLOTS).map(|_| None).collect(), overflow: FastMap::default(), len: 0 }
    }
}

#[inline(always)]
fn slot_of(id: OpId) -> usize {
    (id.raw() as usize) & (SLOTS - 1)
}

impl OpTable {
    /// The record of `id`.
    #[inline]
    pub(crate) fn get(&self, id: &OpId) -> Option<&Operation> {
        match &self.slots[slot_of(*id)] {
            Some((held, op)) if held == id => Some(op),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.get(id),
        }
    }

    /// The record of `id`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &OpId) -> Option<&mut Operation> {
        match &mut self.slots[slot_of(*id)] {
            Some((held, op)) if held == id => Some(op),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.get_mut(id),
        }
    }

    /// Whether `id` has a record.
    pub(crate) fn contains_key(&self, id: &OpId) -> bool {
        self.get(id).is_some()
    }

    /// Records `op` under `id`; the record it replaces, if there was one.
    #[inline]
    pub(crate) fn insert(&mut self, id: OpId, op: Operation) -> Option<Operation> {
        let slot = &mut self.slots[slot_of(id)];
        match slot {
            Some((held, old)) if *held == id => return Some(std::mem::replace(old, op)),
            None if self.overflow.is_empty() || !self.overflow.contains_key(&id) => {
                *slot = Some((id, op));
                self.len += 1;
                return None;
            }
            _ => {}
        }
        let old = self.overflow.insert(id, op);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the record of `id` and returns it.
    #[inline]
    pub(crate) fn remove(&mut self, id: &OpId) -> Option<Operation> {
        let slot = &mut self.slots[slot_of(*id)];
        let removed = match slot {
            Some((held, _)) if held == id => slot.take().map(|(_, op)| op),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.remove(id),
        };
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// Records alive.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every record with its id, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&OpId, &Operation)> {
        self.slots.iter().flatten().map(|(id, op)| (id, op)).chain(self.overflow.iter())
    }

    /// Every record, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Operation> {
        self.iter().map(|(_, op)| op)
    }

    /// Every record, to change, in no particular order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Operation> {
        self.slots.iter_mut().flatten().map(|(_, op)| op).chain(self.overflow.values_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::OpKind;

    fn op(len: usize) -> Operation {
        Operation {
            ep: None,
            kind: OpKind::Held { len },
            tokens: 0,
            rma_issued: false,
            implicit: false,
            flush_reports: false,
            result: None,
            cookie: None,
        }
    }

    fn len_of(op: Option<&Operation>) -> Option<usize> {
        op.map(|op| match op.kind {
            OpKind::Held { len } => len,
            _ => unreachable!("the tests record only Held"),
        })
    }

    /// Ids that share a slot each keep their own record, whichever part holds it, and an id
    /// never recorded (one a peer made up) finds nothing, however its slot is filled.
    #[test]
    fn ids_sharing_a_slot_keep_their_own_records() {
        let mut table = OpTable::default();
        let ids: Vec<OpId> = (0..5).map(|i| OpId::from_raw(7 + i * SLOTS as u64)).collect();
        for (n, &id) in ids.iter().enumerate() {
            assert!(table.insert(id, op(n)).is_none());
        }
        assert_eq!(table.len(), 5);
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(len_of(table.get(id)), Some(n));
        }
        for forged in [7 + 5 * SLOTS as u64, 8, u64::MAX, 7 + (1 << 40)] {
            assert!(table.get(&OpId::from_raw(forged)).is_none(), "{forged}");
            assert!(table.remove(&OpId::from_raw(forged)).is_none(), "{forged}");
        }
        // The slot's own record goes; the ones beside it stay and are found.
        assert_eq!(len_of(table.remove(&ids[0]).as_ref()), Some(0));
        assert!(table.get(&ids[0]).is_none());
        assert_eq!(len_of(table.get(&ids[3])), Some(3));
        // An id in the map is replaced there, not recorded twice once its slot is free.
        assert_eq!(len_of(table.insert(ids[3], op(30)).as_ref()), Some(3));
        assert_eq!(table.len(), 4);
        assert_eq!(table.iter().filter(|(id, _)| **id == ids[3]).count(), 1);
        assert_eq!(len_of(table.get(&ids[3])), Some(30));
        for id in &ids[1..] {
            assert!(table.remove(id).is_some());
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.iter().count(), 0);
    }

    /// Iteration sees every record once, in both parts; changes through `values_mut` stay.
    #[test]
    fn iteration_covers_both_parts() {
        let mut table = OpTable::default();
        for raw in 0..(3 * SLOTS as u64) {
            table.insert(OpId::from_raw(raw), op(raw as usize));
        }
        assert_eq!(table.len(), 3 * SLOTS);
        let mut seen: Vec<u64> = table.iter().map(|(id, _)| id.raw()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..3 * SLOTS as u64).collect::<Vec<_>>());
        for op in table.values_mut() {
            op.tokens = 1;
        }
        assert!(table.values().all(|op| op.tokens == 1));
        assert!(table.contains_key(&OpId::from_raw(2 * SLOTS as u64 + 1)));
    }
}
