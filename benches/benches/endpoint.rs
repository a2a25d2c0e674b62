//! Costs above the transport: an idle `progress()` call, and an 8-byte tag ping-pong between two
//! workers over endpoints (the same exchange as `zcx perf -t tag_lat`, without the process
//! boundary). Next to `uring`'s raw ping-pong in the same run, the difference is what the
//! endpoint layer adds per round trip.
//!
//! Run: `cargo bench -p zcx-benches --bench endpoint`. The ping-pong time is a full round trip.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use zcx::{Context, EpParams, Features, ListenerParams, RequestParams, TagSendParams, Worker, WorkerParams};
use zcx_hugepages::{pin_current_thread, CpuSet};

const TAG: u64 = 0x1337;

fn cpu_count() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn pin(cpu: usize) {
    if let Ok(set) = CpuSet::single(cpu % cpu_count()) {
        let _ = pin_current_thread(&set);
    }
}

fn worker(ctx: &Context, name: &str) -> Worker {
    ctx.create_worker(&WorkerParams { name: Some(name.into()), ..WorkerParams::default() }).expect("worker")
}

fn wait<B: Send + 'static>(w: &Worker, request: zcx::Request<B>) -> zcx::Completion<B> {
    let mut request = request;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        request = match request.try_take() {
            Ok(result) => return result.expect("operation failed"),
            Err(r) => r,
        };
        w.progress();
        assert!(Instant::now() < deadline, "request timed out");
    }
}

fn idle_progress(c: &mut Criterion) {
    let ctx = Context::with_features(Features::TAG).expect("context");
    let w = worker(&ctx, "idle");
    c.bench_function("endpoint/idle_progress", |b| b.iter(|| w.progress()));
}

fn tag_ping_pong(c: &mut Criterion) {
    cpu_count();
    let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AM).expect("context");
    let server = worker(&ctx, "server");
    let client = worker(&ctx, "client");
    let accepted = Arc::new(Mutex::new(None));
    let slot = accepted.clone();
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
            ..Default::default()
        })
        .expect("listener");
    let ep = client
        .create_endpoint(EpParams { sockaddr: Some(listener.sockaddr()), ..Default::default() })
        .expect("endpoint");
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted.lock().unwrap().is_none() {
        server.progress();
        client.progress();
        assert!(Instant::now() < deadline, "connect timed out");
    }
    let server_ep = accepted.lock().unwrap().take().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // The echo side: every ping is answered with a pong of the same size.
    let echo = std::thread::spawn(move || {
        pin(1);
        let mut buf = Some(vec![0u8; 8]);
        while !flag.load(Ordering::Relaxed) {
            let mut recv = server
                .tag_recv(buf.take().unwrap(), TAG, u64::MAX, RequestParams::default())
                .expect("tag_recv");
            let got = loop {
                recv = match recv.try_take() {
                    Ok(result) => break result.expect("recv"),
                    Err(r) => r,
                };
                if flag.load(Ordering::Relaxed) {
                    recv.cancel();
                    return;
                }
                server.progress();
            };
            let send = server_ep.tag_send(got.buf, TAG, TagSendParams::default()).expect("tag_send");
            buf = Some(wait(&server, send).buf);
        }
    });
    pin(0);
    let mut sbuf = Some(vec![0xA5u8; 8]);
    let mut rbuf = Some(vec![0u8; 8]);
    c.bench_function("endpoint/tag_ping_pong_8B_round_trip", |b| {
        b.iter(|| {
            let recv = client
                .tag_recv(rbuf.take().unwrap(), TAG, u64::MAX, RequestParams::default())
                .expect("tag_recv");
            let send = ep.tag_send(sbuf.take().unwrap(), TAG, TagSendParams::default()).expect("tag_send");
            sbuf = Some(wait(&client, send).buf);
            rbuf = Some(wait(&client, recv).buf);
        })
    });
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    drop(ep);
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4));
    targets = idle_progress, tag_ping_pong
}
criterion_main!(benches);
