//! The doorbells a quiet worker watches, readable by a spinning thread without an atomic
//! read-modify-write.
//!
//! The set changes only when the worker's links change, but it is read on every skipped
//! `progress` call. A lock there (a reader's `try_read` and its release: two locked
//! instructions) is the costliest part of a skipped call, and a locked instruction also holds
//! back the loads after it: a caller spinning on its own memory (a put's flag) sees the peer's
//! write later. So each thread keeps its own reference to the set it last read, in a small
//! thread-local cache: a skipped call looks for the set's generation among its entries and reads
//! the doorbells through its own reference. The lock is taken only when the generation moved.
//!
//! Why this is sound: the doorbells keep the ring memory they read mapped, and a thread reads
//! only a set its own cache holds a reference to, so a replaced set (and a closed link's mapping)
//! goes away only once no thread can still read it. The replacing thread and the thread that
//! drops the worker let go at once; any other thread lets go when it next polls this worker,
//! when polling other workers pushes the entry out of its cache, or when it exits.
//!
//! The price: a thread that polled a worker and then stopped for good without exiting (a setup
//! thread that hands the worker to a progress thread) keeps the set it last read, and with it the
//! mappings of the rings that were watched then, until it exits. No descriptor is kept: a link's
//! socket and memfd close as usual.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use zcx_dataplane::doorbell::Doorbell;
use zcx_dataplane::LinkId;

/// Generations and set ids, unique in the process. Generation 0 is every set's first, empty
/// content.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Workers one thread can poll in turn without refetching their sets (a benchmark polling a
/// client and a server worker from one thread needs two).
const CACHED_SETS: usize = 4;

pub(crate) struct BellSet {
    /// Names this set in the caches (unique in the process, unlike an address, which a moved or
    /// freed set gives up).
    id: u64,
    generation: AtomicU64,
    current: RwLock<Arc<[Doorbell]>>,
}

struct CachedSet {
    /// The [`BellSet::id`] of the set it was read from.
    owner: u64,
    generation: u64,
    bells: Arc<[Doorbell]>,
    /// Where this thread's next look starts: the doorbell that rang last (see [`first_rung`]).
    start: usize,
}

struct Cache {
    entries: [Option<CachedSet>; CACHED_SETS],
    /// The entry a set not in the cache takes next.
    next: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { entries: [const { None }; CACHED_SETS], next: 0 }) };
}

impl BellSet {
    pub fn new() -> BellSet {
        BellSet {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            current: RwLock::new(Arc::from(Vec::new())),
        }
    }

    /// The link of the first doorbell that rang (`Some(None)`: none rang); `None` when the set
    /// could not be read without waiting (a writer is replacing it, so a full poll is running:
    /// the caller makes one too).
    #[inline(always)]
    pub fn rung_link(&self) -> Option<Option<LinkId>> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 {
            // The first, empty set: nothing to read.
            return Some(None);
        }
        CACHE
            .try_with(|cache| {
                let mut cache = cache.try_borrow_mut().ok()?;
                // Generations past 0 are unique in the process: a match is this set as it is now.
                match cache.entries.iter_mut().flatten().find(|e| e.generation == generation) {
                    Some(entry) => Some(first_rung(&entry.bells, &mut entry.start)),
                    None => self.refetch(&mut cache),
                }
            })
            .ok()
            .flatten()
    }

    /// The set moved on (or this thread never read it): takes a reference to the current one,
    /// in this set's old entry if it has one.
    #[cold]
    #[inline(never)]
    fn refetch(&self, cache: &mut Cache) -> Option<Option<LinkId>> {
        let current = self.current.try_read().ok()?;
        // Read under the lock: the writer changes both under it.
        let generation = self.generation.load(Ordering::Relaxed);
        let bells = Arc::clone(&current);
        drop(current);
        let mut start = 0;
        let rang = first_rung(&bells, &mut start);
        let stale = cache.entries.iter().position(|e| e.as_ref().is_some_and(|e| e.owner == self.id));
        let index = stale.unwrap_or_else(|| {
            let index = cache.next;
            cache.next = (index + 1) % CACHED_SETS;
            index
        });
        cache.entries[index] = Some(CachedSet { owner: self.id, generation, bells, start });
        Some(rang)
    }

    /// A new set for a changed set of links.
    pub fn replace(&self, bells: Vec<Doorbell>) {
        let bells: Arc<[Doorbell]> = Arc::from(bells);
        {
            let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
            *current = bells;
            self.generation.store(NEXT_GENERATION.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        }
        self.forget_here();
    }

    /// Drops this thread's reference to the set, if it has one: a replaced set's mappings go
    /// as soon as the other threads that read it let go too.
    fn forget_here(&self) {
        let owner = self.id;
        let _ = CACHE.try_with(|cache| {
            if let Ok(mut cache) = cache.try_borrow_mut() {
                for entry in cache.entries.iter_mut() {
                    if entry.as_ref().is_some_and(|e| e.owner == owner) {
                        *entry = None;
                    }
                }
            }
        });
    }
}

/// The link of the first doorbell of `bells` that rang, looking from `start` round to it.
#[inline(always)]
fn first_rung(bells: &[Doorbell], start: &mut usize) -> Option<LinkId> {
    let mut rung = None;
    first_from(bells, start, |bell| {
        rung = bell.rung();
        rung.is_some()
    })?;
    rung
}

/// The index of the first item of `items` that `rang`, looking from `*start` on and then from
/// the beginning; `*start` becomes it. Starting where the last one rang, not at the beginning,
/// finds a peer that answers on its turn (a server's clients taking turns) after a look or two
/// whatever the number of doorbells, and a busy link at the front does not hide the others.
#[inline(always)]
fn first_from<T>(items: &[T], start: &mut usize, mut rang: impl FnMut(&T) -> bool) -> Option<usize> {
    let from = (*start).min(items.len());
    let (before, after) = items.split_at(from);
    let at = match after.iter().position(&mut rang) {
        Some(offset) => from + offset,
        None => before.iter().position(rang)?,
    };
    if at != *start {
        *start = at;
    }
    Some(at)
}

impl Drop for BellSet {
    fn drop(&mut self) {
        self.forget_here();
    }
}

/// Doorbells on rings in ordinary memory, for tests of what watches them.
#[cfg(test)]
pub(crate) mod test_bells {
    use std::sync::{Arc, Weak};

    use zcx_dataplane::doorbell::Doorbell;
    use zcx_dataplane::shm::ring::{ring_bytes, Producer};
    use zcx_dataplane::LinkId;

    #[repr(C, align(64))]
    struct Line([u8; 64]);

    /// A doorbell on a fresh ring, holding one record nobody consumes when `rung` (it then rings
    /// at every look), and a weak reference to the ring's memory: gone once no doorbell keeps it.
    pub fn ring_doorbell(rung: bool) -> (Doorbell, Weak<dyn Send + Sync>) {
        ring_doorbell_of(LinkId(0), rung)
    }

    /// [`ring_doorbell`] naming `link`.
    pub fn ring_doorbell_of(link: LinkId, rung: bool) -> (Doorbell, Weak<dyn Send + Sync>) {
        let capacity = 4096;
        let mut lines: Vec<Line> = (0..ring_bytes(capacity) / 64).map(|_| Line([0; 64])).collect();
        let base = lines.as_mut_ptr().cast::<u8>();
        if rung {
            // SAFETY: `lines` is zeroed (a fresh ring), 64-byte aligned, `ring_bytes(capacity)`
            // long, and moves into the doorbell's keep below without its heap buffer moving.
            let mut producer = unsafe { Producer::new(base, capacity) };
            assert!(producer.push(1, &[b"ping"]).expect("room in a fresh ring"));
        }
        let keep: Arc<dyn Send + Sync> = Arc::new(lines);
        let weak = Arc::downgrade(&keep);
        // SAFETY: as above; `keep` owns the ring for the doorbell's life.
        (unsafe { Doorbell::new(base, capacity, link, keep) }, weak)
    }
}

#[cfg(test)]
mod tests {
    use super::test_bells::ring_doorbell;
    use super::*;

    /// Another thread that read a set keeps it (and the memory its doorbells read) until it
    /// reads the new one or exits; the replacing thread lets go at once; every thread's next look
    /// reads the new set.
    #[test]
    fn a_replaced_set_lives_while_a_thread_may_read_it_and_no_longer() {
        let set = BellSet::new();
        assert_eq!(set.rung_link(), Some(None));
        let (silent, silent_ring) = ring_doorbell(false);
        set.replace(vec![silent]);
        assert_eq!(set.rung_link(), Some(None));
        let (read, replaced) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(set.rung_link(), Some(None));
                read.wait();
                replaced.wait();
                // Its cached set is stale now: it reads the new one (which rings).
                assert_eq!(set.rung_link(), Some(Some(LinkId(0))));
            });
            read.wait();
            let (rung, _) = ring_doorbell(true);
            set.replace(vec![rung]);
            assert!(silent_ring.upgrade().is_some(), "freed while another thread may read it");
            replaced.wait();
        });
        assert!(silent_ring.upgrade().is_none(), "kept after every thread let go");
        assert_eq!(set.rung_link(), Some(Some(LinkId(0))));
        let (rung, rung_ring) = ring_doorbell(true);
        set.replace(vec![rung]);
        assert_eq!(set.rung_link(), Some(Some(LinkId(0))));
        drop(set);
        assert!(rung_ring.upgrade().is_none(), "a dropped set is let go by the dropping thread");
    }

    /// The look starts at the doorbell that rang last and goes round: each ringing one is found
    /// in turn, none hidden by one before it.
    #[test]
    fn the_look_starts_where_the_last_doorbell_rang() {
        let mut start = 0;
        let mut rings = [false, true, false, true, false];
        assert_eq!(first_from(&rings, &mut start, |&r| r), Some(1));
        assert_eq!(start, 1);
        assert_eq!(first_from(&rings, &mut start, |&r| r), Some(1), "still ringing: found again");
        rings[1] = false;
        assert_eq!(first_from(&rings, &mut start, |&r| r), Some(3));
        rings[3] = false;
        rings[0] = true;
        assert_eq!(first_from(&rings, &mut start, |&r| r), Some(0), "round to the beginning");
        rings[0] = false;
        assert_eq!(first_from(&rings, &mut start, |&r| r), None);
        assert_eq!(start, 0);
        start = 10;
        assert_eq!(first_from(&rings[..2], &mut start, |&r| r), None, "a start past a shrunk set");
        assert_eq!(first_from::<bool>(&[], &mut start, |&r| r), None);
    }

    /// One thread polling more workers than its cache holds still reads each one's own set.
    #[test]
    fn more_sets_than_the_cache_holds_each_read_right() {
        let sets: Vec<(BellSet, bool)> = (0..2 * CACHED_SETS)
            .map(|i| {
                let set = BellSet::new();
                set.replace(vec![ring_doorbell(i % 3 == 0).0]);
                (set, i % 3 == 0)
            })
            .collect();
        for _ in 0..3 {
            for (set, rung) in &sets {
                assert_eq!(set.rung_link(), Some(rung.then_some(LinkId(0))));
            }
        }
    }

    /// A rung doorbell names its link, so the rung poll goes to that link alone: the first rung
    /// one in the set's order, past silent ones.
    #[test]
    fn the_rung_doorbell_names_its_link() {
        use super::test_bells::ring_doorbell_of;
        let set = BellSet::new();
        let bells = vec![
            ring_doorbell_of(LinkId(7), false).0,
            ring_doorbell_of(LinkId(8), true).0,
            ring_doorbell_of(LinkId(9), true).0,
        ];
        set.replace(bells);
        assert_eq!(set.rung_link(), Some(Some(LinkId(8))));
        set.replace(vec![ring_doorbell_of(LinkId(7), false).0, ring_doorbell_of(LinkId(9), true).0]);
        assert_eq!(set.rung_link(), Some(Some(LinkId(9))));
        set.replace(vec![ring_doorbell_of(LinkId(7), false).0]);
        assert_eq!(set.rung_link(), Some(None));
    }
}
