//! The protocol layer's per-message costs, with no transport: tag matching
//! (`proto::TagMatcher`), the remote-access check every put/get/atomic passes on the target
//! (`RemoteAccessTable`: region lookup, key compare, protection and bounds), and the frame
//! header codec (`proto::wire::Op` encode/decode), and a reliable-session ping-pong of 8-byte
//! messages (`proto::reliable::Session`: queue, transmit, receive, ack, on both ends) with the
//! send queue of `ZCX_DPDK_WINDOW=64` at a 1500-byte MTU and of 256 at a 9000-byte one, where the
//! queue's buffers span megabytes.
//!
//! Run: `cargo bench -p zcx-benches --bench proto`. Each figure is the cost of one operation;
//! `queue_N` names how many non-matching entries the matcher searches past, `regions_N` how many
//! regions the table holds.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use zcx_dataplane::proto::reliable::{Config as SessionConfig, Delivery, Session};
use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::proto::{Arrival, AtomicOp, Message, Posted, TagMatcher, FULL_MASK, MAX_HEADER_LEN};
use zcx_dataplane::{RegionEntry, RemoteAccess, RemoteAccessTable};

const TAG: u64 = 0x7a63_7870_0000_0010;

fn message(tag: u64) -> Message<u64> {
    Message { sender: 1, tag, length: 8, data: 0 }
}

/// A matcher with `depth` posted receives that the benchmarked messages do not match, so every
/// match searches past them (a worker with many outstanding receives of other tags).
fn matcher_with_posted(depth: usize) -> TagMatcher<u64, u64> {
    let mut m = TagMatcher::new();
    for i in 0..depth as u64 {
        assert!(matches!(m.post_recv(i, FULL_MASK, i), Posted::Queued(_)));
    }
    m
}

fn tag_matching(c: &mut Criterion) {
    let mut group = c.benchmark_group("proto/tag_match");
    for depth in [0usize, 16, 256] {
        // The expected path: a receive is posted, then its message arrives.
        group.bench_function(BenchmarkId::new("expected", format!("queue_{depth}")), |b| {
            let mut m = matcher_with_posted(depth);
            b.iter(|| {
                let _ = m.post_recv(black_box(TAG), FULL_MASK, 7);
                match m.arrive(black_box(message(TAG))) {
                    Arrival::Matched { recv, .. } => recv,
                    Arrival::Queued => unreachable!("the receive was posted"),
                }
            })
        });
        // The unexpected path: the message arrives first, then the receive finds it.
        group.bench_function(BenchmarkId::new("unexpected", format!("queue_{depth}")), |b| {
            let mut m: TagMatcher<u64, u64> = TagMatcher::new();
            for i in 0..depth as u64 {
                m.queue_unexpected(message(i));
            }
            b.iter(|| {
                assert!(matches!(m.arrive(black_box(message(TAG))), Arrival::Queued));
                match m.post_recv(black_box(TAG), FULL_MASK, 7) {
                    Posted::Matched { message, .. } => message.length,
                    Posted::Queued(_) => unreachable!("the message was queued"),
                }
            })
        });
    }
    // A wildcard receive (mask 0 on the low half) behind exact ones of other tags.
    group.bench_function("expected_wildcard/queue_16", |b| {
        let mut m = matcher_with_posted(16);
        b.iter(|| {
            let _ = m.post_recv(black_box(TAG), 0xFFFF_FFFF_0000_0000, 7);
            match m.arrive(black_box(message(TAG | 0x1234))) {
                Arrival::Matched { recv, .. } => recv,
                Arrival::Queued => unreachable!("the wildcard matches"),
            }
        })
    });
    group.finish();
}

/// Backing memory for the table's regions: the table is told these bytes are accessible.
struct Regions {
    memory: Vec<u64>,
    table: RemoteAccessTable,
}

const REGION_BYTES: usize = 4096;

fn regions(count: usize) -> Regions {
    let mut memory = vec![0u64; count * REGION_BYTES / 8];
    let table = RemoteAccessTable::new();
    for i in 0..count {
        let base = memory[i * REGION_BYTES / 8..].as_mut_ptr() as u64;
        let entry = RegionEntry {
            base,
            length: REGION_BYTES as u64,
            prot: zcx_dataplane::access::PROT_REMOTE_READ | zcx_dataplane::access::PROT_REMOTE_WRITE,
            access_key: key(i as u64),
            shm: None,
        };
        // SAFETY: the region is inside `memory`, which lives (and does not move: it is never
        // resized) as long as the table in the same `Regions`.
        unsafe { table.insert(i as u64, entry) };
    }
    Regions { memory, table }
}

fn key(id: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    k[8..].copy_from_slice(&(!id).to_le_bytes());
    k
}

fn access_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("proto/access");
    for count in [1usize, 1024] {
        let r = regions(count);
        let id = (count / 2) as u64;
        let k = key(id);
        let base = r.memory[id as usize * REGION_BYTES / 8..].as_ptr() as u64;
        group.bench_function(BenchmarkId::new("check_put_64B", format!("regions_{count}")), |b| {
            b.iter(|| r.table.check(black_box(id), &k, black_box(base + 128), 64, RemoteAccess::Write))
        });
        group.bench_function(BenchmarkId::new("with_access_atomic_add", format!("regions_{count}")), |b| {
            b.iter(|| {
                r.table.with_access(
                    black_box(id),
                    &k,
                    black_box(base + 8),
                    8,
                    RemoteAccess::Atomic { size: 8 },
                    |p| {
                        // SAFETY: the check passed: `p` is 8 aligned bytes inside the live region.
                        unsafe { *(p as *mut u64) = (*(p as *mut u64)).wrapping_add(1) }
                    },
                )
            })
        });
        group.bench_function(BenchmarkId::new("refuse_out_of_bounds", format!("regions_{count}")), |b| {
            b.iter(|| {
                let verdict = r.table.check(
                    black_box(id),
                    &k,
                    black_box(base + REGION_BYTES as u64 - 4),
                    8,
                    RemoteAccess::Read,
                );
                assert!(verdict.is_err());
                verdict
            })
        });
    }
    group.finish();
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("proto/wire");
    let ops = [
        ("tag_eager", Op::TagEager { tag: TAG, sync: false, sender_req: 0 }, 8usize),
        ("rndv_data", Op::RndvData { recv_req: 77, offset: 1 << 20 }, 64),
        ("get", Op::Get { req: 5, region: 3, key: key(3), addr: 0x7f00_1234_5000, len: 4096 }, 0),
        (
            "atomic",
            Op::Atomic {
                req: 9,
                region: 3,
                key: key(3),
                addr: 0x7f00_1234_5008,
                op: AtomicOp::Add,
                size: 8,
                fetch: true,
                value: 1,
                compare: 0,
            },
            0,
        ),
    ];
    for (name, op, payload) in ops {
        group.bench_function(BenchmarkId::new("encode", name), |b| {
            let mut out = [0u8; MAX_HEADER_LEN];
            b.iter(|| black_box(op).encode(&mut out))
        });
        let mut header = [0u8; MAX_HEADER_LEN];
        let len = op.encode(&mut header);
        let mut frame = header[..len].to_vec();
        frame.resize(len + payload, 0xA5);
        assert_eq!(
            Op::decode(&frame).map(|(decoded, rest)| (decoded, rest.len())),
            Ok((op, payload)),
            "{name}"
        );
        group.bench_function(BenchmarkId::new("decode", name), |b| b.iter(|| Op::decode(black_box(&frame))));
    }
    group.finish();
}

/// One round trip of an 8-byte message between two sessions (the answer carries the ack).
fn session_round_trip(a: &mut Session, b: &mut Session, now: &mut u64, buf: &mut [u8]) {
    session_one_way(a, b, now, buf);
    session_one_way(b, a, now, buf);
}

/// An 8-byte message from `from` to `to`, with whatever `from` has to send besides.
fn session_one_way(from: &mut Session, to: &mut Session, now: &mut u64, buf: &mut [u8]) {
    from.send(&now.to_le_bytes()).expect("room in the send queue");
    *now += 1000;
    while let Some(len) = from.poll_transmit(*now, buf) {
        match to.on_datagram(*now, &buf[..len]) {
            Ok(Delivery::Message(bytes)) => assert_eq!(bytes.len(), 8),
            Ok(Delivery::Ack) => {}
            Err(why) => panic!("dropped: {why:?}"),
        }
    }
}

fn reliable_session(c: &mut Criterion) {
    let mut group = c.benchmark_group("reliable_session");
    for (window, mtu) in [(64u32, 1500usize), (256, 9000)] {
        let config = SessionConfig {
            window,
            send_queue: window * 2,
            receive_credit: window,
            max_payload: mtu - 40,
            ..SessionConfig::default()
        };
        let mut a = Session::new(config.clone(), 1, 2).expect("config");
        let mut b = Session::new(config, 2, 1).expect("config");
        let mut buf = vec![0u8; mtu];
        let mut now = 0u64;
        group
            .bench_function(BenchmarkId::new("pingpong_8B", format!("window_{window}_mtu_{mtu}")), |bench| {
                bench.iter(|| session_round_trip(&mut a, &mut b, &mut now, &mut buf))
            });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = tag_matching, access_check, codec, reliable_session
}
criterion_main!(benches);
