//! One reliable session: the sender and receiver halves of one peer pair over a datagram link,
//! giving exactly-once, in-order delivery of messages.
//!
//! The design is eRPC's, chosen for links that rarely lose packets:
//!
//! - **Credits.** The sender never has more than [`Config::window`] DATA packets unacknowledged,
//!   nor more than the peer's credit grant allows (each packet carries `ack + credit`, the edge
//!   the peer may send up to; the edge never moves back).
//! - **Cumulative acks, no reorder buffer.** The receiver accepts only the next expected
//!   sequence number. A duplicate or an out-of-order packet is dropped, and the receiver answers
//!   it with its current cumulative ack at once, so a sender whose acks were lost learns quickly
//!   and frees its credits.
//! - **Go-back-N on timeout.** When the oldest unacknowledged packet has gone unacknowledged for
//!   the retransmission timeout, everything from it on is sent again. The timeout is
//!   `srtt + 4 · rttvar` of measured round trips (RFC 6298, Karn's rule), never below
//!   [`Config::rto_ns`] nor above [`Config::max_rto_ns`], and doubles on each
//!   consecutive expiry without progress (capped), and after [`Config::dead_after_rtos`] of them
//!   the peer is declared dead. Duplicate acks do not trigger early retransmission: reordering
//!   would make that spurious, and losses are rare.
//! - **Delayed acks.** Acks ride on DATA going the other way when there is any; otherwise a
//!   standalone ACK goes out after [`Config::ack_every`] packets or [`Config::ack_delay_ns`].
//!
//! It is sans-IO: the caller passes in datagrams and the time, and takes out datagrams and
//! deadlines. The driving loop is
//!
//! 1. [`Session::send`] messages (until [`SendError::Backpressure`]),
//! 2. feed every datagram for this session to [`Session::on_datagram`] (or route them through a
//!    [`Demux`](super::Demux)),
//! 3. when the clock reaches [`Session::poll_timeout`], call [`Session::handle_timeout`]; an
//!    error there means the peer is dead (the transport reports `UCS_ERR_ENDPOINT_TIMEOUT`),
//! 4. after any of these, drain [`Session::poll_transmit`] onto the wire until it yields nothing.
//!
//! Time is a `u64` count of nanoseconds since any origin the caller picks; it must not go
//! backwards. Messages are copied once, into a slot of the preallocated send ring, and again
//! into the caller's transmit buffer; received payloads are borrowed from the datagram. Nothing
//! is allocated after [`Session::new`].
//!
//! Liveness is judged only while data is unacknowledged: an idle session never times out, and
//! spotting a silent peer on an idle link is the control plane's keepalive's job.

use std::fmt;

use super::config::{Config, ConfigError};
use super::rtt::RttEstimator;
pub use super::send_ring::External;
use super::send_ring::SendRing;
use super::stats::{DropReason, Stats};
use super::wire::{Header, Kind, Packet};

/// What an accepted datagram gave the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// The next message of the peer's stream, borrowed from the datagram. Each message is
    /// delivered once, in the order the peer sent them.
    Message(&'a [u8]),
    /// A standalone ACK: acknowledgement and credit were taken in, nothing to deliver.
    Ack,
}

/// Why [`Session::send`] did not queue a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The send queue is full of unacknowledged messages: try again once acks arrive
    /// (after [`Session::on_datagram`] or [`Session::handle_timeout`]).
    Backpressure,
    /// The message is longer than [`Config::max_payload`]; the layer above must fragment it.
    TooLarge {
        /// The message's length.
        len: usize,
        /// The longest message the session takes.
        max: usize,
    },
    /// The peer was declared dead.
    Dead,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Backpressure => f.write_str("send queue full"),
            SendError::TooLarge { len, max } => write!(f, "message of {len} bytes exceeds {max}"),
            SendError::Dead => f.write_str("peer is dead"),
        }
    }
}

impl std::error::Error for SendError {}

/// The peer acknowledged nothing for [`Config::dead_after_rtos`] consecutive retransmission
/// timeouts; the session is dead for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerDead;

impl fmt::Display for PeerDead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("peer acknowledged nothing for the configured number of retransmission timeouts")
    }
}

impl std::error::Error for PeerDead {}

/// The sans-IO state of one reliable session (go-back-N, credits, cumulative acks; see
/// `proto::reliable` and its `session` module).
#[derive(Debug)]
pub struct Session {
    config: Config,
    local: u32,
    peer: u32,

    /// Messages `acked()..` not yet acknowledged; its head is the oldest unacknowledged
    /// sequence number.
    ring: SendRing,
    /// Next sequence number to transmit: new data, or old data again after a timeout.
    snd_nxt: u64,
    /// One past the highest sequence number ever transmitted.
    snd_max: u64,
    /// The peer's credit edge: sequence numbers below it may be in flight.
    send_edge: u64,
    /// When the oldest unacknowledged packet times out; set iff data is in flight.
    rto_deadline: Option<u64>,
    /// Consecutive timeouts without progress; drives backoff and death.
    timeouts: u32,
    /// The retransmission timeout from measured round trips, at least [`Config::rto_ns`].
    rtt: RttEstimator,
    /// The packet being timed for a round-trip sample and when it was sent: one at a time,
    /// only first transmissions (Karn's rule).
    timed: Option<(u64, u64)>,

    /// Next sequence number to deliver; every packet below it was delivered.
    rcv_nxt: u64,
    /// Packets delivered since the last ack went out.
    unacked: u32,
    /// When a standalone ACK is due for them.
    ack_deadline: Option<u64>,
    /// A standalone ACK is due now (a duplicate or out-of-order packet, `ack_every` reached,
    /// the credit raised).
    ack_now: bool,
    /// The credit this end grants the peer.
    receive_credit: u32,

    dead: bool,
    stats: Stats,
}

impl Session {
    /// A session with local id `local_id` talking to the peer's session `peer_id`, both agreed
    /// on by the control plane. Allocates the send ring, `send_queue × max_payload` bytes.
    pub fn new(config: Config, local_id: u32, peer_id: u32) -> Result<Session, ConfigError> {
        config.validate()?;
        // Lossless: validated as at most u32::MAX slots, and the ring was sized by it.
        let ring = SendRing::new(config.send_queue as usize, config.max_payload);
        Ok(Session {
            local: local_id,
            peer: peer_id,
            ring,
            snd_nxt: 0,
            snd_max: 0,
            // Both ends use the same config, so the peer starts out granting what we grant.
            send_edge: u64::from(config.receive_credit),
            rto_deadline: None,
            timeouts: 0,
            rtt: RttEstimator::new(config.rto_ns, config.max_rto_ns),
            timed: None,
            rcv_nxt: 0,
            unacked: 0,
            ack_deadline: None,
            ack_now: false,
            receive_credit: config.receive_credit,
            dead: false,
            stats: Stats::default(),
            config,
        })
    }

    /// This end's session id (the `dst_session` of datagrams it accepts).
    pub fn local_id(&self) -> u32 {
        self.local
    }

    /// The peer's session id (the `src_session` of datagrams it accepts).
    pub fn peer_id(&self) -> u32 {
        self.peer
    }

    /// The settings the session was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters of what the session sent, received and dropped.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Whether the peer was declared dead.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Queues `payload` as the next message of this end's stream (copying it into the send
    /// ring); [`Session::poll_transmit`] sends it when credits allow.
    pub fn send(&mut self, payload: &[u8]) -> Result<(), SendError> {
        if self.dead {
            return Err(SendError::Dead);
        }
        if payload.len() > self.config.max_payload {
            return Err(SendError::TooLarge { len: payload.len(), max: self.config.max_payload });
        }
        match self.ring.push(payload) {
            Some(_) => Ok(()),
            None => Err(SendError::Backpressure),
        }
    }

    /// Queues a message made of `inline` (copied into the send ring) followed by `external`
    /// bytes that stay where they are: the session keeps only their description, and
    /// [`Session::poll_transmit_split`] returns it with every (re)transmission of the message.
    /// The caller must keep those bytes readable and unchanged until [`Session::acked`] passes
    /// the message's sequence number ([`Session::next_seq`] before this call), or until
    /// [`Session::abandon_sends`].
    pub fn send_split(&mut self, inline: &[u8], external: External) -> Result<(), SendError> {
        if self.dead {
            return Err(SendError::Dead);
        }
        let len = inline.len().saturating_add(external.len as usize);
        if len > self.config.max_payload {
            return Err(SendError::TooLarge { len, max: self.config.max_payload });
        }
        match self.ring.push_split(inline, Some(external)) {
            Some(_) => Ok(()),
            None => Err(SendError::Backpressure),
        }
    }

    /// Queues the message `fill` writes straight into the send ring's next slot (a buffer of
    /// [`Config::max_payload`] bytes; `fill` returns the message's length, clamped to it), which
    /// saves building it elsewhere and copying it in. On [`SendError::Backpressure`] or
    /// [`SendError::Dead`] `fill` is not called.
    pub fn send_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<(), SendError> {
        if self.dead {
            return Err(SendError::Dead);
        }
        match self.ring.push_with(fill) {
            Some(_) => Ok(()),
            None => Err(SendError::Backpressure),
        }
    }

    /// Whether [`Session::send`] would refuse any message now for want of room (or because the
    /// peer is dead): lets a caller skip preparing one (copying it, computing its CRC).
    pub fn send_queue_full(&self) -> bool {
        self.dead || self.ring.is_full()
    }

    /// The sequence number the next queued message gets.
    pub fn next_seq(&self) -> u64 {
        self.ring.tail()
    }

    /// Forgets every queued and unacknowledged message: nothing of them is sent again, and the
    /// memory of their external parts is no longer referred to. For a link that failed or was
    /// closed while the session lingers to acknowledge the peer.
    pub fn abandon_sends(&mut self) {
        let tail = self.ring.tail();
        self.ring.release_before(tail);
        self.snd_nxt = tail;
        self.snd_max = self.snd_max.max(tail);
        self.rto_deadline = None;
        self.timeouts = 0;
        self.timed = None;
    }

    /// Messages the peer has acknowledged so far (all of them, once it equals the number sent).
    pub fn acked(&self) -> u64 {
        self.ring.head()
    }

    /// Whether an ACK is due without waiting for the delayed-ack timer: `ack_every` in-order
    /// packets arrived unacknowledged, or a duplicate or out-of-order one did. A transport that
    /// reads its receive queue in long batches sends it before reading on, or a peer whose
    /// window the batch spent waits out the whole batch.
    pub fn ack_due_now(&self) -> bool {
        self.ack_now
    }

    /// Messages queued or in flight and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.ring.len()
    }

    /// DATA packets transmitted and not acknowledged; never more than [`Config::window`].
    pub fn in_flight(&self) -> u64 {
        self.snd_max - self.ring.head()
    }

    /// Messages delivered from the peer so far.
    pub fn received(&self) -> u64 {
        self.rcv_nxt
    }

    /// Sets the credit granted to the peer (at least 1; 0 counts as 1, so the peer can always
    /// make progress and no window probe is needed). A lower grant takes effect as the ack
    /// advances, since an edge already granted is never taken back; a higher one is announced
    /// at once with an ACK.
    pub fn set_receive_credit(&mut self, credit: u32) {
        let credit = credit.max(1);
        if credit > self.receive_credit {
            self.ack_now = true;
        }
        self.receive_credit = credit;
    }

    /// Takes in one datagram from the link, addressed to this session.
    ///
    /// A DATA packet carrying the next message yields it; every other outcome is either an
    /// accepted standalone ACK or a [`DropReason`], counted in [`Session::stats`]. Whatever the
    /// outcome, call [`Session::poll_transmit`] afterwards: an ack may be due, or credits freed.
    pub fn on_datagram<'a>(&mut self, now: u64, datagram: &'a [u8]) -> Result<Delivery<'a>, DropReason> {
        match Packet::new_checked(datagram) {
            Ok(packet) => self.on_packet(now, &packet),
            Err(err) => {
                let reason = DropReason::from(err);
                self.stats.drops.count(&reason);
                Err(reason)
            }
        }
    }

    /// [`Session::on_datagram`] for a datagram already parsed (by a [`Demux`](super::Demux)).
    pub fn on_packet<'a>(&mut self, now: u64, packet: &Packet<'a>) -> Result<Delivery<'a>, DropReason> {
        let outcome = self.accept(now, packet);
        if let Err(reason) = &outcome {
            self.stats.drops.count(reason);
        }
        outcome
    }

    fn accept<'a>(&mut self, now: u64, packet: &Packet<'a>) -> Result<Delivery<'a>, DropReason> {
        if self.dead {
            return Err(DropReason::SessionDead);
        }
        if packet.dst_session() != self.local {
            return Err(DropReason::UnknownSession(packet.dst_session()));
        }
        if packet.src_session() != self.peer {
            return Err(DropReason::WrongPeer { src_session: packet.src_session() });
        }
        if packet.ack() > self.snd_max {
            return Err(DropReason::AckBeyondSent);
        }
        // Every packet's ack counts, even a duplicate DATA's: a retransmission carries the
        // peer's latest ack.
        self.take_ack(now, packet.ack(), packet.credit());
        match packet.kind() {
            Kind::Ack => {
                self.stats.acks_received += 1;
                Ok(Delivery::Ack)
            }
            Kind::Data => self.take_data(now, packet),
        }
    }

    fn take_ack(&mut self, now: u64, ack: u64, credit: u32) {
        self.send_edge = self.send_edge.max(ack.saturating_add(u64::from(credit)));
        if ack <= self.ring.head() {
            return;
        }
        self.ring.release_before(ack);
        self.snd_nxt = self.snd_nxt.max(ack);
        self.timeouts = 0;
        if let Some((seq, sent)) = self.timed {
            if ack > seq {
                self.rtt.sample(now.saturating_sub(sent));
                self.timed = None;
            }
        }
        self.rto_deadline = (ack < self.snd_max).then(|| now.saturating_add(self.rtt.rto()));
    }

    fn take_data<'a>(&mut self, now: u64, packet: &Packet<'a>) -> Result<Delivery<'a>, DropReason> {
        let seq = packet.seq();
        if seq != self.rcv_nxt {
            // Re-ack at once: the sender either lost our ack (duplicate) or a packet (gap).
            self.ack_now = true;
            return Err(if seq < self.rcv_nxt { DropReason::Duplicate } else { DropReason::OutOfOrder });
        }
        self.rcv_nxt += 1;
        self.unacked += 1;
        if self.unacked >= self.config.ack_every {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now.saturating_add(self.config.ack_delay_ns));
        }
        self.stats.delivered += 1;
        Ok(Delivery::Message(packet.payload()))
    }

    /// Writes the next datagram to send into `buf` and returns its length, or `None` when there
    /// is nothing to send now. Call it until it returns `None`.
    ///
    /// DATA comes first (new messages, or old ones again after a timeout) as credits allow,
    /// each carrying the current ack; then a standalone ACK if one is due. `buf` must hold
    /// [`Config::datagram_len`] bytes; a DATA packet that does not fit is not sent (and nothing
    /// after it). A session with messages queued by [`Session::send_split`] must be drained
    /// with [`Session::poll_transmit_split`]: this stops (returns `None`) at such a message.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<usize> {
        if self.next_is_split() {
            return None;
        }
        self.poll_transmit_split(now, buf).map(|(len, _)| len)
    }

    /// Whether the next DATA to transmit has an external part.
    fn next_is_split(&self) -> bool {
        self.snd_nxt < self.transmit_limit()
            && self.ring.get(self.snd_nxt).is_some_and(|(_, external)| external.is_some())
    }

    fn transmit_limit(&self) -> u64 {
        let window_end = self.ring.head().saturating_add(u64::from(self.config.window));
        self.ring.tail().min(window_end).min(self.send_edge)
    }

    /// [`Session::poll_transmit`] for sessions that queue messages with external parts: writes
    /// the next datagram's header and inline bytes into `buf` and returns their length with the
    /// message's [`External`] part, which the caller sends right after those bytes, in the same
    /// datagram (the checksum written already covers it).
    pub fn poll_transmit_split(&mut self, now: u64, buf: &mut [u8]) -> Option<(usize, Option<External>)> {
        if self.dead {
            return None;
        }
        if self.snd_nxt < self.transmit_limit() {
            let seq = self.snd_nxt;
            let header = self.header(Kind::Data, seq);
            // Present: head <= snd_nxt < tail.
            let (inline, external) = self.ring.get(seq)?;
            let crc = self.ring.payload_crc(seq)?;
            let external_len = external.map_or(0, |e| e.len as usize);
            let emitted = header.emit_split(inline, external_len, crc, buf);
            let len = match emitted {
                Ok(len) => len,
                Err(err) => {
                    tracing::debug!(%err, session = self.local, "cannot emit a DATA packet");
                    return None;
                }
            };
            self.snd_nxt += 1;
            if seq < self.snd_max {
                self.stats.retransmissions += 1;
            } else {
                self.stats.data_sent += 1;
                self.snd_max = seq + 1;
                if self.timed.is_none() {
                    self.timed = Some((seq, now));
                }
            }
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now.saturating_add(self.current_rto()));
            }
            self.ack_sent();
            return Some((len, external));
        }
        let ack_due = self.ack_now || self.ack_deadline.is_some_and(|due| due <= now);
        if ack_due {
            let len = self.header(Kind::Ack, 0).emit(&[], buf).ok()?;
            self.stats.acks_sent += 1;
            self.ack_sent();
            return Some((len, None));
        }
        None
    }

    fn header(&self, kind: Kind, seq: u64) -> Header {
        Header {
            kind,
            src_session: self.local,
            dst_session: self.peer,
            seq,
            ack: self.rcv_nxt,
            credit: self.receive_credit,
        }
    }

    fn ack_sent(&mut self) {
        self.unacked = 0;
        self.ack_deadline = None;
        self.ack_now = false;
    }

    /// The retransmission timeout after `timeouts` consecutive expiries: the measured one
    /// ([`Session::rto`]) doubled each time, capped at [`Config::max_rto_ns`].
    fn current_rto(&self) -> u64 {
        let factor = 1u64 << self.timeouts.min(63);
        self.rtt.rto().saturating_mul(factor).min(self.config.max_rto_ns)
    }

    /// The retransmission timeout before backoff: `srtt + 4 · rttvar` of the measured round
    /// trips, between [`Config::rto_ns`] and [`Config::max_rto_ns`].
    pub fn rto(&self) -> u64 {
        self.rtt.rto()
    }

    /// The smoothed round-trip time, once one was measured.
    pub fn srtt(&self) -> Option<u64> {
        self.rtt.srtt()
    }

    /// The earliest time [`Session::handle_timeout`] has something to do (a retransmission
    /// timeout, a delayed ack), or `None` when there is no timer running.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.dead {
            return None;
        }
        match (self.rto_deadline, self.ack_deadline) {
            (Some(rto), Some(ack)) => Some(rto.min(ack)),
            (rto, ack) => rto.or(ack),
        }
    }

    /// Runs the timers that expired by `now`: a due delayed ack is queued, and on a
    /// retransmission timeout everything from the oldest unacknowledged packet on is queued
    /// again, or, on the [`Config::dead_after_rtos`]th timeout in a row without progress, the
    /// session dies: this and every later call return [`PeerDead`].
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), PeerDead> {
        if self.dead {
            return Err(PeerDead);
        }
        if self.ack_deadline.is_some_and(|due| due <= now) {
            self.ack_deadline = None;
            self.ack_now = true;
        }
        let Some(due) = self.rto_deadline else { return Ok(()) };
        if due > now {
            return Ok(());
        }
        self.stats.rto_expiries += 1;
        self.timeouts += 1;
        if self.timeouts >= self.config.dead_after_rtos {
            tracing::debug!(session = self.local, timeouts = self.timeouts, "peer declared dead");
            self.dead = true;
            self.rto_deadline = None;
            self.ack_deadline = None;
            return Err(PeerDead);
        }
        tracing::debug!(
            session = self.local,
            from_seq = self.ring.head(),
            timeouts = self.timeouts,
            "retransmission timeout, going back"
        );
        self.snd_nxt = self.ring.head();
        // Karn: what is in flight now is sent again, its acks time nothing.
        self.timed = None;
        self.rto_deadline = Some(now.saturating_add(self.current_rto()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::reliable::wire::HEADER_LEN;

    fn config() -> Config {
        Config {
            window: 4,
            send_queue: 6,
            max_payload: 64,
            rto_ns: 1_000,
            max_rto_ns: 3_000,
            dead_after_rtos: 3,
            ack_every: 2,
            ack_delay_ns: 100,
            receive_credit: 4,
        }
    }

    fn pair() -> (Session, Session) {
        (Session::new(config(), 1, 2).unwrap(), Session::new(config(), 2, 1).unwrap())
    }

    /// Every datagram `session` has to send now.
    fn drain(session: &mut Session, now: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 128];
        while let Some(len) = session.poll_transmit(now, &mut buf) {
            out.push(buf[..len].to_vec());
        }
        out
    }

    fn kind(datagram: &[u8]) -> (Kind, u64, u64) {
        let packet = Packet::new_checked(datagram).unwrap();
        (packet.kind(), packet.seq(), packet.ack())
    }

    #[test]
    fn delivers_in_order_and_acks_every_second_packet() {
        let (mut a, mut b) = pair();
        for msg in [&b"one"[..], b"two", b"three"] {
            a.send(msg).unwrap();
        }
        let wire = drain(&mut a, 0);
        assert_eq!(wire.len(), 3);
        assert_eq!(b.on_datagram(1, &wire[0]), Ok(Delivery::Message(b"one")));
        assert!(!b.ack_due_now(), "one packet: the ack waits");
        assert!(drain(&mut b, 1).is_empty(), "one packet: the ack waits");
        assert_eq!(b.poll_timeout(), Some(101));
        assert_eq!(b.on_datagram(2, &wire[1]), Ok(Delivery::Message(b"two")));
        assert!(b.ack_due_now(), "ack_every packets: the ack is due without the timer");
        let acks = drain(&mut b, 2);
        assert_eq!(acks.iter().map(|d| kind(d)).collect::<Vec<_>>(), [(Kind::Ack, 0, 2)]);
        assert!(!b.ack_due_now(), "sent");
        assert_eq!(a.on_datagram(3, &acks[0]), Ok(Delivery::Ack));
        assert_eq!((a.acked(), a.in_flight()), (2, 1));

        assert_eq!(b.on_datagram(4, &wire[2]), Ok(Delivery::Message(b"three")));
        assert!(drain(&mut b, 4).is_empty());
        b.handle_timeout(104).unwrap();
        let acks = drain(&mut b, 104);
        assert_eq!(kind(&acks[0]), (Kind::Ack, 0, 3));
        a.on_datagram(105, &acks[0]).unwrap();
        assert_eq!((a.acked(), a.unacked(), a.poll_timeout()), (3, 0, None));
    }

    #[test]
    fn data_carries_the_ack_so_no_standalone_ack_is_needed() {
        let (mut a, mut b) = pair();
        a.send(b"ping").unwrap();
        let ping = drain(&mut a, 0);
        b.on_datagram(1, &ping[0]).unwrap();
        b.send(b"pong").unwrap();
        let pong = drain(&mut b, 1);
        assert_eq!(pong.len(), 1);
        assert_eq!(kind(&pong[0]), (Kind::Data, 0, 1));
        assert_eq!(a.on_datagram(2, &pong[0]), Ok(Delivery::Message(b"pong")));
        assert_eq!(a.acked(), 1);
        assert_eq!(b.poll_timeout(), Some(1 + 1_000), "only the retransmission timer runs");
    }

    #[test]
    fn duplicates_and_gaps_are_dropped_and_re_acked_at_once() {
        let (mut a, mut b) = pair();
        a.send(b"x").unwrap();
        a.send(b"y").unwrap();
        let wire = drain(&mut a, 0);
        assert_eq!(b.on_datagram(1, &wire[1]), Err(DropReason::OutOfOrder));
        assert!(b.ack_due_now(), "a gap is acknowledged at once");
        assert_eq!(kind(&drain(&mut b, 1)[0]), (Kind::Ack, 0, 0));
        b.on_datagram(2, &wire[0]).unwrap();
        assert_eq!(b.on_datagram(3, &wire[0]), Err(DropReason::Duplicate));
        assert_eq!(kind(&drain(&mut b, 3)[0]), (Kind::Ack, 0, 1));
        let drops = b.stats().drops;
        assert_eq!((drops.out_of_order, drops.duplicate, b.stats().delivered), (1, 1, 1));
    }

    #[test]
    fn timeout_goes_back_to_the_oldest_unacked_and_backs_off() {
        let (mut a, mut b) = pair();
        for msg in [b"0", b"1", b"2"] {
            a.send(msg).unwrap();
        }
        let first = drain(&mut a, 0);
        b.on_datagram(1, &first[0]).unwrap();
        b.handle_timeout(101).unwrap();
        a.on_datagram(102, &drain(&mut b, 101)[0]).unwrap();
        assert_eq!(a.poll_timeout(), Some(1_102), "progress restarts the timer");

        a.handle_timeout(1_102).unwrap();
        let again = drain(&mut a, 1_102);
        assert_eq!(again.iter().map(|d| kind(d).1).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a.stats().retransmissions, 2);
        assert_eq!(a.poll_timeout(), Some(1_102 + 2_000), "doubled");
        a.handle_timeout(3_102).unwrap();
        assert_eq!(drain(&mut a, 3_102).len(), 2);
        assert_eq!(a.poll_timeout(), Some(3_102 + 3_000), "capped at max_rto");
    }

    #[test]
    fn dies_after_the_configured_timeouts_without_progress() {
        let (mut a, _) = pair();
        a.send(b"lost").unwrap();
        drain(&mut a, 0);
        assert_eq!(a.handle_timeout(999), Ok(()));
        assert_eq!(a.handle_timeout(1_000), Ok(()));
        drain(&mut a, 1_000);
        assert_eq!(a.handle_timeout(3_000), Ok(()));
        drain(&mut a, 3_000);
        assert_eq!(a.handle_timeout(5_999), Ok(()));
        assert_eq!(a.handle_timeout(6_000), Err(PeerDead));
        assert!(a.is_dead());
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(a.send(b"more"), Err(SendError::Dead));
        assert!(drain(&mut a, 8_000).is_empty());
        assert_eq!(a.handle_timeout(9_000), Err(PeerDead));
    }

    #[test]
    fn window_and_peer_credit_bound_what_is_in_flight() {
        let (mut a, mut b) = pair();
        for i in 0..6u8 {
            a.send(&[i]).unwrap();
        }
        assert_eq!(a.send(b"full"), Err(SendError::Backpressure));
        let wire = drain(&mut a, 0);
        assert_eq!(wire.len(), 4, "window of 4");
        assert_eq!(a.in_flight(), 4);

        // The receiver grants 1 (0 counts as 1): once it acked 4, only seq 4 may go.
        b.set_receive_credit(0);
        for datagram in &wire {
            b.on_datagram(1, datagram).unwrap();
        }
        let acks = drain(&mut b, 1);
        assert_eq!(acks.iter().map(|d| kind(d)).collect::<Vec<_>>(), [(Kind::Ack, 0, 4)]);
        a.on_datagram(2, &acks[0]).unwrap();
        assert_eq!(a.acked(), 4);
        assert_eq!(drain(&mut a, 2).len(), 1, "credit edge 4 + 1");

        b.set_receive_credit(8);
        let update = drain(&mut b, 3);
        assert_eq!(kind(&update[0]), (Kind::Ack, 0, 4), "a raised grant is announced");
        a.on_datagram(4, &update[0]).unwrap();
        assert_eq!(drain(&mut a, 4).len(), 1, "the last queued message");
    }

    #[test]
    fn refuses_what_is_not_for_it() {
        let (mut a, mut b) = pair();
        let mut c = Session::new(config(), 3, 1).unwrap();
        a.send(b"hi").unwrap();
        let wire = drain(&mut a, 0);
        assert_eq!(c.on_datagram(0, &wire[0]), Err(DropReason::UnknownSession(2)));
        let mut stranger = Session::new(config(), 9, 2).unwrap();
        stranger.send(b"hi").unwrap();
        let forged = drain(&mut stranger, 0);
        assert_eq!(b.on_datagram(0, &forged[0]), Err(DropReason::WrongPeer { src_session: 9 }));
        assert_eq!(
            b.on_datagram(0, &wire[0][..HEADER_LEN]),
            Err(DropReason::Malformed(crate::proto::reliable::wire::Error::Truncated))
        );
        let mut corrupt = wire[0].clone();
        corrupt[HEADER_LEN] ^= 1;
        assert_eq!(b.on_datagram(0, &corrupt), Err(DropReason::BadChecksum));

        // b acks a packet a never sent.
        b.on_datagram(0, &wire[0]).unwrap();
        b.on_datagram(0, &wire[0]).unwrap_err();
        let ack = drain(&mut b, 0);
        let mut fresh = Session::new(config(), 1, 2).unwrap();
        assert_eq!(fresh.on_datagram(0, &ack[0]), Err(DropReason::AckBeyondSent));
        let drops = b.stats().drops;
        assert_eq!((drops.wrong_peer, drops.malformed, drops.bad_checksum, drops.duplicate), (1, 1, 1, 1));
    }

    #[test]
    fn measured_round_trips_set_the_timeout_and_retransmissions_are_not_timed() {
        let config = Config { max_rto_ns: 100_000, ..config() };
        let mut a = Session::new(config.clone(), 1, 2).unwrap();
        let mut b = Session::new(config, 2, 1).unwrap();
        assert_eq!((a.rto(), a.srtt()), (1_000, None), "the floor until measured");
        // Round trips of 5 000 ns, well above the 1 000 ns floor.
        let mut now = 0;
        for _ in 0..4 {
            a.send(b"m").unwrap();
            a.send(b"n").unwrap();
            let wire = drain(&mut a, now);
            for d in &wire {
                b.on_datagram(now + 2_500, d).unwrap();
            }
            let acks = drain(&mut b, now + 2_500);
            a.on_datagram(now + 5_000, &acks[0]).unwrap();
            now += 5_000;
        }
        assert_eq!(a.srtt(), Some(5_000));
        // srtt + 4 rttvar: rttvar started at half the first sample and decays without variation.
        assert!((5_000..100_000).contains(&a.rto()), "rto {} follows the round trips", a.rto());
        // A go-back-N retransmission is not timed: its late ack would pass for a long round trip.
        let srtt = a.srtt();
        a.send(b"lost").unwrap();
        let lost = drain(&mut a, now);
        let due = a.poll_timeout().unwrap();
        a.handle_timeout(due).unwrap();
        let again = drain(&mut a, due);
        assert_eq!(again, lost);
        b.on_datagram(due + 1, &again[0]).unwrap();
        b.handle_timeout(due + 1_000).unwrap();
        a.on_datagram(due + 1_000, &drain(&mut b, due + 1_000)[0]).unwrap();
        assert_eq!(a.srtt(), srtt, "no sample from a retransmitted packet");
        assert_eq!(a.poll_timeout(), None);
    }

    #[test]
    fn send_with_writes_the_message_in_place() {
        let (mut a, mut b) = pair();
        for i in 0..6u8 {
            assert!(!a.send_queue_full());
            a.send_with(|slot| {
                assert_eq!(slot.len(), 64, "a whole max_payload slot");
                slot[..2].copy_from_slice(&[i, i]);
                2
            })
            .unwrap();
        }
        assert!(a.send_queue_full());
        assert_eq!(a.send_with(|_| unreachable!("not called when full")), Err(SendError::Backpressure));
        let wire = drain(&mut a, 0);
        assert_eq!(b.on_datagram(1, &wire[3]), Err(DropReason::OutOfOrder));
        assert_eq!(b.on_datagram(1, &wire[0]), Ok(Delivery::Message(&[0, 0][..])));
        assert_eq!(b.on_datagram(1, &wire[1]), Ok(Delivery::Message(&[1, 1][..])));
    }

    #[test]
    fn oversized_messages_are_refused() {
        let (mut a, _) = pair();
        assert_eq!(a.send(&[0; 65]), Err(SendError::TooLarge { len: 65, max: 64 }));
        assert_eq!(a.send(&[0; 64]), Ok(()));
        let mut small = [0u8; HEADER_LEN + 10];
        assert_eq!(a.poll_transmit(0, &mut small), None, "does not fit: not sent");
        assert_eq!(a.stats().data_sent, 0);
    }
    /// Every datagram `session` has to send now, external parts appended from `memory`
    /// (addresses are offsets into it).
    fn drain_split(session: &mut Session, now: u64, memory: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 128];
        while let Some((len, external)) = session.poll_transmit_split(now, &mut buf) {
            let mut datagram = buf[..len].to_vec();
            if let Some(e) = external {
                datagram.extend_from_slice(&memory[e.addr..e.addr + e.len as usize]);
            }
            out.push(datagram);
        }
        out
    }

    /// The external part of a message whose inline bytes are `inline`.
    fn external(inline: &[u8], memory: &[u8], addr: usize, len: usize, cookie: u32) -> External {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(inline);
        hasher.update(&memory[addr..addr + len]);
        External { addr, len: len as u32, crc: hasher.finalize(), cookie }
    }

    #[test]
    fn split_messages_carry_their_external_part_and_are_retransmitted_from_it() {
        let (mut a, mut b) = pair();
        let memory: Vec<u8> = (0..200u8).collect();
        assert_eq!(a.next_seq(), 0);
        a.send(b"plain").unwrap();
        a.send_split(b"\x03", external(b"\x03", &memory, 10, 60, 7)).unwrap();
        a.send_split(b"", external(b"", &memory, 100, 64, 7)).unwrap();
        assert_eq!(a.next_seq(), 3);
        assert_eq!(
            a.send_split(b"xx", external(b"xx", &memory, 0, 63, 7)),
            Err(SendError::TooLarge { len: 65, max: 64 })
        );
        let mut buf = [0u8; 128];
        assert!(a.poll_transmit(0, &mut buf).is_some(), "the plain message");
        assert_eq!(a.poll_transmit(0, &mut buf), None, "stops at a split message");
        let wire = drain_split(&mut a, 0, &memory);
        assert_eq!(wire.len(), 2);
        let mut first = b"\x03".to_vec();
        first.extend_from_slice(&memory[10..70]);
        // Everything is lost: go-back-N resends all three, the split ones from memory again.
        a.handle_timeout(1_000).unwrap();
        let again = drain_split(&mut a, 1_000, &memory);
        assert_eq!(again.len(), 3);
        assert_eq!(&again[1..], &wire[..]);
        assert_eq!(b.on_datagram(1, &again[0]), Ok(Delivery::Message(&b"plain"[..])));
        assert_eq!(b.on_datagram(2, &again[1]), Ok(Delivery::Message(&first[..])));
        assert_eq!(b.on_datagram(3, &again[2]), Ok(Delivery::Message(&memory[100..164])));
        assert_eq!(a.stats().retransmissions, 3);
        let acks = drain(&mut b, 3);
        a.on_datagram(4, &acks[0]).unwrap();
        assert_eq!((a.acked(), a.unacked()), (3, 0));
    }

    #[test]
    fn abandoned_sends_are_never_sent_again() {
        let (mut a, mut b) = pair();
        let memory = [5u8; 64];
        a.send_split(b"", external(b"", &memory, 0, 64, 1)).unwrap();
        a.send_split(b"", external(b"", &memory, 0, 64, 1)).unwrap();
        let wire = drain_split(&mut a, 0, &memory);
        assert_eq!(wire.len(), 2);
        a.abandon_sends();
        assert_eq!((a.unacked(), a.poll_timeout()), (0, None));
        assert!(drain_split(&mut a, 5_000, &memory).is_empty());
        // The peer's ack of what was in flight is still taken.
        b.on_datagram(1, &wire[0]).unwrap();
        b.on_datagram(1, &wire[1]).unwrap();
        let acks = drain(&mut b, 1);
        assert_eq!(a.on_datagram(2, &acks[0]), Ok(Delivery::Ack));
        a.send(b"after").unwrap();
        let next = drain(&mut a, 3);
        assert_eq!(kind(&next[0]), (Kind::Data, 2, 0));
    }
}
