//! Two engines joined by an in-memory network, in the manner of quinn-proto's test `Pair`.
//!
//! The network moves each side's transmits as frames to the other side, in order, and answers
//! borrowed payloads with `send_done` (at once, or later when told to hold them). It can be a
//! native-RMA network, executing RMA requests against the peer side's remote-access table at
//! once or later; and it can fail the link at a chosen step: after N delivered frames, or when a
//! frame of a chosen kind is about to be delivered. No socket, shared memory or thread is used.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use zcx_dataplane::access::{PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_dataplane::proto::rma_exec;
use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::{RegionEntry, RemoteAccessTable};

use crate::{
    AmDelivery, BulkMode, Completion, EndpointId, Engine, EngineConfig, Event, LinkCaps, LinkId, OpId,
    OpInfo, Payload, RecvBuffer, RemoteKey, RmaKind, RmaRequest, SendBuffer, Start, Status,
};

/// The link both engines know the connection by.
pub const LINK: LinkId = LinkId(7);
/// Messages of this many bytes or more go by rendezvous in the tests.
pub const RNDV: usize = 256;
/// Frames are at most this long, so a rendezvous takes several fragments.
pub const MAX_FRAME: usize = 1024;

/// The network's shape.
#[derive(Clone, Copy, Debug)]
pub struct Net {
    /// The transport executes RMA itself (put, get, atomics) and large payloads are pulled by
    /// the receiver.
    pub native: bool,
    /// Native RMA requests complete only when the test calls [`Pair::finish_rma`].
    pub rma_later: bool,
    /// Borrowed payloads come back only when the test calls [`Pair::return_payloads`].
    pub payloads_later: bool,
    /// Data fragments are placed straight into receive buffers.
    pub placed: bool,
    /// The transport reports a dead peer itself (`LinkCaps::peer_watched`).
    pub peer_watched: bool,
}

impl Net {
    /// TCP-like: everything emulated, sender push.
    pub fn emulated() -> Net {
        Net { native: false, rma_later: false, payloads_later: false, placed: false, peer_watched: false }
    }

    /// Verbs-like: native RMA, receiver pull.
    pub fn native() -> Net {
        Net { native: true, ..Net::emulated() }
    }

    /// The caps both ends get.
    pub fn caps(&self) -> LinkCaps {
        LinkCaps {
            max_frame: MAX_FRAME,
            rndv_threshold: RNDV,
            native_put: self.native,
            native_get: self.native,
            native_atomics: self.native,
            bulk: if self.native { BulkMode::ReceiverPull } else { BulkMode::SenderPush },
            placed: self.placed,
            max_placed: 0,
            place_streams: self.placed,
            peer_watched: self.peer_watched,
        }
    }
}

/// Memory of one side registered for peers' RMA.
pub struct Region {
    ptr: *mut u64,
    words: usize,
    /// The key a peer uses.
    pub key: RemoteKey,
}

impl Region {
    /// Address of byte `offset`.
    pub fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset as u64
    }

    /// The region's bytes, read now.
    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: `ptr..ptr + words` is this region's live allocation; nothing writes it while
        // the test (single-threaded) reads.
        let words = unsafe { std::slice::from_raw_parts(self.ptr, self.words) };
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Writes `data` at byte `offset` (the test's own setup, before any peer accesses it).
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.words * 8);
        // SAFETY: in bounds of the live allocation; nothing else accesses it meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.cast::<u8>().add(offset), data.len()) }
    }

    /// Word `index`.
    pub fn word(&self, index: usize) -> u64 {
        assert!(index < self.words);
        // SAFETY: in bounds of the live allocation; see `bytes`.
        unsafe { self.ptr.add(index).read() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::into_raw` of a boxed slice of `words` words, freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.words)) });
    }
}

/// The packed key format of this network: region id and access key.
fn pack(region: u64, access_key: [u8; 16]) -> Arc<[u8]> {
    let mut packed = region.to_le_bytes().to_vec();
    packed.extend_from_slice(&access_key);
    packed.into()
}

fn unpack(packed: &[u8]) -> Option<(u64, [u8; 16])> {
    let region = u64::from_le_bytes(packed.get(..8)?.try_into().ok()?);
    let key = packed.get(8..24)?.try_into().ok()?;
    Some((region, key))
}

/// A hook the test runs when its side reports an endpoint error (an error handler).
pub type ErrorHook = Box<dyn FnMut(&mut Engine, EndpointId, Status)>;

/// One engine with what it reported.
pub struct Side {
    /// The engine.
    pub engine: Engine,
    /// Its remote-access table (regions peers may touch).
    pub table: Arc<RemoteAccessTable>,
    /// Its endpoint to the other side.
    pub ep: EndpointId,
    completions: HashMap<OpId, Completion>,
    /// Completions in the order they came.
    pub order: Vec<OpId>,
    /// Endpoint errors reported.
    pub errors: Vec<(EndpointId, Status)>,
    /// Active messages delivered.
    pub ams: Vec<AmDelivery>,
    /// Links the engine asked to close.
    pub closed_links: Vec<(LinkId, bool)>,
    /// Handshake frames it handed over.
    pub handshakes: usize,
    /// Runs on each endpoint error, like an API error handler.
    pub on_error: Option<ErrorHook>,
    regions: Vec<Region>,
    next_region: u64,
    done_at_once: u64,
}

impl Side {
    fn new(net: &Net, config: EngineConfig, connecting: bool) -> Side {
        let table = Arc::new(RemoteAccessTable::new());
        let mut engine = Engine::new(config, table.clone());
        let ep = engine.add_endpoint(LINK, net.caps(), connecting, true);
        Side {
            engine,
            table,
            ep,
            completions: HashMap::new(),
            order: Vec::new(),
            errors: Vec::new(),
            ams: Vec::new(),
            closed_links: Vec::new(),
            handshakes: 0,
            on_error: None,
            regions: Vec::new(),
            next_region: 1,
            done_at_once: 0,
        }
    }

    /// Registers `words` zeroed 8-byte words for peers with protection `prot`; returns its index.
    pub fn register(&mut self, words: usize, prot: u32) -> usize {
        let ptr = Box::into_raw(vec![0u64; words].into_boxed_slice()).cast::<u64>();
        let id = self.next_region;
        self.next_region += 1;
        let access_key = [id as u8 ^ 0x5A; 16];
        let entry = RegionEntry {
            base: ptr.expose_provenance() as u64,
            length: (words * 8) as u64,
            prot,
            access_key,
            shm: None,
        };
        // SAFETY: the region is this side's allocation, freed only when the side (and with it
        // the table's users) is dropped; the table is dropped with the side too.
        unsafe { self.table.insert(id, entry) };
        let key = RemoteKey { region: id, access_key, packed: Some(pack(id, access_key)) };
        self.regions.push(Region { ptr, words, key });
        self.regions.len() - 1
    }

    /// Registers `words` read-write words.
    pub fn register_rw(&mut self, words: usize) -> usize {
        self.register(words, PROT_REMOTE_READ | PROT_REMOTE_WRITE)
    }

    /// Region `index`.
    pub fn region(&self, index: usize) -> &Region {
        &self.regions[index]
    }

    /// A send buffer over `data`, with a packed key of a region registered around it so a
    /// receiver-pull peer can read it.
    pub fn keyed(&mut self, data: &[u8]) -> SendBuffer {
        let id = self.next_region;
        self.next_region += 1;
        let access_key = [id as u8 ^ 0xA5; 16];
        let entry = RegionEntry {
            base: data.as_ptr().expose_provenance() as u64,
            length: data.len() as u64,
            prot: PROT_REMOTE_READ,
            access_key,
            shm: None,
        };
        // SAFETY: the tests keep `data` alive and unchanged until the send completes, and remove
        // nothing; the table is only used while they do.
        unsafe { self.table.insert(id, entry) };
        send_buf(data).with_key(pack(id, access_key))
    }

    /// The id to check a send's completion under: its own, or for a send done at once (an eager
    /// one), a fresh id recorded as completed with that status and info.
    pub fn track(&mut self, start: Start) -> OpId {
        match start {
            Start::Pending(op) => op,
            Start::Done(status, info) => {
                self.done_at_once += 1;
                let op = OpId::from_raw(u64::MAX - self.done_at_once);
                self.completions.insert(op, Completion { op, status, info, cookie: None });
                self.order.push(op);
                op
            }
        }
    }

    /// The completion of `op`, if it came.
    pub fn completion(&self, op: OpId) -> Option<Completion> {
        self.completions.get(&op).copied()
    }

    /// The status `op` completed with; panics if it did not complete.
    pub fn status(&self, op: OpId) -> Status {
        self.completion(op).unwrap_or_else(|| panic!("{op} did not complete")).status
    }

    /// The info `op` completed with; panics if it did not complete.
    pub fn info(&self, op: OpId) -> OpInfo {
        self.completion(op).unwrap_or_else(|| panic!("{op} did not complete")).info
    }

    /// Whether `op` completed.
    pub fn done(&self, op: OpId) -> bool {
        self.completions.contains_key(&op)
    }

    fn record(&mut self, event: Event) {
        match event {
            Event::Completion(completion) => {
                let previous = self.completions.insert(completion.op, completion);
                assert!(previous.is_none(), "{} completed twice", completion.op);
                self.order.push(completion.op);
            }
            Event::EndpointError { ep, status } => {
                self.errors.push((ep, status));
                if let Some(hook) = self.on_error.as_mut() {
                    hook(&mut self.engine, ep, status);
                }
            }
            Event::Am(delivery) => self.ams.push(*delivery),
            Event::Handshake { .. } => self.handshakes += 1,
            Event::EndpointDown { .. } => {}
            Event::CloseLink { link, force } => self.closed_links.push((link, force)),
            Event::Extension(_) => {}
        }
    }
}

/// A send buffer over `data`, which the test keeps alive and unchanged until the send completes.
pub fn send_buf(data: &[u8]) -> SendBuffer {
    // SAFETY: every test keeps `data` alive and unmodified until the operation completes or the
    // pair is dropped.
    unsafe { SendBuffer::new(data.as_ptr(), data.len()) }
}

/// A receive buffer over `data`, which the test does not touch until the receive completes.
pub fn recv_buf(data: &mut [u8]) -> RecvBuffer {
    // SAFETY: every test leaves `data` alone until the operation completes or the pair is dropped.
    unsafe { RecvBuffer::new(data.as_mut_ptr(), data.len()) }
}

/// Which side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// The first engine.
    A,
    /// The second engine.
    B,
}

impl Who {
    fn other(self) -> Who {
        match self {
            Who::A => Who::B,
            Who::B => Who::A,
        }
    }
}

/// A frame on the wire.
struct Frame {
    from: Who,
    bytes: Vec<u8>,
    placed: bool,
}

/// What decides that the link fails.
pub type FailRule = Box<dyn FnMut(Who, &Op) -> bool>;

/// Two engines and the network between them.
pub struct Pair {
    /// The first engine.
    pub a: Side,
    /// The second engine.
    pub b: Side,
    /// The network's shape.
    pub net: Net,
    wire: VecDeque<Frame>,
    held_payloads: Vec<(Who, OpId)>,
    held_rma: Vec<(Who, RmaRequest)>,
    /// Frames delivered so far.
    pub delivered: usize,
    /// Fail the link before delivering frame number N (counted from 0).
    pub fail_after: Option<usize>,
    /// Fail the link before delivering a frame this rule picks.
    pub fail_on: Option<FailRule>,
    /// Every frame delivered, decoded, with its sender.
    pub log: Vec<(Who, Op)>,
    up: bool,
    /// Sides that closed their end (the other one sees the link fail once the wire drains).
    closed_by: Vec<Who>,
    failure_told: bool,
}

impl Pair {
    /// Two ready engines on a network of shape `net`.
    pub fn new(net: Net) -> Pair {
        Pair::with_config(net, EngineConfig::default())
    }

    /// Two ready engines with `config`.
    pub fn with_config(net: Net, config: EngineConfig) -> Pair {
        Pair {
            a: Side::new(&net, config.clone(), false),
            b: Side::new(&net, config, false),
            net,
            wire: VecDeque::new(),
            held_payloads: Vec::new(),
            held_rma: Vec::new(),
            delivered: 0,
            fail_after: None,
            fail_on: None,
            log: Vec::new(),
            up: true,
            closed_by: Vec::new(),
            failure_told: false,
        }
    }

    /// The side `who`.
    pub fn side(&mut self, who: Who) -> &mut Side {
        match who {
            Who::A => &mut self.a,
            Who::B => &mut self.b,
        }
    }

    /// Runs both engines and the network until nothing moves.
    pub fn drive(&mut self) {
        for _ in 0..100_000 {
            let mut moved = self.drain(Who::A);
            moved |= self.drain(Who::B);
            moved |= self.deliver();
            if !moved {
                return;
            }
        }
        panic!("the pair never went quiet");
    }

    /// Sends a transmit a command handed back at once ([`crate::Sent::Now`]) on `from`'s link,
    /// as the caller does before the command returns.
    pub fn send_now(&mut self, from: Who, transmit: crate::Transmit) {
        self.send_now_after(from, transmit, &[]);
    }

    /// [`Pair::send_now`] for an active message's transmit, whose frame carries the user
    /// `header` between the transmit's header and payload.
    pub fn send_now_after(&mut self, from: Who, transmit: crate::Transmit, header: &[u8]) {
        assert!(matches!(transmit.payload, Payload::Inline { .. }), "{transmit:?}");
        let mut bytes = transmit.header.as_bytes().to_vec();
        bytes.extend_from_slice(header);
        // SAFETY: the command that made the transmit has not returned to its user yet.
        bytes.extend_from_slice(unsafe { transmit.payload.bytes() });
        if self.up && !self.closed_by.contains(&from) {
            self.wire.push_back(Frame { from, bytes, placed: transmit.placed });
        }
    }

    /// Puts raw bytes on the wire as if `from` had sent them.
    pub fn inject(&mut self, from: Who, bytes: Vec<u8>) {
        self.wire.push_back(Frame { from, bytes, placed: false });
    }

    /// Fails the link now, as a transport would: frames in flight are lost, held payloads and
    /// RMA requests come back with an error, and both engines hear of it.
    pub fn fail_link(&mut self) {
        if !self.up && self.failure_told {
            return;
        }
        self.up = false;
        self.failure_told = true;
        self.wire.clear();
        for (who, op) in std::mem::take(&mut self.held_payloads) {
            self.side(who).engine.send_done(op, Err(Status::ConnectionReset));
        }
        for (who, request) in std::mem::take(&mut self.held_rma) {
            self.side(who).engine.rma_done(request.token, Status::ConnectionReset, 0);
        }
        self.a.engine.link_failed(LINK, Status::ConnectionReset);
        self.b.engine.link_failed(LINK, Status::ConnectionReset);
    }

    /// Hands back every held borrowed payload.
    pub fn return_payloads(&mut self) {
        for (who, op) in std::mem::take(&mut self.held_payloads) {
            self.side(who).engine.send_done(op, Ok(()));
        }
    }

    /// Number of native RMA requests being held.
    pub fn held_rma(&self) -> usize {
        self.held_rma.len()
    }

    /// Where the held native RMA requests write or read locally, oldest first.
    pub fn held_rma_locals(&self) -> Vec<*mut u8> {
        self.held_rma.iter().map(|(_, request)| request.local).collect()
    }

    /// Executes the held native RMA requests, oldest first.
    pub fn finish_rma(&mut self) {
        for (who, request) in std::mem::take(&mut self.held_rma) {
            let (status, value) = self.execute(who, &request);
            self.side(who).engine.rma_done(request.token, status, value);
        }
    }

    /// Closes (with flush) and releases both endpoints, drives, and asserts both engines hold
    /// nothing.
    pub fn assert_no_leaks(&mut self) {
        let (a, b) = (self.a.ep, self.b.ep);
        for who in [Who::A, Who::B] {
            let side = self.side(who);
            if matches!(side.engine.phase(side.ep), Some(crate::Phase::Ready | crate::Phase::Connecting)) {
                let ep = side.ep;
                side.engine.close(ep, crate::CloseMode::Flush).expect("close");
            }
            self.drive();
        }
        self.a.engine.release_endpoint(a);
        self.b.engine.release_endpoint(b);
        self.drive();
        assert!(self.a.engine.table_counts().is_empty(), "A holds {:?}", self.a.engine.table_counts());
        assert!(self.b.engine.table_counts().is_empty(), "B holds {:?}", self.b.engine.table_counts());
    }

    /// Runs `who`'s engine alone: its frames, RMA requests and events are taken (the frames put
    /// on the wire), and nothing is delivered to either side. Returns whether anything moved.
    pub fn drain(&mut self, who: Who) -> bool {
        let mut moved = false;
        loop {
            let side = self.side(who);
            let Some(transmit) = side.engine.poll_transmit() else { break };
            moved = true;
            let mut bytes = transmit.header.as_bytes().to_vec();
            // SAFETY: the payload was not reported done yet.
            bytes.extend_from_slice(unsafe { transmit.payload.bytes() });
            let link_usable = self.up && !self.closed_by.contains(&who);
            if let Payload::Borrowed { op, .. } = transmit.payload {
                if !link_usable {
                    self.side(who).engine.send_done(op, Err(Status::ConnectionReset));
                } else if self.net.payloads_later {
                    self.held_payloads.push((who, op));
                } else {
                    self.side(who).engine.send_done(op, Ok(()));
                }
            }
            if link_usable {
                self.wire.push_back(Frame { from: who, bytes, placed: transmit.placed });
            }
        }
        while let Some(request) = self.side(who).engine.poll_rma() {
            moved = true;
            assert!(self.net.native, "an emulated network got an RMA request");
            if !self.up {
                self.side(who).engine.rma_done(request.token, Status::ConnectionReset, 0);
            } else if self.net.rma_later {
                self.held_rma.push((who, request));
            } else {
                let (status, value) = self.execute(who, &request);
                self.side(who).engine.rma_done(request.token, status, value);
            }
        }
        while let Some(event) = self.side(who).engine.poll_event() {
            moved = true;
            if let Event::CloseLink { .. } = event {
                if !self.closed_by.contains(&who) {
                    self.closed_by.push(who);
                }
            }
            self.side(who).record(event);
        }
        if self.wire.is_empty() && !self.closed_by.is_empty() && !self.failure_told {
            // A closed link: once what was sent arrived, the peer sees it fail.
            self.failure_told = true;
            self.up = false;
            for (who, request) in std::mem::take(&mut self.held_rma) {
                self.side(who).engine.rma_done(request.token, Status::ConnectionReset, 0);
            }
            for (who, op) in std::mem::take(&mut self.held_payloads) {
                self.side(who).engine.send_done(op, Err(Status::ConnectionReset));
            }
            for who in [Who::A, Who::B] {
                if !self.closed_by.contains(&who) {
                    self.side(who).engine.link_failed(LINK, Status::ConnectionReset);
                }
            }
            moved = true;
        }
        moved
    }

    /// Delivers every frame on the wire.
    fn deliver(&mut self) -> bool {
        let mut moved = false;
        while let Some(frame) = self.wire.pop_front() {
            moved = true;
            let op = Op::decode(&frame.bytes).ok().map(|(op, _)| op);
            let fail_now = self.fail_after == Some(self.delivered)
                || match (&mut self.fail_on, op) {
                    (Some(rule), Some(op)) => rule(frame.from, &op),
                    _ => false,
                };
            if fail_now {
                self.fail_after = None;
                self.fail_on = None;
                self.fail_link();
                return true;
            }
            self.delivered += 1;
            if let Some(op) = op {
                self.log.push((frame.from, op));
            }
            let to = frame.from.other();
            let placed = frame.placed && self.net.placed;
            let engine = &mut self.side(to).engine;
            match (placed, Op::decode(&frame.bytes)) {
                (true, Ok((_, payload))) => {
                    let header_len = frame.bytes.len() - payload.len();
                    let payload = payload.to_vec();
                    if let Some(placement) =
                        engine.handle_placed(LINK, &frame.bytes[..header_len], payload.len())
                    {
                        // SAFETY: the engine checked `dest..dest + len` lies inside the receiving
                        // operation's buffer, which stays valid until `place_done`.
                        unsafe {
                            std::ptr::copy_nonoverlapping(payload.as_ptr(), placement.dest, payload.len())
                        };
                        engine.place_done(placement.token, Ok(()));
                    }
                }
                _ => engine.handle_frame(LINK, &frame.bytes),
            }
        }
        moved
    }

    /// Executes a native RMA request of side `who` against the other side's table.
    fn execute(&mut self, who: Who, request: &RmaRequest) -> (Status, u64) {
        let table = self.side(who.other()).table.clone();
        let Some((region, key)) = unpack(&request.remote_key) else { return (Status::InvalidParam, 0) };
        let result = match request.kind {
            RmaKind::Put => {
                // SAFETY: the engine lends `local..local + len` until `rma_done`.
                let data = unsafe { std::slice::from_raw_parts(request.local.cast_const(), request.len) };
                rma_exec::put(&table, region, &key, request.remote_addr, data).map(|()| 0)
            }
            RmaKind::Get => {
                // SAFETY: as above, and the engine lends it for writing.
                let out = unsafe { std::slice::from_raw_parts_mut(request.local, request.len) };
                rma_exec::get(&table, region, &key, request.remote_addr, out).map(|()| 0)
            }
            RmaKind::Atomic { op, size, value, compare } => {
                rma_exec::atomic(&table, region, &key, request.remote_addr, op, size, value, compare)
            }
        };
        match result {
            Ok(value) => (Status::Ok, value),
            Err(err) => {
                (Status::from_code(i32::from(rma_exec::status_of(err))).unwrap_or(Status::IoError), 0)
            }
        }
    }
}

/// The op id of a start that must be pending.
pub fn pending(start: Start) -> OpId {
    match start {
        Start::Pending(op) => op,
        Start::Done(status, info) => panic!("completed at once: {status:?} {info:?}"),
    }
}

/// Bytes `0, 1, 2, ...` (mod 251), `len` of them.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i % 251) as u8).wrapping_add(seed)).collect()
}
