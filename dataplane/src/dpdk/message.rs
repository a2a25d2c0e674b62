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
//!              3 = END (last or only fragment of a frame), 4 = BYE (the peer closed the link)
//! 1  body
//! ```
//!
//! HELLO is the first message of every session: the acceptor creates its session when it sees
//! it (see the transport). BYE is the last message of a link closed gracefully.

use std::fmt;

const HELLO: u8 = 1;
const MORE: u8 = 2;
const END: u8 = 3;
const BYE: u8 = 4;
/// The HELLO version this code speaks.
const HELLO_VERSION: u8 = 1;

/// The HELLO message.
pub const HELLO_MSG: [u8; 2] = [HELLO, HELLO_VERSION];
/// The BYE message.
pub const BYE_MSG: [u8; 1] = [BYE];

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
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Empty => f.write_str("empty message"),
            MessageError::Kind(k) => write!(f, "unknown message kind {k:#04x}"),
            MessageError::Hello => f.write_str("unsupported hello"),
            MessageError::Bye => f.write_str("bye with a body"),
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
            other => Err(MessageError::Kind(other)),
        }
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
}
