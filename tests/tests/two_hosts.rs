//! zcx between two "hosts": a server process in one network namespace and a client process in
//! another, joined by a veth pair with an address on each end. Every operation kind crosses the
//! veth and is checked byte for byte; connection failures and a link that goes down mid-traffic
//! reach the error handler.
//!
//! Each test runs three copies of this binary: the parent builds the namespaces ([`TwoHosts`]) and
//! starts the same test as `server` in host A and as `client` in host B, passing addresses through
//! the environment and reading the children's `@key=value` answers. Without root, CAP_NET_ADMIN or
//! iproute2 a test prints `skipped: <reason>` and returns.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcx::{
    AmProto, AmSendParams, AtomicOp, AtomicSize, CloseMode, Context, Endpoint, EpParams, Features, Listener,
    ListenerParams, MemMapParams, Prot, Request, RequestParams, Status, TagSendParams, Worker, WorkerParams,
};
use zcx_control::{TransportAddress, WorkerAddressWire};
use zcx_tests::netns::{answer, child_role, Host, TwoHosts};

/// The listener address (server) or the server's listener (client).
const ADDR_VAR: &str = "TWO_HOSTS_ADDR";
/// The process's own veth address.
const IP_VAR: &str = "TWO_HOSTS_IP";
/// The peer's worker address, hex.
const WORKER_VAR: &str = "TWO_HOSTS_WORKER";
/// How long a parent waits for one answer or for a child to end.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a child waits for one operation.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// The namespaces, or `None` after printing why this machine cannot make them.
fn hosts_or_skip() -> Option<TwoHosts> {
    match TwoHosts::new() {
        Ok(hosts) => Some(hosts),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

/// Runs the child side when this process is one; true if it was.
fn run_role(server: fn(), client: fn()) -> bool {
    match child_role().as_deref() {
        Some("server") => server(),
        Some("client") => client(),
        Some(other) => panic!("unknown role {other}"),
        None => return false,
    }
    true
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

fn context() -> Context {
    Context::with_features(
        Features::TAG | Features::RMA | Features::AM | Features::STREAM | Features::AMO32 | Features::AMO64,
    )
    .expect("context")
}

fn worker() -> Worker {
    context().create_worker(&WorkerParams::default()).expect("worker")
}

/// Progresses `w` once; sleeps on its event fd when there was nothing to do.
fn step(w: &Worker, idle: &mut u32) {
    if w.progress() > 0 {
        *idle = 0;
        return;
    }
    *idle += 1;
    if *idle < 64 {
        std::thread::yield_now();
    } else {
        w.wait().expect("worker wait");
    }
}

/// Progresses `w` until `done`, failing after [`OP_TIMEOUT`].
fn progress_until(w: &Worker, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut idle = 0;
    while !done() {
        step(w, &mut idle);
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// The result of `request`, progressing `w` meanwhile.
fn wait<B: Send + 'static>(w: &Worker, request: Request<B>, what: &str) -> zcx::Result<zcx::Completion<B>> {
    let mut request = request;
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut idle = 0;
    loop {
        request = match request.try_take() {
            Ok(result) => return result,
            Err(r) => r,
        };
        step(w, &mut idle);
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// As [`wait`], panicking on failure.
fn done<B: Send + 'static>(w: &Worker, request: Request<B>, what: &str) -> zcx::Completion<B> {
    wait(w, request, what).unwrap_or_else(|s| panic!("{what} failed: {s:?}"))
}

/// Bytes `offset..offset + len` of the deterministic stream `seed` (position-dependent, so any
/// sub-range of a region filled with it can be checked).
fn pattern(seed: u64, offset: usize, len: usize) -> Vec<u8> {
    let first = offset / 8;
    let words = (offset + len).div_ceil(8) - first;
    let mut out = Vec::with_capacity(words * 8);
    for i in first..first + words {
        let mut x = (i as u64 ^ seed.rotate_left(32)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(x ^ (x >> 31)).to_le_bytes());
    }
    let skip = offset - first * 8;
    out.drain(..skip);
    out.truncate(len);
    out
}

/// Panics naming the first differing byte unless `got` is `pattern(seed, offset, len)`.
fn check(what: &str, got: &[u8], seed: u64, offset: usize) {
    let want = pattern(seed, offset, got.len());
    if got != want.as_slice() {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        panic!("{what}: {} bytes differ from byte {at} on", got.len());
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn show(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "none".into(), |a| a.to_string())
}

/// An endpoint slot the listener's handler fills.
type Accepted = Arc<Mutex<Option<Endpoint>>>;

/// An endpoint's failure and when the error handler saw it.
type Failure = Arc<Mutex<Option<(Status, Instant)>>>;

/// Listens on this host's veth address (port 0) and accepts one client, with a peer error handler
/// that records the failure in `failed`.
fn listen(w: &Worker, failed: Option<Failure>) -> (Listener, Accepted) {
    let ip: IpAddr = env(IP_VAR).parse().expect("own ip");
    let accepted: Accepted = Arc::default();
    let slot = Arc::clone(&accepted);
    let server = w.clone();
    let listener = w
        .listen(ListenerParams {
            sockaddr: Some(SocketAddr::new(ip, 0)),
            conn_handler: Some(Box::new(move |request| {
                let mut params = EpParams::conn_request(request);
                if let Some(failed) = &failed {
                    let failed = Arc::clone(failed);
                    params = params.with_err_handler(move |_, status| {
                        failed.lock().unwrap().get_or_insert((status, Instant::now()));
                    });
                }
                *slot.lock().unwrap() = Some(server.create_endpoint(params).expect("accept"));
            })),
            ..Default::default()
        })
        .expect("listen");
    answer("listening", listener.sockaddr());
    (listener, accepted)
}

fn accept(w: &Worker, accepted: &Accepted) -> Endpoint {
    progress_until(w, "a connection", || accepted.lock().unwrap().is_some());
    let ep = accepted.lock().unwrap().take().unwrap();
    ep
}

/// Connects to the server's listener and waits until the endpoint is up.
fn connect(w: &Worker) -> Endpoint {
    let server: SocketAddr = env(ADDR_VAR).parse().expect("server address");
    let ep = w.create_endpoint(EpParams::sockaddr(server)).expect("create endpoint");
    progress_until(w, "connected", || match ep.query().unwrap().status {
        Status::Ok => true,
        Status::InProgress => false,
        other => panic!("connect to {server} failed: {other:?}"),
    });
    ep
}

fn recv_tag(w: &Worker, len: usize, tag: u64, what: &str) -> Vec<u8> {
    let got = done(w, w.tag_recv(vec![0u8; len], tag, u64::MAX, RequestParams::default()).unwrap(), what);
    let mut buf = got.buf;
    buf.truncate(got.info.length);
    buf
}

fn send_tag(w: &Worker, ep: &Endpoint, data: Vec<u8>, tag: u64, what: &str) {
    done(w, ep.tag_send(data, tag, TagSendParams::default()).unwrap(), what);
}

fn close(w: &Worker, ep: Endpoint) {
    done(w, ep.close(CloseMode::Flush).unwrap(), "close");
}

/// Starts the server in A, then the client in B pointed at its listener; both must end well.
fn run_pair(
    hosts: &TwoHosts,
    test: &str,
) -> (std::collections::HashMap<String, String>, std::collections::HashMap<String, String>) {
    let started = Instant::now();
    let mut server = hosts.spawn(Host::A, test, "server", &[(IP_VAR, hosts.ip(Host::A).to_string())]);
    let listening = server.expect("listening", ANSWER_TIMEOUT);
    let client = hosts.spawn(
        Host::B,
        test,
        "client",
        &[(IP_VAR, hosts.ip(Host::B).to_string()), (ADDR_VAR, listening.clone())],
    );
    let client = client.finish(ANSWER_TIMEOUT);
    let server = server.finish(ANSWER_TIMEOUT);
    println!("{test}: {:?}", started.elapsed());
    (server, client)
}

// ---------------------------------------------------------------------------------------------
// Connect by sockaddr, query, tag messages.

const TAG_SIZES: &[usize] = &[0, 1, 8, 4096, 65535, 65536, 1 << 20, 16 << 20, 64 << 20];

#[test]
fn sockaddr_connect_query_and_tag_sizes() {
    if run_role(tag_server, tag_client) {
        return;
    }
    let Some(hosts) = hosts_or_skip() else { return };
    let (server, client) = run_pair(&hosts, "sockaddr_connect_query_and_tag_sizes");
    let listening: SocketAddr = server["listening"].parse().unwrap();
    assert_eq!(listening.ip(), hosts.ip(Host::A));
    // The client sees the veth addresses at both ends, and the server sees the same pair reversed.
    assert_eq!(client["remote"], listening.to_string());
    let client_local: SocketAddr = client["local"].parse().expect("client local sockaddr");
    assert_eq!(client_local.ip(), hosts.ip(Host::B));
    assert_eq!(server["remote"], client["local"]);
    assert_eq!(server["local"], listening.to_string());
    assert_eq!(server["received"], TAG_SIZES.len().to_string());
    assert_eq!(client["received"], TAG_SIZES.len().to_string());
}

fn tag_server() {
    let w = worker();
    let (_listener, accepted) = listen(&w, None);
    let ep = accept(&w, &accepted);
    let attr = ep.query().unwrap();
    answer("local", show(attr.local_sockaddr));
    answer("remote", show(attr.remote_sockaddr));
    for (i, &len) in TAG_SIZES.iter().enumerate() {
        let got = done(
            &w,
            w.tag_recv(vec![0u8; len], i as u64, u64::MAX, RequestParams::default()).unwrap(),
            "recv",
        );
        assert_eq!(got.info.length, len);
        assert_eq!(got.info.sender_tag, i as u64);
        check(&format!("tag message of {len} bytes at the server"), &got.buf, i as u64, 0);
    }
    answer("received", TAG_SIZES.len());
    for (i, &len) in TAG_SIZES.iter().enumerate() {
        let tag = 100 + i as u64;
        send_tag(&w, &ep, pattern(tag, 0, len), tag, "send back");
    }
    assert_eq!(recv_tag(&w, 16, 999, "bye"), b"bye");
}

fn tag_client() {
    let w = worker();
    let ep = connect(&w);
    let attr = ep.query().unwrap();
    answer("local", show(attr.local_sockaddr));
    answer("remote", show(attr.remote_sockaddr));
    for (i, &len) in TAG_SIZES.iter().enumerate() {
        send_tag(&w, &ep, pattern(i as u64, 0, len), i as u64, "send");
    }
    for (i, &len) in TAG_SIZES.iter().enumerate() {
        let tag = 100 + i as u64;
        let got =
            done(&w, w.tag_recv(vec![0u8; len], tag, u64::MAX, RequestParams::default()).unwrap(), "recv");
        assert_eq!(got.info.length, len);
        check(&format!("tag message of {len} bytes at the client"), &got.buf, tag, 0);
    }
    answer("received", TAG_SIZES.len());
    send_tag(&w, &ep, b"bye".to_vec(), 999, "bye");
    close(&w, ep);
}

// ---------------------------------------------------------------------------------------------
// Stream and active messages.

const STREAM_LEN: usize = 1 << 20;
const AM_EAGER_LEN: usize = 8000;
const AM_RNDV_LEN: usize = 4 << 20;

#[test]
fn stream_and_active_messages() {
    if run_role(stream_am_server, stream_am_client) {
        return;
    }
    let Some(hosts) = hosts_or_skip() else { return };
    let (server, client) = run_pair(&hosts, "stream_and_active_messages");
    assert_eq!(server["stream"], STREAM_LEN.to_string());
    assert_eq!(client["stream"], STREAM_LEN.to_string());
    assert_eq!(server["am_eager"], AM_EAGER_LEN.to_string());
    assert_eq!(server["am_rndv"], AM_RNDV_LEN.to_string());
    assert_eq!(client["acks"], "1");
}

fn am_header() -> Vec<u8> {
    (0..64u8).map(|i| i.wrapping_mul(7) ^ 0x5A).collect()
}

/// What the AM handler saw: header, eager data or a pending rendezvous receive.
enum SeenAm {
    Eager(Vec<u8>, Vec<u8>),
    Rndv(Vec<u8>, Request<Vec<u8>>),
}

fn stream_am_server() {
    let w = worker();
    let seen: Arc<Mutex<Vec<SeenAm>>> = Arc::default();
    let s = Arc::clone(&seen);
    w.set_am_handler(
        3,
        Some(Box::new(move |msg: &mut zcx::AmMessage| {
            let header = msg.header().to_vec();
            if msg.is_rndv() {
                let req = msg.recv_data(vec![0u8; msg.data_len()]).expect("recv_data");
                s.lock().unwrap().push(SeenAm::Rndv(header, req));
            } else {
                let data = msg.data().expect("eager data").to_vec();
                let ep = msg.reply_ep().expect("reply endpoint");
                ep.am_send(4, b"ack", Vec::new(), AmSendParams::default()).expect("ack");
                s.lock().unwrap().push(SeenAm::Eager(header, data));
            }
            Status::Ok
        })),
    );
    let (_listener, accepted) = listen(&w, None);
    let ep = accept(&w, &accepted);

    let got =
        done(&w, ep.stream_recv(vec![0u8; STREAM_LEN], true, RequestParams::default()).unwrap(), "stream");
    assert_eq!(got.info.length, STREAM_LEN);
    check("stream at the server", &got.buf, 1, 0);
    answer("stream", got.info.length);
    done(&w, ep.stream_send(pattern(2, 0, STREAM_LEN), RequestParams::default()).unwrap(), "stream back");

    progress_until(&w, "two active messages", || seen.lock().unwrap().len() == 2);
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    for am in seen {
        match am {
            SeenAm::Eager(header, data) => {
                assert_eq!(header, am_header());
                check("eager AM data", &data, 3, 0);
                answer("am_eager", data.len());
            }
            SeenAm::Rndv(header, req) => {
                assert_eq!(header, am_header());
                let got = done(&w, req, "rendezvous AM data");
                check("rendezvous AM data", &got.buf, 4, 0);
                answer("am_rndv", got.buf.len());
            }
        }
    }
    done(
        &w,
        ep.tag_send(b"done".to_vec(), 1, TagSendParams { sync: true, ..Default::default() }).unwrap(),
        "done",
    );
}

fn stream_am_client() {
    let w = worker();
    let acks = Arc::new(Mutex::new(0));
    let a = Arc::clone(&acks);
    w.set_am_handler(
        4,
        Some(Box::new(move |msg: &mut zcx::AmMessage| {
            assert_eq!(msg.header(), b"ack");
            *a.lock().unwrap() += 1;
            Status::Ok
        })),
    );
    let ep = connect(&w);
    let send = ep.stream_send(pattern(1, 0, STREAM_LEN), RequestParams::default()).unwrap();
    let got =
        done(&w, ep.stream_recv(vec![0u8; STREAM_LEN], true, RequestParams::default()).unwrap(), "stream");
    assert_eq!(got.info.length, STREAM_LEN);
    check("stream at the client", &got.buf, 2, 0);
    answer("stream", got.info.length);
    done(&w, send, "stream send");

    let header = am_header();
    let eager = ep
        .am_send(
            3,
            &header,
            pattern(3, 0, AM_EAGER_LEN),
            AmSendParams { reply: true, proto: AmProto::Eager, ..Default::default() },
        )
        .unwrap();
    let rndv = ep
        .am_send(
            3,
            &header,
            pattern(4, 0, AM_RNDV_LEN),
            AmSendParams { proto: AmProto::Rndv, ..Default::default() },
        )
        .unwrap();
    done(&w, eager, "eager AM");
    done(&w, rndv, "rendezvous AM");
    progress_until(&w, "the ack", || *acks.lock().unwrap() == 1);
    answer("acks", *acks.lock().unwrap());
    assert_eq!(recv_tag(&w, 16, 1, "done"), b"done");
    close(&w, ep);
}

// ---------------------------------------------------------------------------------------------
// Put, get, atomics and flush into a registered region of the server.

const RMA_LEN: usize = 64 << 20;
/// The atomic words live after the bulk area: a u64 at +0, a u32 at +8, a sentinel u32 at +12.
const AMO_OFFSET: usize = RMA_LEN;
const REGION_LEN: usize = RMA_LEN + 4096;
const GET_SEED: u64 = 0xA1;
const WORD64_FINAL: u64 = 0xFFFF_FFFF_0000_0001;
const WORD32_FINAL: u32 = 0x3501_FF00;
const SENTINEL: u32 = 0xA5A5_A5A5;
/// (offset, length, seed) of each put; the server checks each one before the next.
const PUTS: &[(usize, usize, u64)] = &[(0, 8, 0xB1), (4096, 1 << 20, 0xB2), (0, 64 << 20, 0xB3)];
const GETS: &[(usize, usize)] = &[(0, 8), (12_345, 1 << 20), (0, 64 << 20)];

#[test]
fn put_get_atomics_and_flush() {
    if run_role(rma_server, rma_client) {
        return;
    }
    let Some(hosts) = hosts_or_skip() else { return };
    let (server, client) = run_pair(&hosts, "put_get_atomics_and_flush");
    assert_eq!(client["gets"], GETS.len().to_string());
    assert_eq!(server["puts"], PUTS.len().to_string());
    assert_eq!(server["word64"], format!("{WORD64_FINAL:#x}"));
    assert_eq!(server["word32"], format!("{WORD32_FINAL:#x}"));
    assert_eq!(server["sentinel"], format!("{SENTINEL:#x}"));
    assert_eq!(client["atomics"], "14");
    assert_eq!(client["flush"], "ok");
}

fn rma_server() {
    let w = worker();
    let (_listener, accepted) = listen(&w, None);
    let memh = w
        .context()
        .mem_map(
            &MemMapParams::alloc(REGION_LEN)
                .prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE),
        )
        .expect("mem_map");
    let base = memh.address();
    let region = |off: usize, len: usize| {
        assert!(off + len <= REGION_LEN);
        // SAFETY: inside the mapped handle, which lives until the end of this function; the client
        // writes into it only between our checks, and we only read here.
        unsafe { std::slice::from_raw_parts(base.add(off), len) }
    };
    // SAFETY: the handle's REGION_LEN bytes are mapped and nobody else writes them yet.
    unsafe {
        std::ptr::copy_nonoverlapping(pattern(GET_SEED, 0, RMA_LEN).as_ptr(), base, RMA_LEN);
        (base.add(AMO_OFFSET) as *mut u64).write(10);
        (base.add(AMO_OFFSET + 8) as *mut u32).write(0xFFFF_FFF0);
        (base.add(AMO_OFFSET + 12) as *mut u32).write(SENTINEL);
    }
    let ep = accept(&w, &accepted);
    // The rkey travels in a tag message: the region's address, then the packed key.
    let mut msg = (base as u64).to_le_bytes().to_vec();
    msg.extend_from_slice(&memh.rkey_pack().expect("rkey_pack"));
    send_tag(&w, &ep, msg, 1, "rkey");

    for (i, &(off, len, seed)) in PUTS.iter().enumerate() {
        assert_eq!(recv_tag(&w, 64, 2, "put check"), format!("put {i}").into_bytes());
        check(&format!("put of {len} bytes at {off}"), region(off, len), seed, off);
        send_tag(&w, &ep, b"ok".to_vec(), 3, "put ok");
    }
    answer("puts", PUTS.len());
    assert_eq!(recv_tag(&w, 64, 2, "atomics check"), b"atomics");
    // SAFETY: aligned words inside the handle; the client's atomics are done and flushed.
    let (word64, word32, sentinel) = unsafe {
        (
            (base.add(AMO_OFFSET) as *const u64).read_volatile(),
            (base.add(AMO_OFFSET + 8) as *const u32).read_volatile(),
            (base.add(AMO_OFFSET + 12) as *const u32).read_volatile(),
        )
    };
    answer("word64", format!("{word64:#x}"));
    answer("word32", format!("{word32:#x}"));
    answer("sentinel", format!("{sentinel:#x}"));
    done(
        &w,
        ep.tag_send(b"ok".to_vec(), 3, TagSendParams { sync: true, ..Default::default() }).unwrap(),
        "bye",
    );
    drop(memh);
}

fn rma_client() {
    let w = worker();
    let ep = connect(&w);
    let msg = recv_tag(&w, 64 << 10, 1, "rkey");
    let base = u64::from_le_bytes(msg[..8].try_into().unwrap());
    let rkey = ep.rkey_unpack(&msg[8..]).expect("rkey_unpack");

    for &(off, len) in GETS {
        let got = done(
            &w,
            ep.get(vec![0u8; len], base + off as u64, &rkey, RequestParams::default()).unwrap(),
            "get",
        );
        check(&format!("get of {len} bytes at {off}"), &got.buf, GET_SEED, off);
    }
    answer("gets", GETS.len());

    for (i, &(off, len, seed)) in PUTS.iter().enumerate() {
        done(
            &w,
            ep.put(pattern(seed, off, len), base + off as u64, &rkey, RequestParams::default()).unwrap(),
            "put",
        );
        done(&w, ep.flush().unwrap(), "endpoint flush");
        send_tag(&w, &ep, format!("put {i}").into_bytes(), 2, "put check");
        assert_eq!(recv_tag(&w, 64, 3, "put ok"), b"ok");
    }

    let word64 = base + AMO_OFFSET as u64;
    let word32 = word64 + 8;
    let mut count = 0;
    let mut amo = |op, size, value, compare, addr| {
        count += 1;
        done(
            &w,
            ep.atomic(op, size, value, compare, addr, &rkey, RequestParams::default()).unwrap(),
            "atomic",
        )
        .info
        .value
    };
    use AtomicOp::*;
    use AtomicSize::{U32, U64};
    // 64-bit: each result is the previous value.
    assert_eq!(amo(Add, U64, 5, 0, word64), 10);
    assert_eq!(amo(Swap, U64, 100, 0, word64), 15);
    assert_eq!(amo(Cswap, U64, 7, 100, word64), 100);
    assert_eq!(amo(Cswap, U64, 9, 100, word64), 7, "a failed compare stores nothing");
    assert_eq!(amo(And, U64, 0b110, 0, word64), 7);
    assert_eq!(amo(Or, U64, 0b1000, 0, word64), 0b110);
    assert_eq!(amo(Xor, U64, 0b1111, 0, word64), 0b1110);
    assert_eq!(amo(Add, U64, 0xFFFF_FFFF_0000_0000, 0, word64), 1);
    // 32-bit: wraps at 32 bits and leaves the neighbouring word alone.
    assert_eq!(amo(Add, U32, 0x20, 0, word32), 0xFFFF_FFF0);
    assert_eq!(amo(Swap, U32, 0x1234_5678, 0, word32), 0x10);
    assert_eq!(amo(Cswap, U32, 0xCAFE_BABE, 0x1234_5678, word32), 0x1234_5678);
    assert_eq!(amo(Cswap, U32, 1, 0, word32), 0xCAFE_BABE, "a failed compare stores nothing");
    assert_eq!(amo(And, U32, 0xFFFF_0000, 0, word32), 0xCAFE_BABE);
    assert_eq!(amo(Or, U32, 0xFF, 0, word32), 0xCAFE_0000);
    assert_eq!(amo(Xor, U32, 0xFFFF_FFFF, 0, word32), 0xCAFE_00FF);
    answer("atomics", count - 1);
    done(&w, ep.flush().unwrap(), "endpoint flush");
    done(&w, w.flush().unwrap(), "worker flush");
    answer("flush", "ok");
    let words =
        done(&w, ep.get(vec![0u8; 16], word64, &rkey, RequestParams::default()).unwrap(), "get words").buf;
    assert_eq!(u64::from_le_bytes(words[..8].try_into().unwrap()), WORD64_FINAL);
    assert_eq!(u32::from_le_bytes(words[8..12].try_into().unwrap()), WORD32_FINAL);
    assert_eq!(u32::from_le_bytes(words[12..].try_into().unwrap()), SENTINEL);
    send_tag(&w, &ep, b"atomics".to_vec(), 2, "atomics check");
    assert_eq!(recv_tag(&w, 64, 3, "bye"), b"ok");
    drop(rkey);
    close(&w, ep);
}

// ---------------------------------------------------------------------------------------------
// Connect by worker address.

#[test]
fn connect_by_worker_address_across_hosts() {
    const TEST: &str = "connect_by_worker_address_across_hosts";
    if run_role(address_server, address_client) {
        return;
    }
    let Some(hosts) = hosts_or_skip() else { return };
    let started = Instant::now();
    let mut server = hosts.spawn(Host::A, TEST, "server", &[]);
    let address = server.expect("address", ANSWER_TIMEOUT);
    // The server advertises its veth address, the only up non-loopback IPv4 of its namespace.
    let wire = WorkerAddressWire::decode(&from_hex(&address)).expect("worker address");
    let advertised = wire
        .transports
        .iter()
        .find_map(|t| match t {
            TransportAddress::Uring { addr } => Some(*addr),
            _ => None,
        })
        .expect("a uring transport address");
    assert_eq!(advertised.ip(), hosts.ip(Host::A), "advertised address of the server");
    let client = hosts.spawn(Host::B, TEST, "client", &[(WORKER_VAR, address)]);
    let client = client.finish(ANSWER_TIMEOUT);
    let server = server.finish(ANSWER_TIMEOUT);
    println!("{TEST}: {:?}", started.elapsed());
    let client_wire =
        WorkerAddressWire::decode(&from_hex(&client["address"])).expect("client worker address");
    assert!(
        client_wire
            .transports
            .iter()
            .any(|t| matches!(t, TransportAddress::Uring { addr } if addr.ip() == hosts.ip(Host::B))),
        "the client advertises its veth address: {:?}",
        client_wire.transports
    );
    assert_eq!(client["remote"], advertised.to_string());
    assert_eq!(client["received"], "1048576");
    assert_eq!(server["received"], "1048576");
}

fn address_server() {
    let w = worker();
    answer("address", to_hex(w.address()));
    // The client sends its own worker address first; the server connects back to it.
    let client_address = recv_tag(&w, 4096, 1, "client address");
    let ep = w.create_endpoint(EpParams::remote_address(&client_address)).expect("connect back");
    done(&w, ep.tag_send(pattern(20, 0, 1 << 20), 2, TagSendParams::default()).unwrap(), "send");
    let got = recv_tag(&w, 1 << 20, 3, "client data");
    check("data from the client", &got, 30, 0);
    answer("received", got.len());
    close(&w, ep);
}

fn address_client() {
    let w = worker();
    answer("address", to_hex(w.address()));
    let ep = w.create_endpoint(EpParams::remote_address(&from_hex(&env(WORKER_VAR)))).expect("connect");
    send_tag(&w, &ep, w.address().to_vec(), 1, "own address");
    let send = ep.tag_send(pattern(30, 0, 1 << 20), 3, TagSendParams::default()).unwrap();
    let got = recv_tag(&w, 1 << 20, 2, "server data");
    check("data from the server", &got, 20, 0);
    answer("received", got.len());
    done(&w, send, "send");
    answer("remote", show(ep.query().unwrap().remote_sockaddr));
    close(&w, ep);
}

// ---------------------------------------------------------------------------------------------
// Failures across hosts.

#[test]
fn connecting_to_a_closed_port_or_an_absent_host_fails() {
    const TEST: &str = "connecting_to_a_closed_port_or_an_absent_host_fails";
    if child_role().is_some() {
        return unreachable_client();
    }
    let Some(hosts) = hosts_or_skip() else { return };
    let started = Instant::now();
    let a = hosts.ip(Host::A).octets();
    let targets = [
        // Host A is there, but nothing listens on this port: it answers with a reset.
        SocketAddr::from((a, 1)),
        // Nobody has this address on the veth: neighbour resolution fails.
        SocketAddr::from(([a[0], a[1], a[2], 3], 7000)),
        // No route at all from host B.
        SocketAddr::from(([10, 214, 0, 1], 7000)),
    ];
    let list = targets.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",");
    let client = hosts.spawn(Host::B, TEST, "client", &[(ADDR_VAR, list)]);
    let client = client.finish(ANSWER_TIMEOUT);
    println!("{TEST}: {:?}", started.elapsed());
    let closed_port = &client["status0"];
    assert!(closed_port == "NotConnected" || closed_port == "Unreachable", "closed port: {closed_port}");
    let absent = &client["status1"];
    assert!(absent == "Unreachable" || absent == "TimedOut", "absent host: {absent}");
    assert_eq!(client["status2"], "Unreachable", "no route");
    println!("statuses: closed port {closed_port}, absent host {absent}, no route {}", client["status2"]);
    for i in 0..3 {
        assert_eq!(client[&format!("handler{i}")], "1", "the error handler runs once");
        assert_eq!(client[&format!("op{i}")], client[&format!("status{i}")], "a pending send fails alike");
    }
}

fn unreachable_client() {
    let w = worker();
    let targets: Vec<SocketAddr> = env(ADDR_VAR).split(',').map(|t| t.parse().unwrap()).collect();
    let mut eps = Vec::new();
    for (i, &target) in targets.iter().enumerate() {
        let seen: Arc<Mutex<Vec<Status>>> = Arc::default();
        let s = Arc::clone(&seen);
        let ep = w
            .create_endpoint(
                EpParams::sockaddr(target).with_err_handler(move |_, status| s.lock().unwrap().push(status)),
            )
            .expect("create endpoint");
        // An operation issued while connecting fails with the connection.
        let send = ep.tag_send(b"never".to_vec(), i as u64, TagSendParams::default()).unwrap();
        eps.push((ep, seen, send));
    }
    for (i, (ep, seen, send)) in eps.into_iter().enumerate() {
        progress_until(&w, "the error handler", || !seen.lock().unwrap().is_empty());
        let status = seen.lock().unwrap()[0];
        answer(&format!("status{i}"), format!("{status:?}"));
        let op = match wait(&w, send, "the pending send") {
            Ok(_) => "Ok".to_owned(),
            Err(s) => format!("{s:?}"),
        };
        answer(&format!("op{i}"), op);
        // Give a second report a chance to show up.
        for _ in 0..100 {
            w.progress();
        }
        answer(&format!("handler{i}"), seen.lock().unwrap().len());
        drop(ep);
    }
}

/// Traffic flows from B to A until the parent cuts the link with `cut`; both ends must fail
/// within a few seconds.
fn link_failure(test: &str, cut: impl FnOnce(&TwoHosts) -> Result<(), String>) {
    let Some(hosts) = hosts_or_skip() else { return };
    let started = Instant::now();
    let keepalive = ("ZCX_KEEPALIVE_INTERVAL", "200ms".to_owned());
    let mut server =
        hosts.spawn(Host::A, test, "server", &[(IP_VAR, hosts.ip(Host::A).to_string()), keepalive.clone()]);
    let listening = server.expect("listening", ANSWER_TIMEOUT);
    let mut client = hosts.spawn(Host::B, test, "client", &[(ADDR_VAR, listening), keepalive]);
    client.expect("flowing", ANSWER_TIMEOUT);
    server.expect("flowing", ANSWER_TIMEOUT);
    cut(&hosts).expect("cut the link");
    let cut_at = Instant::now();
    let client_status = client.expect("failed", Duration::from_secs(10));
    let client_after = cut_at.elapsed();
    let server_status = server.expect("failed", Duration::from_secs(10));
    let server_after = cut_at.elapsed();
    let client = client.finish(ANSWER_TIMEOUT);
    let server = server.finish(ANSWER_TIMEOUT);
    println!(
        "{test}: client {client_status} after {client_after:?}, server {server_status} after {server_after:?}, \
         total {:?}",
        started.elapsed()
    );
    for (side, status, after) in
        [("client", &client_status, client_after), ("server", &server_status, server_after)]
    {
        assert!(
            status == "EndpointTimeout" || status == "ConnectionReset",
            "{side} endpoint failed with {status}"
        );
        assert!(after < Duration::from_secs(5), "{side} noticed the cut only after {after:?}");
    }
    assert_eq!(client["pending"], "0", "every operation of the failed endpoint ended");
    assert!(client["sent"].parse::<u64>().unwrap() > 0);
    assert!(server["received"].parse::<u64>().unwrap() > 0);
}

const FLOW_LEN: usize = 64 << 10;

fn flow_server() {
    let w = worker();
    let failed: Failure = Arc::default();
    let (_listener, accepted) = listen(&w, Some(Arc::clone(&failed)));
    let _ep = accept(&w, &accepted);
    let mut received = 0u64;
    let mut recv = Some(w.tag_recv(vec![0u8; FLOW_LEN], 5, u64::MAX, RequestParams::default()).unwrap());
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut idle = 0;
    while failed.lock().unwrap().is_none() {
        if let Some(r) = recv.take() {
            match r.try_take() {
                Ok(Ok(got)) => {
                    check("flow at the server", &got.buf, received, 0);
                    received += 1;
                    if received == 10 {
                        answer("flowing", received);
                    }
                    recv = Some(w.tag_recv(got.buf, 5, u64::MAX, RequestParams::default()).unwrap());
                }
                // A receive matched to a rendezvous in progress fails with the endpoint.
                Ok(Err(status)) => assert!(
                    status.is_endpoint_error() || status == Status::ConnectionReset,
                    "receive failed with {status:?}"
                ),
                Err(r) => recv = Some(r),
            }
        }
        step(&w, &mut idle);
        assert!(Instant::now() < deadline, "the endpoint did not fail");
    }
    let (status, _) = failed.lock().unwrap().unwrap();
    answer("failed", format!("{status:?}"));
    answer("received", received);
}

fn flow_client() {
    let w = worker();
    let server: SocketAddr = env(ADDR_VAR).parse().unwrap();
    let failed: Failure = Arc::default();
    let f = Arc::clone(&failed);
    let ep = w
        .create_endpoint(EpParams::sockaddr(server).with_err_handler(move |_, status| {
            f.lock().unwrap().get_or_insert((status, Instant::now()));
        }))
        .unwrap();
    let flowing = AtomicBool::new(false);
    let mut in_flight = std::collections::VecDeque::new();
    let mut sent = 0u64;
    let mut completed = 0u64;
    let deadline = Instant::now() + OP_TIMEOUT;
    let mut idle = 0;
    while failed.lock().unwrap().is_none() {
        while in_flight.len() < 4 {
            match ep.tag_send(pattern(sent, 0, FLOW_LEN), 5, TagSendParams::default()) {
                Ok(r) => in_flight.push_back(r),
                Err(_) => break,
            }
            sent += 1;
        }
        while in_flight.front().is_some_and(|r: &Request<Vec<u8>>| r.is_done()) {
            let r = in_flight.pop_front().unwrap();
            if r.status() == Status::Ok {
                completed += 1;
            }
        }
        if completed >= 10 && !flowing.swap(true, Ordering::Relaxed) {
            answer("flowing", completed);
        }
        step(&w, &mut idle);
        assert!(Instant::now() < deadline, "the endpoint did not fail");
    }
    let (status, _) = failed.lock().unwrap().unwrap();
    answer("failed", format!("{status:?}"));
    answer("sent", completed);
    // Every operation still in flight ends with the endpoint.
    progress_until(&w, "the pending sends to end", || in_flight.iter().all(|r| r.is_done()));
    answer("pending", in_flight.iter().filter(|r| !r.is_done()).count());
    drop(ep);
}

#[test]
fn link_down_mid_traffic_fails_both_endpoints() {
    if run_role(flow_server, flow_client) {
        return;
    }
    link_failure("link_down_mid_traffic_fails_both_endpoints", |hosts| hosts.link_down(Host::A));
}

#[test]
fn deleted_veth_mid_traffic_fails_both_endpoints() {
    if run_role(flow_server, flow_client) {
        return;
    }
    link_failure("deleted_veth_mid_traffic_fails_both_endpoints", |hosts| hosts.delete_veth(Host::B));
}
