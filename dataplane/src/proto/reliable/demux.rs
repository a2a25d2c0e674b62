//! The table of a link's sessions: routes each incoming datagram to the session it names, and
//! drops (and counts) what no session may take.

use crate::fast_map::FastMap;

use super::session::{Delivery, Session};
use super::stats::{DropReason, DropStats};
use super::wire::Packet;

/// Sessions by local id. A datagram is parsed once here; one that is malformed, corrupted or
/// addressed to no session is dropped and counted in [`Demux::drops`], and never reaches a
/// session. What a session then drops is counted in that session's own stats.
#[derive(Debug, Default)]
pub struct Demux {
    sessions: FastMap<u32, Session>,
    drops: DropStats,
}

impl Demux {
    /// An empty table.
    pub fn new() -> Demux {
        Demux::default()
    }

    /// Adds `session` under its local id; if that id is taken, gives the session back (boxed, to
    /// keep the result small).
    pub fn insert(&mut self, session: Session) -> Result<(), Box<Session>> {
        match self.sessions.entry(session.local_id()) {
            std::collections::hash_map::Entry::Occupied(_) => Err(Box::new(session)),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(session);
                Ok(())
            }
        }
    }

    /// Removes and returns the session with local id `local_id`; later datagrams for it are
    /// dropped as [`DropReason::UnknownSession`].
    pub fn remove(&mut self, local_id: u32) -> Option<Session> {
        self.sessions.remove(&local_id)
    }

    /// The session with local id `local_id`.
    pub fn get(&self, local_id: u32) -> Option<&Session> {
        self.sessions.get(&local_id)
    }

    /// The session with local id `local_id`, to send on, poll or time out.
    pub fn get_mut(&mut self, local_id: u32) -> Option<&mut Session> {
        self.sessions.get_mut(&local_id)
    }

    /// Every session, in no particular order.
    pub fn sessions_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.sessions.values_mut()
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether there is no session.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Datagrams dropped before reaching a session: malformed, corrupted, or for an unknown
    /// session.
    pub fn drops(&self) -> &DropStats {
        &self.drops
    }

    /// The earliest deadline of any session ([`Session::poll_timeout`]).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.sessions.values().filter_map(Session::poll_timeout).min()
    }

    /// Parses `datagram` and hands it to the session it is addressed to; returns that session's
    /// local id with what it delivered.
    pub fn on_datagram<'a>(
        &mut self,
        now: u64,
        datagram: &'a [u8],
    ) -> Result<(u32, Delivery<'a>), DropReason> {
        let packet = match Packet::new_checked(datagram) {
            Ok(packet) => packet,
            Err(err) => return Err(self.drop(DropReason::from(err))),
        };
        let id = packet.dst_session();
        match self.sessions.get_mut(&id) {
            Some(session) => session.on_packet(now, &packet).map(|delivery| (id, delivery)),
            None => Err(self.drop(DropReason::UnknownSession(id))),
        }
    }

    fn drop(&mut self, reason: DropReason) -> DropReason {
        self.drops.count(&reason);
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::reliable::Config;

    fn session(local: u32, peer: u32) -> Session {
        Session::new(Config { max_payload: 32, send_queue: 32, ..Config::default() }, local, peer).unwrap()
    }

    fn datagram_from(sender: &mut Session, msg: &[u8]) -> Vec<u8> {
        sender.send(msg).unwrap();
        let mut buf = [0u8; 128];
        let len = sender.poll_transmit(0, &mut buf).unwrap();
        buf[..len].to_vec()
    }

    #[test]
    fn routes_by_destination_and_refuses_duplicate_ids() {
        let mut demux = Demux::new();
        assert!(demux.insert(session(10, 20)).is_ok());
        assert!(demux.insert(session(11, 21)).is_ok());
        assert_eq!(demux.insert(session(10, 99)).unwrap_err().peer_id(), 99);
        assert_eq!(demux.len(), 2);

        let mut peer_of_11 = session(21, 11);
        let datagram = datagram_from(&mut peer_of_11, b"to eleven");
        assert_eq!(demux.on_datagram(1, &datagram), Ok((11, Delivery::Message(b"to eleven"))));
        assert_eq!(demux.get(11).unwrap().received(), 1);
        assert_eq!(demux.get(10).unwrap().received(), 0);
        assert_eq!(demux.poll_timeout(), Some(1 + Config::default().ack_delay_ns));
    }

    #[test]
    fn drops_and_counts_what_no_session_may_take() {
        let mut demux = Demux::new();
        demux.insert(session(10, 20)).unwrap();
        let mut stranger = session(30, 77);
        let datagram = datagram_from(&mut stranger, b"who?");
        assert_eq!(demux.on_datagram(0, &datagram), Err(DropReason::UnknownSession(77)));
        assert_eq!(
            demux.on_datagram(0, &datagram[..10]),
            Err(DropReason::Malformed(super::super::wire::Error::Truncated))
        );
        let mut corrupt = datagram.clone();
        corrupt[5] ^= 0x80;
        assert_eq!(demux.on_datagram(0, &corrupt), Err(DropReason::BadChecksum));
        let drops = demux.drops();
        assert_eq!((drops.unknown_session, drops.malformed, drops.bad_checksum), (1, 1, 1));

        // Right session, wrong peer: the session drops it and counts it.
        let mut impostor = session(31, 10);
        let datagram = datagram_from(&mut impostor, b"me");
        assert_eq!(demux.on_datagram(0, &datagram), Err(DropReason::WrongPeer { src_session: 31 }));
        assert_eq!(demux.get(10).unwrap().stats().drops.wrong_peer, 1);
        assert_eq!(demux.get(10).unwrap().stats().delivered, 0);

        let removed = demux.remove(10).unwrap();
        assert_eq!(removed.local_id(), 10);
        assert!(demux.is_empty());
        let mut peer = session(20, 10);
        let datagram = datagram_from(&mut peer, b"late");
        assert_eq!(demux.on_datagram(0, &datagram), Err(DropReason::UnknownSession(10)));
    }
}
