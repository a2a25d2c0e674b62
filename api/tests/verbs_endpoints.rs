//! Endpoints over verbs between two processes, one on each Soft-RoCE device of the VM
//! (`scripts/vm/verbs-test.sh`: rxe0 and rxe1 on two wired NICs). The test runs its own binary
//! as a server on rxe1 and a client on rxe0; the client connects by sockaddr over loopback TCP
//! with `ZCX_TLS=verbs,tcp` and `ZCX_ATOMIC_MODE=device`. After the handshake both endpoints
//! must be on verbs. Tag (small and 1 MiB), stream, AM (eager and rendezvous), puts and gets
//! (1 MiB, and 20 MiB past the 8 MiB a work request moves) and 64-bit atomics are checked byte
//! for byte, and the transport counters must show the RMA ran as RDMA writes, reads and atomics.
//! An access outside the key's region is refused before anything is posted; a key edited to claim
//! a longer region reaches the server's NIC, which refuses it: the put fails with
//! CONNECTION_RESET, both sides' error handlers run, and the bytes past the region are unchanged.
//!
//! Elsewhere (no device) it prints `skipped:`.
#![cfg(feature = "verbs")]

#[path = "common/child_ops.rs"]
mod child_ops;
#[path = "common/dpdk_pair.rs"]
mod dpdk_pair;
#[path = "../../dataplane/tests/common/verbs_here.rs"]
mod verbs_here;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use child_ops::{
    assert_on, collect_ams, finish, listen_for_one, progress, progress_until, recv_tag, wait, PATIENCE,
};
use dpdk_pair::pattern;
use verbs_here::verbs_here;

use zcx::{
    AmProto, AmSendParams, AtomicOp, AtomicSize, Context, EpParams, Features, MemMapParams, Prot,
    RequestParams, Status, TagSendParams, Worker, WorkerParams,
};

const TEST: &str = "endpoints_over_verbs_between_two_processes";
const ROLE_ENV: &str = "ZCX_VERBS_EP_ROLE";
const DIR_ENV: &str = "ZCX_VERBS_EP_DIR";
const MIB: usize = 1 << 20;
/// Message sizes every operation is checked at: empty, around a frame and a send buffer, around
/// the 8 MiB one work request moves, and 64 MiB.
const SWEEP: [usize; 10] = [0, 1, 4095, 8192, 8193, 65537, 8 * MIB - 1, 8 * MIB + 1, 24 * MIB + 3, 64 * MIB];

#[test]
fn endpoints_over_verbs_between_two_processes() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        Ok(other) => panic!("unknown {ROLE_ENV}={other}"),
        Err(_) => {}
    }
    if !verbs_here() {
        return;
    }
    let dir = dpdk_pair::run_dir("verbs-ep");
    let configure = |role: &str, command: &mut std::process::Command| configure(role, &dir, command);
    let logs = dpdk_pair::run_pair(&dir, TEST, "verbs", PATIENCE, |role| format!("none-{role}"), configure)
        .expect("both processes ran");
    assert!(logs.client.contains("client: verified everything over verbs"));
    assert!(logs.server.contains("server: verified everything over verbs"));
    assert!(logs.server.contains("server: error handler ran"));
    assert!(logs.server.contains("woken by the peer"));
    assert!(logs.client.contains("client: error handler ran"));
}

/// A child in `role`: the server on rxe1, the client on rxe0, verbs required.
fn configure(role: &str, dir: &std::path::Path, command: &mut std::process::Command) {
    let device = if role.starts_with("server") { "rxe1:1" } else { "rxe0:1" };
    command
        .env(ROLE_ENV, role)
        .env(DIR_ENV, dir)
        .env("ZCX_TLS", "verbs,tcp")
        .env("ZCX_VERBS_DEVICE", device)
        .env("ZCX_VERBS_GID_INDEX", "0")
        .env("ZCX_ATOMIC_MODE", "device")
        .env("ZCX_KEEPALIVE_INTERVAL", "2s")
        .env("ZCX_HUGEPAGES", "no")
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()));
}

const KILL_TEST: &str = "a_peer_killed_mid_put_and_mid_rendezvous_is_an_error_not_a_hang";

/// The server is SIGKILLed while the client's 16 MiB put (RDMA writes) and 4 MiB tag message
/// (a rendezvous) are in flight: both operations and the error handler must end with an error,
/// within seconds, not hang.
#[test]
fn a_peer_killed_mid_put_and_mid_rendezvous_is_an_error_not_a_hang() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server-victim") => return victim(),
        Ok("client-survivor") => return survivor(),
        Ok(_) => return,
        Err(_) => {}
    }
    if !verbs_here() {
        return;
    }
    let dir = dpdk_pair::run_dir("verbs-kill");
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str| {
        let log = std::fs::File::create(dir.join(format!("{role}.log"))).unwrap();
        let mut command = std::process::Command::new(&exe);
        command.args([KILL_TEST, "--exact", "--nocapture", "--test-threads=1"]);
        command.stdout(log.try_clone().unwrap()).stderr(log);
        configure(role, &dir, &mut command);
        command.spawn().unwrap()
    };
    let wait_file = |name: &str| {
        let deadline = Instant::now() + PATIENCE;
        while !dir.join(name).exists() {
            assert!(Instant::now() < deadline, "no {name}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut victim = spawn("server-victim");
    wait_file("server.port");
    let mut survivor = spawn("client-survivor");
    wait_file("started");
    // Our own child, by its handle.
    victim.kill().unwrap();
    let killed_at = Instant::now();
    victim.wait().unwrap();
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = survivor.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = survivor.kill();
            panic!("the survivor hung after its peer was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.join("client-survivor.log")).unwrap();
    eprintln!("{log}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "the survivor failed: {status:?}");
    assert!(log.contains("survivor: put ended with"), "{log}");
    assert!(log.contains("survivor: rendezvous ended with"), "{log}");
    assert!(log.contains("survivor: error handler ran once"), "{log}");
    println!("the survivor finished {:.1} s after the kill", killed_at.elapsed().as_secs_f64());
}

/// Maps a region, sends its key, and waits to be killed.
fn victim() {
    let worker = start();
    let accepting = listen_for_one(&worker, &dir());
    let ep = accepting.endpoint(&worker);
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    let memh = worker.context().mem_map(&MemMapParams::alloc(16 * MIB).prot(prot)).unwrap();
    let mut key = (memh.address() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(&memh.rkey_pack().unwrap());
    wait(&worker, ep.tag_send(key, 1, TagSendParams::default()).unwrap());
    // Never posts the receive for the rendezvous; progresses until killed.
    loop {
        progress(&worker);
    }
}

fn survivor() {
    let worker = start();
    let addr: std::net::SocketAddr =
        std::fs::read_to_string(dir().join("server.port")).unwrap().trim().parse().unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&errors);
    let ep = worker
        .create_endpoint(
            EpParams::sockaddr(addr).with_err_handler(move |_, status| seen.lock().unwrap().push(status)),
        )
        .unwrap();
    progress_until(&worker, "the connection", || ep.query().unwrap().status == Status::Ok);
    assert_on(&ep, "verbs", "survivor");
    let key = recv_tag(&worker, 1, 4096);
    let base = u64::from_le_bytes(key[..8].try_into().unwrap());
    let rkey = ep.rkey_unpack(&key[8..]).unwrap();
    // The victim never posts the receive: the rendezvous waits for it until the kill.
    let rndv = ep.tag_send(pattern(4 * MIB, 4), 9, TagSendParams::default()).unwrap();
    // Puts back to back, two in flight, until one fails: the kill lands in the middle of one.
    let source = pattern(16 * MIB, 3);
    let put = || ep.put(source.clone(), base, &rkey, RequestParams::default());
    let mut in_flight = std::collections::VecDeque::from([put().unwrap(), put().unwrap()]);
    let mut started = None;
    let put_error = loop {
        let request = in_flight.pop_front().unwrap();
        match finish(&worker, request) {
            Ok(_) => {
                if started.is_none() {
                    std::fs::write(dir().join("started"), b"").unwrap();
                    started = Some(Instant::now());
                }
                match put() {
                    Ok(request) => in_flight.push_back(request),
                    Err(status) => break status,
                }
            }
            Err(status) => break status,
        }
    };
    let started = started.expect("a put completed before the kill");
    println!(
        "survivor: put ended with {put_error:?}, {:.1} s after the first put",
        started.elapsed().as_secs_f64()
    );
    for request in in_flight {
        assert!(finish(&worker, request).is_err(), "a put in flight to a killed peer succeeded");
    }
    let rndv = finish(&worker, rndv);
    println!("survivor: rendezvous ended with {:?}", rndv.as_ref().err());
    assert!(matches!(rndv.err(), Some(Status::EndpointTimeout | Status::ConnectionReset)));
    progress_until(&worker, "the error handler", || !errors.lock().unwrap().is_empty());
    for _ in 0..1000 {
        progress(&worker);
    }
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "the error handler ran {errors:?}");
    println!("survivor: error handler ran once with {:?}", errors[0]);
    assert!(started.elapsed() < Duration::from_secs(30), "noticed only after {:?}", started.elapsed());
}

fn dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_ENV).unwrap())
}

fn start() -> Worker {
    // `RUST_LOG` (passed on to the children) shows the transport's view of a failure.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let features = Features::TAG | Features::RMA | Features::AM | Features::STREAM | Features::AMO64;
    let config = zcx::Config::from_env().expect("config");
    let ctx = Context::new(&zcx::ContextParams::new(features), &config).expect("context");
    ctx.create_worker(&WorkerParams::default()).expect("a worker with verbs")
}

/// [`recv_tag`] by `ucp_worker_arm` and a blocking poll of the worker's event fd, with no
/// timeout of its own: only the verbs completion channel, raised by the peer's traffic, can
/// wake it. Asserts that it slept and woke.
fn recv_tag_sleeping(worker: &Worker, tag: u64, len: usize) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let mut request = worker.tag_recv(vec![0u8; len], tag, u64::MAX, RequestParams::default()).unwrap();
    let (mut slept, deadline) = (0, Instant::now() + PATIENCE);
    let done = loop {
        request = match request.try_take() {
            Ok(result) => break result.expect("the receive"),
            Err(r) => r,
        };
        if worker.arm().is_ok() {
            let mut fd = libc::pollfd { fd: worker.event_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut fd, 1, 60_000) };
            assert_eq!(ready, 1, "the event fd did not wake in 60 s");
            slept += 1;
        }
        worker.progress();
        assert!(Instant::now() < deadline, "no message");
    };
    assert!(slept > 0, "never slept on the event fd");
    println!("server: slept {slept} times on the event fd, woken by the peer");
    let mut buf = done.buf;
    buf.truncate(done.info.length);
    buf
}

fn counter(worker: &Worker, name: &str) -> u64 {
    worker.transport_counters().into_iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v)
}

fn server() {
    let worker = start();
    let accepting = listen_for_one(&worker, &dir());
    let (seen, pending) = collect_ams(&worker, 3);
    let ep = accepting.endpoint(&worker);
    let failed = accepting.failed.clone();
    let small = recv_tag_sleeping(&worker, 1, 4096);
    assert_eq!(small, pattern(100, 1));
    let reads = counter(&worker, "verbs_rdma_reads");
    let big = recv_tag(&worker, 2, 2 * MIB);
    assert!(big == pattern(MIB, 2), "1 MiB tag message differs");
    assert!(counter(&worker, "verbs_rdma_reads") > reads, "the receiver did not pull the 1 MiB message");
    assert_on(&ep, "verbs", "server");
    wait(&worker, ep.tag_send(small, 3, TagSendParams::default()).unwrap());
    wait(&worker, ep.tag_send(big, 4, TagSendParams::default()).unwrap());
    let got = wait(&worker, ep.stream_recv(vec![0u8; 300_000], true, RequestParams::default()).unwrap());
    assert!(got.buf == pattern(300_000, 5), "stream bytes differ");
    wait(&worker, ep.stream_send(b"stream ok".to_vec(), RequestParams::default()).unwrap());
    progress_until(&worker, "two AMs", || seen.lock().unwrap().len() == 2);
    let rndv = pending.lock().unwrap().pop().expect("the rendezvous AM");
    let rndv = wait(&worker, rndv).buf;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], (b"eager".to_vec(), pattern(1000, 6)));
        assert_eq!(seen[1].0, b"rndv");
    }
    assert!(rndv == pattern(MIB, 7), "rendezvous AM data differs");
    wait(&worker, ep.tag_send(b"am ok".to_vec(), 5, TagSendParams::default()).unwrap());

    // Every size from 0 B to 64 MiB (past the 8 MiB one work request moves): tag messages
    // checked here, puts and gets into a 64 MiB region checked by the client's read-back.
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    let sweep = worker.context().mem_map(&MemMapParams::alloc(64 * MIB).prot(prot)).unwrap();
    let mut key = (sweep.address() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(&sweep.rkey_pack().unwrap());
    wait(&worker, ep.tag_send(key, 10, TagSendParams::default()).unwrap());
    for (i, &size) in SWEEP.iter().enumerate() {
        let got = recv_tag(&worker, 100 + i as u64, size.max(1));
        assert!(got == pattern(size, i as u8), "tag message of {size} bytes differs");
    }
    assert_eq!(recv_tag(&worker, 11, 64), b"sweep done");
    // SAFETY: the client is done with the region; the last put filled all of it.
    let last = unsafe { std::slice::from_raw_parts(sweep.address(), 64 * MIB) };
    assert!(last == pattern(64 * MIB, SWEEP.len() as u8 - 1).as_slice(), "the 64 MiB put differs here");
    println!("server: sweep of {} sizes verified", SWEEP.len());

    // RMA: the client's target is the first 21 MiB of a 24 MiB allocation, mapped as a region
    // of its own; the last 3 MiB are another region nobody may reach through the first's key.
    let ctx = worker.context().clone();
    let all = ctx.mem_map(&MemMapParams::alloc(24 * MIB)).unwrap();
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    // SAFETY: the range lies inside `all`, which outlives `memh`.
    let memh = ctx
        .mem_map(&unsafe { MemMapParams::new().length(21 * MIB).address(all.address()) }.prot(prot))
        .unwrap();
    let word_off = 21 * MIB - 64;
    // SAFETY: an 8-byte aligned word inside the region, not yet shared with anyone.
    unsafe { (memh.address().add(word_off) as *mut u64).write(40) };
    // SAFETY: the 3 MiB past the region, which nobody else writes.
    let outside = || unsafe { std::slice::from_raw_parts(all.address().add(21 * MIB), 3 * MIB) };
    let outside_before = outside().to_vec();
    let mut key = (memh.address() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(&memh.rkey_pack().unwrap());
    wait(&worker, ep.tag_send(key, 6, TagSendParams::default()).unwrap());
    assert_eq!(recv_tag(&worker, 7, 64), b"rma done");
    // SAFETY: the client is done with the region (it said so after its flush).
    let there = unsafe { std::slice::from_raw_parts(memh.address(), MIB) };
    assert!(there == pattern(MIB, 8).as_slice(), "put bytes differ");
    // SAFETY: as above.
    let big_there = unsafe { std::slice::from_raw_parts(memh.address().add(MIB), 20 * MIB - 4096) };
    assert!(big_there == &pattern(20 * MIB, 9)[..20 * MIB - 4096], "20 MiB put bytes differ");
    // SAFETY: as above.
    assert_eq!(unsafe { (memh.address().add(word_off) as *const u64).read() }, 77, "fetch-add then swap");
    assert_on(&ep, "verbs", "server");
    println!("server: verified everything over verbs");
    wait(&worker, ep.tag_send(b"forge now".to_vec(), 8, TagSendParams::default()).unwrap());
    // The client's put with a key claiming a longer region reaches this NIC, which refuses it:
    // the link fails, and the bytes past the region are as they were.
    progress_until(&worker, "the error handler", || failed.lock().unwrap().is_some());
    let status = failed.lock().unwrap().unwrap();
    assert!(
        matches!(status, Status::EndpointTimeout | Status::ConnectionReset),
        "error handler status {status:?}"
    );
    assert!(outside() == &outside_before[..], "a forged key wrote past its region");
    println!("server: error handler ran with {status:?}");
    drop(ep);
    drop(accepting);
    memh.unmap().unwrap();
    all.unmap().unwrap();
}

fn client() {
    let worker = start();
    let addr: std::net::SocketAddr =
        std::fs::read_to_string(dir().join("server.port")).unwrap().trim().parse().unwrap();
    let failed: Arc<Mutex<Option<Status>>> = Arc::default();
    let fail_slot = Arc::clone(&failed);
    let ep = worker
        .create_endpoint(
            EpParams::sockaddr(addr)
                .with_err_handler(move |_, status| *fail_slot.lock().unwrap() = Some(status)),
        )
        .unwrap();
    progress_until(&worker, "the connection", || ep.query().unwrap().status == Status::Ok);
    assert_on(&ep, "verbs", "client");
    // The server sleeps on its event fd meanwhile (`recv_tag_sleeping`).
    std::thread::sleep(Duration::from_millis(1500));
    let s = ep.tag_send(pattern(100, 1), 1, TagSendParams::default()).unwrap();
    let b = ep.tag_send(pattern(MIB, 2), 2, TagSendParams::default()).unwrap();
    wait(&worker, s);
    wait(&worker, b);
    assert_eq!(recv_tag(&worker, 3, 4096), pattern(100, 1));
    assert!(recv_tag(&worker, 4, 2 * MIB) == pattern(MIB, 2), "1 MiB tag echo differs");
    wait(&worker, ep.stream_send(pattern(300_000, 5), RequestParams::default()).unwrap());
    let got = wait(&worker, ep.stream_recv(vec![0u8; 9], true, RequestParams::default()).unwrap());
    assert_eq!(got.buf, b"stream ok");
    wait(&worker, ep.am_send(3, b"eager", pattern(1000, 6), AmSendParams::default()).unwrap());
    let rndv = AmSendParams { proto: AmProto::Rndv, ..Default::default() };
    wait(&worker, ep.am_send(3, b"rndv", pattern(MIB, 7), rndv).unwrap());
    assert_eq!(recv_tag(&worker, 5, 64), b"am ok");

    let key = recv_tag(&worker, 10, 4096);
    let sweep_base = u64::from_le_bytes(key[..8].try_into().unwrap());
    let sweep_key = ep.rkey_unpack(&key[8..]).unwrap();
    for (i, &size) in SWEEP.iter().enumerate() {
        let bytes = pattern(size, i as u8);
        let tag = ep.tag_send(bytes.clone(), 100 + i as u64, TagSendParams::default()).unwrap();
        wait(&worker, ep.put(bytes.clone(), sweep_base, &sweep_key, RequestParams::default()).unwrap());
        let back =
            wait(&worker, ep.get(vec![0u8; size], sweep_base, &sweep_key, RequestParams::default()).unwrap());
        assert!(back.buf == bytes, "put then get of {size} bytes differs");
        wait(&worker, tag);
    }
    wait(&worker, ep.tag_send(b"sweep done".to_vec(), 11, TagSendParams::default()).unwrap());

    let sends_before_rma = counter(&worker, "verbs_sends");
    let key = recv_tag(&worker, 6, 4096);
    let base = u64::from_le_bytes(key[..8].try_into().unwrap());
    let rkey = ep.rkey_unpack(&key[8..]).unwrap();
    wait(&worker, ep.put(pattern(MIB, 8), base, &rkey, RequestParams::default()).unwrap());
    let back = wait(&worker, ep.get(vec![0u8; MIB], base, &rkey, RequestParams::default()).unwrap());
    assert!(back.buf == pattern(MIB, 8), "get bytes differ");
    let big = pattern(20 * MIB, 9);
    let big_at = base + MIB as u64;
    wait(&worker, ep.put(big[..20 * MIB - 4096].to_vec(), big_at, &rkey, RequestParams::default()).unwrap());
    let back =
        wait(&worker, ep.get(vec![0u8; 20 * MIB - 4096], big_at, &rkey, RequestParams::default()).unwrap());
    assert!(back.buf[..] == big[..20 * MIB - 4096], "20 MiB get bytes differ");
    let word = base + 21 * MIB as u64 - 64;
    let atomic =
        |op, size, value, compare| ep.atomic(op, size, value, compare, word, &rkey, RequestParams::default());
    assert_eq!(wait(&worker, atomic(AtomicOp::Add, AtomicSize::U64, 2, 0).unwrap()).info.value, 40);
    assert_eq!(wait(&worker, atomic(AtomicOp::Cswap, AtomicSize::U64, 77, 42).unwrap()).info.value, 42);
    // Device mode: what the NIC cannot do is refused, never done by a CPU beside it.
    let refused = atomic(AtomicOp::Swap, AtomicSize::U64, 1, 0).and_then(|r| finish(&worker, r).map(drop));
    assert_eq!(refused, Err(Status::Unsupported), "swap in device mode");
    // Starts inside the region and ends past it: refused here, before anything is posted.
    let posted = counter(&worker, "verbs_posted");
    for (offset, len) in [(21 * MIB - 8, 16), (21 * MIB, 1)] {
        let put = ep.put(vec![0xEE; len], base + offset as u64, &rkey, RequestParams::default());
        assert_eq!(put.err(), Some(Status::InvalidAddr), "put of {len} at +{offset:#x}");
    }
    assert_eq!(counter(&worker, "verbs_posted"), posted, "a refused access posted nothing");
    wait(&worker, ep.flush().unwrap());
    let (writes, reads, atomics) = (
        counter(&worker, "verbs_rdma_writes"),
        counter(&worker, "verbs_rdma_reads"),
        counter(&worker, "verbs_rdma_atomics"),
    );
    println!("client: counters {:?}", worker.transport_counters());
    assert!(writes >= 4, "puts as RDMA writes (1 MiB, and 20 MiB as three): {writes}");
    assert!(reads >= 4, "gets as RDMA reads (1 MiB, and 20 MiB as three): {reads}");
    assert_eq!(atomics, 2, "fetch-add and compare-and-swap as RDMA atomics");
    // Emulated, the 42 MiB moved would take thousands of frames; what went is keepalives and
    // the flush.
    let sends = counter(&worker, "verbs_sends") - sends_before_rma;
    assert!(sends < 64, "RMA went as messages: {sends} sends");
    wait(&worker, ep.tag_send(b"rma done".to_vec(), 7, TagSendParams::default()).unwrap());
    assert_on(&ep, "verbs", "client");
    println!("client: verified everything over verbs");

    // A key edited to claim a region twice as long passes the checks here and reaches the
    // server's NIC, which refuses the write past the real region.
    assert_eq!(recv_tag(&worker, 8, 64), b"forge now");
    let mut longer = zcx_control::RkeyWire::decode(&key[8..]).unwrap();
    longer.length *= 2;
    longer.shm = None;
    let longer = ep.rkey_unpack(&longer.encode()).unwrap();
    let put = ep.put(vec![0xEE; 4096], base + 22 * MIB as u64, &longer, RequestParams::default()).unwrap();
    assert_eq!(finish(&worker, put).err(), Some(Status::ConnectionReset), "the NIC refused the forged key");
    progress_until(&worker, "the error handler", || failed.lock().unwrap().is_some());
    println!("client: error handler ran with {:?}", failed.lock().unwrap().unwrap());
}
