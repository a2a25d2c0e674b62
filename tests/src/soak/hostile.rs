//! Hostile connections: plain TCP from the orchestrator to random peers' listeners on 127.0.0.1,
//! bounded in number (at most a few dozen open at once) and in time (each held a few seconds at
//! most). None of them may crash a peer, stall its honest traffic, touch its memory or, once
//! closed, leave anything behind; the canary regions they aim at are checked by their owners, and
//! the refusals the library sends back are checked here.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcx_control::{HandshakeWire, RkeyWire, TransportAddress, WorkerAddressWire};
use zcx_dataplane::proto::wire::{AtomicOp, Op, MAX_HEADER_LEN};
use zcx_dataplane::uring::framing::{PLACED, PREFIX_LEN};
use zcx_dataplane::uring::MAX_FRAME;

use super::run_dir::PeerFile;
use super::Rng;

/// The kinds of hostile connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A frame header announcing the largest (or a too large) frame, one byte of it, then
    /// silence with the connection held open.
    HugeFrame,
    /// Part of a connection request, then silence.
    Slowloris,
    /// Random bytes.
    RandomBytes,
    /// Frames cut mid-way (before or after a valid connection request), then close.
    CutFrame,
    /// Put, get, atomic and key-check frames with a real key's fields, before any handshake.
    RmaBeforeHandshake,
    /// A completed handshake, then puts running past a region, accesses without protection or
    /// with a forged key, and key checks of edited keys; each refusal is checked.
    BadRmaAfterHandshake,
}

pub const KINDS: [Kind; 6] = [
    Kind::HugeFrame,
    Kind::Slowloris,
    Kind::RandomBytes,
    Kind::CutFrame,
    Kind::RmaBeforeHandshake,
    Kind::BadRmaAfterHandshake,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::HugeFrame => "huge_frame",
            Kind::Slowloris => "slowloris",
            Kind::RandomBytes => "random_bytes",
            Kind::CutFrame => "cut_frame",
            Kind::RmaBeforeHandshake => "rma_before_handshake",
            Kind::BadRmaAfterHandshake => "bad_rma_after_handshake",
        }
    }
}

/// What happened to the connections of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Connections attempted.
    pub launched: u64,
    /// Connected (the others found no listener: the peer was just killed).
    pub connected: u64,
    /// Found closed by the peer when this side came to close them, the peer still running.
    pub closed_by_peer: u64,
    /// Found closed because the peer had been killed meanwhile.
    pub peer_died: u64,
    /// Handshakes the peer accepted (bad RMA only).
    pub handshakes: u64,
    /// Forbidden accesses the peer answered with an error status (bad RMA only).
    pub refusals: u64,
}

impl KindStats {
    fn add(&mut self, other: &KindStats) {
        self.launched += other.launched;
        self.connected += other.connected;
        self.closed_by_peer += other.closed_by_peer;
        self.peer_died += other.peer_died;
        self.handshakes += other.handshakes;
        self.refusals += other.refusals;
    }
}

pub type HostileStats = BTreeMap<Kind, KindStats>;

pub fn merge(into: &mut HostileStats, from: &HostileStats) {
    for (kind, stats) in from {
        into.entry(*kind).or_default().add(stats);
    }
}

/// Limits of the hostile load.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once, at most.
    pub max_open: usize,
    /// Time between two new connections.
    pub interval: Duration,
}

/// The running hostile load; [`Hostiles::stop`] closes every connection and returns the counts.
pub struct Hostiles {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<HostileStats, String>>,
}

impl Hostiles {
    pub fn start(dir: PathBuf, peers: usize, seed: u64, limits: Limits) -> Hostiles {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || run(&dir, peers, seed, limits, &flag));
        Hostiles { stop, thread }
    }

    /// Stops launching, closes every connection, and returns the counts, or what a peer let
    /// through.
    pub fn stop(self) -> Result<HostileStats, String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_else(|_| Err("the hostile thread panicked".into()))
    }
}

/// A connection held open until `until`.
struct Held {
    stream: TcpStream,
    kind: Kind,
    until: Instant,
    peer: usize,
    incarnation: u32,
}

/// What a bad-RMA connection's thread reports.
struct Exchange {
    handshake: bool,
    refusals: u64,
    closed_by_peer: bool,
    peer_died: bool,
}

fn run(
    dir: &Path,
    peers: usize,
    seed: u64,
    limits: Limits,
    stop: &AtomicBool,
) -> Result<HostileStats, String> {
    let mut rng = Rng::new(seed);
    let mut stats = HostileStats::new();
    let mut held: Vec<Held> = Vec::new();
    let (done_tx, done_rx) = mpsc::channel::<Result<Exchange, String>>();
    let exchanges = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    let mut failure = None;
    let mut next_launch = Instant::now();
    while !stop.load(Ordering::SeqCst) && failure.is_none() {
        let now = Instant::now();
        let mut i = 0;
        while i < held.len() {
            if held[i].until <= now {
                let h = held.swap_remove(i);
                close(h, dir, &mut stats);
            } else {
                i += 1;
            }
        }
        while let Ok(result) = done_rx.try_recv() {
            match result {
                Ok(exchange) => record_exchange(&mut stats, &exchange),
                Err(why) => failure = Some(why),
            }
        }
        if now >= next_launch && held.len() + exchanges.load(Ordering::SeqCst) < limits.max_open {
            next_launch = now + limits.interval;
            let peer = rng.below(peers as u64) as usize;
            let mut kind = KINDS[rng.below(KINDS.len() as u64) as usize];
            // The exchanges block on reads: a couple of threads at most.
            if kind == Kind::BadRmaAfterHandshake && exchanges.load(Ordering::SeqCst) >= 2 {
                kind = Kind::RandomBytes;
            }
            if let Some(file) = PeerFile::read(dir, peer) {
                let entry = stats.entry(kind).or_default();
                entry.launched += 1;
                let addr = SocketAddr::from(([127, 0, 0, 1], file.port));
                if let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                    entry.connected += 1;
                    let conn_seed = rng.next_u64();
                    if kind == Kind::BadRmaAfterHandshake {
                        exchanges.fetch_add(1, Ordering::SeqCst);
                        let (tx, count) = (done_tx.clone(), Arc::clone(&exchanges));
                        let dir = dir.to_owned();
                        threads.push(std::thread::spawn(move || {
                            let mut result = bad_rma_after_handshake(stream, &file, conn_seed);
                            if let Ok(exchange) = &mut result {
                                if exchange.closed_by_peer && !still_runs(&dir, peer, file.incarnation) {
                                    exchange.closed_by_peer = false;
                                    exchange.peer_died = true;
                                }
                            }
                            count.fetch_sub(1, Ordering::SeqCst);
                            let _ = tx.send(result);
                        }));
                    } else if let Some(hold) = misbehave(kind, &stream, &file, &mut Rng::new(conn_seed)) {
                        let incarnation = file.incarnation;
                        held.push(Held { stream, kind, until: now + hold, peer, incarnation });
                    }
                }
            }
        }
        threads.retain(|t| !t.is_finished());
        std::thread::sleep(Duration::from_millis(2));
    }
    for h in held {
        close(h, dir, &mut stats);
    }
    for t in threads {
        let _ = t.join();
    }
    drop(done_tx);
    for result in done_rx {
        match result {
            Ok(exchange) => record_exchange(&mut stats, &exchange),
            Err(why) => failure = failure.or(Some(why)),
        }
    }
    match failure {
        Some(why) => Err(why),
        None => Ok(stats),
    }
}

fn record_exchange(stats: &mut HostileStats, exchange: &Exchange) {
    let entry = stats.entry(Kind::BadRmaAfterHandshake).or_default();
    entry.handshakes += u64::from(exchange.handshake);
    entry.refusals += exchange.refusals;
    entry.closed_by_peer += u64::from(exchange.closed_by_peer);
    entry.peer_died += u64::from(exchange.peer_died);
}

/// Whether `incarnation` of `peer` is the one running now.
fn still_runs(dir: &Path, peer: usize, incarnation: u32) -> bool {
    PeerFile::read(dir, peer).is_some_and(|f| f.incarnation == incarnation)
}

/// Closes a held connection, noting whether the peer had closed it already, and whether that
/// was because it was killed.
fn close(held: Held, dir: &Path, stats: &mut HostileStats) {
    if peer_closed(&held.stream) {
        let entry = stats.entry(held.kind).or_default();
        if still_runs(dir, held.peer, held.incarnation) {
            entry.closed_by_peer += 1;
        } else {
            entry.peer_died += 1;
        }
    }
}

/// A connection to `addr` that only pins memory at the peer, if the peer lets it: a frame
/// header announcing the largest frame and one byte of it (`huge`), or part of a connection
/// request; nothing more is sent. `None` when it cannot connect.
pub fn open_pinning(addr: SocketAddr, huge: bool, seed: u64) -> Option<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    let mut rng = Rng::new(seed);
    let bytes = if huge {
        let mut b = (MAX_FRAME as u32).to_le_bytes().to_vec();
        b.push(0x0A);
        b
    } else {
        let hello = hello_frame(&stream, &mut rng);
        hello[..hello.len() / 2].to_vec()
    };
    stream.write_all(&bytes).ok()?;
    Some(stream)
}

/// True when the peer closed or reset `stream`.
pub fn closed_by_peer(stream: &TcpStream) -> bool {
    peer_closed(stream)
}

/// True when the peer closed or reset the connection (whatever it sent before is skipped).
fn peer_closed(mut stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// One transport frame: length prefix, then the bytes.
fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn op_frame(op: &Op, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = op.encode(&mut header);
    let mut body = header[..n].to_vec();
    body.extend_from_slice(payload);
    frame(&body)
}

/// A valid connection request frame, as a client worker would send it.
fn hello_frame(stream: &TcpStream, rng: &mut Rng) -> Vec<u8> {
    let local = stream.local_addr().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9)));
    let mut uid = [0u8; 16];
    uid[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    uid[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    let hello = HandshakeWire::ConnRequest {
        client_id: rng.next_u64(),
        ep_name: "hostile".into(),
        err_mode_peer: false,
        client_address: WorkerAddressWire {
            worker_uid: uid,
            name: "soak-hostile".into(),
            boot_id: None,
            transports: vec![TransportAddress::Uring { addr: local }],
        },
        client_ep_id: 1,
        pair_token: 0,
    };
    op_frame(&Op::Hello, &hello.encode())
}

/// The canary key fields a hostile frame borrows.
fn canary(bytes: &[u8]) -> Option<RkeyWire> {
    RkeyWire::decode(bytes).ok()
}

/// Behaves as `kind` on a fresh connection; returns how long to hold it open, or `None` to
/// close it now.
fn misbehave(kind: Kind, stream: &TcpStream, file: &PeerFile, rng: &mut Rng) -> Option<Duration> {
    let mut out = stream;
    let hold = |rng: &mut Rng, lo: u64, hi: u64| Some(Duration::from_millis(rng.range(lo, hi)));
    match kind {
        Kind::HugeFrame => {
            let mut bytes = if rng.chance(75) {
                // The largest frame a reader accepts: it waits for the rest.
                (MAX_FRAME as u32).to_le_bytes().to_vec()
            } else if rng.chance(50) {
                // Larger than allowed: refused on sight.
                (rng.range(MAX_FRAME as u64 + 1, u64::from(!PLACED)) as u32).to_le_bytes().to_vec()
            } else {
                // A placed frame announcing the largest payload there is.
                let mut b = ((PREFIX_LEN + 1) as u32 | PLACED).to_le_bytes().to_vec();
                b.extend_from_slice(&u32::MAX.to_le_bytes());
                b
            };
            bytes.push(0x0A);
            let _ = out.write_all(&bytes);
            hold(rng, 1000, 4000)
        }
        Kind::Slowloris => {
            let hello = hello_frame(stream, rng);
            let cut = rng.range(1, hello.len() as u64 - 1) as usize;
            let _ = out.write_all(&hello[..cut]);
            hold(rng, 2000, 6000)
        }
        Kind::RandomBytes => {
            let bytes: Vec<u8> = (0..rng.range(1, 4096)).map(|_| rng.next_u64() as u8).collect();
            let _ = out.write_all(&bytes);
            hold(rng, 0, 500)
        }
        Kind::CutFrame => {
            let mut bytes = Vec::new();
            let handshake = rng.chance(50);
            if handshake {
                bytes.extend_from_slice(&hello_frame(stream, rng));
            }
            let payload: Vec<u8> = (0..rng.range(1, 8000)).map(|_| rng.next_u64() as u8).collect();
            let whole = match rng.below(3) {
                0 => op_frame(&Op::TagEager { tag: rng.next_u64(), sync: false, sender_req: 0 }, &payload),
                1 => op_frame(&Op::Stream, &payload),
                _ => {
                    // A placed rendezvous fragment whose payload never fully comes.
                    let mut header = [0u8; MAX_HEADER_LEN];
                    let n = Op::RndvData { recv_req: rng.next_u64(), offset: 0 }.encode(&mut header);
                    let mut b = ((PREFIX_LEN + n) as u32 | PLACED).to_le_bytes().to_vec();
                    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    b.extend_from_slice(&header[..n]);
                    b.extend_from_slice(&payload);
                    b
                }
            };
            let cut = bytes.len() + rng.range(1, whole.len() as u64 - 1) as usize;
            bytes.extend_from_slice(&whole);
            let _ = out.write_all(&bytes[..cut]);
            hold(rng, 0, 300)
        }
        Kind::RmaBeforeHandshake => {
            let key = canary(&file.canary_rw)?;
            let (region, access, base) = (key.region_id, key.access_key, key.base);
            let mut bytes = Vec::new();
            match rng.below(4) {
                0 => bytes.extend(op_frame(
                    &Op::Put { req: 1, region, key: access, addr: base, len: 64, offset: 0, ack: true },
                    &[0xEE; 64],
                )),
                1 => {
                    bytes.extend(op_frame(&Op::Get { req: 2, region, key: access, addr: base, len: 64 }, &[]))
                }
                2 => bytes.extend(op_frame(
                    &Op::Atomic {
                        req: 3,
                        region,
                        key: access,
                        addr: base,
                        op: AtomicOp::Add,
                        size: 8,
                        fetch: true,
                        value: 1,
                        compare: 0,
                    },
                    &[],
                )),
                _ => bytes.extend(op_frame(&Op::KeyCheck { req: 4 }, &file.canary_rw)),
            }
            let _ = out.write_all(&bytes);
            hold(rng, 200, 1000)
        }
        Kind::BadRmaAfterHandshake => unreachable!("run on a thread of its own"),
    }
}

/// Reads one frame; a placed frame's header is returned and its payload skipped.
fn read_frame(mut stream: &TcpStream) -> std::io::Result<Vec<u8>> {
    let mut word = [0u8; 4];
    stream.read_exact(&mut word)?;
    let word = u32::from_le_bytes(word);
    let invalid = || std::io::Error::new(ErrorKind::InvalidData, "bad frame length");
    if word & PLACED != 0 {
        let len = (word & !PLACED) as usize;
        if !(PREFIX_LEN..=PREFIX_LEN + 4096).contains(&len) {
            return Err(invalid());
        }
        let mut header = vec![0u8; len];
        stream.read_exact(&mut header)?;
        let payload = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as u64;
        std::io::copy(&mut stream.take(payload), &mut std::io::sink())?;
        return Ok(header.split_off(PREFIX_LEN));
    }
    if word as usize > MAX_FRAME {
        return Err(invalid());
    }
    let mut body = vec![0u8; word as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// A completed handshake, then forbidden accesses; every answer must be a refusal, except the
/// key check of the owner's own key, which must pass (so the refusals are not an artefact of a
/// malformed exchange). `Err` when a peer let a forbidden access through.
fn bad_rma_after_handshake(stream: TcpStream, file: &PeerFile, seed: u64) -> Result<Exchange, String> {
    let mut rng = Rng::new(seed);
    let mut exchange = Exchange { handshake: false, refusals: 0, closed_by_peer: false, peer_died: false };
    let (Some(rw), Some(ro)) = (canary(&file.canary_rw), canary(&file.canary_ro)) else {
        return Ok(exchange);
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    if stream.set_read_timeout(Some(Duration::from_secs(3))).is_err() {
        return Ok(exchange);
    }
    let mut out = &stream;
    if out.write_all(&hello_frame(&stream, &mut rng)).is_err() {
        return Ok(exchange);
    }
    // The server's answer; until it accepted, any other frame would fail the link.
    loop {
        let Ok(body) = read_frame(&stream) else {
            exchange.closed_by_peer = true;
            return Ok(exchange);
        };
        if let Ok((Op::Hello, payload)) = Op::decode(&body) {
            match HandshakeWire::decode(payload) {
                Ok(HandshakeWire::Accept { .. }) => break,
                _ => return Ok(exchange),
            }
        }
        if Instant::now() > deadline {
            return Ok(exchange);
        }
    }
    exchange.handshake = true;
    let mut forged = rw.access_key;
    forged[rng.below(16) as usize] ^= 1 << rng.below(8);
    let past_end = rng.range(1, 63);
    let mut longer = rw.clone();
    longer.length += 4096;
    let mut writable = ro.clone();
    writable.prot |= zcx::Prot::REMOTE_WRITE.bits();
    let amo = |req, region, key, addr| Op::Atomic {
        req,
        region,
        key,
        addr,
        op: AtomicOp::Swap,
        size: 8,
        fetch: true,
        value: u64::MAX,
        compare: 0,
    };
    // (request, frame, what it is); request 9 is the control that must pass.
    let requests: Vec<(u64, Vec<u8>, &str)> = vec![
        (
            1,
            op_frame(
                &Op::Put {
                    req: 1,
                    region: rw.region_id,
                    key: rw.access_key,
                    addr: rw.base + rw.length - past_end,
                    len: 64,
                    offset: 0,
                    ack: true,
                },
                &[0xEE; 64],
            ),
            "a put starting inside the region and ending outside",
        ),
        (
            2,
            op_frame(
                &Op::Put {
                    req: 2,
                    region: rw.region_id,
                    key: forged,
                    addr: rw.base,
                    len: 64,
                    offset: 0,
                    ack: true,
                },
                &[0xEE; 64],
            ),
            "a put with a forged key",
        ),
        (
            3,
            op_frame(
                &Op::Put {
                    req: 3,
                    region: ro.region_id,
                    key: ro.access_key,
                    addr: ro.base,
                    len: 64,
                    offset: 0,
                    ack: true,
                },
                &[0xEE; 64],
            ),
            "a put to a region without REMOTE_WRITE",
        ),
        (
            4,
            op_frame(&amo(4, ro.region_id, ro.access_key, ro.base), &[]),
            "an atomic on a region without REMOTE_WRITE",
        ),
        (5, op_frame(&amo(5, rw.region_id, forged, rw.base), &[]), "an atomic with a forged key"),
        (
            6,
            op_frame(
                &Op::Get {
                    req: 6,
                    region: rw.region_id,
                    key: rw.access_key,
                    addr: rw.base + rw.length - 8,
                    len: 64,
                },
                &[],
            ),
            "a get running past the region",
        ),
        (7, op_frame(&Op::KeyCheck { req: 7 }, &longer.encode()), "a key with its length edited"),
        (8, op_frame(&Op::KeyCheck { req: 8 }, &writable.encode()), "a key with REMOTE_WRITE added"),
        (9, op_frame(&Op::KeyCheck { req: 9 }, &file.canary_rw), "the owner's own key"),
        (
            10,
            op_frame(
                &Op::Put {
                    req: 10,
                    region: rw.region_id,
                    key: rw.access_key,
                    addr: rw.base,
                    len: u64::MAX / 2,
                    offset: 0,
                    ack: true,
                },
                &[0xEE; 16],
            ),
            "a put announcing an enormous length",
        ),
    ];
    let mut what = BTreeMap::new();
    for (req, bytes, name) in &requests {
        if out.write_all(bytes).is_err() {
            exchange.closed_by_peer = true;
            return Ok(exchange);
        }
        what.insert(*req, *name);
    }
    while !what.is_empty() {
        let Ok(body) = read_frame(&stream) else {
            // Killed meanwhile, or the answers did not come in time.
            exchange.closed_by_peer = true;
            return Ok(exchange);
        };
        match Op::decode(&body) {
            Ok((Op::RmaAck { req, status, .. }, _)) => {
                let Some(name) = what.remove(&req) else { continue };
                match (req, status) {
                    (9, 0) => {}
                    (9, s) => return Err(format!("peer {}: the owner refused its own key ({s})", file.pid)),
                    (_, 0) => return Err(format!("peer {} carried out {name}", file.pid)),
                    _ => exchange.refusals += 1,
                }
            }
            Ok((Op::GetData { .. }, _)) => {
                return Err(format!("peer {} answered a get running past its region with data", file.pid))
            }
            _ => {}
        }
    }
    Ok(exchange)
}
