//! Tag matching: pairs posted receives with arriving messages by `(tag, mask)`, as UCP's tag API does.
//!
//! One [`TagMatcher`] per worker holds two queues. The *expected* queue keeps receives that were
//! posted before any matching message arrived (`ucp_tag_recv_nbx`), in posting order; the
//! *unexpected* queue keeps messages that arrived before any matching receive, in arrival order,
//! for later receives and for `ucp_tag_probe_nb`. A receive posted with `(tag, mask)` matches a
//! message tag `t` iff `t & mask == tag & mask`; among several candidates the oldest wins, which
//! is what gives UCP its ordering guarantee for messages from one sender with matching tags.
//!
//! The engine is sans-IO and generic: `R` is whatever the caller needs to complete a receive (a
//! request handle), `M` whatever describes an unexpected payload (a descriptor of bytes left in a
//! transport buffer). Payloads are moved, never copied, and truncation is left to the caller, which
//! sees the message length next to its own buffer length.
//!
//! Both queues live in a slab of nodes threaded on intrusive lists, the shape of UCX's own tag
//! matcher: a match, a cancel or a probe-remove unlinks a node in O(1) and frees its slot for reuse,
//! so after warm-up nothing is allocated per message. Besides the posting/arrival order list, every
//! node sits on a second list: its tag's bucket in a hash index when its tag is exact, or the
//! wildcard list otherwise. Receives posted with [`FULL_MASK`] (by far the common case) and all
//! messages are exact, so those lookups are one hash probe; only wildcard receives are scanned
//! linearly, as in UCX. Every node carries a sequence number from a per-queue counter, so picking
//! the oldest of "front of the tag's bucket" and "first matching wildcard" keeps posting order
//! exactly as if there were one list.
//!
//! The common small cases skip the hash altogether: a node remembers its bucket, so unlinking it
//! needs no lookup; each queue remembers the last tag it looked up, so one tag used over and over
//! is hashed once; an empty queue answers at once; and a message arriving while at most one
//! receive waits is checked against that receive alone.

/// Mask that matches one tag exactly; receives posted with it are found by hash instead of by scan.
pub const FULL_MASK: u64 = u64::MAX;

/// Whether a message tagged `message_tag` satisfies a receive posted with `(recv_tag, recv_mask)`.
#[inline]
pub fn tag_matches(message_tag: u64, recv_tag: u64, recv_mask: u64) -> bool {
    (message_tag ^ recv_tag) & recv_mask == 0
}

/// Handle of a receive waiting in the expected queue, for `ucp_request_cancel`.
///
/// Besides the slab slot it carries the receive's sequence number, so a stale handle (its receive
/// already matched or cancelled, the slot since reused) is recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvId {
    slot: usize,
    seq: u64,
}

/// A message as the matcher sees it: who sent it, its tag, its length and a descriptor of its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message<M> {
    /// The sending endpoint as the caller identifies it; matching ignores it.
    pub sender: u64,
    /// The tag the sender gave the message (`ucp_tag_send_nbx`).
    pub tag: u64,
    /// Payload length in bytes, so the receiver can detect truncation against its buffer.
    pub length: usize,
    /// The caller's payload descriptor; moved through the matcher untouched.
    pub data: M,
}

impl<M> Message<M> {
    /// The message's sender, tag and length without its payload, as `ucp_tag_recv_info_t` reports them.
    pub fn info(&self) -> MessageInfo {
        MessageInfo { sender: self.sender, tag: self.tag, length: self.length }
    }
}

/// What `ucp_tag_probe_nb` without remove reports about an unexpected message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageInfo {
    /// The sending endpoint as the caller identifies it.
    pub sender: u64,
    /// The message's tag.
    pub tag: u64,
    /// Payload length in bytes.
    pub length: usize,
}

/// Outcome of [`TagMatcher::arrive`]: a message either completes a posted receive or is kept.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Arrival<R, M> {
    /// The oldest matching posted receive takes the message; the caller delivers it there.
    Matched {
        /// The handle the receive was queued under, now spent.
        recv_id: RecvId,
        /// The receive's user data, handed back for completion.
        recv: R,
        /// The message, for the caller to deliver into the receive's buffer.
        message: Message<M>,
    },
    /// No posted receive matches; the message joined the unexpected queue.
    Queued,
}

/// Outcome of [`TagMatcher::post_recv`]: a receive either takes a waiting message or is queued.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Posted<R, M> {
    /// The oldest matching unexpected message was waiting; the receive completes with it at once.
    Matched {
        /// The receive's user data, handed back for completion.
        recv: R,
        /// The message, for the caller to deliver into the receive's buffer.
        message: Message<M>,
    },
    /// No unexpected message matches; the receive waits in the expected queue under this handle.
    Queued(RecvId),
}

/// A posted receive waiting in the expected queue.
struct PostedRecv<R> {
    mask: u64,
    recv: R,
}

/// The tag-matching engine of one worker: the expected and unexpected queues and the rules
/// between them (`ucp_tag_recv_nbx`, `ucp_tag_probe_nb`, `ucp_tag_msg_recv_nbx`, `ucp_request_cancel`).
pub struct TagMatcher<R, M> {
    expected: TagQueue<PostedRecv<R>>,
    unexpected: TagQueue<Message<M>>,
}

impl<R, M> Default for TagMatcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> TagMatcher<R, M> {
    /// An engine with both queues empty.
    pub fn new() -> Self {
        TagMatcher { expected: TagQueue::new(), unexpected: TagQueue::new() }
    }

    /// Posts a receive for `(tag, tag_mask)` (`ucp_tag_recv_nbx`): it takes the oldest matching
    /// unexpected message if there is one, and otherwise joins the expected queue.
    pub fn post_recv(&mut self, tag: u64, tag_mask: u64, recv: R) -> Posted<R, M> {
        match self.find_unexpected(tag, tag_mask) {
            Some(slot) => Posted::Matched { recv, message: self.unexpected.remove(slot).1 },
            None => {
                let indexed = tag_mask == FULL_MASK;
                let (slot, seq) = self.expected.push(tag, indexed, PostedRecv { mask: tag_mask, recv });
                Posted::Queued(RecvId { slot, seq })
            }
        }
    }

    /// Matches an arriving message against the posted receives: the oldest matching receive takes
    /// it, and otherwise it joins the unexpected queue for a later `ucp_tag_recv_nbx` or probe.
    pub fn arrive(&mut self, message: Message<M>) -> Arrival<R, M> {
        match self.take_expected(message.tag) {
            Some((recv_id, recv)) => Arrival::Matched { recv_id, recv, message },
            None => {
                self.queue_unexpected(message);
                Arrival::Queued
            }
        }
    }

    /// Takes the oldest posted receive that a message with `tag` matches, without queueing
    /// anything: the first half of [`TagMatcher::arrive`], for a caller that wants to build the
    /// message's payload descriptor (a copy of its bytes) only when no receive takes it.
    pub fn take_expected(&mut self, tag: u64) -> Option<(RecvId, R)> {
        if self.expected.len <= 1 {
            // Nothing or one receive waiting (a ping-pong, a receive posted per message): the
            // only candidate is the head of the queue, checked without a hash lookup.
            let slot = self.expected.order.head;
            if slot == NIL {
                return None;
            }
            let node = self.expected.node(slot);
            if !tag_matches(tag, node.tag, node.value.mask) {
                return None;
            }
            let (seq, posted) = self.expected.pop_sole();
            return Some((RecvId { slot, seq }, posted.recv));
        }
        if self.expected.wildcards.head == NIL {
            // No masked receive is waiting, so the oldest receive of the tag's bucket is the
            // answer: found and unlinked with one map lookup.
            let (slot, seq, posted) = self.expected.pop_indexed(tag)?;
            return Some((RecvId { slot, seq }, posted.recv));
        }
        let exact = self.expected.first_indexed(tag);
        let exact_seq = exact.map_or(u64::MAX, |slot| self.expected.node(slot).seq);
        let wildcard = self
            .expected
            .unindexed_before(exact_seq)
            .find(|node| tag_matches(tag, node.tag, node.value.mask));
        let slot = wildcard.map(|node| node.slot()).or(exact)?;
        let (seq, posted) = self.expected.remove(slot);
        Some((RecvId { slot, seq }, posted.recv))
    }

    /// Posts a receive straight to the expected queue: for a caller that just found no matching
    /// unexpected message ([`TagMatcher::probe_remove`] returned `None`), so the queue is not
    /// searched twice.
    pub fn post_expected(&mut self, tag: u64, tag_mask: u64, recv: R) -> RecvId {
        debug_assert!(self.find_unexpected(tag, tag_mask).is_none());
        let indexed = tag_mask == FULL_MASK;
        let (slot, seq) = self.expected.push(tag, indexed, PostedRecv { mask: tag_mask, recv });
        RecvId { slot, seq }
    }

    /// Queues a message no posted receive took (the second half of [`TagMatcher::arrive`]; call it
    /// only after [`TagMatcher::take_expected`] returned `None` for the message's tag).
    pub fn queue_unexpected(&mut self, message: Message<M>) {
        let tag = message.tag;
        self.unexpected.push(tag, true, message);
    }

    /// The oldest unexpected message matching `(tag, tag_mask)`, left in the queue
    /// (`ucp_tag_probe_nb` with remove = 0).
    pub fn probe(&self, tag: u64, tag_mask: u64) -> Option<MessageInfo> {
        self.find_unexpected(tag, tag_mask).map(|slot| self.unexpected.node(slot).value.info())
    }

    /// Takes the oldest unexpected message matching `(tag, tag_mask)` out of the queue
    /// (`ucp_tag_probe_nb` with remove = 1); the caller owns it and later receives it into a
    /// buffer with `ucp_tag_msg_recv_nbx`, which no other receive can then take.
    pub fn probe_remove(&mut self, tag: u64, tag_mask: u64) -> Option<Message<M>> {
        if self.unexpected.len == 0 {
            // Every receive posted while nothing waits asks this first: no hash lookup then.
            return None;
        }
        if tag_mask == FULL_MASK {
            // Every message is indexed by its tag, and a bucket is in arrival order.
            return self.unexpected.pop_indexed(tag).map(|(_, _, message)| message);
        }
        self.find_unexpected(tag, tag_mask).map(|slot| self.unexpected.remove(slot).1)
    }

    /// Withdraws a receive still waiting in the expected queue (`ucp_request_cancel`) and returns
    /// its user data, for the caller to complete with `UCS_ERR_CANCELED` and its buffer untouched.
    /// `None` if the receive already matched, was already cancelled or drained.
    pub fn cancel(&mut self, id: RecvId) -> Option<R> {
        if self.expected.holds(id.slot, id.seq) {
            Some(self.expected.remove(id.slot).1.recv)
        } else {
            None
        }
    }

    /// The handle of the oldest waiting receive whose user data `pick` accepts: for a caller that
    /// knows a receive only by its own data, on a cold path (cancelling it). A walk over the
    /// expected queue, so the hot path keeps no index from user data to handles.
    pub fn find_expected(&self, pick: impl Fn(&R) -> bool) -> Option<RecvId> {
        self.expected
            .in_order()
            .find(|node| pick(&node.value.recv))
            .map(|node| RecvId { slot: node.slot(), seq: node.seq })
    }

    /// Number of posted receives waiting for a message.
    pub fn expected_len(&self) -> usize {
        self.expected.len
    }

    /// Number of arrived messages waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len
    }

    /// Removes every waiting receive in posting order, for `ucp_worker_destroy` or a forced close,
    /// which complete them as cancelled. Receives the iterator did not reach stay queued.
    pub fn drain_expected(&mut self) -> impl Iterator<Item = (RecvId, R)> + '_ {
        std::iter::from_fn(move || {
            let slot = self.expected.order.head;
            if slot == NIL {
                return None;
            }
            let (seq, posted) = self.expected.remove(slot);
            Some((RecvId { slot, seq }, posted.recv))
        })
    }

    /// Removes every unexpected message in arrival order, for `ucp_worker_destroy` to release
    /// their payloads. Messages the iterator did not reach stay queued.
    pub fn drain_unexpected(&mut self) -> impl Iterator<Item = Message<M>> + '_ {
        std::iter::from_fn(move || {
            let slot = self.unexpected.order.head;
            (slot != NIL).then(|| self.unexpected.remove(slot).1)
        })
    }

    /// Slot of the oldest unexpected message matching `(tag, tag_mask)`.
    fn find_unexpected(&self, tag: u64, tag_mask: u64) -> Option<usize> {
        if self.unexpected.len == 0 {
            return None;
        }
        if tag_mask == FULL_MASK {
            // Every message is indexed by its tag, and a bucket is in arrival order.
            self.unexpected.first_indexed(tag)
        } else {
            self.unexpected.in_order().find(|node| tag_matches(node.tag, tag, tag_mask)).map(Node::slot)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The queue: a slab of nodes on intrusive doubly linked lists.

/// End-of-list marker for slab links.
const NIL: usize = usize::MAX;

/// Neighbours of a node on one list.
#[derive(Clone, Copy)]
struct Links {
    prev: usize,
    next: usize,
}

/// First and last node of one list.
#[derive(Clone, Copy)]
struct Ends {
    head: usize,
    tail: usize,
}

impl Ends {
    const EMPTY: Ends = Ends { head: NIL, tail: NIL };
}

/// Which of a node's two lists an operation follows.
#[derive(Clone, Copy)]
enum Chain {
    /// Every node of the queue, oldest first.
    Order,
    /// The node's tag bucket when indexed, the wildcard list otherwise; oldest first too.
    Class,
}

struct Node<T> {
    /// Position in the queue's history; older nodes have smaller numbers.
    seq: u64,
    /// Own slot index, so iterators can hand out nodes and callers still find where they live.
    slot: usize,
    tag: u64,
    /// The bucket of `tag` the node sits in (an index into [`TagQueue::buckets`]), or [`NIL`]
    /// when it sits on the wildcard list; kept so unlinking the node needs no hash lookup.
    bucket: usize,
    order: Links,
    class: Links,
    value: T,
}

impl<T> Node<T> {
    fn slot(&self) -> usize {
        self.slot
    }

    fn links(&self, chain: Chain) -> Links {
        match chain {
            Chain::Order => self.order,
            Chain::Class => self.class,
        }
    }

    fn links_mut(&mut self, chain: Chain) -> &mut Links {
        match chain {
            Chain::Order => &mut self.order,
            Chain::Class => &mut self.class,
        }
    }
}

enum Slot<T> {
    Occupied(Node<T>),
    Vacant { next_free: usize },
}

/// One of the matcher's queues: nodes in insertion order, indexed nodes also bucketed by tag,
/// the rest also on one wildcard list.
struct TagQueue<T> {
    slots: Vec<Slot<T>>,
    /// Head of the chain of vacant slots, reused before the slab grows.
    free_head: usize,
    len: usize,
    next_seq: u64,
    order: Ends,
    /// Buckets of indexed nodes by exact tag. An emptied bucket stays, so a tag used again and
    /// again (one receive at a time, as in a ping-pong) costs no map insertion and removal per
    /// message; once at least half the buckets (and more than [`EMPTY_BUCKETS_KEPT`]) are empty
    /// they are all swept out, so ever-changing tags (sequence numbers in tags are common) do not
    /// grow the map forever.
    /// Tags are chosen by remote peers, so the map's hasher is seeded per process (foldhash, see
    /// `fast_map`): a peer cannot compute tags that all land in one hash chain offline.
    /// The map holds an index into `buckets`, which every node of the bucket keeps too.
    by_tag: crate::FastMap<u64, usize>,
    /// The lists of the buckets `by_tag` names; a slot no tag names is on `free_buckets`.
    buckets: Vec<Ends>,
    free_buckets: Vec<usize>,
    /// The tag last looked up and its bucket (`NIL` when none): a worker that uses one tag
    /// again and again (a ping-pong, a stream of messages to one receiver) hashes it once.
    /// Valid while the tag is in `by_tag`, i.e. until the next sweep, which clears it.
    last_bucket: (u64, usize),
    /// Buckets of `by_tag` that hold no node.
    empty_buckets: usize,
    wildcards: Ends,
}

/// Empty tag buckets kept before a sweep is considered.
const EMPTY_BUCKETS_KEPT: usize = 64;

impl<T> TagQueue<T> {
    fn new() -> Self {
        TagQueue {
            slots: Vec::new(),
            free_head: NIL,
            len: 0,
            next_seq: 0,
            order: Ends::EMPTY,
            by_tag: crate::FastMap::default(),
            buckets: Vec::new(),
            free_buckets: Vec::new(),
            last_bucket: (0, NIL),
            empty_buckets: 0,
            wildcards: Ends::EMPTY,
        }
    }

    fn node(&self, slot: usize) -> &Node<T> {
        match &self.slots[slot] {
            Slot::Occupied(node) => node,
            Slot::Vacant { .. } => unreachable!("a linked slot is vacant"),
        }
    }

    /// Whether `slot` holds the node numbered `seq`, i.e. that node is still queued.
    fn holds(&self, slot: usize, seq: u64) -> bool {
        matches!(self.slots.get(slot), Some(Slot::Occupied(node)) if node.seq == seq)
    }

    /// Appends a node as the newest; returns its slot and sequence number.
    fn push(&mut self, tag: u64, indexed: bool, value: T) -> (usize, u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = if self.free_head == NIL { self.slots.len() } else { self.free_head };
        let unlinked = Links { prev: NIL, next: NIL };
        let bucket = if indexed { self.bucket_for_push(tag) } else { NIL };
        let node = Node { seq, slot, tag, bucket, order: unlinked, class: unlinked, value };
        if slot == self.slots.len() {
            self.slots.push(Slot::Occupied(node));
        } else {
            match std::mem::replace(&mut self.slots[slot], Slot::Occupied(node)) {
                Slot::Vacant { next_free } => self.free_head = next_free,
                Slot::Occupied(_) => unreachable!("the free chain holds an occupied slot"),
            }
        }
        append(&mut self.slots, &mut self.order, Chain::Order, slot);
        let class = if bucket == NIL { &mut self.wildcards } else { &mut self.buckets[bucket] };
        append(&mut self.slots, class, Chain::Class, slot);
        self.len += 1;
        (slot, seq)
    }

    /// Unlinks the node in `slot` and frees the slot; returns the node's sequence number and value.
    fn remove(&mut self, slot: usize) -> (u64, T) {
        let bucket = self.node(slot).bucket;
        detach(&mut self.slots, &mut self.order, Chain::Order, slot);
        if bucket != NIL {
            let ends = &mut self.buckets[bucket];
            detach(&mut self.slots, ends, Chain::Class, slot);
            if ends.head == NIL {
                self.bucket_emptied();
            }
        } else {
            detach(&mut self.slots, &mut self.wildcards, Chain::Class, slot);
        }
        self.free(slot)
    }

    /// Takes the queue's only node (`len == 1`) and frees its slot: it is alone on each of its
    /// lists, so they are just emptied. Returns its sequence number and value.
    #[inline]
    fn pop_sole(&mut self) -> (u64, T) {
        debug_assert_eq!(self.len, 1);
        let slot = self.order.head;
        let bucket = self.node(slot).bucket;
        self.order = Ends::EMPTY;
        if bucket == NIL {
            self.wildcards = Ends::EMPTY;
        } else {
            self.buckets[bucket] = Ends::EMPTY;
            self.bucket_emptied();
        }
        self.free(slot)
    }

    /// Unlinks the oldest indexed node tagged `tag` and frees its slot, with one map lookup:
    /// returns its slot, sequence number and value.
    fn pop_indexed(&mut self, tag: u64) -> Option<(usize, u64, T)> {
        let index = self.bucket_of(tag)?;
        let bucket = &mut self.buckets[index];
        let slot = bucket.head;
        if slot == NIL {
            return None;
        }
        detach(&mut self.slots, bucket, Chain::Class, slot);
        let emptied = bucket.head == NIL;
        detach(&mut self.slots, &mut self.order, Chain::Order, slot);
        if emptied {
            self.bucket_emptied();
        }
        let (seq, value) = self.free(slot);
        Some((slot, seq, value))
    }

    /// Counts a bucket that just lost its last node, and sweeps empty buckets out when they
    /// are many and at least half of the map.
    #[inline]
    fn bucket_emptied(&mut self) {
        self.empty_buckets += 1;
        if self.empty_buckets > EMPTY_BUCKETS_KEPT && self.empty_buckets * 2 >= self.by_tag.len() {
            self.sweep_buckets();
        }
    }

    /// Drops every empty bucket from the map and frees its slot.
    #[cold]
    #[inline(never)]
    fn sweep_buckets(&mut self) {
        let (buckets, free) = (&self.buckets, &mut self.free_buckets);
        self.by_tag.retain(|_, &mut index| {
            let keep = buckets[index].head != NIL;
            if !keep {
                free.push(index);
            }
            keep
        });
        self.empty_buckets = 0;
        self.last_bucket = (0, NIL);
    }

    /// Frees an unlinked slot; returns its node's sequence number and value.
    fn free(&mut self, slot: usize) -> (u64, T) {
        self.len -= 1;
        let vacant = Slot::Vacant { next_free: self.free_head };
        self.free_head = slot;
        match std::mem::replace(&mut self.slots[slot], vacant) {
            Slot::Occupied(node) => (node.seq, node.value),
            Slot::Vacant { .. } => unreachable!("removing a vacant slot"),
        }
    }

    /// Slot of the oldest indexed node tagged `tag`.
    fn first_indexed(&self, tag: u64) -> Option<usize> {
        let index = match self.last_bucket {
            (last, index) if last == tag && index != NIL => index,
            _ => *self.by_tag.get(&tag)?,
        };
        Some(self.buckets[index].head).filter(|&head| head != NIL)
    }

    /// The bucket of `tag`, if it has one; remembered for the next lookup.
    fn bucket_of(&mut self, tag: u64) -> Option<usize> {
        match self.last_bucket {
            (last, index) if last == tag && index != NIL => Some(index),
            _ => {
                let index = *self.by_tag.get(&tag)?;
                self.last_bucket = (tag, index);
                Some(index)
            }
        }
    }

    /// The bucket a new node tagged `tag` joins, made if the tag has none; remembered for the
    /// next lookup.
    fn bucket_for_push(&mut self, tag: u64) -> usize {
        let index = match self.bucket_of(tag) {
            Some(index) => index,
            None => {
                let index = match self.free_buckets.pop() {
                    Some(index) => index,
                    None => {
                        self.buckets.push(Ends::EMPTY);
                        self.buckets.len() - 1
                    }
                };
                // A swept bucket was emptied before it was freed.
                debug_assert!(self.buckets[index].head == NIL);
                self.by_tag.insert(tag, index);
                self.last_bucket = (tag, index);
                // Counted as emptied here, so joining it below reads as for a kept empty bucket.
                self.empty_buckets += 1;
                index
            }
        };
        if self.buckets[index].head == NIL {
            self.empty_buckets -= 1;
        }
        index
    }

    /// Every node, oldest first.
    fn in_order(&self) -> Walk<'_, T> {
        Walk { slots: &self.slots, chain: Chain::Order, next: self.order.head, seq_limit: u64::MAX }
    }

    /// The wildcard nodes older than `seq_limit`, oldest first.
    fn unindexed_before(&self, seq_limit: u64) -> Walk<'_, T> {
        Walk { slots: &self.slots, chain: Chain::Class, next: self.wildcards.head, seq_limit }
    }
}

/// Links `slot` as the newest node of the list `ends`.
fn append<T>(slots: &mut [Slot<T>], ends: &mut Ends, chain: Chain, slot: usize) {
    let old_tail = ends.tail;
    *occupied_mut(slots, slot).links_mut(chain) = Links { prev: old_tail, next: NIL };
    if old_tail == NIL {
        ends.head = slot;
    } else {
        occupied_mut(slots, old_tail).links_mut(chain).next = slot;
    }
    ends.tail = slot;
}

/// Unlinks `slot` from the list `ends`, joining its neighbours.
fn detach<T>(slots: &mut [Slot<T>], ends: &mut Ends, chain: Chain, slot: usize) {
    let Links { prev, next } = occupied_mut(slots, slot).links(chain);
    if prev == NIL {
        ends.head = next;
    } else {
        occupied_mut(slots, prev).links_mut(chain).next = next;
    }
    if next == NIL {
        ends.tail = prev;
    } else {
        occupied_mut(slots, next).links_mut(chain).prev = prev;
    }
}

fn occupied_mut<T>(slots: &mut [Slot<T>], slot: usize) -> &mut Node<T> {
    match &mut slots[slot] {
        Slot::Occupied(node) => node,
        Slot::Vacant { .. } => unreachable!("a linked slot is vacant"),
    }
}

/// Iterator along one list of a queue, stopping at the first node numbered `seq_limit` or later.
struct Walk<'a, T> {
    slots: &'a [Slot<T>],
    chain: Chain,
    next: usize,
    seq_limit: u64,
}

impl<'a, T> Iterator for Walk<'a, T> {
    type Item = &'a Node<T>;

    fn next(&mut self) -> Option<&'a Node<T>> {
        if self.next == NIL {
            return None;
        }
        let node = match &self.slots[self.next] {
            Slot::Occupied(node) => node,
            Slot::Vacant { .. } => unreachable!("a linked slot is vacant"),
        };
        if node.seq >= self.seq_limit {
            self.next = NIL;
            return None;
        }
        self.next = node.links(self.chain).next;
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Matcher = TagMatcher<&'static str, u32>;

    fn msg(sender: u64, tag: u64, data: u32) -> Message<u32> {
        Message { sender, tag, length: 8 * data as usize, data }
    }

    fn queued(posted: Posted<&'static str, u32>) -> RecvId {
        match posted {
            Posted::Queued(id) => id,
            Posted::Matched { .. } => panic!("expected the receive to be queued"),
        }
    }

    fn matched_recv(arrival: Arrival<&'static str, u32>) -> (&'static str, u32) {
        match arrival {
            Arrival::Matched { recv, message, .. } => (recv, message.data),
            Arrival::Queued => panic!("expected the message to match"),
        }
    }

    fn matched_message(posted: Posted<&'static str, u32>) -> u32 {
        match posted {
            Posted::Matched { message, .. } => message.data,
            Posted::Queued(_) => panic!("expected the receive to match"),
        }
    }

    #[test]
    fn mask_semantics() {
        assert!(tag_matches(0x1234, 0xffff_ffff, 0));
        assert!(tag_matches(0x12ab, 0x1200, 0xff00));
        assert!(!tag_matches(0x13ab, 0x1200, 0xff00));
        assert!(tag_matches(0x1234, 0x1234, FULL_MASK));
        assert!(!tag_matches(0x1234, 0x1235, FULL_MASK));
    }

    #[test]
    fn oldest_posted_receive_wins() {
        let mut m = Matcher::new();
        queued(m.post_recv(7, FULL_MASK, "first"));
        queued(m.post_recv(7, FULL_MASK, "second"));
        assert_eq!(matched_recv(m.arrive(msg(1, 7, 1))), ("first", 1));
        assert_eq!(matched_recv(m.arrive(msg(1, 7, 2))), ("second", 2));
        assert_eq!(m.expected_len(), 0);
    }

    #[test]
    fn older_wildcard_beats_newer_exact_and_vice_versa() {
        let mut m = Matcher::new();
        queued(m.post_recv(0, 0, "any"));
        queued(m.post_recv(7, FULL_MASK, "exact"));
        queued(m.post_recv(0x700, 0xff00, "high byte"));
        assert_eq!(matched_recv(m.arrive(msg(1, 7, 1))), ("any", 1));
        assert_eq!(matched_recv(m.arrive(msg(1, 7, 2))), ("exact", 2));
        queued(m.post_recv(0, 0, "any again"));
        // "high byte" is older than "any again" and matches 0x7ff; it must win.
        assert_eq!(matched_recv(m.arrive(msg(1, 0x7ff, 3))), ("high byte", 3));
        assert_eq!(matched_recv(m.arrive(msg(1, 0x7ff, 4))), ("any again", 4));
    }

    #[test]
    fn non_matching_message_is_queued_unexpected() {
        let mut m = Matcher::new();
        queued(m.post_recv(0x100, 0xff00, "high"));
        assert_eq!(m.arrive(msg(1, 0x200, 1)), Arrival::Queued);
        assert_eq!((m.expected_len(), m.unexpected_len()), (1, 1));
    }

    #[test]
    fn oldest_unexpected_message_wins() {
        let mut m = Matcher::new();
        assert_eq!(m.arrive(msg(1, 0x105, 1)), Arrival::Queued);
        assert_eq!(m.arrive(msg(2, 0x205, 2)), Arrival::Queued);
        assert_eq!(m.arrive(msg(1, 0x105, 3)), Arrival::Queued);
        assert_eq!(matched_message(m.post_recv(0x05, 0xff, "low")), 1);
        assert_eq!(matched_message(m.post_recv(0x105, FULL_MASK, "exact")), 3);
        assert_eq!(matched_message(m.post_recv(0, 0, "any")), 2);
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn zero_mask_matches_everything() {
        let mut m = Matcher::new();
        queued(m.post_recv(0xdead, 0, "any"));
        assert_eq!(matched_recv(m.arrive(msg(9, u64::MAX, 1))), ("any", 1));
    }

    #[test]
    fn probe_keeps_and_probe_remove_takes() {
        let mut m = Matcher::new();
        assert_eq!(m.probe(5, FULL_MASK), None);
        assert_eq!(m.arrive(msg(3, 5, 2)), Arrival::Queued);
        let info = MessageInfo { sender: 3, tag: 5, length: 16 };
        assert_eq!(m.probe(5, FULL_MASK), Some(info));
        assert_eq!(m.probe(0, 0), Some(info));
        assert_eq!(m.unexpected_len(), 1);
        assert_eq!(m.probe_remove(4, FULL_MASK), None);
        assert_eq!(m.probe_remove(1, 1), Some(msg(3, 5, 2)));
        assert_eq!(m.unexpected_len(), 0);
        // The removed message belongs to the caller now; a new receive cannot take it.
        queued(m.post_recv(5, FULL_MASK, "late"));
    }

    #[test]
    fn cancel_before_and_after_match() {
        let mut m = Matcher::new();
        let waiting = queued(m.post_recv(1, FULL_MASK, "waiting"));
        let served = queued(m.post_recv(2, FULL_MASK, "served"));
        assert_eq!(matched_recv(m.arrive(msg(1, 2, 1))), ("served", 1));
        assert_eq!(m.cancel(served), None);
        assert_eq!(m.cancel(waiting), Some("waiting"));
        assert_eq!(m.cancel(waiting), None);
        // A cancelled receive no longer matches.
        assert_eq!(m.arrive(msg(1, 1, 2)), Arrival::Queued);
    }

    #[test]
    fn find_expected_gives_the_oldest_picked_receive() {
        let mut m = Matcher::new();
        let first = queued(m.post_recv(1, FULL_MASK, "a"));
        let wildcard = queued(m.post_recv(0, 0, "b"));
        let second = queued(m.post_recv(2, FULL_MASK, "a"));
        assert_eq!(m.find_expected(|recv| *recv == "a"), Some(first));
        assert_eq!(m.find_expected(|recv| *recv == "b"), Some(wildcard));
        assert_eq!(m.find_expected(|recv| *recv == "c"), None);
        assert_eq!(m.cancel(first), Some("a"));
        assert_eq!(m.find_expected(|recv| *recv == "a"), Some(second));
        // A matched receive is no longer found.
        assert_eq!(matched_recv(m.arrive(msg(1, 0, 1))), ("b", 1));
        assert_eq!(m.find_expected(|recv| *recv == "b"), None);
    }

    #[test]
    fn stale_id_does_not_cancel_the_slot_reuser() {
        let mut m = Matcher::new();
        let old = queued(m.post_recv(1, FULL_MASK, "old"));
        assert_eq!(m.cancel(old), Some("old"));
        let new = queued(m.post_recv(1, FULL_MASK, "new"));
        assert_ne!(old, new);
        assert_eq!(m.cancel(old), None);
        assert_eq!(m.cancel(new), Some("new"));
    }

    #[test]
    fn matched_id_is_the_posted_id() {
        let mut m = Matcher::new();
        let id = queued(m.post_recv(0, 0, "any"));
        match m.arrive(msg(1, 3, 1)) {
            Arrival::Matched { recv_id, .. } => assert_eq!(recv_id, id),
            Arrival::Queued => panic!("expected a match"),
        }
    }

    #[test]
    fn drains_in_posting_and_arrival_order() {
        let mut m = Matcher::new();
        let a = queued(m.post_recv(1, FULL_MASK, "a"));
        let b = queued(m.post_recv(0x10, 0xf0, "b"));
        let c = queued(m.post_recv(1, FULL_MASK, "c"));
        let d = queued(m.post_recv(2, FULL_MASK, "d"));
        assert_eq!(m.cancel(c), Some("c"));
        assert_eq!(m.arrive(msg(1, 7, 1)), Arrival::Queued);
        assert_eq!(m.arrive(msg(2, 3, 2)), Arrival::Queued);
        assert_eq!(m.arrive(msg(1, 7, 3)), Arrival::Queued);
        assert_eq!(m.drain_expected().collect::<Vec<_>>(), [(a, "a"), (b, "b"), (d, "d")]);
        let drained: Vec<u32> = m.drain_unexpected().map(|message| message.data).collect();
        assert_eq!(drained, [1, 2, 3]);
        assert_eq!((m.expected_len(), m.unexpected_len()), (0, 0));
    }

    #[test]
    fn partial_drain_leaves_the_rest_queued() {
        let mut m = Matcher::new();
        queued(m.post_recv(1, FULL_MASK, "a"));
        queued(m.post_recv(2, FULL_MASK, "b"));
        assert_eq!(m.drain_expected().next().map(|(_, recv)| recv), Some("a"));
        assert_eq!(m.expected_len(), 1);
        assert_eq!(matched_recv(m.arrive(msg(1, 2, 1))), ("b", 1));
    }

    #[test]
    fn buckets_survive_sweeps_and_come_back() {
        let mut m = Matcher::new();
        // A receive that waits across every sweep below, its tag remembered as the last looked up.
        let waiting = queued(m.post_recv(5_000, FULL_MASK, "waiting"));
        for round in 0..3u64 {
            for tag in 0..300u64 {
                queued(m.post_recv(tag, FULL_MASK, "r"));
                queued(m.post_recv(9_000, FULL_MASK, "other"));
                assert_eq!(matched_recv(m.arrive(msg(1, tag, 1))), ("r", 1));
                assert_eq!(matched_recv(m.arrive(msg(1, 9_000, 2))), ("other", 2));
            }
            assert!(m.expected.by_tag.len() <= 2 * EMPTY_BUCKETS_KEPT + 3, "round {round}");
            assert_eq!(m.expected_len(), 1);
        }
        assert_eq!(matched_recv(m.arrive(msg(1, 5_000, 3))), ("waiting", 3));
        assert_eq!(m.cancel(waiting), None);
        assert_eq!(m.arrive(msg(1, 5_000, 4)), Arrival::Queued);
        assert_eq!(matched_message(m.post_recv(5_000, FULL_MASK, "late")), 4);
    }

    #[test]
    fn slots_are_reused() {
        let mut m = Matcher::new();
        for round in 0..100u32 {
            queued(m.post_recv(u64::from(round), FULL_MASK, "r"));
            assert_eq!(matched_recv(m.arrive(msg(1, u64::from(round), round))), ("r", round));
            assert_eq!(m.arrive(msg(1, u64::from(round), round)), Arrival::Queued);
            assert!(m.probe_remove(u64::from(round), FULL_MASK).is_some());
        }
        assert_eq!(m.expected.slots.len(), 1);
        assert_eq!(m.unexpected.slots.len(), 1);
        // Emptied buckets are kept for reuse, but swept before they outnumber live ones.
        assert!(m.expected.by_tag.len() <= 2 * EMPTY_BUCKETS_KEPT, "{}", m.expected.by_tag.len());
        assert!(m.unexpected.by_tag.len() <= 2 * EMPTY_BUCKETS_KEPT, "{}", m.unexpected.by_tag.len());
        // Every kept bucket is accounted for as empty.
        assert_eq!(m.expected.empty_buckets, m.expected.by_tag.len());
        assert!(m.expected.by_tag.values().all(|&b| m.expected.buckets[b].head == NIL));
        assert!(m.expected.by_tag.values().all(|&b| m.expected.buckets[b].tail == NIL));
        // Bucket slots are reused, not grown per tag.
        assert!(m.expected.buckets.len() <= 2 * EMPTY_BUCKETS_KEPT + 2, "{}", m.expected.buckets.len());
    }
}
