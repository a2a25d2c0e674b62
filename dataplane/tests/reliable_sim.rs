//! Reliable sessions over a simulated faulty link, on a virtual clock.
//!
//! Two sessions exchange thousands of messages both ways through a link that drops, duplicates,
//! delays (so reorders) and corrupts datagrams, driven by a fixed-seed PRNG so every run is
//! reproducible. Every message must arrive exactly once, in order, byte for byte, within a bounded
//! virtual time. Further tests: a peer that goes silent is declared dead after the configured
//! timeouts; the window and the peer's credit bound what is in flight; datagrams for sessions a
//! demux does not hold are dropped and counted.
//!
//! The whole file runs in a few seconds in a debug build.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use zcx_dataplane::proto::reliable::wire::{Kind, Packet};
use zcx_dataplane::proto::reliable::{Config, Delivery, Demux, DropReason, SendError, Session, Stats};

/// splitmix64: tiny, and good enough to pick faults and fill messages.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent / 100`.
    fn chance(&mut self, percent: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 100.0 < percent
    }
}

/// Fault rates of one link direction, in percent of datagrams.
#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    loss: f64,
    duplicate: f64,
    /// Held back by up to `REORDER_DELAY_NS`, so later datagrams overtake it.
    reorder: f64,
    /// One to three bits flipped.
    corrupt: f64,
}

const LATENCY_NS: u64 = 5_000;
const REORDER_DELAY_NS: u64 = 40_000;

/// One direction of the link: datagrams in flight, ordered by arrival time, then by send order.
struct Link {
    faults: Faults,
    rng: Rng,
    in_flight: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    sent: u64,
}

impl Link {
    fn new(faults: Faults, seed: u64) -> Link {
        Link { faults, rng: Rng(seed), in_flight: BinaryHeap::new(), sent: 0 }
    }

    fn push(&mut self, now: u64, datagram: &[u8]) {
        if self.rng.chance(self.faults.loss) {
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let mut bytes = datagram.to_vec();
            if self.rng.chance(self.faults.corrupt) {
                for _ in 0..=self.rng.below(3) {
                    let bit = self.rng.below(bytes.len() as u64 * 8);
                    bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
            }
            let mut at = now + LATENCY_NS;
            if self.rng.chance(self.faults.reorder) {
                at += 1 + self.rng.below(REORDER_DELAY_NS);
            }
            self.in_flight.push(Reverse((at, self.sent, bytes)));
            self.sent += 1;
        }
    }

    fn next_arrival(&self) -> Option<u64> {
        self.in_flight.peek().map(|Reverse((at, _, _))| *at)
    }

    fn pop_due(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.next_arrival()? > now {
            return None;
        }
        self.in_flight.pop().map(|Reverse((_, _, bytes))| bytes)
    }
}

/// Message `index` of the stream from side `side`: a length cycling through 0..=max (empty
/// messages included) and pseudo-random bytes, so any mix-up shows in a byte comparison.
fn message(seed: u64, side: u64, index: u64, max: usize) -> Vec<u8> {
    let mut rng = Rng(seed ^ (side << 40) ^ index.wrapping_mul(0x1000_0001));
    let len = (index as usize * 37 + side as usize * 11) % (max + 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

fn sim_config() -> Config {
    Config {
        window: 16,
        send_queue: 32,
        max_payload: 200,
        rto_ns: 200_000,
        max_rto_ns: 1_600_000,
        // Far more timeouts in a row than 10 % loss ever causes: these links are slow, not dead.
        dead_after_rtos: 20,
        ack_every: 4,
        ack_delay_ns: 20_000,
        receive_credit: 16,
    }
}

/// One side: its session, the stream it sends, and what it received.
struct Side {
    session: Session,
    outgoing: Vec<Vec<u8>>,
    queued: usize,
    received: Vec<Vec<u8>>,
}

impl Side {
    fn new(config: &Config, local: u32, peer: u32, outgoing: Vec<Vec<u8>>) -> Side {
        Side {
            session: Session::new(config.clone(), local, peer).unwrap(),
            outgoing,
            queued: 0,
            received: vec![],
        }
    }

    /// Queues as much of the stream as the session takes.
    fn queue(&mut self) {
        while self.queued < self.outgoing.len() {
            match self.session.send(&self.outgoing[self.queued]) {
                Ok(()) => self.queued += 1,
                Err(SendError::Backpressure) => break,
                Err(err) => panic!("send failed: {err}"),
            }
        }
    }

    /// Sends everything due onto `link`, checking each DATA packet against the send bound.
    fn transmit(&mut self, now: u64, link: &mut Link, buf: &mut [u8], max_in_flight: &mut u64) {
        while let Some(len) = self.session.poll_transmit(now, buf) {
            let packet = Packet::new_checked(&buf[..len]).expect("a session emits valid datagrams");
            if packet.kind() == Kind::Data {
                let in_flight = packet.seq() + 1 - self.session.acked();
                *max_in_flight = (*max_in_flight).max(in_flight);
            }
            link.push(now, &buf[..len]);
        }
    }

    fn receive(&mut self, now: u64, datagram: &[u8]) {
        if let Ok(Delivery::Message(payload)) = self.session.on_datagram(now, datagram) {
            self.received.push(payload.to_vec());
        }
    }

    fn done(&self) -> bool {
        self.queued == self.outgoing.len() && self.session.unacked() == 0
    }
}

struct Outcome {
    end_ns: u64,
    stats: [Stats; 2],
    /// Largest `seq + 1 - acked` of any DATA packet either side sent.
    max_in_flight: u64,
}

/// Runs both streams to completion over links with `faults` both ways, checking delivery.
fn exchange(config: &Config, faults: Faults, seed: u64, messages: u64) -> Outcome {
    let stream = |side| (0..messages).map(|i| message(seed, side, i, config.max_payload)).collect();
    let mut a = Side::new(config, 1, 2, stream(0));
    let mut b = Side::new(config, 2, 1, stream(1));
    let mut a_to_b = Link::new(faults, seed.wrapping_mul(3).wrapping_add(1));
    let mut b_to_a = Link::new(faults, seed.wrapping_mul(5).wrapping_add(2));
    let mut buf = vec![0u8; config.datagram_len()];
    let mut max_in_flight = 0;
    // At least one message per retransmission timeout on average, however faulty the link.
    let time_limit = messages * config.rto_ns;
    let mut now = 0;
    loop {
        a.queue();
        b.queue();
        a.transmit(now, &mut a_to_b, &mut buf, &mut max_in_flight);
        b.transmit(now, &mut b_to_a, &mut buf, &mut max_in_flight);
        if a.done() && b.done() {
            break;
        }
        let next = [
            a_to_b.next_arrival(),
            b_to_a.next_arrival(),
            a.session.poll_timeout(),
            b.session.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("work left but nothing scheduled: the sessions stalled");
        assert!(next >= now, "time went backwards");
        now = next;
        assert!(now <= time_limit, "seed {seed:#x} {faults:?}: not done after {now} ns");
        while let Some(datagram) = a_to_b.pop_due(now) {
            b.receive(now, &datagram);
        }
        while let Some(datagram) = b_to_a.pop_due(now) {
            a.receive(now, &datagram);
        }
        for side in [&mut a, &mut b] {
            if side.session.poll_timeout().is_some_and(|due| due <= now) {
                side.session.handle_timeout(now).expect("a live peer was declared dead");
            }
        }
    }
    for (from, to) in [(&a, &b), (&b, &a)] {
        assert_eq!(to.received.len(), from.outgoing.len(), "seed {seed:#x} {faults:?}: count");
        for (i, (got, sent)) in to.received.iter().zip(&from.outgoing).enumerate() {
            assert!(got == sent, "seed {seed:#x} {faults:?}: message {i} differs");
        }
        assert_eq!(to.session.stats().delivered, messages);
    }
    assert!(max_in_flight <= u64::from(config.window));
    Outcome { end_ns: now, stats: [*a.session.stats(), *b.session.stats()], max_in_flight }
}

const SEEDS: [u64; 3] = [1, 0x5EED_CAFE, 0xDEAD_BEEF_0BAD_F00D];
const MESSAGES: u64 = 2_000;

fn sum(outcome: &Outcome, field: fn(&Stats) -> u64) -> u64 {
    outcome.stats.iter().map(field).sum()
}

#[test]
fn lossless_link_needs_no_retransmission() {
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), Faults::default(), seed, MESSAGES);
        assert_eq!(sum(&outcome, |s| s.retransmissions + s.rto_expiries + s.drops.total()), 0);
        assert_eq!(sum(&outcome, |s| s.data_sent), 2 * MESSAGES);
        // Both ways busy: most acks ride on data.
        assert!(sum(&outcome, |s| s.acks_sent) < MESSAGES / 2);
        // Pipelined: far faster than one message per one-way latency.
        assert!(outcome.end_ns < MESSAGES * LATENCY_NS / 4, "took {} ns", outcome.end_ns);
    }
}

#[test]
fn one_percent_loss() {
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), Faults { loss: 1.0, ..Faults::default() }, seed, MESSAGES);
        assert!(sum(&outcome, |s| s.retransmissions) > 0);
    }
}

#[test]
fn ten_percent_loss() {
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), Faults { loss: 10.0, ..Faults::default() }, seed, MESSAGES);
        assert!(sum(&outcome, |s| s.rto_expiries) > 10);
    }
}

#[test]
fn duplication() {
    for seed in SEEDS {
        let outcome =
            exchange(&sim_config(), Faults { duplicate: 10.0, ..Faults::default() }, seed, MESSAGES);
        assert!(sum(&outcome, |s| s.drops.duplicate) > 100);
    }
}

#[test]
fn reordering() {
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), Faults { reorder: 5.0, ..Faults::default() }, seed, MESSAGES);
        assert!(sum(&outcome, |s| s.drops.out_of_order) > 0);
    }
}

#[test]
fn corruption() {
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), Faults { corrupt: 5.0, ..Faults::default() }, seed, MESSAGES);
        assert!(sum(&outcome, |s| s.drops.bad_checksum) > 100);
    }
}

#[test]
fn everything_at_once() {
    let faults = Faults { loss: 3.0, duplicate: 3.0, reorder: 3.0, corrupt: 3.0 };
    for seed in SEEDS {
        let outcome = exchange(&sim_config(), faults, seed, MESSAGES);
        let drops = sum(&outcome, |s| s.drops.duplicate)
            .min(sum(&outcome, |s| s.drops.out_of_order))
            .min(sum(&outcome, |s| s.drops.bad_checksum + s.drops.malformed));
        assert!(drops > 0, "every fault happened");
    }
}

#[test]
fn window_and_credit_bound_in_flight_packets() {
    let faults = Faults { loss: 2.0, ..Faults::default() };
    let outcome = exchange(&sim_config(), faults, 7, 500);
    assert_eq!(outcome.max_in_flight, 16, "the window is reached and never exceeded");

    let config = Config { receive_credit: 5, ..sim_config() };
    let outcome = exchange(&config, faults, 7, 500);
    assert_eq!(outcome.max_in_flight, 5, "the peer's credit is reached and never exceeded");
    assert!(outcome.end_ns > 0);
}

#[test]
fn silent_peer_is_declared_dead_after_the_configured_timeouts() {
    let config = Config { dead_after_rtos: 5, ..sim_config() };
    let mut a = Session::new(config.clone(), 1, 2).unwrap();
    let mut b = Session::new(config.clone(), 2, 1).unwrap();
    let mut buf = vec![0u8; config.datagram_len()];
    // A healthy start: one message there and its ack back.
    a.send(b"hello").unwrap();
    let len = a.poll_transmit(0, &mut buf).unwrap();
    assert!(matches!(b.on_datagram(10, &buf[..len]), Ok(Delivery::Message(b"hello"))));
    b.handle_timeout(10 + config.ack_delay_ns).unwrap();
    let len = b.poll_transmit(10 + config.ack_delay_ns, &mut buf).unwrap();
    a.on_datagram(30_000, &buf[..len]).unwrap();
    assert_eq!(a.acked(), 1);

    // Then b falls silent; a keeps sending.
    let start = 40_000;
    a.send(b"anyone?").unwrap();
    assert!(a.poll_transmit(start, &mut buf).is_some());
    let mut expected_death = start;
    for i in 0..config.dead_after_rtos {
        expected_death += (config.rto_ns << i).min(config.max_rto_ns);
    }
    let mut expiries = 0;
    let death = loop {
        let due = a.poll_timeout().expect("a timer runs while data is unacknowledged");
        match a.handle_timeout(due) {
            Ok(()) => expiries += 1,
            Err(_) => break due,
        }
        assert!(a.poll_transmit(due, &mut buf).is_some(), "each timeout sends the oldest again");
        while a.poll_transmit(due, &mut buf).is_some() {}
    };
    assert_eq!(expiries + 1, config.dead_after_rtos);
    assert_eq!(death, expected_death);
    assert_eq!(a.stats().rto_expiries, u64::from(config.dead_after_rtos));
    assert_eq!(a.stats().retransmissions, u64::from(config.dead_after_rtos - 1));
    assert!(a.is_dead());
    assert_eq!(a.send(b"x"), Err(SendError::Dead));
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(a.poll_transmit(death, &mut buf), None);
}

#[test]
fn datagrams_for_unknown_sessions_are_dropped_and_counted() {
    let config = sim_config();
    let mut demux = Demux::new();
    demux.insert(Session::new(config.clone(), 10, 1).unwrap()).unwrap();
    demux.insert(Session::new(config.clone(), 30, 3).unwrap()).unwrap();
    let mut senders = [
        Session::new(config.clone(), 1, 10).unwrap(),
        Session::new(config.clone(), 3, 30).unwrap(),
        // No session 99 behind the demux.
        Session::new(config.clone(), 50, 99).unwrap(),
        // Session 10 exists but its peer is 1, not 51.
        Session::new(config.clone(), 51, 10).unwrap(),
    ];
    let mut received: [Vec<Vec<u8>>; 2] = [vec![], vec![]];
    let mut buf = vec![0u8; config.datagram_len()];
    let mut wire = Vec::new();
    for round in 0..20u8 {
        let now = u64::from(round) * 100_000;
        let later = now + config.ack_delay_ns;
        for (i, sender) in senders.iter_mut().enumerate() {
            sender.send(&[i as u8, round]).unwrap();
            while let Some(len) = sender.poll_transmit(now, &mut buf) {
                wire.push(buf[..len].to_vec());
            }
        }
        for datagram in wire.drain(..) {
            match demux.on_datagram(now, &datagram) {
                Ok((10, Delivery::Message(m))) => received[0].push(m.to_vec()),
                Ok((30, Delivery::Message(m))) => received[1].push(m.to_vec()),
                Ok(other) => panic!("unexpected delivery {other:?}"),
                Err(DropReason::UnknownSession(99)) | Err(DropReason::WrongPeer { src_session: 51 }) => {}
                Err(reason) => panic!("unexpected drop: {reason}"),
            }
        }
        // Acks back to the two real senders, so their windows keep moving.
        for (local, sender) in [(10, 0), (30, 1)] {
            let session = demux.get_mut(local).unwrap();
            session.handle_timeout(later).unwrap();
            while let Some(len) = session.poll_transmit(later, &mut buf) {
                senders[sender].on_datagram(later, &buf[..len]).unwrap();
            }
        }
    }
    for (i, got) in received.iter().enumerate() {
        let expected: Vec<Vec<u8>> = (0..20u8).map(|round| vec![i as u8, round]).collect();
        assert_eq!(got, &expected);
    }
    // Nobody acks the two strays, so each sends its window's worth and then waits.
    let window = u64::from(config.window);
    assert_eq!(demux.drops().unknown_session, window);
    assert_eq!(demux.get(10).unwrap().stats().drops.wrong_peer, window);
    assert_eq!(demux.get(30).unwrap().stats().drops.total(), 0);
}
