//! The sender's preallocated ring of messages: every message queued and not yet acknowledged,
//! indexed by sequence number.
//!
//! A message stays in its slot from [`SendRing::push`] until the peer's cumulative ack passes
//! it, because go-back-N may have to send it again at any time until then. Slots are allocated
//! once, `capacity × max_payload` bytes, so queuing, (re)transmitting and acknowledging never
//! allocate.

/// The part of a message that stays in the caller's memory instead of being copied into the
/// ring: the session only carries this description and hands it back with every (re)transmission
/// of the message, for the caller to send the bytes from where they are (a DPDK external-buffer
/// mbuf). The session never reads or writes the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External {
    /// Where the bytes are, as an opaque number for the session (the caller's address).
    pub addr: usize,
    /// How many bytes.
    pub len: u32,
    /// CRC-32 (IEEE) of the whole message, the inline bytes followed by these, for the datagram
    /// checksum (computed once by the caller, so no (re)transmission reads the bytes again).
    pub crc: u32,
    /// The caller's cookie, returned with the message (which buffer record it belongs to).
    pub cookie: u32,
}

/// Fixed-size slots holding the messages with sequence numbers `head..tail`.
pub(crate) struct SendRing {
    bytes: Box<[u8]>,
    lens: Box<[usize]>,
    /// CRC-32 of each slot's whole message (inline then external bytes), computed once when it
    /// is pushed, so retransmissions do not hash the payload again.
    crcs: Box<[u32]>,
    /// The external tail of each slot's message, if it has one (see [`External`]).
    external: Box<[Option<External>]>,
    slot_size: usize,
    /// Oldest held message: the peer has acknowledged everything before it.
    head: u64,
    /// Sequence number the next pushed message gets.
    tail: u64,
}

impl std::fmt::Debug for SendRing {
    /// Positions only: the slots' bytes would bury everything else in a session's debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRing")
            .field("capacity", &self.capacity())
            .field("slot_size", &self.slot_size)
            .field("head", &self.head)
            .field("tail", &self.tail)
            .finish()
    }
}

impl SendRing {
    /// A ring of `capacity` (at least 1) slots of `slot_size` bytes each.
    pub(crate) fn new(capacity: usize, slot_size: usize) -> SendRing {
        SendRing {
            bytes: vec![0; capacity * slot_size].into_boxed_slice(),
            lens: vec![0; capacity].into_boxed_slice(),
            crcs: vec![0; capacity].into_boxed_slice(),
            external: vec![None; capacity].into_boxed_slice(),
            slot_size,
            head: 0,
            tail: 0,
        }
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Messages held (queued or in flight, not acknowledged).
    pub(crate) fn len(&self) -> usize {
        // At most `capacity`, which is a usize.
        (self.tail - self.head) as usize
    }

    /// Sequence number of the oldest held message (or of the next pushed, when empty).
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Sequence number the next pushed message gets.
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Copies `payload` into the next slot and returns its sequence number, or `None` when every
    /// slot is taken or the payload is longer than a slot.
    pub(crate) fn push(&mut self, payload: &[u8]) -> Option<u64> {
        self.push_split(payload, None)
    }

    /// Copies `inline` into the next slot and records `external` as the rest of the message (not
    /// copied: only its description is kept); `None` when every slot is taken or the whole
    /// message is longer than a slot.
    pub(crate) fn push_split(&mut self, inline: &[u8], external: Option<External>) -> Option<u64> {
        let total = inline.len().saturating_add(external.map_or(0, |e| e.len as usize));
        if self.len() == self.capacity() || total > self.slot_size {
            return None;
        }
        let seq = self.tail;
        let slot = self.slot(seq);
        let start = slot * self.slot_size;
        self.bytes[start..start + inline.len()].copy_from_slice(inline);
        self.lens[slot] = inline.len();
        self.crcs[slot] = external.map_or_else(|| crc32fast::hash(inline), |e| e.crc);
        self.external[slot] = external;
        self.tail += 1;
        Some(seq)
    }

    /// Lets `fill` write the next message straight into the next slot (`slot_size` bytes; it
    /// returns the message's length, clamped to the slot) and returns its sequence number, or
    /// `None`, without calling `fill`, when every slot is taken. Saves building the message
    /// elsewhere first and copying it in.
    pub(crate) fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Option<u64> {
        if self.len() == self.capacity() {
            return None;
        }
        let seq = self.tail;
        let slot = self.slot(seq);
        let start = slot * self.slot_size;
        let bytes = &mut self.bytes[start..start + self.slot_size];
        let len = fill(bytes).min(self.slot_size);
        self.lens[slot] = len;
        self.crcs[slot] = crc32fast::hash(&bytes[..len]);
        self.external[slot] = None;
        self.tail += 1;
        Some(seq)
    }

    /// Whether every slot is taken (a push would fail).
    pub(crate) fn is_full(&self) -> bool {
        self.len() == self.capacity()
    }

    /// The CRC-32 of message `seq`'s whole payload (see [`External::crc`]), if the ring holds it.
    pub(crate) fn payload_crc(&self, seq: u64) -> Option<u32> {
        if seq < self.head || seq >= self.tail {
            return None;
        }
        Some(self.crcs[self.slot(seq)])
    }

    /// The message with sequence number `seq`, if the ring holds it: its inline bytes and its
    /// external tail.
    pub(crate) fn get(&self, seq: u64) -> Option<(&[u8], Option<External>)> {
        if seq < self.head || seq >= self.tail {
            return None;
        }
        let slot = self.slot(seq);
        let start = slot * self.slot_size;
        Some((&self.bytes[start..start + self.lens[slot]], self.external[slot]))
    }

    /// Frees every message with a sequence number below `seq` (clamped to what is held).
    pub(crate) fn release_before(&mut self, seq: u64) {
        self.head = seq.clamp(self.head, self.tail);
    }

    fn slot(&self, seq: u64) -> usize {
        // The remainder is below `capacity`, a usize.
        (seq % self.capacity() as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_messages_until_released_and_reuses_slots() {
        let mut ring = SendRing::new(3, 4);
        assert_eq!(ring.push(b"a"), Some(0));
        assert_eq!(ring.push(b"bb"), Some(1));
        assert_eq!(ring.push(b"cccc"), Some(2));
        assert_eq!(ring.push(b"d"), None, "full");
        assert_eq!(ring.get(1), Some((&b"bb"[..], None)));
        assert_eq!(ring.get(3), None);

        ring.release_before(2);
        assert_eq!((ring.head(), ring.len()), (2, 1));
        assert_eq!(ring.get(1), None);
        assert_eq!(ring.push(b"ee"), Some(3));
        assert_eq!(ring.push(b""), Some(4));
        assert_eq!(ring.get(2), Some((&b"cccc"[..], None)));
        assert_eq!(ring.get(3), Some((&b"ee"[..], None)));
        assert_eq!(ring.get(4), Some((&b""[..], None)));
    }

    #[test]
    fn refuses_oversized_messages_and_clamps_releases() {
        let mut ring = SendRing::new(2, 4);
        assert_eq!(ring.push(b"12345"), None);
        assert_eq!(ring.push(b"1234"), Some(0));
        ring.release_before(10);
        assert_eq!((ring.head(), ring.tail(), ring.len()), (1, 1, 0));
        ring.release_before(0);
        assert_eq!(ring.head(), 1, "never moves back");
        let ext = External { addr: 0x1000, len: 3, crc: 1, cookie: 2 };
        assert_eq!(ring.push_split(b"12", Some(ext)), None, "2 + 3 bytes exceed a slot");
        assert_eq!(ring.push_split(b"1", Some(ext)), Some(1));
        assert_eq!(ring.get(1), Some((&b"1"[..], Some(ext))));
        ring.release_before(2);
        assert_eq!(format!("{ring:?}"), "SendRing { capacity: 2, slot_size: 4, head: 2, tail: 2 }");
    }

    #[test]
    fn push_with_fills_the_slot_in_place_and_records_the_crc() {
        let mut ring = SendRing::new(2, 4);
        assert_eq!(
            ring.push_with(|buf| {
                buf[..3].copy_from_slice(b"abc");
                3
            }),
            Some(0)
        );
        assert_eq!(ring.get(0), Some((&b"abc"[..], None)));
        assert_eq!(ring.payload_crc(0), Some(crc32fast::hash(b"abc")));
        assert_eq!(ring.push_with(|buf| buf.len() + 10), Some(1), "clamped to the slot");
        assert_eq!(ring.get(1).map(|(b, _)| b.len()), Some(4));
        assert!(ring.is_full());
        assert_eq!(ring.push_with(|_| unreachable!("full: not called")), None);
        let ext = External { addr: 0, len: 1, crc: 0xdead, cookie: 0 };
        ring.release_before(2);
        assert_eq!(ring.push_split(b"x", Some(ext)), Some(2));
        assert_eq!(ring.payload_crc(2), Some(0xdead));
        assert_eq!(ring.payload_crc(1), None);
    }
}
