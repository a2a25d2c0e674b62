//! Endpoints over DPDK between two processes: the test runs its own binary as a server and a
//! client, each with its own EAL (`--file-prefix`, `--lcores`, a `net_memif` port; the memif
//! socket in a temporary directory) brought up by `create_worker` from `ZCX_DPDK_*`. The client
//! connects by sockaddr over loopback TCP with `ZCX_TLS=dpdk,tcp`; after the handshake both
//! endpoints must be on the dpdk transport, and tag (small and 1 MiB), stream, AM (eager and
//! rendezvous), put and get (1 MiB) and a fetch-and-add are checked byte for byte. Then the client
//! exits without closing anything and the server's error handler must fire.
//!
//! The port of each child can be given instead: `ZCX_DPDK_EP_SERVER_EAL` and
//! `ZCX_DPDK_EP_SERVER_PORT` (EAL arguments, whitespace-separated, and the ethdev name), and the
//! same with `CLIENT`. The VM harness runs the test that way on two PCI virtio-net NICs wired
//! together (`scripts/vm/dpdk-test.sh`).
//!
//! Skips with `skipped: <reason>` when DPDK is not in the build or EAL cannot start here;
//! `ZCX_REQUIRE_DPDK=1` turns a skip into a failure.
#![cfg(feature = "dpdk")]

#[path = "common/child_ops.rs"]
mod child_ops;
#[path = "common/dpdk_pair.rs"]
mod dpdk_pair;

use std::path::{Path, PathBuf};
use std::time::Instant;

use child_ops::{assert_on, collect_ams, finish, listen_for_one, progress_until, recv_tag, wait, PATIENCE};
use dpdk_pair::{pattern, skip};

use zcx::{
    AmProto, AmSendParams, AtomicOp, AtomicSize, Context, EpParams, Features, MemMapParams, Prot, Request,
    RequestParams, Status, TagSendParams, Worker, WorkerParams,
};

const TEST: &str = "endpoints_over_dpdk_between_two_processes";
const ROLE_ENV: &str = "ZCX_DPDK_EP_ROLE";
const DIR_ENV: &str = "ZCX_DPDK_EP_DIR";
/// The children's `ZCX_KEEPALIVE_INTERVAL` instead of 250 ms, for slow (emulated) machines.
const KEEPALIVE_ENV: &str = "ZCX_DPDK_EP_KEEPALIVE_INTERVAL";
const MIB: usize = 1 << 20;

#[test]
fn endpoints_over_dpdk_between_two_processes() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        Ok(other) => panic!("unknown {ROLE_ENV}={other}"),
        Err(_) => {}
    }
    if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
        skip(&format!("zcx-dpdk-sys was built without DPDK: {why}"));
        return;
    }
    parent();
}

/// The `ZCX_*` settings of a child in `role`: its end of a `net_memif` pair, or the EAL arguments
/// and port given for the role (both or neither).
fn child_env(role: &str, dir: &Path) -> Vec<(&'static str, String)> {
    let given = |what: &str| {
        let name = format!("ZCX_DPDK_EP_{}_{what}", role.to_uppercase());
        std::env::var(&name).ok().map(|value| (name, value))
    };
    let (eal, port) = match (given("EAL"), given("PORT")) {
        (Some((_, eal)), Some((_, port))) => (eal, port),
        (None, None) => {
            let socket = dir.join("memif.sock");
            let vdev =
                format!("--vdev=net_memif0,role={role},id=0,socket={},socket-abstract=no", socket.display());
            let eal = zcx_dataplane::dpdk::vdev_eal_args(&format!("ep-{role}"), &[vdev]).join(" ");
            (eal, "net_memif0".to_owned())
        }
        (Some((name, _)), None) | (None, Some((name, _))) => {
            panic!("{name} is set but not its EAL/PORT counterpart: give both or neither")
        }
    };
    vec![
        ("ZCX_TLS", "dpdk,tcp".to_owned()),
        ("ZCX_DPDK_EAL_ARGS", eal),
        ("ZCX_DPDK_PORT", port),
        ("ZCX_DPDK_MBUFS", "4095".to_owned()),
        ("ZCX_KEEPALIVE_INTERVAL", std::env::var(KEEPALIVE_ENV).unwrap_or_else(|_| "250ms".to_owned())),
        ("ZCX_HUGEPAGES", "no".to_owned()),
    ]
}

fn parent() {
    let dir = dpdk_pair::run_dir("ep");
    let eal_prefix = |role: &str| format!("zcx-ep-{role}-{}", std::process::id());
    let configure = |role: &str, command: &mut std::process::Command| {
        command.env(ROLE_ENV, role).env(DIR_ENV, &dir).envs(child_env(role, &dir));
    };
    let Some(logs) = dpdk_pair::run_pair(&dir, TEST, "ep", PATIENCE, eal_prefix, configure) else { return };
    let (server_log, client_log) = (logs.server, logs.client);
    assert!(client_log.contains("client: verified everything over dpdk"));
    assert!(server_log.contains("server: verified everything over dpdk"));
    assert!(server_log.contains("server: error handler ran"));
}

fn dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_ENV).unwrap())
}

/// The context and worker of a child; `None` (after printing `skipped:`) when DPDK cannot start.
fn start() -> Option<Worker> {
    let features = Features::TAG | Features::RMA | Features::AM | Features::STREAM | Features::AMO64;
    let config = zcx::Config::from_env().expect("config");
    let ctx = Context::new(&zcx::ContextParams::new(features), &config).expect("context");
    match ctx.create_worker(&WorkerParams::default()) {
        Ok(worker) => Some(worker),
        Err(Status::NoDevice) => {
            println!("skipped: create_worker could not start the DPDK transport here (NO_DEVICE)");
            None
        }
        Err(other) => panic!("create_worker: {other}"),
    }
}

fn server() {
    let Some(worker) = start() else { return };
    let accepting = listen_for_one(&worker, &dir());
    // AMs: eager ones kept from the handler, rendezvous ones received into a buffer.
    let (seen, pending) = collect_ams(&worker, 3);
    let ep = accepting.endpoint(&worker);
    let failed = accepting.failed.clone();
    // Tag, both sizes, echoed back.
    let small = recv_tag(&worker, 1, 4096);
    assert_eq!(small, pattern(100, 1));
    let big = recv_tag(&worker, 2, 2 * MIB);
    assert!(big == pattern(MIB, 2), "1 MiB tag message differs");
    assert_on(&ep, "dpdk", "server");
    wait(&worker, ep.tag_send(small, 3, TagSendParams::default()).unwrap());
    wait(&worker, ep.tag_send(big, 4, TagSendParams::default()).unwrap());
    // Stream: 300 KB in, an answer out.
    let got = wait(&worker, ep.stream_recv(vec![0u8; 300_000], true, RequestParams::default()).unwrap());
    assert!(got.buf == pattern(300_000, 5), "stream bytes differ");
    wait(&worker, ep.stream_send(b"stream ok".to_vec(), RequestParams::default()).unwrap());
    // AM: one eager, one rendezvous.
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
    // RMA: a region for the client's put, get and atomics; its address and key go by tag.
    let ctx = worker.context().clone();
    let memh = ctx
        .mem_map(
            &MemMapParams::alloc(2 * MIB)
                .prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE),
        )
        .unwrap();
    let word_off = MIB + 64;
    // SAFETY: an 8-byte aligned word inside the mapping, not yet shared with anyone.
    unsafe { (memh.address().add(word_off) as *mut u64).write(40) };
    let mut key = (memh.address() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(&memh.rkey_pack().unwrap());
    wait(&worker, ep.tag_send(key, 6, TagSendParams::default()).unwrap());
    assert_eq!(recv_tag(&worker, 7, 64), b"rma done");
    // SAFETY: the client is done with the region (it said so after its flush).
    let there = unsafe { std::slice::from_raw_parts(memh.address(), MIB) };
    assert!(there == pattern(MIB, 8).as_slice(), "put bytes differ");
    // SAFETY: as above.
    assert_eq!(unsafe { (memh.address().add(word_off) as *const u64).read() }, 42);
    // The client's puts that ran past the end were refused whole: the tail is as allocated.
    // SAFETY: as above.
    let tail = unsafe { std::slice::from_raw_parts(memh.address().add(MIB + 4096), MIB - 4096) };
    assert!(tail.iter().all(|&b| b == 0), "a refused put wrote into the region");
    assert_on(&ep, "dpdk", "server");
    println!("server: verified everything over dpdk");
    // In flight when the client goes: must end with the endpoint's error.
    let mut in_flight = ep.stream_recv(vec![0u8; 16], true, RequestParams::default()).unwrap();
    wait(&worker, ep.tag_send(b"exit now".to_vec(), 8, TagSendParams::default()).unwrap());
    // The client exits without closing: the error handler must run.
    progress_until(&worker, "the error handler", || failed.lock().unwrap().is_some());
    let status = failed.lock().unwrap().unwrap();
    assert!(
        matches!(status, Status::EndpointTimeout | Status::ConnectionReset),
        "error handler status {status:?}"
    );
    let deadline = Instant::now() + PATIENCE;
    let result = loop {
        in_flight = match in_flight.try_take() {
            Ok(result) => break result,
            Err(r) => r,
        };
        worker.progress();
        assert!(Instant::now() < deadline, "the in-flight receive never completed");
    };
    assert_eq!(result.err(), Some(status), "the in-flight receive must end with the endpoint's error");
    println!("server: error handler ran with {status:?}");
    drop(ep);
    drop(accepting);
}

fn client() {
    let Some(worker) = start() else { return };
    let addr: std::net::SocketAddr =
        std::fs::read_to_string(dir().join("server.port")).unwrap().trim().parse().unwrap();
    let ep = worker.create_endpoint(EpParams::sockaddr(addr)).unwrap();
    progress_until(&worker, "the connection", || ep.query().unwrap().status == Status::Ok);
    assert_on(&ep, "dpdk", "client");
    // Tag: small and 1 MiB, then both back.
    let s = ep.tag_send(pattern(100, 1), 1, TagSendParams::default()).unwrap();
    let b = ep.tag_send(pattern(MIB, 2), 2, TagSendParams::default()).unwrap();
    wait(&worker, s);
    wait(&worker, b);
    assert_eq!(recv_tag(&worker, 3, 4096), pattern(100, 1));
    assert!(recv_tag(&worker, 4, 2 * MIB) == pattern(MIB, 2), "1 MiB tag echo differs");
    // Stream.
    wait(&worker, ep.stream_send(pattern(300_000, 5), RequestParams::default()).unwrap());
    let got = wait(&worker, ep.stream_recv(vec![0u8; 9], true, RequestParams::default()).unwrap());
    assert_eq!(got.buf, b"stream ok");
    // AM.
    wait(&worker, ep.am_send(3, b"eager", pattern(1000, 6), AmSendParams::default()).unwrap());
    let rndv = AmSendParams { proto: AmProto::Rndv, ..Default::default() };
    wait(&worker, ep.am_send(3, b"rndv", pattern(MIB, 7), rndv).unwrap());
    assert_eq!(recv_tag(&worker, 5, 64), b"am ok");
    // RMA.
    let key = recv_tag(&worker, 6, 4096);
    let base = u64::from_le_bytes(key[..8].try_into().unwrap());
    let rkey = ep.rkey_unpack(&key[8..]).unwrap();
    wait(&worker, ep.put(pattern(MIB, 8), base, &rkey, RequestParams::default()).unwrap());
    let back = wait(&worker, ep.get(vec![0u8; MIB], base, &rkey, RequestParams::default()).unwrap());
    assert!(back.buf == pattern(MIB, 8), "get bytes differ");
    let word = base + MIB as u64 + 64;
    let fetched = wait(
        &worker,
        ep.atomic(AtomicOp::Add, AtomicSize::U64, 2, 0, word, &rkey, RequestParams::default()).unwrap(),
    );
    assert_eq!(fetched.info.value, 40);
    // Accesses that start inside the region and end past it: refused before any byte moves, with
    // the real key (here at once) and with one that claims a longer region (by the target).
    let mut longer = zcx_control::RkeyWire::decode(&key[8..]).unwrap();
    longer.length *= 2;
    longer.shm = None;
    let longer = ep.rkey_unpack(&longer.encode()).unwrap();
    let outcome = |issued: zcx::Result<Request<Vec<u8>>>| issued.and_then(|r| finish(&worker, r)).map(drop);
    for (offset, len) in [(MIB + MIB / 2, MIB), (2 * MIB - 1, 2)] {
        for (name, rkey) in [("key", &rkey), ("longer key", &longer)] {
            let put = ep.put(vec![0xEE; len], base + offset as u64, rkey, RequestParams::default());
            assert_eq!(outcome(put), Err(Status::InvalidAddr), "put of {len} at +{offset:#x}, {name}");
            let get = ep.get(vec![0u8; len], base + offset as u64, rkey, RequestParams::default());
            assert_eq!(outcome(get), Err(Status::InvalidAddr), "get of {len} at +{offset:#x}, {name}");
        }
    }
    wait(&worker, ep.flush().unwrap());
    wait(&worker, ep.tag_send(b"rma done".to_vec(), 7, TagSendParams::default()).unwrap());
    assert_eq!(recv_tag(&worker, 8, 64), b"exit now");
    assert_on(&ep, "dpdk", "client");
    println!("client: verified everything over dpdk");
    // Gone without closing anything, as a crashed peer would be.
    std::process::exit(0);
}

/// `ZCX_TLS` naming dpdk without a port to use is the worker's failure; allowing it (`all`)
/// without one leaves the worker as it was, with no DPDK member and no EAL.
#[test]
fn dpdk_required_without_a_port_is_invalid_param() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let context = |tls: &str| {
        let config = zcx::Config::from_vars([("ZCX_TLS", tls), ("ZCX_HUGEPAGES", "no")]).unwrap();
        Context::new(&zcx::ContextParams::new(Features::TAG), &config).unwrap()
    };
    let err = context("dpdk,tcp").create_worker(&WorkerParams::default()).unwrap_err();
    assert_eq!(err, Status::InvalidParam);
    let worker = context("all").create_worker(&WorkerParams::default()).unwrap();
    let peer = zcx_control::WorkerAddressWire::decode(worker.address()).unwrap();
    assert!(!peer.transports.iter().any(|t| matches!(t, zcx_control::TransportAddress::Dpdk { .. })));
}
