//! The server side of a peer: the endpoints other peers opened to its listener. Each gets a slot
//! of the data region at its hello, a posted tag receive for exactly its next message, a stream
//! receive, and its active messages; every message is checked against its header and the
//! connection's sequence, and confirmed to the client with a credit message.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zcx::{AmProto, AmSendParams, CloseMode, Endpoint, Request, RequestParams, Status};

use super::super::pattern::{Header, Kind, HEADER_LEN};
use super::super::{MAX_MSG, MAX_RMA, MAX_STREAM_MSG};
use super::{
    fail, is_peer_failure, overdue, poll, tag_of, Peer, AM_CREDIT, AM_HELLO_REPLY, CONN_TAG_MASK,
    SLOT_COUNTERS,
};

/// Index of a message kind in the per-kind counters of a connection.
pub(crate) const TAG: usize = 0;
pub(crate) const STREAM: usize = 1;
pub(crate) const AM: usize = 2;
pub(crate) const KIND_NAMES: [&str; 3] = ["tag", "stream", "am"];

/// How long a freed slot rests before another connection gets it: a client whose connection
/// this side already failed may go on writing to the slot directly (shared memory) until it
/// notices the failure itself, which keepalive bounds to about 3 s.
const SLOT_QUARANTINE: Duration = Duration::from_secs(5);

/// The slots of the data region: two for each client peer, so that a client reconnecting while
/// this side has not yet seen its old connection fail still finds one. A client only ever
/// touches its own two slots of a server's region, so the pages it maps of it stop growing once
/// it has used both.
pub(crate) struct Slots {
    /// When each slot was freed; `None` while a connection holds it.
    freed: Vec<Option<Instant>>,
}

impl Slots {
    pub fn new(peers: usize) -> Slots {
        let long_ago = Instant::now().checked_sub(SLOT_QUARANTINE).unwrap_or_else(Instant::now);
        Slots { freed: vec![Some(long_ago); 2 * peers] }
    }

    pub fn len(&self) -> usize {
        self.freed.len()
    }

    /// A slot of `client`'s pair, free and past its quarantine.
    fn take(&mut self, client: u8, now: Instant) -> Option<u8> {
        let first = 2 * usize::from(client);
        let slot = (first..first + 2)
            .filter(|&s| {
                self.freed
                    .get(s)
                    .copied()
                    .flatten()
                    .is_some_and(|at| now.duration_since(at) >= SLOT_QUARANTINE)
            })
            .min_by_key(|&s| self.freed[s])?;
        self.freed[slot] = None;
        Some(slot as u8)
    }

    fn give_back(&mut self, slot: u8, now: Instant) {
        self.freed[usize::from(slot)] = Some(now);
    }
}

/// The hello of a client, as the server recorded it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hello {
    pub client: u8,
    pub client_incarnation: u32,
    pub nonce: u32,
    pub slot: u8,
}

/// Bytes of a hello's AM header.
pub(crate) const HELLO_LEN: usize = 16;

impl Hello {
    /// The client's hello: who it is and its number for the connection (the slot is the
    /// server's to give).
    pub fn encode_request(client: u8, client_incarnation: u32, nonce: u32) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0..4].copy_from_slice(&super::super::pattern::MAGIC.to_le_bytes());
        out[4] = client;
        out[8..12].copy_from_slice(&client_incarnation.to_le_bytes());
        out[12..16].copy_from_slice(&nonce.to_le_bytes());
        out
    }

    fn decode_request(bytes: &[u8]) -> Option<(u8, u32, u32)> {
        let b: &[u8; HELLO_LEN] = bytes.try_into().ok()?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        (u32_at(0) == super::super::pattern::MAGIC).then(|| (b[4], u32_at(8), u32_at(12)))
    }
}

/// The server's answer to a hello (AM header; the data is the region's packed key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HelloReply {
    pub server: u8,
    /// False when no slot was free: the client tries again later.
    pub accepted: bool,
    pub slot: u8,
    pub server_incarnation: u32,
    pub nonce: u32,
    /// The slot's data area and counter words in the server's address space.
    pub data_addr: u64,
    pub counter_addr: u64,
}

pub(crate) const HELLO_REPLY_LEN: usize = 32;

impl HelloReply {
    pub fn encode(&self) -> [u8; HELLO_REPLY_LEN] {
        let mut out = [0u8; HELLO_REPLY_LEN];
        out[0] = self.server;
        out[1] = u8::from(self.accepted);
        out[2] = self.slot;
        out[4..8].copy_from_slice(&self.server_incarnation.to_le_bytes());
        out[8..12].copy_from_slice(&self.nonce.to_le_bytes());
        out[16..24].copy_from_slice(&self.data_addr.to_le_bytes());
        out[24..32].copy_from_slice(&self.counter_addr.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<HelloReply> {
        let b: &[u8; HELLO_REPLY_LEN] = bytes.try_into().ok()?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(HelloReply {
            server: b[0],
            accepted: b[1] == 1,
            slot: b[2],
            server_incarnation: u32_at(4),
            nonce: u32_at(8),
            data_addr: u64_at(16),
            counter_addr: u64_at(24),
        })
    }
}

/// A credit message: how many messages of each kind the server checked on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Credit {
    pub nonce: u32,
    pub slot: u8,
    pub checked: [u64; 3],
}

pub(crate) const CREDIT_LEN: usize = 40;

impl Credit {
    pub fn encode(&self) -> [u8; CREDIT_LEN] {
        let mut out = [0u8; CREDIT_LEN];
        out[0..4].copy_from_slice(&self.nonce.to_le_bytes());
        out[4] = self.slot;
        for (k, n) in self.checked.iter().enumerate() {
            out[16 + 8 * k..24 + 8 * k].copy_from_slice(&n.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Credit> {
        let b: &[u8; CREDIT_LEN] = bytes.try_into().ok()?;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(Credit {
            nonce: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            slot: b[4],
            checked: [u64_at(16), u64_at(24), u64_at(32)],
        })
    }
}

/// The data of an active message: checked in its handler (eager), or being received.
pub(crate) enum AmData {
    Eager(Result<(), String>),
    Rndv(Result<Request<Vec<u8>>, Status>),
}

/// One endpoint another peer (or a hostile connection that completed the handshake) opened.
pub(crate) struct ServerConn {
    ep: Endpoint,
    accepted: Instant,
    hello: Option<Hello>,
    tag_recv: Option<Request<Vec<u8>>>,
    stream_recv: Option<Request<Vec<u8>>>,
    stream_bytes: Vec<u8>,
    /// The sequence number the next message of each kind must carry.
    next: [u64; 3],
    checked: [u64; 3],
    credited: [u64; 3],
    am_rndv: Vec<(Header, Request<Vec<u8>>)>,
    /// The error handler ran.
    failed: Option<(Status, Instant)>,
    /// An operation failed as it does when the peer is gone: the error handler must follow.
    op_error: Option<(Status, Instant)>,
    /// Statuses of the operations that failed, counted when the connection goes.
    op_errors: Vec<Status>,
    /// Since when the client's peer file shows another incarnation than the one that said hello.
    client_gone_since: Option<Instant>,
    /// The error handler ran and every request ended: the connection can go.
    finished: bool,
}

impl ServerConn {
    pub fn new(ep: Endpoint) -> ServerConn {
        ServerConn {
            ep,
            accepted: Instant::now(),
            hello: None,
            tag_recv: None,
            stream_recv: None,
            stream_bytes: Vec::new(),
            next: [0; 3],
            checked: [0; 3],
            credited: [0; 3],
            am_rndv: Vec::new(),
            failed: None,
            op_error: None,
            client_gone_since: None,
            op_errors: Vec::new(),
            finished: false,
        }
    }

    pub fn is_quiet(&self) -> bool {
        self.hello.is_some()
            && self.failed.is_none()
            && self.op_error.is_none()
            && self.am_rndv.is_empty()
            && self.checked == self.credited
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    pub fn hello(&self) -> Option<Hello> {
        self.hello
    }

    pub fn note_client_file(&mut self, incarnation: Option<u32>, now: Instant) {
        if let Some(hello) = self.hello {
            if incarnation == Some(hello.client_incarnation) {
                self.client_gone_since = None;
            } else {
                self.client_gone_since.get_or_insert(now);
            }
        }
    }

    fn op_failed(&mut self, what: &str, status: Status, now: Instant) {
        if !is_peer_failure(status) {
            fail(format!("server {what} on {:?} failed with {status:?}", self.hello));
        }
        self.op_error.get_or_insert((status, now));
        self.op_errors.push(status);
    }

    fn usable(&self) -> bool {
        self.failed.is_none() && self.op_error.is_none()
    }
}

impl Peer {
    fn post_tag_recv(&mut self, conn: &mut ServerConn, buf: Vec<u8>) {
        let hello = conn.hello.expect("posted after the hello");
        let tag = tag_of(hello.slot, hello.nonce, conn.next[TAG]);
        match self.worker.tag_recv(buf, tag, u64::MAX, RequestParams::default()) {
            Ok(request) => conn.tag_recv = Some(request),
            Err(status) => fail(format!("tag_recv: {status:?} {:?}", zcx::last_error_detail())),
        }
    }

    fn post_stream_recv(conn: &mut ServerConn, buf: Vec<u8>, now: Instant) {
        match conn.ep.stream_recv(buf, false, RequestParams::default()) {
            Ok(request) => conn.stream_recv = Some(request),
            Err(status) => conn.op_failed("stream_recv", status, now),
        }
    }

    pub(crate) fn on_hello(&mut self, conn: Option<u64>, header: &[u8]) {
        let Some(id) = conn else { fail("a hello without a reply endpoint".into()) };
        let Some(mut conn) = self.servers.remove(&id) else { return };
        if conn.usable() {
            self.accept_hello(&mut conn, header);
        }
        self.servers.insert(id, conn);
    }

    fn accept_hello(&mut self, conn: &mut ServerConn, header: &[u8]) {
        let now = Instant::now();
        let Some((client, client_incarnation, nonce)) = Hello::decode_request(header) else {
            fail(format!("malformed hello {header:02x?}"))
        };
        if let Some(earlier) = conn.hello {
            fail(format!("a second hello on one connection: {earlier:?}, then nonce {nonce}"));
        }
        let base = self.data.address() as u64;
        let counters_len = (self.slots.len() * SLOT_COUNTERS) as u64;
        let mut reply = HelloReply {
            server: self.args.id as u8,
            accepted: false,
            slot: 0,
            server_incarnation: self.args.incarnation,
            nonce,
            data_addr: 0,
            counter_addr: 0,
        };
        if let Some(slot) = self.slots.take(client, now) {
            let counter = (self.data.address() as usize + usize::from(slot) * SLOT_COUNTERS) as *mut u64;
            // SAFETY: the slot's counter words lie inside the data region, 8-byte aligned (the
            // region is page aligned and SLOT_COUNTERS a multiple of 8), mapped while `self.data`
            // lives. The slot was free past its quarantine, so no client accesses it now; peers
            // access the words only atomically.
            unsafe {
                AtomicU64::from_ptr(counter).store(0, Ordering::SeqCst);
                AtomicU32::from_ptr(counter.add(1).cast::<u32>()).store(0, Ordering::SeqCst);
            }
            reply.accepted = true;
            reply.slot = slot;
            reply.counter_addr = base + (usize::from(slot) * SLOT_COUNTERS) as u64;
            reply.data_addr = base + counters_len + (usize::from(slot) * MAX_RMA) as u64;
            conn.hello = Some(Hello { client, client_incarnation, nonce, slot });
            self.post_tag_recv(conn, vec![0u8; MAX_MSG]);
            Self::post_stream_recv(conn, vec![0u8; 64 << 10], now);
            self.count("conn.hello", 1);
        } else {
            self.count("conn.busy", 1);
        }
        let params = AmSendParams { proto: AmProto::Eager, ..AmSendParams::default() };
        match conn.ep.am_send(AM_HELLO_REPLY, &reply.encode(), self.data_key.clone(), params) {
            // An eager send that did not complete at once still completes; nothing to check.
            Ok(request) => drop(request),
            Err(status) => conn.op_failed("hello reply", status, now),
        }
    }

    pub(crate) fn on_server_failed(&mut self, id: u64, status: Status) {
        let Some(conn) = self.servers.get_mut(&id) else {
            fail(format!("error handler of unknown server endpoint {id}: {status:?}"))
        };
        if let Some((first, _)) = conn.failed {
            fail(format!("error handler ran twice on {:?}: {first:?}, then {status:?}", conn.hello));
        }
        conn.failed = Some((status, Instant::now()));
        let anonymous = conn.hello.is_none();
        self.count(&format!("epfail.server.{status:?}"), 1);
        if anonymous {
            self.count("conn.anonymous_failed", 1);
        }
    }

    /// An active message's header and data (checked in the handler when eager, or received).
    pub(crate) fn on_am(&mut self, id: Option<u64>, header: Result<Header, String>, data: AmData) {
        let Some(id) = id else { fail("an active message without a reply endpoint".into()) };
        let now = Instant::now();
        let Some(conn) = self.servers.get_mut(&id) else { return };
        if !conn.usable() {
            return;
        }
        let header = header.unwrap_or_else(|e| fail(format!("active message: {e}")));
        let Some(hello) = conn.hello else { fail(format!("an active message before the hello: {header:?}")) };
        if header.kind != Kind::Am || header.slot != hello.slot || header.nonce != hello.nonce {
            fail(format!("active message {header:?} on the connection of {hello:?}"));
        }
        if header.seq != conn.next[AM] {
            fail(format!("active message seq {} where {} was due: {header:?}", header.seq, conn.next[AM]));
        }
        conn.next[AM] += 1;
        match data {
            AmData::Eager(Ok(())) => {
                conn.checked[AM] += 1;
                self.count("checked.am", 1);
                self.count("checked.am_eager", 1);
                self.count("checked.bytes", header.len);
            }
            AmData::Eager(Err(why)) => fail(why),
            AmData::Rndv(Ok(request)) => conn.am_rndv.push((header, request)),
            AmData::Rndv(Err(status)) => conn.op_failed("AM rendezvous receive", status, now),
        }
    }

    /// Checks what arrived; returns true when anything moved.
    pub(crate) fn poll_servers(&mut self, now: Instant) -> bool {
        let mut servers = std::mem::take(&mut self.servers);
        let mut busy = false;
        for conn in servers.values_mut() {
            busy |= self.poll_server(conn, now);
        }
        servers.retain(|_, conn| !conn.finished);
        self.servers = servers;
        busy
    }

    fn poll_server(&mut self, conn: &mut ServerConn, now: Instant) -> bool {
        let mut busy = false;
        if let Some(request) = conn.tag_recv.take() {
            match poll(request) {
                Err(request) => conn.tag_recv = Some(request),
                Ok(Ok(done)) => {
                    busy = true;
                    let buf = self.check_tag(conn, done);
                    if conn.usable() {
                        self.post_tag_recv(conn, buf);
                    }
                }
                Ok(Err(status)) => conn.op_failed("tag receive", status, now),
            }
        }
        if let Some(request) = conn.stream_recv.take() {
            match poll(request) {
                Err(request) => conn.stream_recv = Some(request),
                Ok(Ok(done)) => {
                    busy = true;
                    self.take_stream(conn, &done.buf[..done.info.length]);
                    if conn.usable() {
                        Self::post_stream_recv(conn, done.buf, now);
                    }
                }
                Ok(Err(status)) => conn.op_failed("stream receive", status, now),
            }
        }
        let mut i = 0;
        while i < conn.am_rndv.len() {
            if !conn.am_rndv[i].1.is_done() {
                i += 1;
                continue;
            }
            busy = true;
            let (header, request) = conn.am_rndv.swap_remove(i);
            match poll(request) {
                Ok(Ok(done)) => {
                    if let Err(why) = header.check_am_data(&done.buf[..done.info.length]) {
                        fail(why);
                    }
                    conn.checked[AM] += 1;
                    self.count("checked.am", 1);
                    self.count("checked.am_rndv", 1);
                    self.count("checked.bytes", header.len);
                }
                Ok(Err(status)) => conn.op_failed("AM rendezvous receive", status, now),
                Err(_) => unreachable!("is_done said so"),
            }
        }
        if conn.usable() && conn.checked != conn.credited {
            let hello = conn.hello.expect("checked messages come after the hello");
            let credit = Credit { nonce: hello.nonce, slot: hello.slot, checked: conn.checked };
            let params = AmSendParams { proto: AmProto::Eager, ..AmSendParams::default() };
            match conn.ep.am_send(AM_CREDIT, &credit.encode(), Vec::new(), params) {
                Ok(request) => {
                    drop(request);
                    conn.credited = conn.checked;
                }
                Err(status) => conn.op_failed("credit", status, now),
            }
        }
        self.watch_server(conn, now);
        busy
    }

    /// Deadlines: a failed connection's requests must end, an operation error must be followed
    /// by the error handler, a dead client's endpoint must fail, and a connection that never
    /// said hello must not stay forever.
    fn watch_server(&mut self, conn: &mut ServerConn, now: Instant) {
        if let Some((status, since)) = conn.failed {
            if let Some(request) = &conn.tag_recv {
                request.cancel();
            }
            if let Some(request) = &conn.stream_recv {
                request.cancel();
            }
            let running = conn.tag_recv.is_some() || conn.stream_recv.is_some() || !conn.am_rndv.is_empty();
            if running {
                if overdue(since, now) {
                    fail(format!(
                        "requests of {:?} still running {:?} after its endpoint failed with {status:?}",
                        conn.hello,
                        now - since
                    ));
                }
                return;
            }
            if let Some(hello) = conn.hello {
                // Messages of the connection that arrived but were never received stay in the
                // worker's unexpected queue until taken out.
                while let Some(message) =
                    self.worker.tag_probe_remove(tag_of(hello.slot, hello.nonce, 0), CONN_TAG_MASK)
                {
                    drop(message);
                    self.count("drained.tag", 1);
                }
                self.slots.give_back(hello.slot, now);
            }
            // A failed endpoint's close completes at once; the request has nothing to report.
            drop(conn.ep.close(CloseMode::Force));
            for status in std::mem::take(&mut conn.op_errors) {
                self.count(&format!("operr.server.{status:?}"), 1);
            }
            conn.finished = true;
            return;
        }
        if let Some((status, since)) = conn.op_error {
            if overdue(since, now) {
                fail(format!(
                    "an operation of {:?} failed with {status:?}, but the endpoint never failed",
                    conn.hello
                ));
            }
        }
        if let Some(since) = conn.client_gone_since {
            if overdue(since, now) {
                fail(format!(
                    "the endpoint from {:?} did not fail {:?} after that peer died",
                    conn.hello,
                    now - since
                ));
            }
        }
        if conn.hello.is_none() && overdue(conn.accepted, now) {
            fail(format!(
                "an accepted endpoint without a hello lived {:?} without failing",
                now - conn.accepted
            ));
        }
    }

    /// Checks a received tag message and returns its buffer for the next receive.
    fn check_tag(&mut self, conn: &mut ServerConn, done: zcx::Completion<Vec<u8>>) -> Vec<u8> {
        let hello = conn.hello.expect("receives are posted after the hello");
        let seq = conn.next[TAG];
        let header = Header::check_message(&done.buf[..done.info.length])
            .unwrap_or_else(|why| fail(format!("tag message of {hello:?}: {why}")));
        let want = (Kind::Tag, hello.slot, hello.nonce, seq, tag_of(hello.slot, hello.nonce, seq));
        let got = (header.kind, header.slot, header.nonce, header.seq, done.info.sender_tag);
        if want != got {
            fail(format!("tag message {got:?} where {want:?} was due ({hello:?})"));
        }
        conn.next[TAG] += 1;
        conn.checked[TAG] += 1;
        self.count("checked.tag", 1);
        self.count("checked.bytes", header.len);
        done.buf
    }

    /// Appends received stream bytes and checks every message they complete.
    fn take_stream(&mut self, conn: &mut ServerConn, bytes: &[u8]) {
        let hello = conn.hello.expect("receives are posted after the hello");
        conn.stream_bytes.extend_from_slice(bytes);
        let mut at = 0;
        while conn.stream_bytes.len() - at >= HEADER_LEN {
            let header = Header::decode(&conn.stream_bytes[at..]).unwrap_or_else(|why| {
                fail(format!("stream of {hello:?} at message {}: {why}", conn.next[STREAM]))
            });
            let len = header.len as usize;
            if !(HEADER_LEN..=MAX_STREAM_MSG).contains(&len) {
                fail(format!("stream message of {len} bytes: {header:?}"));
            }
            if conn.stream_bytes.len() - at < len {
                break;
            }
            let checked = Header::check_message(&conn.stream_bytes[at..at + len])
                .unwrap_or_else(|why| fail(format!("stream of {hello:?}: {why}")));
            let want = (Kind::Stream, hello.slot, hello.nonce, conn.next[STREAM]);
            if (checked.kind, checked.slot, checked.nonce, checked.seq) != want {
                fail(format!("stream message {checked:?} where {want:?} was due"));
            }
            conn.next[STREAM] += 1;
            conn.checked[STREAM] += 1;
            self.count("checked.stream", 1);
            self.count("checked.bytes", header.len);
            at += len;
        }
        conn.stream_bytes.drain(..at);
    }
}
