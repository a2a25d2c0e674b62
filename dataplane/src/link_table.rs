//! [`LinkTable`]: the links of one transport, by generational [`LinkId`].
//!
//! Every transport keeps its links in one of these. A link id names a slot and the generation
//! of the slot when the link got it; a slot freed by a closed or failed link is reused only
//! with the next generation, so an id the api still holds for a gone link misses (`get` answers
//! `None`) instead of naming whatever link took its slot. A lookup is an index and a compare:
//! the receive and send paths do one per message.
//!
//! # Bit layout of a [`LinkId`]
//!
//! ```text
//!  31        28 27                20 19                                 0
//! +------------+--------------------+------------------------------------+
//! |   member   |     generation     |             slot index             |
//! +------------+--------------------+------------------------------------+
//!   4 bits        GENERATION_BITS (8)        INDEX_BITS (20)
//! ```
//!
//! A transport hands out the low [`LOCAL_ID_BITS`] (28): the slot index in the low
//! [`INDEX_BITS`], the generation above it. The top bits are zero in a transport's own ids; a
//! [`crate::TransportSet`] puts the index of the member that owns the link there
//! (`transport_set::MEMBER_SHIFT` is [`LOCAL_ID_BITS`]). [`ListenerId`](crate::ListenerId)s
//! share the member bits.
//!
//! # Generations wrap
//!
//! A slot's generation goes up by one each time its link is removed, modulo
//! 2^[`GENERATION_BITS`]: after 256 links have had one slot, the first one's id names the
//! 257th. Freed slots are reused oldest first, so with `n` slots free a slot comes back only
//! every `n`-th new link, and an id goes stale for at least 256 reuses of its slot. (A slot
//! retired at wrap-around instead would make the table a finite supply of 2^28 links for the
//! life of a worker.)
//!
//! # Capacity
//!
//! At most 2^[`INDEX_BITS`] links at once, or the smaller limit given to
//! [`LinkTable::with_limit`]; beyond it `insert` answers [`TableFull`], which transports report
//! as [`TlError::NoResource`].

use std::collections::VecDeque;

use crate::transport::{LinkId, TlError};

/// Bits of a link id that hold the slot index.
pub const INDEX_BITS: u32 = 20;
/// Bits of a link id above the index that hold the slot's generation.
pub const GENERATION_BITS: u32 = 8;
/// Bits of a link id a transport uses; the bits above are a [`crate::TransportSet`]'s.
pub const LOCAL_ID_BITS: u32 = INDEX_BITS + GENERATION_BITS;
/// Most links one table holds at once.
pub const MAX_LINKS: usize = 1 << INDEX_BITS;

const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;

/// The table holds as many links as it may: the caller reports `NoResource`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableFull;

impl std::fmt::Display for TableFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("link table full")
    }
}

impl std::error::Error for TableFull {}

impl From<TableFull> for TlError {
    fn from(_: TableFull) -> TlError {
        TlError::NoResource
    }
}

/// One slot: its generation, and the link that has it now.
#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A transport's links, each of type `T`, by generational [`LinkId`] (see the
/// [module documentation](self)).
///
/// Besides lookups by id, a caller may walk the slots by position (`0..slot_count()`, with
/// [`LinkTable::at_mut`] and [`LinkTable::remove_at`]), which stays valid while entries are
/// removed during the walk; a slot's position is the index bits of its id.
#[derive(Debug)]
pub struct LinkTable<T> {
    slots: Vec<Slot<T>>,
    /// Vacant slots, the longest vacant first.
    free: VecDeque<u32>,
    len: usize,
    limit: usize,
}

impl<T> Default for LinkTable<T> {
    fn default() -> LinkTable<T> {
        LinkTable::new()
    }
}

impl<T> LinkTable<T> {
    /// An empty table of at most [`MAX_LINKS`] links.
    pub fn new() -> LinkTable<T> {
        LinkTable::with_limit(MAX_LINKS)
    }

    /// An empty table of at most `limit` links (and never more than [`MAX_LINKS`]).
    pub fn with_limit(limit: usize) -> LinkTable<T> {
        LinkTable { slots: Vec::new(), free: VecDeque::new(), len: 0, limit: limit.min(MAX_LINKS) }
    }

    fn id(index: u32, generation: u32) -> LinkId {
        LinkId(index | (generation << INDEX_BITS))
    }

    /// A vacant slot: the longest vacant one, else a new one within the limit.
    fn vacant_slot(&mut self) -> Result<u32, TableFull> {
        if let Some(index) = self.free.pop_front() {
            return Ok(index);
        }
        if self.slots.len() >= self.limit {
            return Err(TableFull);
        }
        self.slots.push(Slot { generation: 0, value: None });
        Ok((self.slots.len() - 1) as u32)
    }

    /// Vacates a slot: its generation moves on, and it waits behind the other vacant ones.
    fn vacate(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.generation = (slot.generation + 1) & GENERATION_MASK;
        self.free.push_back(index);
    }

    /// Adds a link; its id names it until it is removed.
    pub fn insert(&mut self, value: T) -> Result<LinkId, TableFull> {
        let index = self.vacant_slot()?;
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        self.len += 1;
        Ok(LinkTable::<T>::id(index, slot.generation))
    }

    /// An id that names no link, now or later (until its slot's generation wraps): for a link
    /// that failed before it existed, such as a refused connect, so that its failure is reported
    /// under an id no other link has. Takes a vacant slot's current generation and moves it on.
    pub fn dead_id(&mut self) -> Result<LinkId, TableFull> {
        let index = self.vacant_slot()?;
        let id = LinkTable::<T>::id(index, self.slots[index as usize].generation);
        self.vacate(index);
        Ok(id)
    }

    /// The slot position of `id` when it names a link.
    #[inline]
    pub fn slot_of(&self, id: LinkId) -> Option<usize> {
        let index = (id.0 & INDEX_MASK) as usize;
        let slot = self.slots.get(index)?;
        (slot.generation == id.0 >> INDEX_BITS && slot.value.is_some()).then_some(index)
    }

    /// The link `id` names; `None` for an id of a removed link, even when its slot has been
    /// reused, and for an id this table never gave.
    #[inline]
    pub fn get(&self, id: LinkId) -> Option<&T> {
        let slot = self.slots.get((id.0 & INDEX_MASK) as usize)?;
        if slot.generation != id.0 >> INDEX_BITS {
            return None;
        }
        slot.value.as_ref()
    }

    /// [`LinkTable::get`], mutably.
    #[inline]
    pub fn get_mut(&mut self, id: LinkId) -> Option<&mut T> {
        let slot = self.slots.get_mut((id.0 & INDEX_MASK) as usize)?;
        if slot.generation != id.0 >> INDEX_BITS {
            return None;
        }
        slot.value.as_mut()
    }

    /// True when `id` names a link.
    pub fn contains(&self, id: LinkId) -> bool {
        self.get(id).is_some()
    }

    /// Removes the link `id` names; its id (and every earlier one of its slot) misses from now
    /// on. `None` when `id` names no link.
    pub fn remove(&mut self, id: LinkId) -> Option<T> {
        let index = self.slot_of(id)?;
        self.remove_at(index)
    }

    /// Links in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table holds no link.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slot positions in use or vacant: walking `0..slot_count()` visits every link.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The id of the link at slot `index`, or for a vacant slot the id its next link will
    /// have (which names nothing yet). Panics when `index >= slot_count()`.
    #[inline]
    pub fn id_at(&self, index: usize) -> LinkId {
        LinkTable::<T>::id(index as u32, self.slots[index].generation)
    }

    /// The link at slot `index`, if any.
    #[inline]
    pub fn at(&self, index: usize) -> Option<&T> {
        self.slots.get(index)?.value.as_ref()
    }

    /// [`LinkTable::at`], mutably.
    #[inline]
    pub fn at_mut(&mut self, index: usize) -> Option<&mut T> {
        self.slots.get_mut(index)?.value.as_mut()
    }

    /// Removes the link at slot `index`, if any (see [`LinkTable::remove`]).
    pub fn remove_at(&mut self, index: usize) -> Option<T> {
        let value = self.slots.get_mut(index)?.value.take()?;
        self.len -= 1;
        self.vacate(index as u32);
        Some(value)
    }

    /// Every link with its id, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (LinkId, &T)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            slot.value.as_ref().map(|value| (LinkTable::<T>::id(index as u32, slot.generation), value))
        })
    }

    /// Every link, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|slot| slot.value.as_ref())
    }

    /// Every link, mutably, in slot order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|slot| slot.value.as_mut())
    }

    /// Removes every link; their ids miss from now on.
    pub fn clear(&mut self) {
        for index in 0..self.slots.len() {
            self.remove_at(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_links_id_misses_and_its_slot_comes_back_with_a_new_id() {
        let mut table = LinkTable::new();
        let a = table.insert("a").unwrap();
        let b = table.insert("b").unwrap();
        assert_eq!((table.get(a), table.get(b)), (Some(&"a"), Some(&"b")));
        assert_eq!(table.remove(a), Some("a"));
        assert_eq!(table.get(a), None);
        assert_eq!(table.get_mut(a), None);
        assert_eq!(table.remove(a), None, "a second remove of the same id");
        assert_eq!(table.slot_of(a), None);

        // Slot 0 is the only vacant one: the new link takes it, with the next generation.
        let c = table.insert("c").unwrap();
        assert_eq!(c.0 & INDEX_MASK, a.0 & INDEX_MASK, "the slot is reused");
        assert_ne!(c, a);
        assert_eq!(table.get(a), None, "the stale id names the slot's new link");
        assert_eq!(table.remove(a), None, "the stale id removed the slot's new link");
        assert_eq!(table.get(c), Some(&"c"));
        assert_eq!(table.get(b), Some(&"b"));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn ids_the_table_never_gave_miss() {
        let mut table = LinkTable::new();
        let a = table.insert(1u8).unwrap();
        assert_eq!(table.get(LinkId(a.0 + 1)), None, "a slot past the end");
        assert_eq!(table.get(LinkId(a.0 | (1 << INDEX_BITS))), None, "a generation not yet given");
        assert_eq!(table.get(LinkId(a.0 | (1 << LOCAL_ID_BITS))), None, "member bits set");
        assert_eq!(table.get(LinkId(u32::MAX)), None);
    }

    #[test]
    fn freed_slots_are_reused_oldest_first() {
        let mut table = LinkTable::new();
        let ids: Vec<LinkId> = (0..3).map(|i| table.insert(i).unwrap()).collect();
        table.remove(ids[1]);
        table.remove(ids[0]);
        let next = table.insert(10).unwrap();
        assert_eq!(next.0 & INDEX_MASK, ids[1].0 & INDEX_MASK, "the slot vacant longest");
        let after = table.insert(11).unwrap();
        assert_eq!(after.0 & INDEX_MASK, ids[0].0 & INDEX_MASK);
        assert_eq!(table.slot_count(), 3, "no new slot while one was vacant");
    }

    #[test]
    fn generations_wrap_after_256_links_in_one_slot_and_ids_stay_in_28_bits() {
        let mut table = LinkTable::with_limit(1);
        let first = table.insert(0u32).unwrap();
        table.remove(first);
        let mut stale = vec![first];
        for n in 1..(1u32 << GENERATION_BITS) {
            let id = table.insert(n).unwrap();
            assert!(id.0 < 1 << LOCAL_ID_BITS, "id {id:?} uses a set's member bits");
            for old in &stale {
                assert_eq!(table.get(*old), None, "id {old:?} named link {n}");
            }
            table.remove(id);
            stale.push(id);
        }
        // The 257th link of the slot has the first one's generation again: defined, documented.
        let wrapped = table.insert(256).unwrap();
        assert_eq!(wrapped, first);
        assert_eq!(table.get(first), Some(&256));
    }

    #[test]
    fn a_full_table_refuses_without_panicking_and_takes_links_again_once_one_goes() {
        let mut table = LinkTable::with_limit(2);
        let a = table.insert('a').unwrap();
        table.insert('b').unwrap();
        assert_eq!(table.insert('c'), Err(TableFull));
        assert_eq!(table.dead_id(), Err(TableFull));
        assert_eq!(TlError::from(TableFull), TlError::NoResource);
        table.remove(a);
        let c = table.insert('c').unwrap();
        assert_eq!(table.get(c), Some(&'c'));
        assert_eq!(table.len(), 2);

        let huge: LinkTable<()> = LinkTable::with_limit(usize::MAX);
        assert_eq!(huge.limit, MAX_LINKS, "no index beyond INDEX_BITS");
    }

    #[test]
    fn a_dead_id_names_no_link_now_or_after_its_slot_is_reused() {
        let mut table = LinkTable::new();
        let dead = table.dead_id().unwrap();
        assert_eq!(table.get(dead), None);
        assert!(table.is_empty());
        let next = table.insert("next").unwrap();
        assert_eq!(next.0 & INDEX_MASK, dead.0 & INDEX_MASK);
        assert_ne!(next, dead);
        assert_eq!(table.get(dead), None);
    }

    #[test]
    fn walking_slots_visits_every_link_and_may_remove_on_the_way() {
        let mut table = LinkTable::new();
        let ids: Vec<LinkId> = (0..5).map(|i| table.insert(i).unwrap()).collect();
        table.remove(ids[2]);
        let mut seen = Vec::new();
        for index in 0..table.slot_count() {
            let id = table.id_at(index);
            let Some(&value) = table.at(index) else {
                assert_eq!(table.get(id), None, "a vacant slot's id names nothing");
                continue;
            };
            assert_eq!(table.get(id), Some(&value));
            seen.push(value);
            if value % 2 == 0 {
                assert_eq!(table.remove_at(index), Some(value));
            }
        }
        assert_eq!(seen, [0, 1, 3, 4]);
        assert_eq!(table.iter().map(|(id, &v)| (id, v)).collect::<Vec<_>>(), [(ids[1], 1), (ids[3], 3)]);
        table.clear();
        assert!(table.is_empty());
        assert!(ids.iter().all(|&id| table.get(id).is_none()));
    }
}
