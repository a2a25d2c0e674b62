//! One soak peer: a worker with a listener on 127.0.0.1, one client endpoint to every other peer
//! ([`client`]) and the endpoints the others opened to it ([`server`]).
//!
//! A client connects by sockaddr with peer error handling, says hello (an active message with its
//! id and the connection's number) and gets back a slot of the server's data region and its
//! packed key. It then sends tag, stream and active messages whose every byte the server checks,
//! and runs puts, gets and atomics on its slot, checking each get against what it put and each
//! fetched atomic value against the value it expects (only this connection touches the slot's
//! counter words). The server confirms checked messages with credit messages, which bound what a
//! client sends ahead.
//!
//! A connection to a peer that was killed must fail through the error handler; every request on
//! it must then end; the client reconnects once the peer published its new port. Anything else
//! (a wrong byte, a gap in a sequence, an unexpected error status, a request or a dead endpoint
//! that never ends) is printed as a `fail` line and ends the process with status 2.
//!
//! Handlers (error, connection, AM) only queue an [`Event`]; the main loop acts on it after
//! `progress` returned.

mod client;
mod server;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcx::{
    AmMessage, Config, Context, ContextParams, Endpoint, EpParams, Features, ListenerParams, MemHandle,
    MemMapParams, Prot, Request, Status, Worker, WorkerParams,
};

use super::pattern::{self, Header, Kind};
use super::run_dir::PeerFile;
use super::{fail_deadline, Counters, Line, Rng, MAX_RMA};
use client::Client;
use server::{AmData, ServerConn, Slots};

/// AM ids.
const AM_HELLO: u16 = 1;
const AM_HELLO_REPLY: u16 = 2;
const AM_DATA: u16 = 3;
const AM_CREDIT: u16 = 4;

/// Bytes of each canary region.
const CANARY_LEN: usize = 64 << 10;
/// Bytes in front of a slot's data area in the server's region: its counter words (a 64-bit word
/// at 0, a 32-bit word at 8).
const SLOT_COUNTERS: usize = 64;

const RW: Prot = Prot::LOCAL_READ.union(Prot::LOCAL_WRITE).union(Prot::REMOTE_READ).union(Prot::REMOTE_WRITE);

/// The command line of a peer: `soak peer ID INCARNATION PEERS DIR SEED`.
#[derive(Clone, Debug)]
pub struct PeerArgs {
    pub id: usize,
    pub incarnation: u32,
    pub peers: usize,
    pub dir: PathBuf,
    pub seed: u64,
}

impl PeerArgs {
    pub fn parse(args: &[String]) -> Option<PeerArgs> {
        match args {
            [id, incarnation, peers, dir, seed] => Some(PeerArgs {
                id: id.parse().ok()?,
                incarnation: incarnation.parse().ok()?,
                peers: peers.parse().ok()?,
                dir: dir.into(),
                seed: seed.parse().ok()?,
            }),
            _ => None,
        }
    }

    pub fn to_args(&self) -> Vec<String> {
        vec![
            "peer".into(),
            self.id.to_string(),
            self.incarnation.to_string(),
            self.peers.to_string(),
            self.dir.display().to_string(),
            self.seed.to_string(),
        ]
    }
}

/// What a handler saw, for the main loop.
pub(crate) enum Event {
    Accepted {
        conn: u64,
        ep: Endpoint,
    },
    AcceptFailed(Status),
    ServerFailed {
        conn: u64,
        status: Status,
    },
    ClientFailed {
        nonce: u32,
        status: Status,
    },
    Hello {
        conn: Option<u64>,
        header: Vec<u8>,
    },
    HelloReply {
        header: Vec<u8>,
        data: Option<Vec<u8>>,
    },
    Credit {
        header: Vec<u8>,
    },
    /// An eager active message, checked in its handler.
    AmEager {
        conn: Option<u64>,
        header: Result<Header, String>,
        checked: Result<(), String>,
    },
    /// A rendezvous active message whose data is being received.
    AmRndv {
        conn: Option<u64>,
        header: Result<Header, String>,
        recv: Result<Request<Vec<u8>>, Status>,
    },
}

pub(crate) type Events = Arc<Mutex<VecDeque<Event>>>;

fn push(events: &Events, event: Event) {
    events.lock().unwrap_or_else(|e| e.into_inner()).push_back(event);
}

/// A fault the peer plants in its own traffic (`SOAK_INJECT`), to show that the checks catch
/// it and the run fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inject {
    /// `corrupt-tag`: one byte of a tag message changed after its pattern was written.
    CorruptTag,
    /// `lose-stream`: a stream message never sent, its sequence number used up.
    LoseStream,
}

/// The sequence number of the message an injected fault hits, on every connection.
pub(crate) const INJECT_AT: u64 = 5;

impl Inject {
    fn from_env() -> Option<Inject> {
        match std::env::var("SOAK_INJECT").ok()?.as_str() {
            "corrupt-tag" => Some(Inject::CorruptTag),
            "lose-stream" => Some(Inject::LoseStream),
            other => fail(format!("unknown SOAK_INJECT={other:?}")),
        }
    }
}

/// Commands from the orchestrator (stdin).
enum Cmd {
    Quiesce,
    Resume,
    Measure(String),
    Report,
    /// stdin closed: the orchestrator is gone.
    Gone,
}

/// Ends the peer with a `fail` line: a data-integrity failure or a hang.
pub(crate) fn fail(why: String) -> ! {
    Line::Fail(why).print();
    std::process::exit(2)
}

/// Statuses an operation or endpoint may fail with when its peer died, closed, or was not there.
pub(crate) fn is_peer_failure(status: Status) -> bool {
    matches!(
        status,
        Status::ConnectionReset
            | Status::EndpointTimeout
            | Status::Canceled
            | Status::NotConnected
            | Status::Unreachable
            | Status::Rejected
            | Status::IoError
    )
}

/// The tag of message `seq` on the connection with `slot` and `nonce`.
pub(crate) fn tag_of(slot: u8, nonce: u32, seq: u64) -> u64 {
    0x5A << 56 | u64::from(slot) << 48 | u64::from(nonce & 0xFFFF) << 32 | (seq & 0xFFFF_FFFF)
}

/// The mask selecting every tag of one connection.
pub(crate) const CONN_TAG_MASK: u64 = !0xFFFF_FFFF;

/// Allocates `len` bytes of registered memory with `prot`, every page touched now, so that later
/// use does not grow the resident set measured against the baseline.
fn region(ctx: &Context, len: usize, prot: Prot) -> MemHandle {
    let memh = ctx
        .mem_map(&MemMapParams::alloc(len).prot(prot))
        .unwrap_or_else(|s| fail(format!("mem_map of {len} bytes: {s:?} {:?}", zcx::last_error_detail())));
    // SAFETY: the handle maps `len` writable bytes at `address()` while it lives; nobody else
    // uses them yet.
    unsafe { std::ptr::write_bytes(memh.address(), 0, len) };
    memh
}

/// Reads a whole registered region. Peers may write it at any time only if the library lets a
/// forbidden access through, which is what the caller looks for.
fn snapshot(memh: &MemHandle) -> Vec<u8> {
    let mut out = vec![0u8; memh.length()];
    // SAFETY: the handle maps `length()` readable bytes at `address()` while it lives; any byte
    // value is a valid `u8`, and `out` is a fresh buffer that cannot overlap the mapping.
    unsafe { std::ptr::copy_nonoverlapping(memh.address(), out.as_mut_ptr(), out.len()) };
    out
}

/// Everything one peer process owns.
pub(crate) struct Peer {
    pub args: PeerArgs,
    pub worker: Worker,
    pub events: Events,
    pub rng: Rng,
    pub counters: Counters,
    /// The region whose slots clients put to, get from and run atomics on.
    pub data: MemHandle,
    pub data_key: Vec<u8>,
    pub slots: Slots,
    /// Put sources and get destinations of this peer's clients: 2 × [`MAX_RMA`] per client.
    pub local: MemHandle,
    canary_rw: MemHandle,
    canary_ro: MemHandle,
    canary_seed: u64,
    pub clients: Vec<Client>,
    pub servers: BTreeMap<u64, ServerConn>,
    pub quiescing: bool,
    pub next_nonce: u32,
    /// Client connections that failed after their hello: (server, its incarnation, when).
    pub failed_servers: Vec<(usize, u32, Instant)>,
    /// The last client connections this side closed itself (nonces).
    pub own_closes: VecDeque<u32>,
    pub inject: Option<Inject>,
}

impl Peer {
    pub fn count(&mut self, name: &str, n: u64) {
        *self.counters.entry(name.to_owned()).or_default() += n;
    }

    fn fill_canaries(&self) {
        for memh in [&self.canary_rw, &self.canary_ro] {
            let mut bytes = vec![0u8; memh.length()];
            pattern::fill(self.canary_seed, &mut bytes, 0);
            // SAFETY: the handle maps `length()` writable bytes; no peer has the keys yet.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), memh.address(), bytes.len()) };
        }
    }

    /// The canaries are aimed at only by hostile connections, each access refused: a changed
    /// byte means one got through.
    fn check_canaries(&mut self) {
        for (name, memh) in [("rw", &self.canary_rw), ("ro", &self.canary_ro)] {
            if let Some(at) = pattern::first_mismatch(self.canary_seed, &snapshot(memh), 0) {
                fail(format!("canary {name} byte {at} changed: a forbidden remote access was carried out"));
            }
        }
        self.count("canary_checks", 1);
    }

    /// What the AM handlers of this peer push.
    fn install_handlers(&self) {
        let conn_of = |msg: &AmMessage<'_>| {
            msg.reply_ep().and_then(|ep| ep.query().ok()).map(|attr| attr.user_data as u64)
        };
        let events = Arc::clone(&self.events);
        self.worker.set_am_handler(
            AM_HELLO,
            Some(Box::new(move |msg| {
                push(&events, Event::Hello { conn: conn_of(msg), header: msg.header().to_vec() });
                Status::Ok
            })),
        );
        let events = Arc::clone(&self.events);
        self.worker.set_am_handler(
            AM_HELLO_REPLY,
            Some(Box::new(move |msg| {
                let data = msg.data().map(<[u8]>::to_vec);
                push(&events, Event::HelloReply { header: msg.header().to_vec(), data });
                Status::Ok
            })),
        );
        let events = Arc::clone(&self.events);
        self.worker.set_am_handler(
            AM_CREDIT,
            Some(Box::new(move |msg| {
                push(&events, Event::Credit { header: msg.header().to_vec() });
                Status::Ok
            })),
        );
        let events = Arc::clone(&self.events);
        self.worker.set_am_handler(
            AM_DATA,
            Some(Box::new(move |msg| {
                let conn = conn_of(msg);
                let header = Header::decode(msg.header());
                if msg.is_rndv() {
                    let len = msg.data_len();
                    let recv = msg.recv_data(vec![0u8; len]);
                    push(&events, Event::AmRndv { conn, header, recv });
                } else {
                    let data = msg.data().unwrap_or(&[]);
                    let checked = header.as_ref().map_err(Clone::clone).and_then(|h| h.check_am_data(data));
                    push(&events, Event::AmEager { conn, header, checked });
                }
                Status::Ok
            })),
        );
    }

    /// The transports of every endpoint this peer holds, joined with `+`.
    fn endpoint_transports(&self) -> Vec<String> {
        let clients = self.clients.iter().filter_map(|c| c.live.as_ref()).map(|l| l.endpoint());
        let servers = self.servers.values().map(ServerConn::endpoint);
        clients
            .chain(servers)
            .map(|ep| ep.query().map_or_else(|s| format!("{s:?}"), |attr| attr.transports.join("+")))
            .collect()
    }

    fn stats(&self, last: bool) -> Line {
        let mut counters = self.counters.clone();
        // A reading, not a count: the orchestrator follows it over time instead of adding it up.
        let rss = super::process_figures().get("rss_kib").copied().unwrap_or(0);
        counters.insert(super::GAUGE_RSS.into(), rss);
        Line::Stats { last, counters }
    }

    /// Every connection is up and idle: nothing in flight, every client connected to the current
    /// incarnation of its peer, and every other peer connected here.
    fn is_quiet(&self) -> bool {
        let clients = self.clients.iter().all(Client::is_quiet);
        let servers =
            self.servers.values().all(ServerConn::is_quiet) && self.servers.len() == self.args.peers - 1;
        clients && servers
    }
}

/// Runs a peer until the orchestrator says `report` (or goes away).
pub fn run(args: PeerArgs) -> ! {
    // A fixed mmap threshold: large buffers come from mmap and go back to the kernel when freed,
    // instead of the heap's high-water mark that glibc's sliding threshold would leave behind, so
    // the resident set follows what the process holds rather than its allocation history.
    // SAFETY: mallopt only changes malloc's tuning; called before any other thread exists.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 10) };
    let config = Config::from_env().unwrap_or_else(|s| fail(format!("config: {s:?}")));
    let features =
        Features::TAG | Features::STREAM | Features::AM | Features::RMA | Features::AMO32 | Features::AMO64;
    let ctx = Context::new(&ContextParams::new(features), &config)
        .unwrap_or_else(|s| fail(format!("context: {s:?} {:?}", zcx::last_error_detail())));
    let worker =
        ctx.create_worker(&WorkerParams::default()).unwrap_or_else(|s| fail(format!("worker: {s:?}")));
    let slots = Slots::new(args.peers);
    let data = region(&ctx, slots.len() * (SLOT_COUNTERS + MAX_RMA), RW);
    let data_key = data.rkey_pack().unwrap_or_else(|s| fail(format!("rkey_pack: {s:?}"))).into_vec();
    let local = region(&ctx, args.peers * 2 * MAX_RMA, RW);
    let canary_rw = region(&ctx, CANARY_LEN, RW);
    let canary_ro = region(&ctx, CANARY_LEN, Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ);
    let events: Events = Arc::default();
    let seed = pattern::mix(args.seed ^ (args.id as u64) << 40 ^ u64::from(args.incarnation));
    let mut peer = Peer {
        worker: worker.clone(),
        events: Arc::clone(&events),
        rng: Rng::new(seed),
        counters: Counters::new(),
        data,
        data_key,
        slots,
        local,
        canary_seed: pattern::seed(Kind::Canary, args.id as u8, args.incarnation, 0, CANARY_LEN as u64),
        canary_rw,
        canary_ro,
        clients: (0..args.peers).filter(|&p| p != args.id).map(Client::new).collect(),
        servers: BTreeMap::new(),
        quiescing: false,
        // Distinct between incarnations, so nothing of an earlier process's connections can be
        // taken for this one's.
        next_nonce: (seed as u32) & 0x7FFF_FFFF,
        failed_servers: Vec::new(),
        own_closes: VecDeque::new(),
        inject: Inject::from_env(),
        args,
    };
    peer.fill_canaries();
    peer.install_handlers();

    let next_conn = Arc::new(AtomicU64::new(1));
    let accept_events = Arc::clone(&events);
    let accept_worker = worker.clone();
    let listener = worker
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().expect("address")),
            conn_handler: Some(Box::new(move |request| {
                let conn = next_conn.fetch_add(1, Ordering::Relaxed);
                let failed = Arc::clone(&accept_events);
                let mut params = EpParams::conn_request(request)
                    .with_err_handler(move |_, status| push(&failed, Event::ServerFailed { conn, status }));
                params.user_data = conn as usize;
                match accept_worker.create_endpoint(params) {
                    Ok(ep) => push(&accept_events, Event::Accepted { conn, ep }),
                    Err(status) => push(&accept_events, Event::AcceptFailed(status)),
                }
            })),
            ..Default::default()
        })
        .unwrap_or_else(|s| fail(format!("listen: {s:?} {:?}", zcx::last_error_detail())));
    let file = PeerFile {
        port: listener.sockaddr().port(),
        incarnation: peer.args.incarnation,
        pid: std::process::id(),
        canary_rw: peer
            .canary_rw
            .rkey_pack()
            .unwrap_or_else(|s| fail(format!("rkey_pack: {s:?}")))
            .into_vec(),
        canary_ro: peer
            .canary_ro
            .rkey_pack()
            .unwrap_or_else(|s| fail(format!("rkey_pack: {s:?}")))
            .into_vec(),
    };
    file.write(&peer.args.dir, peer.args.id).unwrap_or_else(|e| fail(format!("port file: {e}")));

    let commands = spawn_command_reader();
    let mut next_stat = Instant::now() + Duration::from_secs(1);
    let mut next_files = Instant::now();
    let mut next_canary = Instant::now();
    let mut quiet_reported = false;
    let mut idle_rounds = 0u32;
    loop {
        let mut busy = worker.progress() > 0;
        loop {
            match commands.try_recv() {
                Ok(Cmd::Quiesce) => {
                    peer.quiescing = true;
                    quiet_reported = false;
                }
                Ok(Cmd::Resume) => peer.quiescing = false,
                Ok(Cmd::Measure(label)) => {
                    let mut figures = super::process_figures();
                    figures.insert("endpoints".into(), worker.endpoint_count() as u64);
                    for transport in peer.endpoint_transports() {
                        *figures.entry(format!("ep.{transport}")).or_default() += 1;
                    }
                    Line::Mem { label, figures }.print()
                }
                Ok(Cmd::Report) => {
                    peer.check_canaries();
                    peer.stats(true).print();
                    // Endpoints and regions go with the process, as with any peer that exits.
                    std::process::exit(0)
                }
                Ok(Cmd::Gone) | Err(mpsc::TryRecvError::Disconnected) => std::process::exit(0),
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let events = std::mem::take(&mut *peer.events.lock().unwrap_or_else(|e| e.into_inner()));
        busy |= !events.is_empty();
        for event in events {
            peer.on_event(event);
        }
        let now = Instant::now();
        if now >= next_files {
            next_files = now + Duration::from_millis(200);
            peer.watch_peer_files(now);
        }
        busy |= peer.poll_servers(now);
        busy |= peer.poll_clients(now);
        if now >= next_canary {
            next_canary = now + Duration::from_millis(500);
            peer.check_canaries();
        }
        if now >= next_stat {
            next_stat = now + Duration::from_secs(1);
            peer.stats(false).print();
        }
        if peer.quiescing && !quiet_reported && peer.is_quiet() {
            quiet_reported = true;
            Line::Quiet.print();
        }
        // Nothing moved for a while (every window full, or quiesced): let the other peers on this
        // small machine run instead of spinning on an empty worker.
        idle_rounds = if busy { 0 } else { idle_rounds + 1 };
        if idle_rounds > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Peer {
    fn on_event(&mut self, event: Event) {
        match event {
            Event::Accepted { conn, ep } => {
                self.count("conn.accepted", 1);
                self.servers.insert(conn, ServerConn::new(ep));
            }
            Event::AcceptFailed(status) => self.count(&format!("err.accept.{status:?}"), 1),
            Event::ServerFailed { conn, status } => self.on_server_failed(conn, status),
            Event::ClientFailed { nonce, status } => self.on_client_failed(nonce, status),
            Event::Hello { conn, header } => self.on_hello(conn, &header),
            Event::HelloReply { header, data } => self.on_hello_reply(&header, data),
            Event::Credit { header } => self.on_credit(&header),
            Event::AmEager { conn, header, checked } => self.on_am(conn, header, AmData::Eager(checked)),
            Event::AmRndv { conn, header, recv } => self.on_am(conn, header, AmData::Rndv(recv)),
        }
    }
}

/// Reads the orchestrator's commands from stdin on a thread of its own.
fn spawn_command_reader() -> mpsc::Receiver<Cmd> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            let cmd = match line.split_once(' ').unwrap_or((line.as_str(), "")) {
                ("quiesce", _) => Cmd::Quiesce,
                ("resume", _) => Cmd::Resume,
                ("measure", label) => Cmd::Measure(label.to_owned()),
                ("report", _) => Cmd::Report,
                _ => continue,
            };
            if tx.send(cmd).is_err() {
                return;
            }
        }
        let _ = tx.send(Cmd::Gone);
    });
    rx
}

/// The peer's view of a request: still running, or ended.
pub(crate) fn poll<B: Send + 'static>(
    request: Request<B>,
) -> Result<Result<zcx::Completion<B>, Status>, Request<B>> {
    if !request.is_done() {
        return Err(request);
    }
    request.try_take()
}

/// `fail_deadline` past `since`.
pub(crate) fn overdue(since: Instant, now: Instant) -> bool {
    now.duration_since(since) > fail_deadline()
}
