//! The client side of a peer: one endpoint to every other peer, reconnected whenever it fails.
//! Sends checked tag, stream and active messages within the server's credits, and runs one
//! chain of remote accesses at a time on its slot: put, flush, get (compared with what was put),
//! or a 32- or 64-bit atomic whose fetched value must be the one this client expects.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx::{
    AmProto, AmSendParams, AtomicOp, AtomicSize, CloseMode, Endpoint, EpParams, EpRkey, MemSlice, RecvBuf,
    Request, RequestParams, SendBuf, Status, TagSendParams,
};

use super::super::pattern::{self, Header, Kind, HEADER_LEN};
use super::super::run_dir::PeerFile;
use super::super::{MAX_MSG, MAX_RMA, MAX_STREAM_MSG, WINDOW};
use super::server::{Credit, Hello, HelloReply, AM, KIND_NAMES, STREAM, TAG};
use super::{
    fail, is_peer_failure, overdue, poll, push, tag_of, Event, Inject, Peer, AM_DATA, AM_HELLO, INJECT_AT,
};

/// Messages of each kind a connection carries before it counts as warm.
const WARM_MESSAGES: u64 = 16;

/// A send or get buffer: heap memory or a slice of the peer's registered memory.
enum Pending {
    Heap(Request<Vec<u8>>),
    Registered(Request<MemSlice>),
}

/// The outcome of a finished [`Pending`]: the bytes (for a get) or the failure.
enum Finished {
    Running(Pending),
    Done(Result<Vec<u8>, Status>),
}

impl Pending {
    /// Whether it ended; a get's bytes are copied out only when `want_bytes`.
    fn poll(self, want_bytes: bool) -> Finished {
        match self {
            Pending::Heap(request) => match poll(request) {
                Err(request) => Finished::Running(Pending::Heap(request)),
                Ok(done) => Finished::Done(done.map(|c| if want_bytes { c.buf } else { Vec::new() })),
            },
            Pending::Registered(request) => match poll(request) {
                Err(request) => Finished::Running(Pending::Registered(request)),
                Ok(done) => {
                    Finished::Done(
                        done.map(|c| if want_bytes { c.buf.as_bytes().to_vec() } else { Vec::new() }),
                    )
                }
            },
        }
    }
}

/// Where one remote-access chain is.
enum Rma {
    Idle,
    Put { request: Option<Pending>, seq: u64, offset: u64, len: usize },
    Flush { request: Request<()>, seq: u64, offset: u64, len: usize },
    Get { request: Pending, seq: u64, len: usize },
    Atomic { request: Request<()>, wide: bool, expect: u64, after: u64 },
}

/// What the server granted at hello.
struct Granted {
    slot: u8,
    rkey: EpRkey,
    data_addr: u64,
    counter_addr: u64,
}

/// One connection to a server.
pub(crate) struct Live {
    ep: Endpoint,
    nonce: u32,
    /// The server's incarnation: from its peer file when connecting, from its hello reply after.
    incarnation: u32,
    created: Instant,
    granted: Option<Granted>,
    sends: Vec<Pending>,
    next: [u64; 3],
    credited: [u64; 3],
    rma: Rma,
    rma_seq: u64,
    expect64: u64,
    expect32: u64,
    /// The error handler ran.
    failed: Option<(Status, Instant)>,
    /// An operation failed as it does when the peer is gone: the error handler must follow.
    op_error: Option<(Status, Instant)>,
    /// Since when the server's peer file shows another incarnation (or none).
    server_gone_since: Option<Instant>,
    /// This side closed the endpoint (stale port, no slot): its failure is ours.
    closed_by_us: bool,
    /// Per kind, since when the oldest unconfirmed message waits for its credit.
    credit_wait: [Instant; 3],
    /// When the current step of the access chain was issued.
    rma_at: Instant,
    /// Statuses of the operations that failed, counted when the connection goes.
    op_errors: Vec<Status>,
    /// Put-get chains and atomics checked on this connection.
    puts_checked: u64,
    atomics_checked: u64,
}

impl Live {
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The connection carried messages of every kind, a large put from registered memory
    /// (helped by the target over shared memory), a get and an atomic: whatever the library
    /// sets up on first use of a connection (a shared-memory endpoint's direct lane, a put
    /// source's mapping) exists, so two measurements of a quiet peer see the same things.
    fn warm(&self) -> bool {
        self.puts_checked > 0 && self.atomics_checked > 0 && self.credited.iter().all(|&n| n >= WARM_MESSAGES)
    }

    fn op_failed(&mut self, what: &str, status: Status, now: Instant) {
        if !is_peer_failure(status) {
            fail(format!("client {what} on connection {} failed with {status:?}", self.nonce));
        }
        self.op_error.get_or_insert((status, now));
        self.op_errors.push(status);
    }

    fn usable(&self) -> bool {
        self.failed.is_none() && self.op_error.is_none()
    }

    fn track(&mut self, what: &str, sent: zcx::Result<Pending>, now: Instant) {
        match sent {
            Ok(pending) => self.sends.push(pending),
            Err(status) => self.op_failed(what, status, now),
        }
    }
}

/// This peer's connection to one other peer.
pub(crate) struct Client {
    pub peer: usize,
    pub live: Option<Live>,
    retry_at: Instant,
    /// The other peer's file as last read.
    file: Option<PeerFile>,
}

impl Client {
    pub fn new(peer: usize) -> Client {
        Client { peer, live: None, retry_at: Instant::now(), file: None }
    }

    pub fn is_quiet(&self) -> bool {
        let Some(live) = &self.live else { return false };
        live.granted.is_some()
            && live.usable()
            && live.sends.is_empty()
            && matches!(live.rma, Rma::Idle)
            && live.next == live.credited
            && live.warm()
            && self.file.as_ref().is_some_and(|f| f.incarnation == live.incarnation)
    }

    pub fn note_file(&mut self, file: Option<PeerFile>, now: Instant) {
        if let Some(live) = &mut self.live {
            if file.as_ref().is_some_and(|f| f.incarnation == live.incarnation) {
                live.server_gone_since = None;
            } else {
                live.server_gone_since.get_or_insert(now);
            }
        }
        self.file = file;
    }
}

/// The value an atomic leaves in a word that held `old`, on `bits` bits.
fn atomic_result(op: AtomicOp, old: u64, value: u64, compare: u64, bits: u32) -> u64 {
    let mask = if bits == 64 { u64::MAX } else { (1 << bits) - 1 };
    let (old, value, compare) = (old & mask, value & mask, compare & mask);
    let new = match op {
        AtomicOp::Add => old.wrapping_add(value),
        AtomicOp::Swap => value,
        AtomicOp::Cswap => {
            if old == compare {
                value
            } else {
                old
            }
        }
        AtomicOp::And => old & value,
        AtomicOp::Or => old | value,
        AtomicOp::Xor => old ^ value,
    };
    new & mask
}

impl Peer {
    pub(crate) fn on_client_failed(&mut self, nonce: u32, status: Status) {
        let now = Instant::now();
        let Some(index) = self.clients.iter().position(|c| c.live.as_ref().is_some_and(|l| l.nonce == nonce))
        else {
            if self.own_closes.contains(&nonce) {
                // It failed on its own before the close this side issued took effect.
                self.count("epfail.client_closed_by_us", 1);
                return;
            }
            fail(format!("error handler of a client endpoint no longer held (nonce {nonce}): {status:?}"))
        };
        let client = &mut self.clients[index];
        let peer = client.peer;
        let live = client.live.as_mut().expect("found above");
        if live.closed_by_us {
            self.count("epfail.client_closed_by_us", 1);
            return;
        }
        if let Some((first, _)) = live.failed {
            fail(format!("error handler ran twice on connection {nonce}: {first:?}, then {status:?}"));
        }
        live.failed = Some((status, now));
        if live.granted.is_some() {
            self.failed_servers.push((peer, live.incarnation, now));
        }
        self.count(&format!("epfail.client.{status:?}"), 1);
    }

    pub(crate) fn on_hello_reply(&mut self, header: &[u8], data: Option<Vec<u8>>) {
        let reply = HelloReply::decode(header)
            .unwrap_or_else(|| fail(format!("malformed hello reply {header:02x?}")));
        let now = Instant::now();
        let Some(client) =
            self.clients.iter_mut().find(|c| c.live.as_ref().is_some_and(|l| l.nonce == reply.nonce))
        else {
            return;
        };
        let peer = client.peer;
        let live = client.live.as_mut().expect("found above");
        if live.granted.is_some() {
            fail(format!("a second hello reply on connection {}: {reply:?}", reply.nonce));
        }
        if !live.usable() {
            return;
        }
        let wrong_peer = usize::from(reply.server) != peer;
        if wrong_peer || !reply.accepted {
            // A stale port now used by another peer, or no slot free: try again a little later.
            live.failed = Some((Status::Canceled, now));
            live.closed_by_us = true;
            drop(live.ep.close(CloseMode::Force));
            if self.own_closes.len() == 64 {
                self.own_closes.pop_front();
            }
            self.own_closes.push_back(reply.nonce);
            client.retry_at = now + Duration::from_millis(300);
            self.count(if wrong_peer { "conn.wrong_peer" } else { "conn.refused_busy" }, 1);
            return;
        }
        let key = data.unwrap_or_else(|| fail(format!("hello reply without a key: {reply:?}")));
        let rkey = live
            .ep
            .rkey_unpack(&key)
            .unwrap_or_else(|s| fail(format!("rkey_unpack of the hello reply's key: {s:?}")));
        live.incarnation = reply.server_incarnation;
        live.granted = Some(Granted {
            slot: reply.slot,
            rkey,
            data_addr: reply.data_addr,
            counter_addr: reply.counter_addr,
        });
        live.expect32 = 0;
        live.expect64 = 0;
        self.count("conn.client", 1);
    }

    pub(crate) fn on_credit(&mut self, header: &[u8]) {
        let credit =
            Credit::decode(header).unwrap_or_else(|| fail(format!("malformed credit {header:02x?}")));
        let Some(live) =
            self.clients.iter_mut().find_map(|c| c.live.as_mut().filter(|l| l.nonce == credit.nonce))
        else {
            return;
        };
        if live.granted.as_ref().map(|g| g.slot) != Some(credit.slot) {
            fail(format!("credit {credit:?} on a connection with another slot"));
        }
        for k in [TAG, STREAM, AM] {
            if credit.checked[k] > live.next[k] {
                fail(format!(
                    "server checked {} {} messages of {} sent",
                    credit.checked[k], KIND_NAMES[k], live.next[k]
                ));
            }
            if credit.checked[k] > live.credited[k] {
                live.credited[k] = credit.checked[k];
                live.credit_wait[k] = Instant::now();
            }
        }
    }

    pub(crate) fn watch_peer_files(&mut self, now: Instant) {
        let files: Vec<Option<PeerFile>> =
            (0..self.args.peers).map(|p| PeerFile::read(&self.args.dir, p)).collect();
        for client in &mut self.clients {
            client.note_file(files[client.peer].clone(), now);
        }
        // A connection failed while both processes still run (a keepalive timeout on a starved
        // machine, say) is no failure of the run, but worth seeing in the report. The server's
        // file is looked at a while after the failure: a killed server's goes only once the
        // orchestrator reaped it.
        let settled = |at: Instant| now.duration_since(at) > Duration::from_secs(2);
        let (old, young): (Vec<_>, Vec<_>) = self.failed_servers.drain(..).partition(|f| settled(f.2));
        self.failed_servers = young;
        for (peer, incarnation, _) in old {
            if files[peer].as_ref().is_some_and(|f| f.incarnation == incarnation) {
                self.count("epfail.client_server_alive", 1);
            }
        }
        for conn in self.servers.values_mut() {
            if let Some(hello) = conn.hello() {
                let file = files.get(usize::from(hello.client)).and_then(Option::as_ref);
                conn.note_client_file(file.map(|f| f.incarnation), now);
            }
        }
    }

    pub(crate) fn poll_clients(&mut self, now: Instant) -> bool {
        let mut clients = std::mem::take(&mut self.clients);
        let mut busy = false;
        for (index, client) in clients.iter_mut().enumerate() {
            busy |= self.poll_client(index, client, now);
        }
        self.clients = clients;
        busy
    }

    fn poll_client(&mut self, index: usize, client: &mut Client, now: Instant) -> bool {
        let Some(live) = &mut client.live else {
            if now >= client.retry_at {
                self.connect(client, now);
            }
            return false;
        };
        let mut busy = self.poll_requests(index, live, now);
        if let Some((status, since)) = live.failed {
            if live.sends.is_empty() && matches!(live.rma, Rma::Idle) {
                // A failed endpoint's close completes at once; nothing to wait for.
                drop(live.ep.close(CloseMode::Force));
                for status in std::mem::take(&mut live.op_errors) {
                    self.count(&format!("operr.client.{status:?}"), 1);
                }
                client.live = None;
                client.retry_at = client.retry_at.max(now + Duration::from_millis(100));
                return true;
            }
            if overdue(since, now) {
                fail(format!(
                    "requests to peer {} still running {:?} after the endpoint failed with {status:?}",
                    client.peer,
                    now - since
                ));
            }
            return busy;
        }
        if let Some((status, since)) = live.op_error {
            if overdue(since, now) {
                fail(format!(
                    "an operation to peer {} failed with {status:?}, but the endpoint never failed",
                    client.peer
                ));
            }
        }
        if let Some(since) = live.server_gone_since {
            if overdue(since, now) {
                fail(format!(
                    "the endpoint to peer {} (incarnation {}) did not fail {:?} after that peer died",
                    client.peer,
                    live.incarnation,
                    now - since
                ));
            }
        }
        if live.granted.is_none() {
            if live.server_gone_since.is_none() && overdue(live.created, now) {
                fail(format!("peer {} never answered the hello of connection {}", client.peer, live.nonce));
            }
            return busy;
        }
        if live.usable() && (!self.quiescing || !live.warm()) {
            // Quiescing stops the traffic of connections that are warm.
            busy |= self.issue(index, live, now);
        }
        if live.usable() {
            Self::watch_stalls(client.peer, live, now);
        }
        busy
    }

    /// On a live connection every message is confirmed and every access ends: a message lost
    /// on the way, or a request stuck, leaves its wait without end.
    fn watch_stalls(peer: usize, live: &Live, now: Instant) {
        for k in [TAG, STREAM, AM] {
            if live.next[k] > live.credited[k] && overdue(live.credit_wait[k], now) {
                fail(format!(
                    "peer {peer} confirmed {} of {} {} messages on connection {} and nothing more for {:?}",
                    live.credited[k],
                    live.next[k],
                    KIND_NAMES[k],
                    live.nonce,
                    now - live.credit_wait[k]
                ));
            }
        }
        if !matches!(live.rma, Rma::Idle) && overdue(live.rma_at, now) {
            fail(format!(
                "a remote access to peer {peer} on connection {} has not ended for {:?}",
                live.nonce,
                now - live.rma_at
            ));
        }
    }

    fn connect(&mut self, client: &mut Client, now: Instant) {
        let Some(file) = &client.file else { return };
        client.retry_at = now + Duration::from_millis(100);
        let nonce = self.next_nonce;
        self.next_nonce = self.next_nonce.wrapping_add(1);
        let events = Arc::clone(&self.events);
        let addr = SocketAddr::from(([127, 0, 0, 1], file.port));
        let params = EpParams::sockaddr(addr)
            .with_err_handler(move |_, status| push(&events, Event::ClientFailed { nonce, status }));
        let ep = match self.worker.create_endpoint(params) {
            Ok(ep) => ep,
            Err(status) => {
                self.count(&format!("err.connect.{status:?}"), 1);
                return;
            }
        };
        let mut live = Live {
            ep,
            nonce,
            incarnation: file.incarnation,
            created: now,
            granted: None,
            sends: Vec::new(),
            next: [0; 3],
            credited: [0; 3],
            rma: Rma::Idle,
            rma_seq: 0,
            expect64: 0,
            expect32: 0,
            failed: None,
            op_error: None,
            server_gone_since: None,
            closed_by_us: false,
            credit_wait: [now; 3],
            rma_at: now,
            puts_checked: 0,
            atomics_checked: 0,
            op_errors: Vec::new(),
        };
        let hello = Hello::encode_request(self.args.id as u8, self.args.incarnation, nonce);
        let params = AmSendParams { reply: true, proto: AmProto::Eager, ..AmSendParams::default() };
        let sent = live.ep.am_send(AM_HELLO, &hello, Vec::new(), params).map(Pending::Heap);
        live.track("hello", sent, now);
        self.count("conn.attempts", 1);
        client.live = Some(live);
    }

    /// Polls the connection's requests; returns true when any ended.
    fn poll_requests(&mut self, index: usize, live: &mut Live, now: Instant) -> bool {
        let mut busy = false;
        let mut i = 0;
        while i < live.sends.len() {
            let pending = live.sends.swap_remove(i);
            match pending.poll(false) {
                Finished::Running(pending) => {
                    live.sends.push(pending);
                    let last = live.sends.len() - 1;
                    live.sends.swap(i, last);
                    i += 1;
                }
                Finished::Done(Ok(_)) => busy = true,
                Finished::Done(Err(status)) => {
                    busy = true;
                    live.op_failed("send", status, now);
                }
            }
        }
        busy | self.poll_rma(index, live, now)
    }

    fn poll_rma(&mut self, index: usize, live: &mut Live, now: Instant) -> bool {
        let rma = std::mem::replace(&mut live.rma, Rma::Idle);
        let outcome: Result<Rma, Status> = match rma {
            Rma::Idle => return false,
            Rma::Put { request: Some(request), seq, offset, len } => match request.poll(false) {
                Finished::Running(request) => {
                    live.rma = Rma::Put { request: Some(request), seq, offset, len };
                    return false;
                }
                Finished::Done(Ok(_)) => Ok(Rma::Put { request: None, seq, offset, len }),
                Finished::Done(Err(status)) => Err(status),
            },
            Rma::Put { request: None, seq, offset, len } => {
                // The put is done locally; a flush makes it visible at the target before the get.
                match live.ep.flush() {
                    Ok(request) => Ok(Rma::Flush { request, seq, offset, len }),
                    Err(status) => Err(status),
                }
            }
            Rma::Flush { request, seq, offset, len } => match poll(request) {
                Err(request) => {
                    live.rma = Rma::Flush { request, seq, offset, len };
                    return false;
                }
                Ok(Ok(_)) => {
                    let granted = live.granted.as_ref().expect("granted before any access");
                    let addr = granted.data_addr + offset;
                    let got = if seq > 0 && self.rng.chance(50) {
                        live.ep
                            .get(vec![0u8; len], addr, &granted.rkey, RequestParams::default())
                            .map(Pending::Heap)
                    } else {
                        let dst = self.local_area(index) + MAX_RMA;
                        let slice = self.local.slice(dst, len).expect("inside the local region");
                        live.ep
                            .get(slice, addr, &granted.rkey, RequestParams::default())
                            .map(Pending::Registered)
                    };
                    got.map(|request| Rma::Get { request, seq, len })
                }
                Ok(Err(status)) => Err(status),
            },
            Rma::Get { request, seq, len } => match request.poll(true) {
                Finished::Running(request) => {
                    live.rma = Rma::Get { request, seq, len };
                    return false;
                }
                Finished::Done(Ok(bytes)) => {
                    let seed = pattern::seed(Kind::Put, self.args.id as u8, live.nonce, seq, len as u64);
                    if let Some(at) = pattern::first_mismatch(seed, &bytes, 0) {
                        fail(format!(
                            "get of put {seq} ({len} bytes) from peer {}: byte {at} differs from what was put",
                            live.incarnation
                        ));
                    }
                    live.puts_checked += 1;
                    self.count("checked.put_get", 1);
                    self.count("checked.rma_bytes", len as u64);
                    Ok(Rma::Idle)
                }
                Finished::Done(Err(status)) => Err(status),
            },
            Rma::Atomic { request, wide, expect, after } => match poll(request) {
                Err(request) => {
                    live.rma = Rma::Atomic { request, wide, expect, after };
                    return false;
                }
                Ok(Ok(done)) => {
                    let old = if wide { done.info.value } else { done.info.value & 0xFFFF_FFFF };
                    if old != expect {
                        fail(format!(
                            "{}-bit atomic on connection {} fetched {old:#x}, expected {expect:#x}",
                            if wide { 64 } else { 32 },
                            live.nonce
                        ));
                    }
                    live.atomics_checked += 1;
                    if wide {
                        live.expect64 = after;
                        self.count("checked.amo64", 1);
                    } else {
                        live.expect32 = after;
                        self.count("checked.amo32", 1);
                    }
                    Ok(Rma::Idle)
                }
                Ok(Err(status)) => Err(status),
            },
        };
        match outcome {
            Ok(rma) => {
                live.rma = rma;
                live.rma_at = now;
            }
            Err(status) => live.op_failed("remote access", status, now),
        }
        true
    }

    /// Offset of client `index`'s put sources and get destinations in the local region.
    fn local_area(&self, index: usize) -> usize {
        index * 2 * MAX_RMA
    }

    /// Issues what the credits and the access chain allow; returns true when anything went.
    fn issue(&mut self, index: usize, live: &mut Live, now: Instant) -> bool {
        let granted = live.granted.as_ref().expect("issued after the hello reply");
        let slot = granted.slot;
        let sender = self.args.id as u8;
        let mut busy = false;
        let nonce = live.nonce;
        let header = |kind, seq, len: usize| Header { kind, sender, slot, nonce, seq, len: len as u64 };
        for k in [TAG, STREAM, AM] {
            if live.next[k] == live.credited[k] {
                // Nothing waits for a credit: the wait starts with the next message.
                live.credit_wait[k] = now;
            }
        }
        // Up to the credits; while quiescing, only what a connection needs to be warm.
        let quiescing = self.quiescing;
        let window: [u64; 3] = std::array::from_fn(|k| {
            let credits = live.credited[k] + WINDOW;
            if quiescing {
                credits.min(WARM_MESSAGES)
            } else {
                credits
            }
        });
        if live.next[TAG] < window[TAG] {
            let seq = live.next[TAG];
            let mut message = header(Kind::Tag, seq, self.rng.size(HEADER_LEN, MAX_MSG)).message();
            if self.inject == Some(Inject::CorruptTag) && seq == INJECT_AT {
                *message.last_mut().expect("at least a header") ^= 0x40;
            }
            let params = TagSendParams { sync: self.rng.chance(10), ..TagSendParams::default() };
            let sent = live.ep.tag_send(message, tag_of(slot, live.nonce, seq), params).map(Pending::Heap);
            live.next[TAG] += 1;
            live.track("tag send", sent, now);
            busy = true;
        }
        if live.usable() && live.next[STREAM] < window[STREAM] {
            let message =
                header(Kind::Stream, live.next[STREAM], self.rng.size(HEADER_LEN, MAX_STREAM_MSG)).message();
            if self.inject == Some(Inject::LoseStream) && live.next[STREAM] == INJECT_AT {
                live.next[STREAM] += 1;
            }
            let sent = live.ep.stream_send(message, RequestParams::default()).map(Pending::Heap);
            live.next[STREAM] += 1;
            live.track("stream send", sent, now);
            busy = true;
        }
        if live.usable() && live.next[AM] < window[AM] {
            let len = if self.rng.chance(3) { 0 } else { self.rng.size(1, MAX_MSG) };
            let h = header(Kind::Am, live.next[AM], len);
            let mut data = vec![0u8; len];
            pattern::fill(h.seed(), &mut data, 0);
            let proto = match self.rng.below(10) {
                0..=1 => AmProto::Rndv,
                2..=4 if len <= 4096 => AmProto::Eager,
                _ => AmProto::Auto,
            };
            let params = AmSendParams { reply: true, proto, ..AmSendParams::default() };
            let sent = live.ep.am_send(AM_DATA, &h.encode(), data, params).map(Pending::Heap);
            live.next[AM] += 1;
            live.track("AM send", sent, now);
            busy = true;
        }
        let accesses_due = !self.quiescing || live.puts_checked == 0 || live.atomics_checked == 0;
        if live.usable() && matches!(live.rma, Rma::Idle) && accesses_due {
            busy = true;
            // A new connection starts with a put-get chain, then an atomic (see `Live::warm`).
            let put = live.puts_checked == 0 || (live.atomics_checked > 0 && self.rng.chance(60));
            let issued = if put { self.issue_put(index, live) } else { self.issue_atomic(live) };
            match issued {
                Ok(rma) => {
                    live.rma = rma;
                    live.rma_at = now;
                }
                Err(status) => live.op_failed("remote access", status, now),
            }
        }
        busy
    }

    fn issue_put(&mut self, index: usize, live: &mut Live) -> Result<Rma, Status> {
        let granted = live.granted.as_ref().expect("issued after the hello reply");
        let seq = live.rma_seq;
        live.rma_seq += 1;
        // The first put of a connection is the largest, from registered memory: over shared
        // memory the target helps copy it.
        let first = seq == 0;
        let len = if first { MAX_RMA } else { self.rng.size(1, MAX_RMA) };
        let offset = self.rng.below((MAX_RMA - len + 1) as u64);
        let seed = pattern::seed(Kind::Put, self.args.id as u8, live.nonce, seq, len as u64);
        let addr = granted.data_addr + offset;
        let request = match if first { 2 } else { self.rng.below(4) } {
            0 if len <= 64 << 10 => {
                // Returns once the bytes are taken; the flush that follows completes it.
                let mut bytes = vec![0u8; len];
                pattern::fill(seed, &mut bytes, 0);
                live.ep.put_nbi(&bytes, addr, &granted.rkey)?;
                None
            }
            1 => {
                let mut bytes = vec![0u8; len];
                pattern::fill(seed, &mut bytes, 0);
                Some(Pending::Heap(live.ep.put(bytes, addr, &granted.rkey, RequestParams::default())?))
            }
            _ => {
                let mut src = self.local.slice(self.local_area(index), len).expect("inside the local region");
                pattern::fill(seed, src.as_mut_bytes(), 0);
                Some(Pending::Registered(live.ep.put(src, addr, &granted.rkey, RequestParams::default())?))
            }
        };
        Ok(Rma::Put { request, seq, offset, len })
    }

    fn issue_atomic(&mut self, live: &mut Live) -> Result<Rma, Status> {
        let granted = live.granted.as_ref().expect("issued after the hello reply");
        let wide = self.rng.chance(50);
        let (size, bits, addr, expect) = if wide {
            (AtomicSize::U64, 64, granted.counter_addr, live.expect64)
        } else {
            (AtomicSize::U32, 32, granted.counter_addr + 8, live.expect32)
        };
        let op = AtomicOp::from_u8(self.rng.below(6) as u8).expect("six ops");
        let value = self.rng.next_u64();
        // Half the compare-and-swaps are meant to hit.
        let compare = if self.rng.chance(50) { expect } else { self.rng.next_u64() };
        let after = atomic_result(op, expect, value, compare, bits);
        let request =
            live.ep.atomic(op, size, value, compare, addr, &granted.rkey, RequestParams::default())?;
        Ok(Rma::Atomic { request, wide, expect, after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_results_wrap_at_their_width() {
        assert_eq!(atomic_result(AtomicOp::Add, 0xFFFF_FFFF, 2, 0, 32), 1);
        assert_eq!(atomic_result(AtomicOp::Add, u64::MAX, 2, 0, 64), 1);
        assert_eq!(atomic_result(AtomicOp::Swap, 5, 0x1_0000_0007, 0, 32), 7);
        assert_eq!(atomic_result(AtomicOp::Cswap, 5, 9, 5, 64), 9);
        assert_eq!(atomic_result(AtomicOp::Cswap, 5, 9, 6, 64), 5);
        assert_eq!(atomic_result(AtomicOp::Xor, 0b1100, 0b1010, 0, 64), 0b0110);
    }
}
