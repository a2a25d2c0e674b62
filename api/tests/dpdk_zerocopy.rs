//! Zero-copy sends over DPDK between two processes, and the whole endpoint API under injected
//! loss. The test runs its own binary as a memif server and a memif client (each with its own
//! EAL, brought up by `create_worker` from `ZCX_DPDK_*`; the client connects by sockaddr with
//! `ZCX_TLS=dpdk,tcp`), once per scenario:
//!
//! - `zcopy`: tag sends, puts and a rendezvous AM of 1 MiB and of odd sizes, from `mem_map`'d
//!   memory (registered with DPDK as external memory when it was mapped), checked byte for byte,
//!   with the process's zero-copy counters showing the frames left from that memory; and a
//!   handle unmapped while a zero-copy send from it is in flight: the send still delivers every
//!   byte, and DPDK forgets the region only after the send completed. The rendezvous payloads and
//!   get replies each side receives are placed: copied once, straight from the received mbufs
//!   into the receive buffer (the process's placement counters show it).
//! - `loss_1pct`, `loss_10pct`: the same traffic plus a get and small eager messages, with
//!   `ZCX_DPDK_DROP_PPM` dropping 1 % or 10 % of the frames each side receives; everything must
//!   still arrive exactly once (no extra tag message or AM afterwards), byte for byte.
//!
//! Skips with `skipped: <reason>` when DPDK is not in the build or EAL cannot start here;
//! `ZCX_REQUIRE_DPDK=1` turns a skip into a failure.
#![cfg(feature = "dpdk")]

#[path = "common/child_ops.rs"]
mod child_ops;
#[path = "common/dpdk_pair.rs"]
mod dpdk_pair;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use child_ops::{assert_on, collect_ams, listen_for_one, progress_until, recv_tag, wait, PATIENCE};
use dpdk_pair::{pattern, skip};

use zcx::{
    AmProto, AmSendParams, Context, EpParams, Features, MemHandle, MemMapParams, Prot, RequestParams, Status,
    TagSendParams, Worker, WorkerParams,
};
use zcx_dataplane::dpdk::extmem;

const ROLE_ENV: &str = "ZCX_DPDK_ZC_ROLE";
const DIR_ENV: &str = "ZCX_DPDK_ZC_DIR";
const SCENARIO_ENV: &str = "ZCX_DPDK_ZC_SCENARIO";
const MIB: usize = 1 << 20;
/// Odd sizes: not a multiple of the fragment size, the page size or 8.
const ODD: usize = MIB + 4097 + 3;
const ODD_PUT: usize = 333_333;

/// One pair of processes at a time: each holds an EAL with 512 MiB, on two shared cores.
static ONE_PAIR: Mutex<()> = Mutex::new(());

#[test]
fn zero_copy_sends_from_mapped_memory_over_memif() {
    run("zcopy", 0);
}

#[test]
fn endpoints_deliver_everything_once_under_1pct_loss() {
    run("loss_1pct", 10_000);
}

#[test]
fn endpoints_deliver_everything_once_under_10pct_loss() {
    run("loss_10pct", 100_000);
}

/// Runs `scenario` as a server and a client process, or, in a child, plays its role.
fn run(scenario: &str, drop_ppm: u32) {
    match (std::env::var(ROLE_ENV).as_deref(), std::env::var(SCENARIO_ENV)) {
        (Ok(_), Ok(s)) if s != scenario => return,
        (Ok("server"), Ok(_)) => return server(scenario),
        (Ok("client"), Ok(_)) => return client(scenario),
        (Ok(other), _) => panic!("unknown {ROLE_ENV}={other}"),
        (Err(_), _) => {}
    }
    if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
        skip(&format!("zcx-dpdk-sys was built without DPDK: {why}"));
        return;
    }
    let _one = ONE_PAIR.lock().unwrap_or_else(|p| p.into_inner());
    parent(scenario, drop_ppm);
}

fn test_name(scenario: &str) -> &'static str {
    match scenario {
        "zcopy" => "zero_copy_sends_from_mapped_memory_over_memif",
        "loss_1pct" => "endpoints_deliver_everything_once_under_1pct_loss",
        _ => "endpoints_deliver_everything_once_under_10pct_loss",
    }
}

fn child_env(role: &str, scenario: &str, dir: &Path, drop_ppm: u32) -> Vec<(&'static str, String)> {
    let socket = dir.join("memif.sock");
    let vdev = format!("--vdev=net_memif0,role={role},id=0,socket={},socket-abstract=no", socket.display());
    let eal = zcx_dataplane::dpdk::vdev_eal_args(&format!("zc-{scenario}-{role}"), &[vdev]).join(" ");
    vec![
        ("ZCX_TLS", "dpdk,tcp".to_owned()),
        ("ZCX_DPDK_EAL_ARGS", eal),
        ("ZCX_DPDK_PORT", "net_memif0".to_owned()),
        ("ZCX_DPDK_MBUFS", "4095".to_owned()),
        ("ZCX_DPDK_DROP_PPM", drop_ppm.to_string()),
        ("ZCX_KEEPALIVE_INTERVAL", "1s".to_owned()),
        ("ZCX_HUGEPAGES", "no".to_owned()),
    ]
}

fn parent(scenario: &str, drop_ppm: u32) {
    let label = format!("zc-{scenario}");
    let dir = dpdk_pair::run_dir(&label);
    let eal_prefix = |role: &str| format!("zcx-zc-{scenario}-{role}-{}", std::process::id());
    let configure = |role: &str, command: &mut std::process::Command| {
        command
            .env(ROLE_ENV, role)
            .env(SCENARIO_ENV, scenario)
            .env(DIR_ENV, &dir)
            .envs(child_env(role, scenario, &dir, drop_ppm));
    };
    let Some(logs) = dpdk_pair::run_pair(&dir, test_name(scenario), &label, PATIENCE, eal_prefix, configure)
    else {
        return;
    };
    let (server_log, client_log) = (logs.server, logs.client);
    assert!(client_log.contains("client: verified"), "client did not finish");
    assert!(server_log.contains("server: verified"), "server did not finish");
}

fn dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_ENV).unwrap())
}

fn start() -> Option<Worker> {
    let features = Features::TAG | Features::RMA | Features::AM | Features::AMO64;
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

/// A region of `len` bytes mapped read-write (remotely too), filled with `fill` from offset 0.
fn mapped(worker: &Worker, len: usize, fill: &[u8]) -> MemHandle {
    let memh = worker
        .context()
        .mem_map(
            &MemMapParams::alloc(len)
                .prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE),
        )
        .unwrap();
    // SAFETY: the mapping is `len` bytes long, owned here and not shared with anyone yet.
    unsafe { std::ptr::copy_nonoverlapping(fill.as_ptr(), memh.address(), fill.len()) };
    memh
}

/// Makes sure nothing more arrives: progress a while, then no unexpected tag message may wait.
fn assert_nothing_more(worker: &Worker, who: &str) {
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        worker.progress();
    }
    assert!(worker.tag_probe(0, 0).is_none(), "{who}: an extra (duplicate?) tag message arrived");
}

fn server(scenario: &str) {
    let Some(worker) = start() else { return };
    let accepting = listen_for_one(&worker, &dir());
    let (seen, pending) = collect_ams(&worker, 3);
    let ep = accepting.endpoint(&worker);

    // The target of the client's puts and gets; its address and key go by tag.
    let region = mapped(&worker, 4 * MIB, &pattern(MIB, 20));
    let mut key = (region.address() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(&region.rkey_pack().unwrap());
    wait(&worker, ep.tag_send(key, 6, TagSendParams::default()).unwrap());

    assert_eq!(recv_tag(&worker, 1, 2 * MIB), pattern(MIB, 1), "1 MiB tag message differs");
    assert_eq!(recv_tag(&worker, 2, 2 * MIB), pattern(ODD, 2), "odd-sized tag message differs");
    assert_eq!(recv_tag(&worker, 10, 2 * MIB), pattern(MIB + 1, 10), "the send unmapped in flight differs");
    assert_eq!(recv_tag(&worker, 11, 4096), pattern(100, 11), "small tag message differs");
    assert_on(&ep, "dpdk", "server");

    progress_until(&worker, "two AMs", || seen.lock().unwrap().len() == 2);
    let rndv = pending.lock().unwrap().pop().expect("the rendezvous AM");
    let rndv = wait(&worker, rndv).buf;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], (b"eager".to_vec(), pattern(1000, 6)));
        assert_eq!(seen[1].0, b"rndv");
    }
    assert!(rndv == pattern(MIB + 777, 7), "rendezvous AM data differs");

    assert_eq!(recv_tag(&worker, 7, 64), b"rma done");
    // SAFETY: the client is done with the region (it flushed before saying so).
    let there = unsafe { std::slice::from_raw_parts(region.address(), 4 * MIB) };
    assert!(there[MIB..2 * MIB] == pattern(MIB, 8)[..], "1 MiB put differs");
    assert!(there[2 * MIB + 5..2 * MIB + 5 + ODD_PUT] == pattern(ODD_PUT, 9)[..], "odd put differs");
    assert!(there[..MIB] == pattern(MIB, 20)[..], "bytes nobody wrote changed");

    // A 1 MiB answer from this side's mapped memory (zero-copy here too), then the end.
    let answer = mapped(&worker, MIB, &pattern(MIB, 12));
    wait(&worker, ep.tag_send(answer.slice(0, MIB).unwrap(), 12, TagSendParams::default()).unwrap());
    assert_eq!(recv_tag(&worker, 13, 64), b"client verified");
    assert_nothing_more(&worker, "server");
    assert_eq!(seen.lock().unwrap().len(), 2, "an extra (duplicate?) AM arrived");
    // Tags 1 (1 MiB), 2 (odd), 10 (1 MiB + 1) and the rendezvous AM arrived placed.
    let placed = zcx_dataplane::dpdk::placed_counters();
    println!("server: {scenario}: placement counters {placed:?}");
    assert!(placed.frames >= 4, "rendezvous payloads were not received placed: {placed:?}");
    assert!(placed.bytes >= (3 * MIB + ODD + 777 + 1) as u64, "too few bytes placed: {placed:?}");
    let counters = extmem::counters();
    println!("server: {scenario}: zero-copy counters {counters:?}");
    assert!(counters.zcopy_frames >= 1, "the server's 1 MiB answer did not leave zero-copy");
    wait(&worker, ep.tag_send(b"bye".to_vec(), 14, TagSendParams::default()).unwrap());
    // An eager send completes once copied; the flush waits until the client acknowledged it.
    wait(&worker, ep.flush().unwrap());
    let drops = zcx_dataplane::dpdk::injected_drops();
    println!("server: {scenario}: {drops} received frames dropped by the loss injection");
    if scenario != "zcopy" {
        assert!(drops > 0, "the loss injection dropped nothing");
    }
    println!("server: verified {scenario}");
    // Exits without tearing down (EAL is never cleaned up in a worker's process anyway).
    std::process::exit(0);
}

fn client(scenario: &str) {
    let Some(worker) = start() else { return };
    let addr: std::net::SocketAddr =
        std::fs::read_to_string(dir().join("server.port")).unwrap().trim().parse().unwrap();
    let ep = worker.create_endpoint(EpParams::sockaddr(addr)).unwrap();
    progress_until(&worker, "the connection", || ep.query().unwrap().status == Status::Ok);
    assert_on(&ep, "dpdk", "client");
    let before = extmem::counters();

    // Everything sent below comes from mapped memory, registered with DPDK when mapped.
    let mut src = pattern(MIB, 1);
    src.resize(2 * MIB, 0);
    src[MIB..MIB + 1000].copy_from_slice(&pattern(1000, 6));
    let a = mapped(&worker, 2 * MIB, &src);
    let b = mapped(&worker, 2 * MIB, &pattern(ODD, 2));
    let c = mapped(&worker, 2 * MIB, &pattern(MIB + 777, 7));
    let d = mapped(&worker, 2 * MIB, &[pattern(MIB, 8), pattern(ODD_PUT, 9)].concat());
    let registered = extmem::counters().registered - before.registered;
    assert!(registered >= 4, "mapped regions were not registered with DPDK: {:?}", extmem::counters());
    for memh in [&a, &b, &c, &d] {
        assert!(memh.registered_domains().contains(&zcx::DomainId::DPDK), "{:?}", memh.registered_domains());
    }

    let key = recv_tag(&worker, 6, 4096);
    let base = u64::from_le_bytes(key[..8].try_into().unwrap());
    let rkey = ep.rkey_unpack(&key[8..]).unwrap();

    let t1 = ep.tag_send(a.slice(0, MIB).unwrap(), 1, TagSendParams::default()).unwrap();
    let t2 = ep.tag_send(b.slice(0, ODD).unwrap(), 2, TagSendParams::default()).unwrap();
    wait(&worker, t1);
    wait(&worker, t2);

    // Unmapped while the zero-copy send is in flight: the send keeps the registration (and the
    // memory) until it completed; only then does DPDK forget the region.
    let e = mapped(&worker, 2 * MIB, &pattern(MIB + 1, 10));
    let in_flight = ep.tag_send(e.slice(0, MIB + 1).unwrap(), 10, TagSendParams::default()).unwrap();
    worker.progress();
    let unregistered = extmem::counters().unregistered;
    e.unmap().unwrap();
    assert_eq!(extmem::counters().unregistered, unregistered, "unregistered under an in-flight send");
    let done = wait(&worker, in_flight);
    drop(done);
    assert_eq!(
        extmem::counters().unregistered,
        unregistered + 1,
        "the region was not unregistered once its last send completed"
    );

    wait(&worker, ep.tag_send(pattern(100, 11), 11, TagSendParams::default()).unwrap());
    wait(&worker, ep.am_send(3, b"eager", a.slice(MIB, 1000).unwrap(), AmSendParams::default()).unwrap());
    let rndv = AmSendParams { proto: AmProto::Rndv, ..Default::default() };
    wait(&worker, ep.am_send(3, b"rndv", c.slice(0, MIB + 777).unwrap(), rndv).unwrap());

    let p1 = ep.put(d.slice(0, MIB).unwrap(), base + MIB as u64, &rkey, RequestParams::default()).unwrap();
    let p2 = ep
        .put(d.slice(MIB, ODD_PUT).unwrap(), base + 2 * MIB as u64 + 5, &rkey, RequestParams::default())
        .unwrap();
    wait(&worker, p1);
    wait(&worker, p2);
    let back = wait(&worker, ep.get(vec![0u8; MIB], base, &rkey, RequestParams::default()).unwrap());
    assert!(back.buf == pattern(MIB, 20), "get bytes differ");
    wait(&worker, ep.flush().unwrap());
    wait(&worker, ep.tag_send(b"rma done".to_vec(), 7, TagSendParams::default()).unwrap());

    assert!(recv_tag(&worker, 12, 2 * MIB) == pattern(MIB, 12), "the server's 1 MiB answer differs");
    wait(&worker, ep.tag_send(b"client verified".to_vec(), 13, TagSendParams::default()).unwrap());
    assert_eq!(recv_tag(&worker, 14, 64), b"bye");
    assert_nothing_more(&worker, "client");

    // The get reply and the server's 1 MiB answer arrived placed.
    let placed = zcx_dataplane::dpdk::placed_counters();
    println!("client: {scenario}: placement counters {placed:?}");
    assert!(placed.frames >= 2, "the get reply and the answer were not received placed: {placed:?}");
    assert!(placed.bytes >= 2 * MIB as u64, "too few bytes placed: {placed:?}");
    let after = extmem::counters();
    let frames = after.zcopy_frames - before.zcopy_frames;
    println!("client: {scenario}: zero-copy counters {after:?}");
    // Tag 1 MiB and odd, the one unmapped in flight, the rendezvous AM, both puts: every one
    // leaves in at least one zero-copy frame (more when a send is cut into several).
    assert!(frames >= 6, "only {frames} frames left zero-copy: {after:?}");
    assert!(after.zcopy_bytes - before.zcopy_bytes >= (3 * MIB + ODD + 777 + 1 + ODD_PUT) as u64);
    assert!(after.dma_not_needed + after.dma_mapped >= 1, "no device was offered the memory");
    assert_on(&ep, "dpdk", "client");
    drop((a, b, c, d));
    let drops = zcx_dataplane::dpdk::injected_drops();
    println!("client: {scenario}: {drops} received frames dropped by the loss injection");
    if scenario == "zcopy" {
        assert_eq!(drops, 0);
    } else {
        assert!(drops > 0, "the loss injection dropped nothing");
    }
    println!("client: verified {scenario}");
    std::process::exit(0);
}
