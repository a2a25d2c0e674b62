//! The engine's endpoints, by id: a slab whose id names the slot and the slot's generation, so
//! that finding the endpoint of every frame and every send is an index and a compare, not a
//! hash.
//!
//! An id is `generation << 32 | slot`. A slot's generation grows each time the slot is freed,
//! so an id is never issued twice; a slot whose generation would wrap is retired instead.
//! Generations start at one, so no id is zero (see [`crate::ids`]). An id from anywhere (a
//! stale one, one from another engine, any `u64`) finds its endpoint or nothing.
//!
//! An endpoint merged into another (see [`crate::Engine::absorb_endpoint`]) leaves an alias: its
//! id finds the endpoint it became, through a lookup made only when the slot misses, so the hot
//! path stays an index and a compare. Since no id is issued twice, an alias never hides a newer
//! endpoint.

use crate::ids::EndpointId;

/// The endpoints (the engine's `Endpoint` records) by [`EndpointId`].
#[derive(Debug)]
pub(crate) struct EndpointTable<T> {
    slots: Vec<Slot<T>>,
    /// Free slots, reused last-freed first.
    free: Vec<u32>,
    len: usize,
    /// Ids of merged endpoints, with the id of the endpoint each became.
    aliases: Vec<(EndpointId, EndpointId)>,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    ep: Option<T>,
}

fn split(id: EndpointId) -> (usize, u32) {
    let raw = id.raw();
    ((raw & u64::from(u32::MAX)) as usize, (raw >> 32) as u32)
}

fn join(slot: usize, generation: u32) -> EndpointId {
    EndpointId::from_raw(u64::from(generation) << 32 | slot as u64)
}

impl<T> Default for EndpointTable<T> {
    fn default() -> Self {
        EndpointTable { slots: Vec::new(), free: Vec::new(), len: 0, aliases: Vec::new() }
    }
}

impl<T> EndpointTable<T> {
    /// Stores `ep` under a new id.
    pub(crate) fn insert(&mut self, ep: T) -> EndpointId {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.ep = Some(ep);
            return join(index as usize, slot.generation);
        }
        let index = self.slots.len();
        assert!(index < u32::MAX as usize, "more than 2^32 - 1 endpoints at once");
        self.slots.push(Slot { generation: 1, ep: Some(ep) });
        join(index, 1)
    }

    /// The endpoint of `id` (or of the endpoint `id` was merged into), if it is still here.
    #[inline]
    pub(crate) fn get(&self, id: &EndpointId) -> Option<&T> {
        match self.slot_of(*id) {
            Some(index) => self.slots[index].ep.as_ref(),
            None => self.slot_of(self.alias_of(*id)?).and_then(|index| self.slots[index].ep.as_ref()),
        }
    }

    /// The endpoint of `id` (or of the endpoint `id` was merged into), if it is still here, to
    /// change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &EndpointId) -> Option<&mut T> {
        let index = match self.slot_of(*id) {
            Some(index) => index,
            None => self.slot_of(self.alias_of(*id)?)?,
        };
        self.slots[index].ep.as_mut()
    }

    /// The id of the endpoint `id` finds: `id` itself, or the endpoint it was merged into. What
    /// an operation records, so that the frames of its endpoint (which come under that id) find
    /// it whichever id it was issued under.
    #[inline]
    pub(crate) fn canonical(&self, id: EndpointId) -> EndpointId {
        match self.slot_of(id) {
            Some(_) => id,
            None => self.alias_of(id).unwrap_or(id),
        }
    }

    /// The slot holding the endpoint of `id` itself (no alias).
    #[inline]
    fn slot_of(&self, id: EndpointId) -> Option<usize> {
        let (index, generation) = split(id);
        let slot = self.slots.get(index)?;
        (slot.generation == generation && slot.ep.is_some()).then_some(index)
    }

    /// The endpoint a merged endpoint's id now finds.
    #[cold]
    fn alias_of(&self, id: EndpointId) -> Option<EndpointId> {
        self.aliases.iter().find(|(from, _)| *from == id).map(|&(_, to)| to)
    }

    /// Takes endpoint `from` out because it was merged into `to` (which must be here): `from`'s
    /// id, and the ids merged into it before, find `to` from now on.
    pub(crate) fn merge(&mut self, from: EndpointId, to: EndpointId) -> Option<T> {
        if from == to {
            return None;
        }
        let index = self.slot_of(from)?;
        self.slot_of(to)?;
        let slot = &mut self.slots[index];
        let ep = slot.ep.take()?;
        self.len -= 1;
        if slot.generation < u32::MAX {
            slot.generation += 1;
            self.free.push(index as u32);
        }
        for alias in &mut self.aliases {
            if alias.1 == from {
                alias.1 = to;
            }
        }
        self.aliases.push((from, to));
        Some(ep)
    }

    /// Takes the endpoint of `id` out (never through an alias); its id, and the ids of the
    /// endpoints merged into it, are never valid again.
    pub(crate) fn remove(&mut self, id: &EndpointId) -> Option<T> {
        let (index, generation) = split(*id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let ep = slot.ep.take()?;
        if !self.aliases.is_empty() {
            self.aliases.retain(|(_, to)| to != id);
        }
        self.len -= 1;
        if slot.generation < u32::MAX {
            slot.generation += 1;
            self.free.push(index as u32);
        }
        Some(ep)
    }

    /// How many endpoints are here.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every endpoint with its id, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (EndpointId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| slot.ep.as_ref().map(|ep| (join(index, slot.generation), ep)))
    }

    /// Every endpoint with its id, in slot order, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (EndpointId, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(index, slot)| {
            let generation = slot.generation;
            slot.ep.as_mut().map(|ep| (join(index, generation), ep))
        })
    }

    /// Every endpoint.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|slot| slot.ep.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_endpoints_id_finds_nothing_even_when_its_slot_is_reused() {
        let mut table = EndpointTable::default();
        let first = table.insert("first");
        assert_eq!(table.remove(&first), Some("first"));
        let second = table.insert("second");
        assert_ne!(first, second, "an id is never issued twice");
        assert_eq!(table.get(&first), None);
        assert_eq!(table.get_mut(&first), None);
        assert_eq!(table.remove(&first), None);
        assert_eq!(table.get(&second), Some(&"second"));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn any_forged_id_finds_nothing() {
        let mut table = EndpointTable::default();
        let id = table.insert(7u32);
        let raw = id.raw();
        for forged in [0, 1, raw + 1, raw ^ (1 << 32), u64::MAX, raw & u64::from(u32::MAX), 1 << 32 | 5] {
            assert_eq!(table.get(&EndpointId::from_raw(forged)), None, "forged id {forged:#x}");
        }
        assert_eq!(table.get(&id), Some(&7));
    }

    #[test]
    fn no_id_is_zero_and_iteration_sees_each_endpoint_once() {
        let mut table = EndpointTable::default();
        let ids: Vec<_> = (0..5u32).map(|n| table.insert(n)).collect();
        assert!(ids.iter().all(|id| id.raw() != 0));
        table.remove(&ids[2]);
        let seen: Vec<_> = table.iter().map(|(id, &n)| (id, n)).collect();
        assert_eq!(seen, vec![(ids[0], 0), (ids[1], 1), (ids[3], 3), (ids[4], 4)]);
        for (_, n) in table.iter_mut() {
            *n += 10;
        }
        assert_eq!(table.values().copied().collect::<Vec<_>>(), vec![10, 11, 13, 14]);
    }

    #[test]
    fn a_merged_endpoints_id_finds_the_endpoint_it_became_until_that_one_goes() {
        let mut table = EndpointTable::default();
        let merged = table.insert("merged");
        let kept = table.insert("kept");
        let chained = table.insert("chained");
        assert_eq!(table.merge(merged, kept), Some("merged"));
        assert_eq!((table.canonical(merged), table.canonical(kept)), (kept, kept));
        assert_eq!(table.get(&merged), Some(&"kept"));
        *table.get_mut(&merged).unwrap() = "kept, changed";
        assert_eq!(table.get(&kept), Some(&"kept, changed"));
        assert_eq!(table.remove(&merged), None, "removal never follows an alias");
        assert_eq!(table.merge(kept, chained), Some("kept, changed"));
        assert_eq!(table.get(&merged), Some(&"chained"));
        assert_eq!(table.merge(chained, chained), None, "an endpoint is not merged into itself");
        table.remove(&chained);
        assert_eq!(table.get(&merged), None);
        assert_eq!(table.get(&kept), None);
        // The freed slots are reused under new ids that no alias names.
        let fresh = table.insert("fresh");
        assert_eq!(table.get(&fresh), Some(&"fresh"));
        assert_eq!(table.get(&merged), None);
    }

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired() {
        let mut table = EndpointTable::default();
        let id = table.insert(1u8);
        table.slots[0].generation = u32::MAX;
        let last = join(0, u32::MAX);
        assert_eq!(table.get(&id), None);
        assert_eq!(table.remove(&last), Some(1));
        let next = table.insert(2u8);
        assert_ne!(split(next).0, 0, "the retired slot is not reused");
        assert_eq!(table.get(&last), None);
    }
}
