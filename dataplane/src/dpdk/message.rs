//! The transport's own one-byte header in front of every reliable message, and the
//! fragmentation of frames into messages.
//!
//! A reliable message is at most [`Config::max_payload`](crate::proto::reliable::Config) bytes
//! (the MTU less the headers), while a frame of the [`Transport`](crate::Transport) may be up to
//! [`DpdkConfig::max_frame`](super::DpdkConfig). A frame is cut into fragments of up to
//! `max_payload - 1` bytes; each is one message whose first byte says whether more of the frame
//! follows. The session delivers messages exactly once and in order, so the receiver only appends
//! fragments until the last one; an empty frame is one empty last fragment.
//!
//! ```text
//! 0  kind  u8  1 = HELLO (then: version u8 = 1), 2 = MORE (fragment, more follow),
//!              3 = END (last or only fragment of a frame), 4 = BYE (the peer closed the link),
//!              5 = PLACED (first fragment of a placed frame, below)
//! 1  body
//! ```
//!
//! HELLO is the first message of every session: the acceptor creates its session when it sees
//! it (see the transport). BYE is the last message of a link closed gracefully.
//!
//! A *placed* frame ([`Transport::send_placed`](crate::Transport::send_placed)) is fragmented
//! like any other, but its first message is PLACED and says how long its protocol header and its
//! payload are; the whole header is in that message, followed by the payload's first bytes:
//!
//! ```text
//! 0  kind        u8      5 = PLACED
//! 1  header_len  u16 LE
//! 3  payload_len u32 LE
//! 7  header      header_len bytes
//!    payload     its first bytes (at most payload_len)
//! ```
//!
//! The rest of the payload follows in MORE fragments and one END, exactly `payload_len` bytes
//! in all; a payload that fits the PLACED message has no further fragment. The receiver writes
//! payload bytes straight from each received message into the destination it was given
//! ([`PlacedReceive::absorb_fragment`](crate::placed_receive::PlacedReceive::absorb_fragment)),
//! so a placed payload is copied once.

use std::fmt;

const HELLO: u8 = 1;
const MORE: u8 = 2;
const END: u8 = 3;
const BYE: u8 = 4;
const PLACED: u8 = 5;
/// The HELLO version this code speaks.
const HELLO_VERSION: u8 = 1;

/// The HELLO message.
pub const HELLO_MSG: [u8; 2] = [HELLO, HELLO_VERSION];
/// The BYE message.
pub const BYE_MSG: [u8; 1] = [BYE];
/// Bytes of a PLACED message's lengths (header and payload), after its kind byte.
pub const PLACED_PREFIX_LEN: usize = 6;

/// One message, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// The session's first message.
    Hello,
    /// A piece of a frame; `last` when it ends the frame.
    Fragment {
        /// Whether this fragment completes the frame.
        last: bool,
        /// The fragment's bytes.
        data: &'a [u8],
    },
    /// The peer closed the link.
    Bye,
    /// The first fragment of a placed frame.
    Placed {
        /// The frame's protocol header, whole.
        header: &'a [u8],
        /// Payload bytes of the frame (in this message and the fragments that follow).
        len: usize,
        /// The payload's first bytes, at most `len`.
        data: &'a [u8],
    },
}

/// Why a message (already checked by the reliability layer, so sent like this by the peer) is
/// not one this code understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageError {
    /// An empty message.
    Empty,
    /// An unknown kind byte.
    Kind(u8),
    /// A HELLO of another version, or of the wrong length.
    Hello,
    /// A BYE with a body.
    Bye,
    /// A PLACED message shorter than its lengths and header, or with more payload bytes than
    /// it announces.
    Placed,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Empty => f.write_str("empty message"),
            MessageError::Kind(k) => write!(f, "unknown message kind {k:#04x}"),
            MessageError::Hello => f.write_str("unsupported hello"),
            MessageError::Bye => f.write_str("bye with a body"),
            MessageError::Placed => {
                f.write_str("placed message shorter than its header or longer than its payload")
            }
        }
    }
}

impl std::error::Error for MessageError {}

impl<'a> Message<'a> {
    /// Parses one message; never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Message<'a>, MessageError> {
        let (&kind, body) = bytes.split_first().ok_or(MessageError::Empty)?;
        match kind {
            HELLO if body == [HELLO_VERSION] => Ok(Message::Hello),
            HELLO => Err(MessageError::Hello),
            MORE => Ok(Message::Fragment { last: false, data: body }),
            END => Ok(Message::Fragment { last: true, data: body }),
            BYE if body.is_empty() => Ok(Message::Bye),
            BYE => Err(MessageError::Bye),
            PLACED => parse_placed(body),
            other => Err(MessageError::Kind(other)),
        }
    }
}

/// The body of a PLACED message.
fn parse_placed(body: &[u8]) -> Result<Message<'_>, MessageError> {
    let (lens, rest) = body.split_first_chunk::<PLACED_PREFIX_LEN>().ok_or(MessageError::Placed)?;
    let header_len = usize::from(u16::from_le_bytes([lens[0], lens[1]]));
    let len = u32::from_le_bytes([lens[2], lens[3], lens[4], lens[5]]) as usize;
    if rest.len() < header_len || rest.len() - header_len > len {
        return Err(MessageError::Placed);
    }
    let (header, data) = rest.split_at(header_len);
    Ok(Message::Placed { header, len, data })
}

/// The lengths a placed frame's first message carries after its kind byte; `None` when the
/// header is longer than a u16 or the payload than a u32 counts.
pub fn placed_prefix(header_len: usize, payload_len: usize) -> Option<[u8; PLACED_PREFIX_LEN]> {
    let header_len = u16::try_from(header_len).ok()?.to_le_bytes();
    let payload_len = u32::try_from(payload_len).ok()?.to_le_bytes();
    let mut prefix = [0u8; PLACED_PREFIX_LEN];
    prefix[..2].copy_from_slice(&header_len);
    prefix[2..].copy_from_slice(&payload_len);
    Some(prefix)
}

/// Makes the fragment just written by [`write_fragment`] (or built by hand) into `out` the first
/// message of a placed frame: the frame it cut is the placed prefix ([`placed_prefix`]), the
/// header and the payload, and this fragment carries at least the prefix and the whole header.
pub fn mark_placed(out: &mut [u8]) {
    if let Some(kind) = out.first_mut() {
        *kind = PLACED;
    }
}

/// The kind byte of a fragment of a zero-copy frame: PLACED for the first fragment of a placed
/// frame, else as [`fragment_kind`].
pub fn first_or_fragment_kind(placed_first: bool, last: bool) -> u8 {
    if placed_first {
        PLACED
    } else {
        fragment_kind(last)
    }
}

/// The kind byte of a fragment: END when it completes its frame, else MORE.
pub fn fragment_kind(last: bool) -> u8 {
    if last {
        END
    } else {
        MORE
    }
}

/// Writes the next fragment of a frame into `out` (which holds at most one message): `left`
/// bytes of the frame remain, the first of them at `offset` of the concatenation `a ++ b`.
/// Returns the message length and how many frame bytes it carries; the fragment is the frame's
/// last when that equals `left`. `out` must be at least 2 bytes long.
pub fn write_fragment(out: &mut [u8], a: &[u8], b: &[u8], offset: usize, left: usize) -> (usize, usize) {
    let n = left.min(out.len().saturating_sub(1));
    out[0] = if n == left { END } else { MORE };
    gather(&mut out[1..=n], a, b, offset);
    (n + 1, n)
}

/// Copies bytes `offset..offset + out.len()` of the concatenation `a ++ b` into `out`; the
/// caller guarantees they exist.
fn gather(out: &mut [u8], a: &[u8], b: &[u8], offset: usize) {
    let from_a = a.len().saturating_sub(offset).min(out.len());
    if from_a > 0 {
        out[..from_a].copy_from_slice(&a[offset..offset + from_a]);
    }
    let rest = out.len() - from_a;
    if rest > 0 {
        let start = offset + from_a - a.len();
        out[from_a..].copy_from_slice(&b[start..start + rest]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placed_receive::{PlaceTracker, PlaceViolation};
    use crate::transport::PlaceTarget;

    #[test]
    fn parses_every_kind_and_refuses_the_rest() {
        assert_eq!(Message::parse(&HELLO_MSG), Ok(Message::Hello));
        assert_eq!(Message::parse(&BYE_MSG), Ok(Message::Bye));
        assert_eq!(Message::parse(&[MORE, 1, 2]), Ok(Message::Fragment { last: false, data: &[1, 2] }));
        assert_eq!(Message::parse(&[END]), Ok(Message::Fragment { last: true, data: &[] }));
        assert_eq!(Message::parse(&[]), Err(MessageError::Empty));
        assert_eq!(Message::parse(&[HELLO, 2]), Err(MessageError::Hello));
        assert_eq!(Message::parse(&[HELLO]), Err(MessageError::Hello));
        assert_eq!(Message::parse(&[BYE, 0]), Err(MessageError::Bye));
        assert_eq!(Message::parse(&[9]), Err(MessageError::Kind(9)));
    }

    #[test]
    fn fragments_reassemble_to_the_frame() {
        let (a, b): (Vec<u8>, Vec<u8>) = ((0..7).collect(), (7..40).collect());
        for room in [2usize, 3, 8, 41, 100] {
            let mut out = vec![0u8; room];
            let (mut offset, mut left, mut got) = (0, a.len() + b.len(), Vec::new());
            loop {
                let (len, n) = write_fragment(&mut out, &a, &b, offset, left);
                let Ok(Message::Fragment { last, data }) = Message::parse(&out[..len]) else { panic!() };
                got.extend_from_slice(data);
                (offset, left) = (offset + n, left - n);
                assert_eq!(last, left == 0);
                if last {
                    break;
                }
            }
            assert_eq!(got, (0..40).collect::<Vec<u8>>(), "room {room}");
        }
        let mut out = [0u8; 4];
        assert_eq!(write_fragment(&mut out, &[], &[], 0, 0), (1, 0));
        assert_eq!(Message::parse(&out[..1]), Ok(Message::Fragment { last: true, data: &[] }));
    }

    /// Cuts a placed frame as the transport does (prefix and header, then payload; the first
    /// fragment marked PLACED) into messages of at most `room` bytes.
    fn placed_messages(header: &[u8], payload: &[u8], room: usize) -> Vec<Vec<u8>> {
        let mut head = placed_prefix(header.len(), payload.len()).unwrap().to_vec();
        head.extend_from_slice(header);
        let (mut out, mut messages) = (vec![0u8; room], Vec::new());
        let (mut offset, mut left) = (0, head.len() + payload.len());
        loop {
            let (len, n) = write_fragment(&mut out, &head, payload, offset, left);
            if offset == 0 {
                mark_placed(&mut out);
            }
            messages.push(out[..len].to_vec());
            (offset, left) = (offset + n, left - n);
            if left == 0 {
                return messages;
            }
        }
    }

    #[test]
    fn placed_messages_parse_and_land_once() {
        let header: Vec<u8> = (100..130).collect();
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        for room in [1 + PLACED_PREFIX_LEN + 30, 64, 1460, 8000] {
            let messages = placed_messages(&header, &payload, room);
            let Ok(Message::Placed { header: h, len, data }) = Message::parse(&messages[0]) else { panic!() };
            assert_eq!((h, len), (&header[..], payload.len()));
            let mut dest = vec![0u8; len];
            let mut tracker = PlaceTracker::default();
            // SAFETY: `dest` is `len` bytes and outlives `tracker`.
            let placing =
                unsafe { tracker.start(Some(PlaceTarget::new(dest.as_mut_ptr(), 9)), len) }.unwrap();
            let mut complete = placing.absorb_fragment(data, data.len() == len).unwrap();
            for message in &messages[1..] {
                assert!(!complete, "room {room}: a fragment after the payload was complete");
                let Ok(Message::Fragment { last, data }) = Message::parse(message) else { panic!() };
                complete = placing.absorb_fragment(data, last).unwrap();
            }
            assert!(complete && placing.remaining() == 0);
            assert_eq!(dest, payload, "room {room}");
        }
        // An empty payload: one PLACED message, complete at once.
        let messages = placed_messages(b"hd", &[], 64);
        assert_eq!(messages, vec![vec![PLACED, 2, 0, 0, 0, 0, 0, b'h', b'd']]);
        assert_eq!(Message::parse(&messages[0]), Ok(Message::Placed { header: b"hd", len: 0, data: &[] }));
    }

    #[test]
    fn placed_messages_that_lie_are_refused() {
        assert_eq!(Message::parse(&[PLACED]), Err(MessageError::Placed));
        assert_eq!(Message::parse(&[PLACED, 0, 0, 0, 0, 0]), Err(MessageError::Placed));
        // Header longer than the message.
        assert_eq!(Message::parse(&[PLACED, 3, 0, 9, 0, 0, 0, 1, 2]), Err(MessageError::Placed));
        // More payload bytes than announced.
        assert_eq!(Message::parse(&[PLACED, 1, 0, 1, 0, 0, 0, 7, 8, 9]), Err(MessageError::Placed));
        assert_eq!(
            Message::parse(&[PLACED, 1, 0, 2, 0, 0, 0, 7, 8, 9]),
            Ok(Message::Placed { header: &[7], len: 2, data: &[8, 9] })
        );
        assert_eq!(placed_prefix(1 << 16, 0), None);
        assert_eq!(placed_prefix(0, 1usize << 32), None);

        let mut dest = [0u8; 8];
        let mut tracker = PlaceTracker::default();
        // SAFETY: the target is the first 4 bytes of `dest`, which outlives `tracker`.
        let placing = unsafe { tracker.start(Some(PlaceTarget::new(dest.as_mut_ptr(), 1)), 4) }.unwrap();
        assert_eq!(placing.absorb_fragment(&[1, 2, 3, 4, 5], true), Err(PlaceViolation::TooLong));
        assert_eq!(placing.absorb_fragment(&[1, 2], true), Err(PlaceViolation::EndsEarly));
        assert_eq!(placing.absorb_fragment(&[1, 2, 3, 4], false), Err(PlaceViolation::NoEnd));
        assert_eq!(dest, [0; 8], "a refused fragment wrote");
        assert_eq!(placing.absorb_fragment(&[1, 2], false), Ok(false));
        assert_eq!(placing.absorb_fragment(&[3, 4, 5], true), Err(PlaceViolation::TooLong));
        assert_eq!(placing.absorb_fragment(&[3, 4], true), Ok(true));
        assert_eq!(dest, [1, 2, 3, 4, 0, 0, 0, 0]);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any bytes parse to a message or an error, never a panic; a PLACED message's parts
            /// always lie inside it and its data never exceeds the announced length.
            #[test]
            fn any_bytes_parse_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
                if let Ok(Message::Placed { header, len, data }) = Message::parse(&bytes) {
                    prop_assert_eq!(1 + PLACED_PREFIX_LEN + header.len() + data.len(), bytes.len());
                    prop_assert!(data.len() <= len);
                }
            }

            /// Valid placed messages with random bytes changed parse or fail, never panic.
            #[test]
            fn mutated_placed_messages_parse_or_fail(
                header in proptest::collection::vec(any::<u8>(), 0..40),
                payload in proptest::collection::vec(any::<u8>(), 0..300),
                room in (1 + PLACED_PREFIX_LEN + 40)..400usize,
                flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            ) {
                for mut message in placed_messages(&header, &payload, room) {
                    for (at, byte) in &flips {
                        let i = at.index(message.len());
                        message[i] = *byte;
                    }
                    let _ = Message::parse(&message);
                }
            }

            /// Whatever fragments a peer sends against whatever length it announced, nothing is
            /// written outside the destination, accepted bytes land at their running offset,
            /// and the placement refuses exactly the fragments that do not fit.
            #[test]
            fn placement_never_writes_outside_the_destination(
                len in 0usize..300,
                fragments in proptest::collection::vec(
                    (proptest::collection::vec(any::<u8>(), 0..120), any::<bool>()), 0..8),
            ) {
                const GUARD: usize = 64;
                let mut buf = vec![0xAAu8; GUARD + len + GUARD];
                // SAFETY: the target is `len` bytes inside `buf`, which outlives `placing`.
                let target = unsafe { PlaceTarget::new(buf.as_mut_ptr().add(GUARD), 3) };
                let mut tracker = PlaceTracker::default();
                // SAFETY: as above.
                let placing = unsafe { tracker.start(Some(target), len) }.unwrap();
                let mut expect = Vec::new();
                for (data, last) in &fragments {
                    let remaining = len - expect.len();
                    let fits = data.len() <= remaining && *last == (data.len() == remaining);
                    match placing.absorb_fragment(data, *last) {
                        Ok(complete) => {
                            prop_assert!(fits);
                            expect.extend_from_slice(data);
                            prop_assert_eq!(complete, expect.len() == len);
                            if complete {
                                break;
                            }
                        }
                        Err(_) => {
                            prop_assert!(!fits);
                            break;
                        }
                    }
                }
                prop_assert!(buf[..GUARD].iter().all(|&b| b == 0xAA));
                prop_assert!(buf[GUARD + len..].iter().all(|&b| b == 0xAA));
                prop_assert_eq!(&buf[GUARD..GUARD + expect.len()], &expect[..]);
                prop_assert!(buf[GUARD + expect.len()..GUARD + len].iter().all(|&b| b == 0xAA));
            }
        }
    }
}
