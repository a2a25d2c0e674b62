//! Costs above the transport: an idle `progress()` call, an 8-byte tag ping-pong between two
//! workers over endpoints on two threads (the same exchange as `zcx perf -t tag_lat`, without the
//! process boundary), and the same ping-pong driven by one thread over shared memory, where
//! nothing waits for another core: that figure is zcx's own software cost per round trip (send,
//! poll, match, complete, post, on both sides), the part of the latency the code controls.
//! Next to `uring`'s raw ping-pong in the same run, the difference is what the endpoint layer adds
//! per round trip.
//!
//! Also the direct one-sided path over shared memory: an 8-byte put and get once the owner vouched
//! for the key (a CPU copy inside the call).
//!
//! Run: `cargo bench -p zcx-benches --bench endpoint`. The ping-pong times are full round trips.
//! `ZCX_PINGPONG_ROUNDS=N cargo bench ... -- --profile-rounds` runs only N one-thread round trips
//! (for an instruction-counting profiler); of active messages with `ZCX_PINGPONG_API=am`, of
//! stream sends and WAITALL receives with `ZCX_PINGPONG_API=stream`, and with
//! `ZCX_PINGPONG_API=rung` the tag messages of `zcx perf -t tag_lat`, each found by a rung
//! doorbell as between two processes (the other forms find them in the general poll), and
//! `am-rung` the same for active messages; `arm` asks each receiver to sleep
//! (`ucp_worker_arm`) before it waits, as an event-driven program does. `ZCX_PINGPONG_ENDPOINTS=N`
//! (with `rung`, `arm` or the default form) connects N endpoints between the two workers and sends round trip `i` over
//! endpoint `i mod N`, as `zcx perf --endpoints N` does: how the cost per message moves with N.
//! Under
//! callgrind, `rung_progress` inclusive over twice the rounds is what a message costs its
//! receiver up to the completion, and `tag_send` over twice the rounds what the answer costs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use zcx::{
    Context, Endpoint, EpParams, Features, ListenerParams, MemMapParams, Prot, RequestParams, TagSendParams,
    Worker, WorkerParams,
};
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

/// The completion of an operation that must have completed when it was issued.
#[inline(always)]
fn done_at_once<B: Send + 'static>(request: zcx::Request<B>) -> zcx::Completion<B> {
    match request.try_take() {
        Ok(result) => result.expect("operation failed"),
        Err(_) => panic!("a direct operation did not complete at once"),
    }
}

fn idle_progress(c: &mut Criterion) {
    let ctx = Context::with_features(Features::TAG).expect("context");
    let w = worker(&ctx, "idle");
    c.bench_function("endpoint/idle_progress", |b| b.iter(|| w.progress()));
    // With a connected link (over shared memory, this host's default): each skipped call also
    // looks at the link's doorbell. A busy-polling receiver notices a message about half of this
    // after it lands.
    let linked = Context::with_features(Features::TAG).expect("context");
    let (client, _server, _ep, _server_ep) = connected_pair(&linked);
    c.bench_function("endpoint/idle_progress_one_link", |b| b.iter(|| client.progress()));
}

/// A client and a server worker of `ctx` with an endpoint each way, connected over loopback.
fn connected_pair(ctx: &Context) -> (Worker, Worker, Endpoint, Endpoint) {
    let server = worker(ctx, "server");
    let client = worker(ctx, "client");
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
    // The client moves to its shared-memory lane (if any) on the server's answer.
    while ep.query().expect("query").status != zcx::Status::Ok {
        server.progress();
        client.progress();
        assert!(Instant::now() < deadline, "connect timed out");
    }
    drop(listener);
    (client, server, ep, server_ep)
}

fn tag_ping_pong(c: &mut Criterion) {
    cpu_count();
    let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AM).expect("context");
    let (client, server, ep, server_ep) = connected_pair(&ctx);
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

/// One round trip driven by one thread: the client sends, the server's progress receives and
/// answers, the client's progress receives. Over shared memory every step finds its message at
/// once.
struct OneThreadPingPong {
    client: Worker,
    server: Worker,
    ep: Endpoint,
    server_ep: Endpoint,
    /// Further endpoint pairs between the same workers; round trips take each pair in turn,
    /// `(ep, server_ep)` first (see [`OneThreadPingPong::connect_more`]).
    more: Vec<(Endpoint, Endpoint)>,
    /// The pair of the next round trip: 0 is `(ep, server_ep)`, `i` is `more[i - 1]`.
    next: usize,
    bufs: [Option<Vec<u8>>; 4],
}

impl OneThreadPingPong {
    fn new(ctx: &Context) -> OneThreadPingPong {
        let (client, server, ep, server_ep) = connected_pair(ctx);
        let bufs = [Some(vec![0xA5u8; 8]), Some(vec![0u8; 8]), Some(vec![0u8; 8]), Some(vec![0x5Au8; 8])];
        OneThreadPingPong { client, server, ep, server_ep, more: Vec::new(), next: 0, bufs }
    }

    /// Connects `count - 1` more endpoints from the client to the server, one at a time, so the
    /// round trips go round-robin over `count` pairs.
    fn connect_more(&mut self, count: usize) {
        let accepted = Arc::new(Mutex::new(None));
        let slot = accepted.clone();
        let listener = self
            .server
            .listen(ListenerParams {
                sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
                ..Default::default()
            })
            .expect("listener");
        for _ in 1..count {
            let ep = self
                .client
                .create_endpoint(EpParams { sockaddr: Some(listener.sockaddr()), ..Default::default() })
                .expect("endpoint");
            let deadline = Instant::now() + Duration::from_secs(10);
            while accepted.lock().unwrap().is_none() || ep.query().expect("query").status != zcx::Status::Ok {
                self.server.progress();
                self.client.progress();
                assert!(Instant::now() < deadline, "connect timed out");
            }
            let server_ep = accepted.lock().unwrap().take().unwrap();
            self.more.push((ep, server_ep));
        }
    }

    /// The pair of the next round trip (see [`OneThreadPingPong::next`]), and the turn moved on.
    fn take_turn(&mut self) -> usize {
        let turn = self.next;
        self.next = if turn == self.more.len() { 0 } else { turn + 1 };
        turn
    }

    /// The stream form: the same steps with `stream_recv` (WAITALL) and `stream_send`.
    fn stream_round_trip(&mut self) {
        let [ping, pong_in, ping_in, pong] = &mut self.bufs;
        let server_recv = self
            .server_ep
            .stream_recv(ping_in.take().unwrap(), true, RequestParams::default())
            .expect("stream_recv");
        let send = self.ep.stream_send(ping.take().unwrap(), RequestParams::default()).expect("stream_send");
        let client_recv = self
            .ep
            .stream_recv(pong_in.take().unwrap(), true, RequestParams::default())
            .expect("stream_recv");
        *ping = Some(wait(&self.client, send).buf);
        *ping_in = Some(wait(&self.server, server_recv).buf);
        let answer =
            self.server_ep.stream_send(pong.take().unwrap(), RequestParams::default()).expect("stream_send");
        *pong = Some(wait(&self.server, answer).buf);
        *pong_in = Some(wait(&self.client, client_recv).buf);
    }

    /// The steps of `zcx perf -t tag_lat` in order, each worker polled until quiet before its
    /// peer sends, so each message is found by a rung doorbell (`worker/rung.rs`), as it is
    /// between two processes.
    fn rung_round_trip(&mut self) {
        self.round_trip_with(Receiver::PollsFirst);
    }

    fn round_trip(&mut self) {
        self.round_trip_with(Receiver::Waits);
    }

    /// A round trip in which each receiver asks to sleep (`ucp_worker_arm`) once its message is
    /// on its way, as an event-driven program does before it waits: the answer is busy (the
    /// message is there), and the receiver polls for it.
    fn arm_round_trip(&mut self) {
        self.round_trip_with(Receiver::ArmsFirst);
    }

    /// One tag round trip, each receiver doing `receiver` on its way.
    fn round_trip_with(&mut self, receiver: Receiver) {
        let turn = self.take_turn();
        let (ep, server_ep) = match turn {
            0 => (&self.ep, &self.server_ep),
            _ => (&self.more[turn - 1].0, &self.more[turn - 1].1),
        };
        let [ping, pong_in, ping_in, pong] = &mut self.bufs;
        let server_recv = self
            .server
            .tag_recv(ping_in.take().unwrap(), TAG, u64::MAX, RequestParams::default())
            .expect("tag_recv");
        if receiver == Receiver::PollsFirst {
            self.server.progress();
        }
        let send = ep.tag_send(ping.take().unwrap(), TAG, TagSendParams::default()).expect("tag_send");
        let client_recv = self
            .client
            .tag_recv(pong_in.take().unwrap(), TAG, u64::MAX, RequestParams::default())
            .expect("tag_recv");
        *ping = Some(wait(&self.client, send).buf);
        if receiver == Receiver::PollsFirst {
            self.client.progress();
        }
        if receiver == Receiver::ArmsFirst {
            let _ = self.server.arm();
        }
        *ping_in = Some(wait(&self.server, server_recv).buf);
        let answer =
            server_ep.tag_send(pong.take().unwrap(), TAG, TagSendParams::default()).expect("tag_send");
        *pong = Some(wait(&self.server, answer).buf);
        if receiver == Receiver::ArmsFirst {
            let _ = self.client.arm();
        }
        *pong_in = Some(wait(&self.client, client_recv).buf);
    }
}

/// What the receiver of a one-thread round trip does besides waiting for its message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Receiver {
    /// Only waits.
    Waits,
    /// Polls once after posting its receive and before its peer sends (so its worker is quiet).
    PollsFirst,
    /// Asks to sleep once the message is on its way.
    ArmsFirst,
}

/// The active-message form of [`OneThreadPingPong`]: each side's handler counts arrivals, and
/// each step progresses the receiving worker until its count moves.
struct OneThreadAmPingPong {
    pp: OneThreadPingPong,
    pings: Arc<AtomicU64>,
    pongs: Arc<AtomicU64>,
}

const AM_PING: u16 = 1;
const AM_PONG: u16 = 2;

impl OneThreadAmPingPong {
    fn new(ctx: &Context) -> OneThreadAmPingPong {
        let pp = OneThreadPingPong::new(ctx);
        let (pings, pongs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        for (worker, id, count) in [(&pp.server, AM_PING, &pings), (&pp.client, AM_PONG, &pongs)] {
            let count = Arc::clone(count);
            worker.set_am_handler(
                id,
                Some(Box::new(move |_msg: &mut zcx::AmMessage| {
                    count.fetch_add(1, Ordering::Relaxed);
                    zcx::Status::Ok
                })),
            );
        }
        OneThreadAmPingPong { pp, pings, pongs }
    }

    /// As `round_trip`, each worker polled until quiet before its peer sends, so each message is
    /// found by a rung doorbell, as between two processes.
    fn rung_round_trip(&mut self) {
        self.pp.server.progress();
        self.pp.client.progress();
        self.round_trip();
    }

    fn round_trip(&mut self) {
        let [ping, _, _, pong] = &mut self.pp.bufs;
        let before = self.pings.load(Ordering::Relaxed);
        let send =
            self.pp.ep.am_send(AM_PING, &[], ping.take().unwrap(), Default::default()).expect("am_send");
        *ping = Some(wait(&self.pp.client, send).buf);
        while self.pings.load(Ordering::Relaxed) == before {
            self.pp.server.progress();
        }
        let before = self.pongs.load(Ordering::Relaxed);
        let send = self
            .pp
            .server_ep
            .am_send(AM_PONG, &[], pong.take().unwrap(), Default::default())
            .expect("am_send");
        *pong = Some(wait(&self.pp.server, send).buf);
        while self.pongs.load(Ordering::Relaxed) == before {
            self.pp.client.progress();
        }
    }
}

fn tag_ping_pong_one_thread(c: &mut Criterion) {
    let ctx = Context::with_features(Features::TAG | Features::AM | Features::STREAM).expect("context");
    let mut pp = OneThreadPingPong::new(&ctx);
    let transport = pp.ep.query().expect("query").transports.join(",");
    c.bench_function(&format!("endpoint/tag_ping_pong_8B_one_thread_{transport}"), |b| {
        b.iter(|| pp.round_trip())
    });
    drop(pp);
    let mut am = OneThreadAmPingPong::new(&ctx);
    c.bench_function(&format!("endpoint/am_ping_pong_8B_one_thread_{transport}"), |b| {
        b.iter(|| am.round_trip())
    });
}

/// Put and get of 8 bytes over shared memory once the owner vouched for the key: a CPU copy into
/// or out of the peer's mapped region, done inside the call. This is the whole software cost of a
/// direct one-sided operation (what `zcx perf -t get_lat` measures, less the clock).
fn rma_direct(c: &mut Criterion) {
    let ctx = Context::with_features(Features::TAG | Features::RMA).expect("context");
    let (client, server, ep, _server_ep) = connected_pair(&ctx);
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    let region = ctx.mem_map(&MemMapParams::alloc(4096).prot(prot)).expect("mem_map");
    let packed = region.rkey_pack().expect("rkey_pack");
    let rkey = ep.rkey_unpack(packed.as_bytes()).expect("rkey_unpack");
    let base = rkey.remote_key().base();
    // The first operation goes to the owner, whose answer vouches for the key.
    let mut first = ep.get(vec![0u8; 8], base, &rkey, RequestParams::default()).expect("get");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rbuf = loop {
        first = match first.try_take() {
            Ok(done) => break Some(done.expect("first get").buf),
            Err(r) => r,
        };
        server.progress();
        client.progress();
        assert!(Instant::now() < deadline, "first get timed out");
    };
    let transport = ep.query().expect("query").transports.join(",");
    c.bench_function(&format!("endpoint/get_8B_{transport}"), |b| {
        b.iter(|| {
            let get = ep.get(rbuf.take().unwrap(), base, &rkey, RequestParams::default()).expect("get");
            rbuf = Some(done_at_once(get).buf);
        })
    });
    let bytes = [0xA5u8; 8];
    c.bench_function(&format!("endpoint/put_nbi_8B_{transport}"), |b| {
        b.iter(|| ep.put_nbi(std::hint::black_box(&bytes), base, &rkey).expect("put_nbi"))
    });
    let mut sbuf = Some(vec![0xA5u8; 8]);
    c.bench_function(&format!("endpoint/put_8B_{transport}"), |b| {
        b.iter(|| {
            let put = ep.put(sbuf.take().unwrap(), base, &rkey, RequestParams::default()).expect("put");
            sbuf = Some(done_at_once(put).buf);
        })
    });
}

/// `--profile-rounds`: only the one-thread round trips, `ZCX_PINGPONG_ROUNDS` of them, for
/// `valgrind --tool=callgrind`, whose instruction counts do not depend on the machine's load.
fn profile_rounds() -> bool {
    if !std::env::args().any(|a| a == "--profile-rounds") {
        return false;
    }
    let rounds: u64 =
        std::env::var("ZCX_PINGPONG_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let ctx = Context::with_features(Features::TAG | Features::AM | Features::STREAM).expect("context");
    let api = std::env::var("ZCX_PINGPONG_API").unwrap_or_default();
    let endpoints: usize =
        std::env::var("ZCX_PINGPONG_ENDPOINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    if api == "am" {
        let mut am = OneThreadAmPingPong::new(&ctx);
        for _ in 0..rounds {
            am.round_trip();
        }
    } else if api == "am-rung" {
        let mut am = OneThreadAmPingPong::new(&ctx);
        for _ in 0..rounds {
            am.rung_round_trip();
        }
    } else if api == "rung" {
        let mut pp = OneThreadPingPong::new(&ctx);
        pp.connect_more(endpoints);
        for _ in 0..rounds {
            pp.rung_round_trip();
        }
    } else if api == "arm" {
        let mut pp = OneThreadPingPong::new(&ctx);
        pp.connect_more(endpoints);
        for _ in 0..rounds {
            pp.arm_round_trip();
        }
    } else if api == "stream" {
        let mut pp = OneThreadPingPong::new(&ctx);
        for _ in 0..rounds {
            pp.stream_round_trip();
        }
    } else {
        let mut pp = OneThreadPingPong::new(&ctx);
        pp.connect_more(endpoints);
        for _ in 0..rounds {
            pp.round_trip();
        }
    }
    true
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4));
    targets = idle_progress, tag_ping_pong, tag_ping_pong_one_thread, rma_direct
}

fn main() {
    if profile_rounds() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
