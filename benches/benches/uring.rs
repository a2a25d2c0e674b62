//! The io_uring TCP transport over loopback: 8-byte ping-pong round trips and 1 MiB streaming,
//! between two threads pinned to different cores (when the machine has two).
//!
//! Run: `cargo bench -p zcx-benches --bench uring`. The ping-pong time is a full round trip;
//! one-way latency is half of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zcx_dataplane::{
    ConnectTarget, LinkId, Payload, TlEvent, Transport, UringConfig, UringTransport, ZcopyPayload,
};
use zcx_hugepages::{pin_current_thread, CpuSet};

const CHUNK: usize = 256 << 10;
const MESSAGE: usize = 1 << 20;
/// Messages the streamer may have unacknowledged.
const WINDOW: u64 = 8;

/// CPUs of the process, read once before any thread is pinned: a thread spawned by a pinned one
/// inherits its single-CPU mask, and `available_parallelism` would then say 1 and put both
/// threads on the same CPU, where they only take turns at each scheduler tick.
fn cpu_count() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn pin(cpu: usize) {
    if let Ok(set) = CpuSet::single(cpu % cpu_count()) {
        let _ = pin_current_thread(&set);
    }
}

fn transport() -> UringTransport {
    cpu_count();
    let cfg = UringConfig { advertise_ip: Some("127.0.0.1".parse().unwrap()), ..UringConfig::default() };
    UringTransport::new(&cfg).expect("io_uring transport")
}

/// A connected pair: the local transport and link, plus the peer transport and its link.
fn connected() -> (UringTransport, LinkId, UringTransport, LinkId) {
    let mut a = transport();
    let mut b = transport();
    let (_, bound) = b.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let la = a.connect(ConnectTarget::Sockaddr { remote: bound, local: None }).unwrap();
    let (mut up, mut lb) = (false, None);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !up || lb.is_none() {
        assert!(Instant::now() < deadline, "connect timed out");
        a.poll(&mut |e| up |= matches!(e, TlEvent::Connected { .. }));
        b.poll(&mut |e| {
            if let TlEvent::Accepted { link, .. } = e {
                lb = Some(link);
            }
        });
    }
    let lb = lb.unwrap();
    // What a worker does once the peer's connection request checks out: until then an accepted
    // link takes frames of a handshake's size only.
    b.link_established(lb);
    (a, la, b, lb)
}

/// Runs `peer` on its own thread, pinned to CPU 1, until the returned flag is set.
fn spawn_peer(
    mut t: UringTransport,
    link: LinkId,
    mut on_frame: impl FnMut(&[u8]) -> Option<usize> + Send + 'static,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        pin(1);
        let reply = [0u8; 8];
        while !flag.load(Ordering::Relaxed) {
            let mut replies = 0;
            t.poll(&mut |e| {
                if let TlEvent::Frame { bytes, .. } = e {
                    if let Some(n) = on_frame(bytes) {
                        replies += n;
                    }
                }
            });
            for _ in 0..replies {
                t.send(link, &reply, Payload::None).unwrap();
            }
        }
    });
    (stop, handle)
}

fn ping_pong(c: &mut Criterion) {
    let (mut a, la, b, lb) = connected();
    let (stop, peer) = spawn_peer(b, lb, |_| Some(1));
    pin(0);
    let ping = [1u8; 8];
    let mut group = c.benchmark_group("uring");
    group.bench_function("ping_pong_8B_round_trip", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                a.send(la, &ping, Payload::None).unwrap();
                let mut got = false;
                while !got {
                    a.poll(&mut |e| got |= matches!(e, TlEvent::Frame { .. }));
                }
            }
            start.elapsed()
        })
    });
    group.finish();
    stop.store(true, Ordering::Relaxed);
    peer.join().unwrap();
}

fn stream(c: &mut Criterion, zcopy: bool) {
    let (mut a, la, b, lb) = connected();
    // The receiver acknowledges every full message with one 8-byte frame.
    let mut received = 0usize;
    let (stop, peer) = spawn_peer(b, lb, move |bytes| {
        received += bytes.len();
        let acks = received / MESSAGE;
        received %= MESSAGE;
        Some(acks)
    });
    pin(0);
    let data = vec![7u8; CHUNK];
    let mut group = c.benchmark_group("uring");
    group.throughput(Throughput::Bytes(MESSAGE as u64));
    let name = if zcopy { "stream_1MiB_zcopy" } else { "stream_1MiB_copy" };
    let mut token = 0u64;
    group.bench_function(name, |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            let (mut sent, mut acked) = (0u64, 0u64);
            while acked < iters {
                while sent < iters && sent - acked < WINDOW {
                    for _ in 0..MESSAGE / CHUNK {
                        let payload = if zcopy {
                            token += 1;
                            // SAFETY: `data` is never written and outlives the benchmark, which
                            // drains every SendDone before returning.
                            Payload::Zcopy(unsafe { ZcopyPayload::new(data.as_ptr(), CHUNK, token) })
                        } else {
                            Payload::Copy(&data)
                        };
                        a.send(la, &[], payload).unwrap();
                    }
                    sent += 1;
                }
                a.poll(&mut |e| {
                    if let TlEvent::Frame { .. } = e {
                        acked += 1;
                    }
                });
            }
            start.elapsed()
        })
    });
    group.finish();
    while a.has_pending_sends(la) {
        a.poll(&mut |_| {});
    }
    stop.store(true, Ordering::Relaxed);
    peer.join().unwrap();
}

fn streaming(c: &mut Criterion) {
    stream(c, false);
    stream(c, true);
}

criterion_group!(benches, ping_pong, streaming);
criterion_main!(benches);
