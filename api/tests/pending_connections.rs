//! Connections that never finish the handshake, over real sockets to a real listener: a peer that
//! announces a large frame before its connection request, peers that stall midway through the
//! request (slowloris), and more idle connections than a listener holds. Each is closed by the
//! server, what it held is given back once the peers are gone, and honest clients still connect.
//!
//! The server runs in this process, so its memory and descriptors are read from /proc/self: the
//! tests of this file take turns (`SERIAL`), so that one's connections never show in another's
//! readings.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::net::{accepting_listener, collecting_listener, progress_until, wait};
use common::open_fds;
use zcx::{
    Config, Context, ContextParams, Endpoint, EpParams, Features, RequestParams, TagSendParams, Worker,
    WorkerParams,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const MIB: usize = 1 << 20;

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).expect("resident field").parse().expect("a number");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

fn server(vars: &[(&str, &str)]) -> (Context, Worker) {
    let config = Config::from_vars(vars.iter().copied()).expect("config");
    let ctx = Context::new(&ContextParams::new(Features::TAG), &config).expect("context");
    let worker = ctx.create_worker(&WorkerParams::default()).expect("worker");
    (ctx, worker)
}

/// True once the server closed its end of `stream` (end of file or a reset); `stream` is
/// non-blocking, and the server never sends a byte to a connection that sent no request.
fn closed_by_server(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match (&*stream).read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => false,
        Err(_) => true,
    }
}

/// Polls `closed` for the streams not known closed yet; returns how many are closed in all.
fn check_closed(peers: &[TcpStream], closed: &mut [bool]) -> usize {
    for (peer, closed) in peers.iter().zip(closed.iter_mut()) {
        if !*closed && closed_by_server(peer) {
            *closed = true;
        }
    }
    closed.iter().filter(|&&c| c).count()
}

/// Progresses `worker` for `time`.
fn progress_for(worker: &Worker, time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        worker.progress();
    }
}

/// Opens a connection to `addr` that sends `bytes` and then nothing more.
fn raw_peer(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect to the listener");
    stream.write_all(bytes).expect("write");
    stream.set_nonblocking(true).expect("non-blocking");
    stream
}

/// One round of what the tests do, so that the worker's and the allocator's one-time costs are
/// paid before the baseline is read.
fn warm_up(worker: &Worker, addr: SocketAddr) {
    let peers: Vec<TcpStream> = (0..8).map(|_| raw_peer(addr, &[])).collect();
    progress_for(worker, Duration::from_millis(50));
    drop(peers);
    progress_for(worker, Duration::from_millis(100));
}

/// Progresses `worker` until the process has at most `fds` descriptors open again (or a few
/// seconds passed), and returns how many it has.
fn settle_fds(worker: &Worker, fds: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        progress_for(worker, Duration::from_millis(10));
        let now = open_fds();
        if now <= fds || Instant::now() > deadline {
            return now;
        }
    }
}

/// A length prefix announcing a frame of `len` bytes, as the io_uring transport frames them.
/// Once the peers went away, descriptors return to `fds0` and resident memory to within a few
/// MiB of `rss0`.
fn assert_given_back(server: &Worker, fds0: usize, rss0: usize) {
    let fds = settle_fds(server, fds0);
    assert!(fds <= fds0, "descriptors: {fds} open, {fds0} before the peers came");
    let rss1 = rss();
    assert!(
        rss1 < rss0 + 4 * MIB,
        "resident memory {} KiB, {} KiB before the peers came",
        rss1 >> 10,
        rss0 >> 10
    );
}

fn announce(len: u32) -> [u8; 4] {
    len.to_le_bytes()
}

#[test]
fn a_large_frame_announced_before_the_handshake_closes_the_link_and_pins_nothing() {
    let _turn = serial();
    // No timeout within the test: what closes these links is the frame they announce.
    let (_ctx, server) = server(&[("ZCX_HANDSHAKE_TIMEOUT", "60s")]);
    let (listener, _accepted) = accepting_listener(&server);
    let addr = listener.sockaddr();
    warm_up(&server, addr);
    let (fds0, rss0) = (open_fds(), rss());

    // Five bytes each: a length word announcing a 200 KiB frame (below the transport's largest
    // frame, above its switch to bulk receives), and the frame's first byte.
    const PEERS: usize = 200;
    let mut hello = announce(200 << 10).to_vec();
    hello.push(0xAB);
    let mut peers = Vec::new();
    for i in 0..PEERS {
        peers.push(raw_peer(addr, &hello));
        if i % 16 == 0 {
            server.progress();
        }
    }
    let mut closed = vec![false; PEERS];
    let mut peak = rss();
    let deadline = Instant::now() + Duration::from_secs(5);
    while check_closed(&peers, &mut closed) < PEERS && Instant::now() < deadline {
        progress_for(&server, Duration::from_millis(1));
        peak = peak.max(rss());
    }
    peak = peak.max(rss());
    let growth = peak.saturating_sub(rss0);
    let n_closed = check_closed(&peers, &mut closed);
    eprintln!("{PEERS} peers: resident memory grew by {} KiB; {n_closed} closed", growth >> 10);
    assert!(growth < 20 * MIB, "{PEERS} five-byte peers grew the server by {} MiB", growth / MIB);
    assert_eq!(n_closed, PEERS, "links announcing a large frame before the handshake stay open");

    // The peers go away: descriptors and memory return to the baseline.
    drop(peers);
    assert_given_back(&server, fds0, rss0);
}

#[test]
fn stalled_handshakes_time_out_and_everything_is_given_back() {
    let _turn = serial();
    let timeout = Duration::from_millis(300);
    let (_ctx, server) = server(&[("ZCX_HANDSHAKE_TIMEOUT", "300ms")]);
    let (listener, _accepted) = accepting_listener(&server);
    let addr = listener.sockaddr();
    warm_up(&server, addr);
    let (fds0, rss0) = (open_fds(), rss());

    // Each starts a frame of a size a connection request may have and stops ten bytes into it.
    const PEERS: usize = 100;
    let mut partial = announce(200).to_vec();
    partial.extend_from_slice(&[0x01; 10]);
    let start = Instant::now();
    let mut peers: Vec<TcpStream> = Vec::new();
    for i in 0..PEERS {
        peers.push(raw_peer(addr, &partial));
        if i % 16 == 0 {
            server.progress();
        }
    }
    progress_for(&server, Duration::from_millis(20));
    // A quarter of them give up on their own first: their state goes with them.
    let leaving: Vec<TcpStream> = peers.drain(..PEERS / 4).collect();
    drop(leaving);
    let stalled = peers.len();

    let mut closed = vec![false; stalled];
    let mut first_close = None;
    let mut peak = rss();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        peak = peak.max(rss());
        let n = check_closed(&peers, &mut closed);
        if n > 0 && first_close.is_none() {
            first_close = Some(start.elapsed());
        }
        if n == stalled || Instant::now() > deadline {
            break;
        }
        progress_for(&server, Duration::from_millis(1));
    }
    let n_closed = check_closed(&peers, &mut closed);
    assert_eq!(n_closed, stalled, "stalled connections still open after {:?}", start.elapsed());
    let first_close = first_close.expect("closed");
    assert!(
        first_close >= timeout,
        "a stalled connection was closed after {first_close:?}, before the timeout"
    );
    let growth = peak.saturating_sub(rss0);
    eprintln!(
        "{stalled} stalled peers closed; the first after {first_close:?}; memory grew by {} KiB",
        growth >> 10
    );
    // While they wait, each costs its bookkeeping, not a receive buffer.
    assert!(growth < 2 * MIB, "{stalled} stalled peers grew the server by {} KiB", growth >> 10);

    drop(peers);
    assert_given_back(&server, fds0, rss0);
}

#[test]
fn a_listener_holds_at_most_its_cap_of_pending_connections_and_honest_clients_get_through() {
    let _turn = serial();
    const CAP: usize = 16;
    const FLOOD: usize = 40;
    let (ctx, server) =
        server(&[("ZCX_HANDSHAKE_TIMEOUT", "60s"), ("ZCX_MAX_PENDING_CONNECTIONS", &CAP.to_string())]);
    let (listener, accepted) = accepting_listener(&server);
    let addr = listener.sockaddr();

    // Idle connections, accepted one after the other.
    let mut peers = Vec::new();
    for _ in 0..FLOOD {
        peers.push(raw_peer(addr, &[]));
        progress_for(&server, Duration::from_millis(2));
    }
    let mut closed = vec![false; FLOOD];
    let deadline = Instant::now() + Duration::from_secs(5);
    while check_closed(&peers, &mut closed) < FLOOD - CAP && Instant::now() < deadline {
        progress_for(&server, Duration::from_millis(1));
    }
    progress_for(&server, Duration::from_millis(100));
    let n_closed = check_closed(&peers, &mut closed);
    assert_eq!(n_closed, FLOOD - CAP, "{FLOOD} idle connections to a listener holding {CAP}");
    // The oldest made room for the newer ones.
    assert!(closed[..FLOOD - CAP].iter().all(|&c| c), "closed: {closed:?}");
    assert!(closed[FLOOD - CAP..].iter().all(|&c| !c), "closed: {closed:?}");

    // An honest client connects while the flood is held open, and a tag message goes both ways.
    let client = ctx.create_worker(&WorkerParams::default()).expect("client worker");
    let ep = client.create_endpoint(EpParams::sockaddr(addr)).expect("endpoint");
    let both = [&client, &server];
    progress_until(&both, "the listener's accept", || accepted.lock().unwrap().is_some());
    let server_ep = accepted.lock().unwrap().take().expect("accepted");
    let recv = server.tag_recv(vec![0u8; 5], 7, u64::MAX, RequestParams::default()).unwrap();
    ep.tag_send(b"hello".to_vec(), 7, TagSendParams::default()).unwrap();
    assert_eq!(wait(&both, recv).unwrap().buf, b"hello");
    let recv = client.tag_recv(vec![0u8; 4], 8, u64::MAX, RequestParams::default()).unwrap();
    server_ep.tag_send(b"back".to_vec(), 8, TagSendParams::default()).unwrap();
    assert_eq!(wait(&both, recv).unwrap().buf, b"back");
    let still_open = FLOOD - check_closed(&peers, &mut closed);
    assert!(still_open >= CAP - 1, "only {still_open} of the flood held open");
}

#[test]
fn a_burst_of_honest_clients_larger_than_the_cap_all_get_through() {
    let _turn = serial();
    const CAP: usize = 4;
    const CLIENTS: usize = 16;
    let (ctx, server) =
        server(&[("ZCX_HANDSHAKE_TIMEOUT", "60s"), ("ZCX_MAX_PENDING_CONNECTIONS", &CAP.to_string())]);
    let (listener, accepted) = collecting_listener(&server);
    let client = ctx.create_worker(&WorkerParams::default()).expect("client worker");
    // All connect before the server looks: their connections are accepted together.
    let eps: Vec<Endpoint> = (0..CLIENTS)
        .map(|_| client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap())
        .collect();
    let both = [&client, &server];
    progress_until(&both, "every client accepted", || accepted.lock().unwrap().len() == CLIENTS);
    for (i, ep) in eps.iter().enumerate() {
        let recv = server.tag_recv(vec![0u8; 8], i as u64, u64::MAX, RequestParams::default()).unwrap();
        ep.tag_send((i as u64).to_le_bytes().to_vec(), i as u64, TagSendParams::default()).unwrap();
        assert_eq!(wait(&both, recv).unwrap().buf, (i as u64).to_le_bytes());
    }
}
