//! Why a datagram was dropped, and the counters a session or demux keeps of it.

use std::fmt;

use super::wire;

/// Why an incoming datagram was dropped instead of delivered. None of these harm the session:
/// loss, duplication, reordering and corruption are what the protocol recovers from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The checksum did not match: corrupted on the way.
    BadChecksum,
    /// Not a well-formed datagram: too short, foreign magic, another version, a bad field.
    Malformed(wire::Error),
    /// No session has the datagram's destination id.
    UnknownSession(u32),
    /// The destination session exists but belongs to another peer than the datagram's source.
    WrongPeer {
        /// The source session id the datagram claims.
        src_session: u32,
    },
    /// A DATA packet received before (its sequence number is below the cumulative ack).
    Duplicate,
    /// A DATA packet ahead of the next expected one: there is no reorder buffer, the sender
    /// will send it again.
    OutOfOrder,
    /// The packet acknowledges a sequence number this end never sent: a confused or forged peer.
    AckBeyondSent,
    /// The session was declared dead; it accepts nothing more.
    SessionDead,
}

impl From<wire::Error> for DropReason {
    fn from(err: wire::Error) -> DropReason {
        match err {
            wire::Error::BadChecksum => DropReason::BadChecksum,
            other => DropReason::Malformed(other),
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::BadChecksum => f.write_str("bad checksum"),
            DropReason::Malformed(err) => write!(f, "malformed: {err}"),
            DropReason::UnknownSession(id) => write!(f, "unknown session {id}"),
            DropReason::WrongPeer { src_session } => write!(f, "wrong peer session {src_session}"),
            DropReason::Duplicate => f.write_str("duplicate"),
            DropReason::OutOfOrder => f.write_str("out of order"),
            DropReason::AckBeyondSent => f.write_str("ack beyond what was sent"),
            DropReason::SessionDead => f.write_str("session dead"),
        }
    }
}

impl std::error::Error for DropReason {}

/// Dropped datagrams, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropStats {
    /// [`DropReason::BadChecksum`].
    pub bad_checksum: u64,
    /// [`DropReason::Malformed`].
    pub malformed: u64,
    /// [`DropReason::UnknownSession`].
    pub unknown_session: u64,
    /// [`DropReason::WrongPeer`].
    pub wrong_peer: u64,
    /// [`DropReason::Duplicate`].
    pub duplicate: u64,
    /// [`DropReason::OutOfOrder`].
    pub out_of_order: u64,
    /// [`DropReason::AckBeyondSent`].
    pub ack_beyond_sent: u64,
    /// [`DropReason::SessionDead`].
    pub session_dead: u64,
}

impl DropStats {
    /// Counts one drop.
    pub fn count(&mut self, reason: &DropReason) {
        let counter = match reason {
            DropReason::BadChecksum => &mut self.bad_checksum,
            DropReason::Malformed(_) => &mut self.malformed,
            DropReason::UnknownSession(_) => &mut self.unknown_session,
            DropReason::WrongPeer { .. } => &mut self.wrong_peer,
            DropReason::Duplicate => &mut self.duplicate,
            DropReason::OutOfOrder => &mut self.out_of_order,
            DropReason::AckBeyondSent => &mut self.ack_beyond_sent,
            DropReason::SessionDead => &mut self.session_dead,
        };
        *counter += 1;
    }

    /// All drops, whatever the reason.
    pub fn total(&self) -> u64 {
        self.bad_checksum
            + self.malformed
            + self.unknown_session
            + self.wrong_peer
            + self.duplicate
            + self.out_of_order
            + self.ack_beyond_sent
            + self.session_dead
    }
}

/// What one session sent, received and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// DATA packets sent for the first time.
    pub data_sent: u64,
    /// DATA packets sent again after a retransmission timeout.
    pub retransmissions: u64,
    /// Standalone ACK packets sent (acks piggybacked on DATA are not counted).
    pub acks_sent: u64,
    /// Messages delivered to the caller, in order, each once.
    pub delivered: u64,
    /// Standalone ACK packets accepted.
    pub acks_received: u64,
    /// Retransmission timeouts that expired.
    pub rto_expiries: u64,
    /// Incoming datagrams dropped, by reason.
    pub drops: DropStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_counter() {
        let reasons = [
            DropReason::BadChecksum,
            DropReason::Malformed(wire::Error::Truncated),
            DropReason::UnknownSession(3),
            DropReason::WrongPeer { src_session: 4 },
            DropReason::Duplicate,
            DropReason::OutOfOrder,
            DropReason::AckBeyondSent,
            DropReason::SessionDead,
        ];
        let mut stats = DropStats::default();
        for (i, reason) in reasons.iter().enumerate() {
            stats.count(reason);
            assert_eq!(stats.total(), i as u64 + 1);
        }
        assert_eq!(stats.bad_checksum + stats.malformed + stats.session_dead, 3);
        assert_eq!(DropReason::from(wire::Error::BadChecksum), DropReason::BadChecksum);
        assert_eq!(DropReason::UnknownSession(3).to_string(), "unknown session 3");
        assert_eq!(
            DropReason::from(wire::Error::BadMagic).to_string(),
            "malformed: not a zcx datagram (bad magic)"
        );
    }
}
