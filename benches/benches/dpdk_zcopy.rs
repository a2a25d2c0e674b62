//! What sending from registered memory without a copy is worth on the DPDK transport: 1 MiB tag
//! messages from `mem_map`'d memory between two workers of this process over `net_memif` (two
//! port pairs in one EAL, server and client of each on one socket), once with zero-copy from
//! 4 KiB on (`ZCX_DPDK_ZCOPY_THRESH=4K`) and once with it off (`inf`: every payload is copied
//! into the session's ring and again into an mbuf). Receiving is the same in both, so the
//! difference is the transmit copies avoided (memif still copies each frame into its ring).
//!
//! First an interleaved measurement (rounds alternate between the two pairs, so both see the same
//! machine) prints the median ratio of the bandwidths: of 1 MiB tag messages, and of puts of 16 KiB
//! to 1 MiB (what the default threshold was chosen by; puts and tag messages below the api's
//! rendezvous threshold, 64 KiB, are sent eagerly and copied whatever this threshold says, which
//! the zero-copy frame count shows). Then criterion measures the 1 MiB tag messages of each pair.
//!
//! Run: `cargo bench -p zcx-benches --features dpdk --bench dpdk_zcopy` (as root, with DPDK;
//! `--no-huge`, nothing to set up). Only ratios mean anything on a shared machine.

use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use zcx::{
    Context, Endpoint, EpParams, Features, ListenerParams, MemHandle, MemMapParams, Prot, RequestParams,
    Status, TagSendParams, Worker, WorkerParams,
};

const MIB: usize = 1 << 20;
const TAG: u64 = 77;

/// A connected pair: the client sends, the server receives.
struct Pair {
    server: Worker,
    client: Worker,
    ep: Endpoint,
    _server_ep: Endpoint,
    src: MemHandle,
    dst: MemHandle,
    /// The server's `dst` as the client reaches it: its address and key.
    remote: (u64, zcx::EpRkey),
}

fn config(eal: &str, port: &str, zcopy_thresh: &str) -> zcx::Config {
    zcx::Config::from_vars([
        ("ZCX_TLS", "dpdk,tcp"),
        ("ZCX_DPDK_EAL_ARGS", eal),
        ("ZCX_DPDK_PORT", port),
        ("ZCX_DPDK_MBUFS", "4095"),
        ("ZCX_DPDK_ZCOPY_THRESH", zcopy_thresh),
        ("ZCX_HUGEPAGES", "no"),
    ])
    .expect("config")
}

fn worker(config: &zcx::Config) -> Worker {
    let ctx = Context::new(&zcx::ContextParams::new(Features::TAG), config).expect("context");
    ctx.create_worker(&WorkerParams::default()).expect("worker (is DPDK available? run as root)")
}

fn map(worker: &Worker) -> MemHandle {
    let params = MemMapParams::alloc(2 * MIB)
        .prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE);
    let memh = worker.context().mem_map(&params).expect("mem_map");
    // SAFETY: the mapping is 2 MiB long and owned here.
    unsafe { std::ptr::write_bytes(memh.address(), 0x5a, 2 * MIB) };
    memh
}

fn pair(eal: &str, index: usize, zcopy_thresh: &str) -> Pair {
    let server = worker(&config(eal, &format!("net_memif{}", 2 * index), zcopy_thresh));
    let client = worker(&config(eal, &format!("net_memif{}", 2 * index + 1), zcopy_thresh));
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (slot, w) = (accepted.clone(), server.clone());
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            conn_handler: Some(Box::new(move |request| {
                *slot.lock().unwrap() = Some(w.create_endpoint(EpParams::conn_request(request)).unwrap());
            })),
            ..Default::default()
        })
        .unwrap();
    let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while accepted.lock().unwrap().is_none() || ep.query().unwrap().status != Status::Ok {
        server.progress();
        client.progress();
        assert!(Instant::now() < deadline, "the pair did not connect");
    }
    let server_ep = accepted.lock().unwrap().take().unwrap();
    assert_eq!(ep.query().unwrap().transports, ["dpdk"], "not on dpdk");
    let (src, dst) = (map(&client), map(&server));
    let rkey = ep.rkey_unpack(&dst.rkey_pack().unwrap()).unwrap();
    let remote = (dst.address() as u64, rkey);
    Pair { server, client, ep, _server_ep: server_ep, src, dst, remote }
}

impl Pair {
    /// One 1 MiB message from the client's mapped memory into the server's.
    fn send(&self) {
        let recv =
            self.server.tag_recv(self.dst.slice(0, MIB).unwrap(), TAG, u64::MAX, RequestParams::default());
        let send = self.ep.tag_send(self.src.slice(0, MIB).unwrap(), TAG, TagSendParams::default());
        let (mut recv, mut send) = (Some(recv.unwrap()), Some(send.unwrap()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while send.is_some() || recv.is_some() {
            self.client.progress();
            self.server.progress();
            if let Some(request) = send.take() {
                match request.try_take() {
                    Ok(result) => drop(result.expect("send failed")),
                    Err(request) => send = Some(request),
                }
            }
            if let Some(request) = recv.take() {
                match request.try_take() {
                    Ok(result) => drop(result.expect("receive failed")),
                    Err(request) => recv = Some(request),
                }
            }
            assert!(Instant::now() < deadline, "a 1 MiB message took over 30 s");
        }
    }

    /// One put of `len` bytes from the client's mapped memory into the server's, completed
    /// (acknowledged by the server).
    fn put(&self, len: usize) {
        let (addr, rkey) = &self.remote;
        let mut put =
            self.ep.put(self.src.slice(0, len).unwrap(), *addr, rkey, RequestParams::default()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.client.progress();
            self.server.progress();
            put = match put.try_take() {
                Ok(r) => {
                    r.expect("put failed");
                    return;
                }
                Err(p) => p,
            };
            assert!(Instant::now() < deadline, "a put took over 30 s");
        }
    }

    /// Seconds for `n` 1 MiB tag messages (`len` 0) or puts of `len` bytes.
    fn time(&self, n: usize, len: usize) -> f64 {
        let start = Instant::now();
        for _ in 0..n {
            if len == 0 {
                self.send();
            } else {
                self.put(len);
            }
        }
        start.elapsed().as_secs_f64()
    }
}

fn eal_args() -> String {
    let dir = std::env::temp_dir().join(format!("zcx-bench-zc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vdevs: Vec<String> = (0..4)
        .map(|i| {
            let role = if i % 2 == 0 { "server" } else { "client" };
            let socket = dir.join(format!("memif{}.sock", i / 2));
            format!("--vdev=net_memif{i},role={role},id=0,socket={},socket-abstract=no", socket.display())
        })
        .collect();
    let mut args = zcx_dataplane::dpdk::vdev_eal_args("bench-zc", &vdevs);
    // Room for four ports' pools.
    if let Some(m) = args.iter().position(|a| a == "-m") {
        args[m + 1] = "1024".to_owned();
    }
    args.join(" ")
}

fn benches(c: &mut Criterion) {
    let eal = eal_args();
    // Zero-copy from 4 KiB on in this pair, so the interleaved puts show where it starts to pay.
    let zc = pair(&eal, 0, "4K");
    let copy = pair(&eal, 1, "inf");
    // Warm both up, then interleave.
    zc.time(4, 0);
    copy.time(4, 0);
    for (what, len, n) in [
        ("tag 1 MiB", 0, 8),
        ("put 16 KiB", 16 << 10, 100),
        ("put 64 KiB", 64 << 10, 40),
        ("put 256 KiB", 256 << 10, 16),
        ("put 1 MiB", MIB, 8),
    ] {
        let before = zcx_dataplane::dpdk::extmem::counters();
        let mut ratios = Vec::new();
        for _ in 0..15 {
            let t_zc = zc.time(n, len);
            let t_copy = copy.time(n, len);
            ratios.push(t_copy / t_zc);
        }
        let frames = zcx_dataplane::dpdk::extmem::counters().zcopy_frames - before.zcopy_frames;
        ratios.sort_by(f64::total_cmp);
        println!(
            "dpdk {what}: zero-copy bandwidth / copy bandwidth, median of 15 interleaved rounds of {n}: {:.2} \
             (min {:.2}, max {:.2}); zero-copy frames {frames}",
            ratios[7], ratios[0], ratios[14]
        );
    }
    let mut group = c.benchmark_group("dpdk_tag_1MiB");
    group.throughput(Throughput::Bytes(MIB as u64));
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    group.bench_function("zero_copy", |b| b.iter(|| zc.send()));
    group.bench_function("copy", |b| b.iter(|| copy.send()));
    group.finish();
}

criterion_group!(group, benches);

fn main() {
    group();
    Criterion::default().configure_from_args().final_summary();
    // EAL stays up in a worker's process; the memif sockets' directory is removed here.
    let _ =
        std::fs::remove_dir_all(std::env::temp_dir().join(format!("zcx-bench-zc-{}", std::process::id())));
}
