//! Two reliable sessions (`proto::reliable::Session`), sans-IO, talking over a link the fuzzer
//! controls: it sends messages (`send`, `send_split` with external bytes, `send_with`), drains
//! transmissions, delivers, drops, duplicates, reorders, corrupts, truncates and pads datagrams,
//! injects forged ones, changes credits, and advances `now` and the timers.
//!
//! Forged datagrams are ones the protocol must refuse: random bytes, genuine ones with one to
//! three bits flipped (the CRC-32 catches those) or cut short, and well-checksummed ones naming
//! the wrong sessions, acknowledging data never sent, or carrying DATA other than the next
//! expected (a duplicate or a gap) with a truthful ack. (A well-checksummed DATA with the next
//! sequence number is indistinguishable from the peer's: the checksum is not authentication.)
//!
//! Asserts: every message delivered is the next one the peer queued, byte-equal, so each is
//! delivered once and in order; forged and damaged datagrams deliver nothing; the sessions'
//! counters agree; and when both ends are still alive, a lossless link then delivers and
//! acknowledges every queued message (no stall) within a bounded number of steps.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use zcx_dataplane::proto::reliable::wire::{Header, Kind, Packet};
use zcx_dataplane::proto::reliable::{Config, Delivery, DropReason, External, SendError, Session};

/// One end: the session, what it queued, what it delivered, its external bytes.
struct End {
    session: Session,
    sent: Vec<Vec<u8>>,
    delivered: usize,
    /// The external part of each split message, by cookie.
    externals: Vec<Vec<u8>>,
}

impl End {
    fn new(config: &Config, local: u32, peer: u32) -> End {
        let session = Session::new(config.clone(), local, peer).expect("validated config");
        End { session, sent: Vec::new(), delivered: 0, externals: Vec::new() }
    }

    /// Queues a message the way `how` picks, recording it when the session took it.
    fn send(&mut self, u: &mut Unstructured<'_>, how: u8) -> arbitrary::Result<()> {
        let max = self.session.config().max_payload;
        let full = self.session.send_queue_full();
        let dead = self.session.is_dead();
        let message = zcx_fuzz::gen::bytes_up_to(u, max + 2)?;
        let result = match how % 3 {
            0 => self.session.send(&message),
            1 => {
                let cut = u.int_in_range(0..=message.len())?;
                let (inline, external) = message.split_at(cut);
                let cookie = self.externals.len() as u32;
                let ext = External {
                    addr: 0x1000 + cookie as usize,
                    len: external.len() as u32,
                    crc: crc32fast::hash(&message),
                    cookie,
                };
                let result = self.session.send_split(inline, ext);
                if result.is_ok() {
                    self.externals.push(external.to_vec());
                }
                result
            }
            _ => {
                let want: usize = u.int_in_range(0..=max + 2)?;
                let mut called = false;
                let result = self.session.send_with(|slot| {
                    called = true;
                    assert_eq!(slot.len(), max, "a slot holds max_payload bytes");
                    for (i, b) in slot.iter_mut().enumerate() {
                        *b = message.get(i).copied().unwrap_or(i as u8);
                    }
                    want
                });
                if result.is_ok() {
                    assert!(called);
                    let len = want.min(max);
                    let bytes = (0..len).map(|i| message.get(i).copied().unwrap_or(i as u8)).collect();
                    self.sent.push(bytes);
                } else {
                    assert!(!called, "send_with filled a slot it then refused");
                }
                return check_send(result, full, dead, None, max);
            }
        };
        if result.is_ok() {
            self.sent.push(message.clone());
        }
        check_send(result, full, dead, Some(message.len()), max)
    }

    /// Every datagram the session has to send now, as the wire carries them.
    fn transmit(&mut self, now: u64, limit: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.session.config().datagram_len()];
        while out.len() < limit {
            let Some((len, external)) = self.session.poll_transmit_split(now, &mut buf) else { break };
            let mut datagram = buf[..len].to_vec();
            if let Some(ext) = external {
                let bytes = &self.externals[ext.cookie as usize];
                assert_eq!((ext.addr, ext.len as usize), (0x1000 + ext.cookie as usize, bytes.len()));
                datagram.extend_from_slice(bytes);
            }
            out.push(datagram);
        }
        out
    }
}

fn check_send(
    result: Result<(), SendError>,
    full: bool,
    dead: bool,
    len: Option<usize>,
    max: usize,
) -> arbitrary::Result<()> {
    match result {
        Ok(()) => assert!(!full && !dead),
        Err(SendError::Dead) => assert!(dead),
        Err(SendError::TooLarge { len: l, max: m }) => {
            assert!(!dead);
            assert_eq!((Some(l), m), (len, max));
            assert!(l > m);
        }
        Err(SendError::Backpressure) => assert!(full && !dead),
    }
    Ok(())
}

/// Hands `datagram` to `to`, checking what comes out against what `from` queued.
fn deliver(to: &mut End, from: &End, now: u64, datagram: &[u8]) -> Result<bool, DropReason> {
    let outcome = to.session.on_datagram(now, datagram);
    match outcome {
        Ok(Delivery::Message(message)) => {
            let expected = from.sent.get(to.delivered).expect("delivered more messages than the peer queued");
            assert_eq!(message, &expected[..], "message {} differs from what was sent", to.delivered);
            to.delivered += 1;
        }
        Ok(Delivery::Ack) => {}
        Err(_) => {}
    }
    assert_eq!(to.session.received(), to.delivered as u64);
    assert!(to.session.acked() <= to.sent.len() as u64);
    assert!(to.session.in_flight() <= u64::from(to.session.config().window));
    outcome.map(|d| matches!(d, Delivery::Message(_)))
}

/// A well-checksummed datagram to `to` (from `from`'s side) that `to` must refuse.
fn forge(u: &mut Unstructured<'_>, to: &End, from: &End) -> arbitrary::Result<Option<Vec<u8>>> {
    let (local, peer) = (to.session.local_id(), to.session.peer_id());
    let snd_max = to.session.acked() + to.session.in_flight();
    // What `from` truly received from `to`: any ack up to it is the truth.
    let true_ack = u.int_in_range(0..=from.session.received())?;
    let credit = u.int_in_range(1..=u32::MAX)?;
    let payload = zcx_fuzz::gen::bytes_up_to(u, 64)?;
    let received = to.session.received();
    let data =
        |seq| Header { kind: Kind::Data, src_session: peer, dst_session: local, seq, ack: true_ack, credit };
    let header = match u.int_in_range(0u8..=4)? {
        0 => {
            let dst = u.arbitrary()?;
            if dst == local {
                return Ok(None);
            }
            Header { dst_session: dst, ..data(u.arbitrary()?) }
        }
        1 => {
            let src = u.arbitrary()?;
            if src == peer {
                return Ok(None);
            }
            Header { src_session: src, ..data(u.arbitrary()?) }
        }
        2 if snd_max < u64::MAX => {
            let ack = u.int_in_range(snd_max + 1..=u64::MAX)?;
            if u.arbitrary()? {
                Header { kind: Kind::Ack, seq: 0, ack, ..data(0) }
            } else {
                Header { ack, ..data(u.arbitrary()?) }
            }
        }
        3 if received > 0 => data(u.int_in_range(0..=received - 1)?),
        4 if received < u64::MAX => data(u.int_in_range(received + 1..=u64::MAX)?),
        _ => return Ok(None),
    };
    let payload = if header.kind == Kind::Ack { &[][..] } else { &payload[..] };
    let mut buf = vec![0u8; 40 + payload.len()];
    let n = header.emit(payload, &mut buf).expect("a forged header follows the rules");
    buf.truncate(n);
    Ok(Some(buf))
}

/// Damages a genuine datagram so that it must be refused.
fn damage(u: &mut Unstructured<'_>, datagram: &[u8]) -> arbitrary::Result<Vec<u8>> {
    let mut d = datagram.to_vec();
    if u.arbitrary()? && !d.is_empty() {
        d.truncate(u.int_in_range(0..=d.len() - 1)?);
    } else {
        // At most three bit flips at distinct positions: the CRC-32 detects them all at these
        // lengths.
        let bits = d.len() * 8;
        let mut flipped: Vec<usize> = Vec::new();
        for _ in 0..u.int_in_range(1..=3)? {
            let bit = u.int_in_range(0..=bits - 1)?;
            if !flipped.contains(&bit) {
                flipped.push(bit);
                d[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }
    Ok(d)
}

fn config(u: &mut Unstructured<'_>) -> arbitrary::Result<Config> {
    let window = u.int_in_range(1..=8)?;
    let rto_ns = u.int_in_range(2..=100_000)?;
    Ok(Config {
        window,
        send_queue: window + u.int_in_range(0..=8)?,
        max_payload: u.int_in_range(0..=96)?,
        rto_ns,
        max_rto_ns: rto_ns.saturating_mul(u.int_in_range(1..=16)?),
        dead_after_rtos: u.int_in_range(1..=32)?,
        ack_every: u.int_in_range(1..=8)?,
        ack_delay_ns: u.int_in_range(0..=rto_ns - 1)?,
        receive_credit: u.int_in_range(1..=16)?,
    })
}

/// Runs both ends over a lossless, in-order link until everything is delivered and acked.
fn heal(ends: &mut [End; 2], links: &mut [Vec<Vec<u8>>; 2], mut now: u64) {
    for _ in 0..20_000 {
        if ends.iter().any(|e| e.session.is_dead()) {
            // A dead end may be legitimate here (the lossy phase used up its timeouts).
            return;
        }
        let done = (0..2).all(|i| {
            let (me, peer) = (&ends[i], &ends[1 - i]);
            me.session.acked() == me.sent.len() as u64 && peer.delivered == me.sent.len()
        });
        if done {
            return;
        }
        let mut moved = false;
        for i in 0..2 {
            let out = ends[i].transmit(now, usize::MAX);
            moved |= !out.is_empty();
            links[i].extend(out);
        }
        for (i, link) in links.iter_mut().enumerate() {
            for datagram in std::mem::take(link) {
                moved = true;
                let [a, b] = &mut *ends;
                let (from, to) = if i == 0 { (&*a, b) } else { (&*b, a) };
                let _ = deliver(to, from, now, &datagram);
            }
        }
        if !moved {
            let next = ends.iter().filter_map(|e| e.session.poll_timeout()).min();
            let Some(next) = next else {
                panic!(
                    "stalled: nothing to send, no timer, yet not all delivered and acked \
                     (acked {}/{} and {}/{}, delivered {} and {})",
                    ends[0].session.acked(),
                    ends[0].sent.len(),
                    ends[1].session.acked(),
                    ends[1].sent.len(),
                    ends[1].delivered,
                    ends[0].delivered
                )
            };
            now = now.max(next);
            for end in ends.iter_mut() {
                let _ = end.session.handle_timeout(now);
            }
        }
    }
    panic!("a lossless link did not deliver everything in 20000 steps");
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let config = config(u)?;
    if config.validate().is_err() {
        return Ok(());
    }
    let (id_a, id_b): (u32, u32) = (u.arbitrary()?, u.arbitrary()?);
    if id_a == id_b {
        return Ok(());
    }
    let mut ends = [End::new(&config, id_a, id_b), End::new(&config, id_b, id_a)];
    // links[i]: datagrams from end i to end 1 - i, in flight, in any order.
    let mut links: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut now: u64 = u.int_in_range(0..=1 << 40)?;
    for _ in 0..2_000 {
        if u.is_empty() {
            break;
        }
        let op: u8 = u.arbitrary()?;
        let side = usize::from(op & 1);
        let [a, b] = &mut ends;
        let (me, other) = if side == 0 { (a, b) } else { (b, a) };
        match op >> 1 {
            0..=19 => me.send(u, op >> 1)?,
            20..=39 => {
                let limit = u.int_in_range(1..=16)?;
                let out = me.transmit(now, limit);
                links[side].extend(out);
            }
            40..=79 => {
                // A datagram from `other` arrives at `me`, picked anywhere in the queue.
                let queue = &mut links[1 - side];
                if queue.is_empty() {
                    continue;
                }
                let i = u.choose_index(queue.len())?;
                match u.int_in_range(0u8..=9)? {
                    0..=4 => {
                        let d = queue.remove(i);
                        let _ = deliver(me, other, now, &d);
                    }
                    5 => drop(queue.remove(i)),
                    6 => {
                        let d = queue[i].clone();
                        let _ = deliver(me, other, now, &d);
                    }
                    7 => {
                        let d = damage(u, &queue[i])?;
                        assert!(deliver(me, other, now, &d).is_err(), "a damaged datagram was accepted");
                    }
                    _ => {
                        // Link padding after the datagram changes nothing.
                        let mut d = queue.remove(i);
                        d.extend_from_slice(&zcx_fuzz::gen::bytes_up_to(u, 24)?);
                        let _ = deliver(me, other, now, &d);
                    }
                }
            }
            80..=89 => {
                if let Some(d) = forge(u, me, other)? {
                    assert!(deliver(me, other, now, &d).is_err(), "a forged datagram was accepted");
                }
            }
            90..=92 => {
                let d = zcx_fuzz::gen::bytes_up_to(u, 80)?;
                // Bytes that happen to form a well-checksummed datagram (the fuzzer can learn
                // the checksum) are as good as the peer's; only the others must be refused.
                if Packet::new_checked(&d).is_err() {
                    assert!(deliver(me, other, now, &d).is_err(), "random bytes were accepted");
                }
            }
            93..=99 => me.session.set_receive_credit(u.arbitrary::<u32>()? % 24),
            100..=119 => now = now.saturating_add(1 << u.int_in_range(0..=20)?),
            120..=124 => {
                if let Some(due) = me.session.poll_timeout() {
                    now = now.max(due);
                }
            }
            _ => {
                let was_dead = me.session.is_dead();
                let result = me.session.handle_timeout(now);
                assert_eq!(result.is_err(), me.session.is_dead());
                if was_dead {
                    assert!(result.is_err(), "a dead session came back");
                }
            }
        }
    }
    heal(&mut ends, &mut links, now);
    Ok(())
}

fuzz_target!(|data: &[u8]| zcx_fuzz::with_unstructured(data, run));
