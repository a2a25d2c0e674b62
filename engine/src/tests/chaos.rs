//! Random mixes of operations on both sides over random networks, with the link failing at a
//! random frame (or not at all): every operation completes exactly once, and nothing is left.

use zcx_dataplane::proto::wire::AtomicOp;

use super::pair::{pattern, recv_buf, send_buf, Net, Pair, Who};
use crate::{CloseMode, OpId, Start};

/// A fixed-seed generator, so every run makes the same choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Buffers the operations use, kept alive (and unmoved) for the whole run.
struct Buffers {
    sends: Vec<Vec<u8>>,
    recvs: Vec<Vec<u8>>,
}

#[test]
fn every_operation_completes_once_whatever_fails_when() {
    for seed in 1..=300u64 {
        run(seed);
    }
}

fn run(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let net = Net {
        native: rng.chance(50),
        rma_later: rng.chance(50),
        payloads_later: rng.chance(50),
        placed: rng.chance(30),
        peer_watched: rng.chance(50),
    };
    let mut p = Pair::new(net);
    let region_a = p.a.register_rw(1024);
    let region_b = p.b.register_rw(1024);
    // Sizes of the buffers are fixed up front so the vectors never move.
    let mut bufs = Buffers {
        sends: (0..24).map(|i| pattern([8, 200, 700, 3000, 9000][i % 5], i as u8)).collect(),
        recvs: (0..24).map(|i| vec![0u8; [16, 300, 1000, 4000, 9000][i % 5]]).collect(),
    };
    let mut pending: Vec<(Who, OpId)> = Vec::new();
    if rng.chance(80) {
        p.fail_after = Some(rng.below(40) as usize);
    }
    for step in 0..24 {
        let who = if rng.chance(50) { Who::A } else { Who::B };
        let (region, peer_key) = match who {
            Who::A => (region_b, p.b.region(region_b).key.clone()),
            Who::B => (region_a, p.a.region(region_a).key.clone()),
        };
        let peer_addr = match who {
            Who::A => p.b.region(region).addr(8 * rng.below(64) as usize),
            Who::B => p.a.region(region).addr(8 * rng.below(64) as usize),
        };
        let tag = rng.below(3);
        let send = std::mem::take(&mut bufs.sends[step]);
        let recv_ptr = &mut bufs.recvs[step];
        let side = p.side(who);
        let ep = side.ep;
        let keyed = if rng.chance(70) { side.keyed(&send) } else { send_buf(&send) };
        let started: Option<Result<Start, crate::Status>> = match rng.below(12) {
            0 | 1 => Some(side.engine.tag_send(ep, keyed, tag, rng.chance(20))),
            2 | 3 => Some(Ok(side.engine.tag_recv(
                recv_buf(recv_ptr),
                tag,
                if rng.chance(20) { 0 } else { u64::MAX },
            ))),
            4 => Some(side.engine.stream_send(ep, keyed)),
            5 => Some(side.engine.stream_recv(ep, recv_buf(recv_ptr), rng.chance(50))),
            6 => Some(side.engine.am_send(ep, 1, b"h", keyed, false)),
            7 => Some(
                side.engine
                    .put(ep, send_buf(&send[..send.len().min(64)]), peer_addr, &peer_key)
                    .map(Start::Pending),
            ),
            8 => {
                let len = recv_ptr.len().min(64);
                Some(
                    side.engine
                        .get(ep, recv_buf(&mut recv_ptr[..len]), peer_addr, &peer_key)
                        .map(Start::Pending),
                )
            }
            9 => {
                Some(side.engine.atomic(ep, AtomicOp::Add, 8, 1, 0, peer_addr, &peer_key).map(Start::Pending))
            }
            10 => {
                let len = send.len().min(if rng.chance(50) { 64 } else { 3000 });
                let _ = side.engine.put_nbi(ep, &send[..len], peer_addr, &peer_key);
                None
            }
            _ => {
                if rng.chance(50) {
                    let _ = side.engine.fence(ep);
                    None
                } else {
                    Some(side.engine.flush(ep, false).map(Start::Pending))
                }
            }
        };
        bufs.sends[step] = send;
        if let Some(Ok(Start::Pending(op))) = started {
            pending.push((who, op));
        }
        if rng.chance(40) {
            p.drive();
            // Handlers take or decline the AM data that arrived.
            for who in [Who::A, Who::B] {
                let side = p.side(who);
                for am in std::mem::take(&mut side.ams) {
                    if let Some((desc, _)) = am.rndv {
                        let _ = side.engine.am_decline(desc);
                    }
                }
            }
        }
        if rng.chance(30) {
            p.return_payloads();
            p.finish_rma();
        }
    }
    if rng.chance(30) {
        let who = if rng.chance(50) { Who::A } else { Who::B };
        let side = p.side(who);
        let ep = side.ep;
        let mode = if rng.chance(50) { CloseMode::Flush } else { CloseMode::Force };
        if let Ok(Some(op)) = side.engine.close(ep, mode) {
            pending.push((who, op));
        }
    }
    for _ in 0..50 {
        p.drive();
        for who in [Who::A, Who::B] {
            let side = p.side(who);
            for am in std::mem::take(&mut side.ams) {
                if let Some((desc, _)) = am.rndv {
                    let _ = side.engine.am_decline(desc);
                }
            }
        }
        p.return_payloads();
        p.finish_rma();
    }
    p.drive();
    // Receives nothing will ever match are withdrawn; everything else must have completed.
    for &(who, op) in &pending {
        let side = p.side(who);
        if !side.done(op) {
            side.engine.cancel(op);
        }
    }
    p.drive();
    // What is still waiting now can only be waiting for the other side's receive (an
    // unmatched rendezvous or sync send): the link going away must end it.
    p.fail_link();
    p.drive();
    for &(who, op) in &pending {
        assert!(p.side(who).done(op), "seed {seed}: {op} of {who:?} never completed ({net:?})");
    }
    // Unexpected messages nobody received: take them, so only real leaks remain.
    for who in [Who::A, Who::B] {
        let side = p.side(who);
        let mut sink = vec![0u8; 16_000];
        while side.engine.table_counts().tag_unexpected > 0 {
            match side.engine.tag_recv(recv_buf(&mut sink), 0, 0) {
                Start::Done(..) => {}
                Start::Pending(op) => {
                    side.engine.cancel(op);
                    break;
                }
            }
        }
    }
    p.drive();
    p.assert_no_leaks();
    drop(bufs);
}
