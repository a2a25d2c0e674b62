//! The server side: accepts one client and answers the tests it asks for until it says `done`.

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zcx::{
    AmSendParams, CloseMode, Endpoint, EpParams, ListenerParams, MemHandle, Request, RequestParams,
    TagSendParams,
};

use crate::perf::am::AmSink;
use crate::perf::args::{TestKind, TestSpec};
use crate::perf::buf::IMPLICIT_PUT_MAX;
use crate::perf::buf::{pool, PerfBuf};
use crate::perf::client::counter_offset;
use crate::perf::many::{self, Accepts, ProcStats, TAG_MANY, TAG_MANY_MASK};
use crate::perf::pattern;
use crate::perf::session::{self, detailed, Session, AM_PING, AM_PONG, TAG_ACK, TAG_CTRL, TAG_DATA};

/// Listens on `bind`, prints `zcx-perf-server listening port=<port>` on stdout once it does, serves
/// one client and returns when the client is done or gone.
pub fn run(bind: SocketAddr, timeout: Duration, parent_pid: Option<u32>) -> Result<(), String> {
    let ctx = session::context()?;
    let worker = session::worker(&ctx, "zcx-perf-server")?;
    let peer_failed = Arc::new(AtomicBool::new(false));
    let accepts = Arc::new(Mutex::new(Accepts::new()));
    let (slot, flag, server) = (accepts.clone(), peer_failed.clone(), worker.clone());
    let listener = worker
        .listen(ListenerParams {
            sockaddr: Some(bind),
            conn_handler: Some(Box::new(move |request| {
                let mut accepts = slot.lock().unwrap_or_else(|p| p.into_inner());
                if !accepts.admit() {
                    // One client per run, with the endpoints its tests asked for; dropping the
                    // request rejects it.
                    return;
                }
                let flag = flag.clone();
                let params = EpParams::conn_request(request)
                    .with_err_handler(move |_, _| flag.store(true, Ordering::Relaxed));
                match server.create_endpoint(params) {
                    Ok(ep) => accepts.push(ep),
                    Err(status) => eprintln!("zcx perf server: cannot accept a client: {}", detailed(status)),
                }
            })),
            ..Default::default()
        })
        .map_err(|s| format!("cannot listen on {bind}: {}", detailed(s)))?;
    println!("zcx-perf-server listening port={}", listener.sockaddr().port());
    let _ = std::io::stdout().flush();
    let ep = loop {
        if let Some(ep) = accepts.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            break ep;
        }
        if worker.progress() == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        if parent_pid.is_some_and(|pid| !parent_alive(pid)) {
            return Err("the process that started the server is gone".into());
        }
    };
    let s = Session { ctx, worker, ep, peer_failed, timeout };
    // Every endpoint of the client, the session's first (see `many`).
    let mut eps = vec![s.ep.clone()];
    loop {
        let message = match s.recv_ctrl(TAG_CTRL, "the client's next test") {
            Ok(message) => message,
            Err(_) if s.peer_failed.load(Ordering::Relaxed) => {
                eprintln!("zcx perf server: the client disconnected");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if message == b"done" {
            s.send_ctrl(TAG_CTRL, b"bye")?;
            break;
        }
        if message == b"stats" {
            s.send_ctrl(TAG_CTRL, ProcStats::now()?.encode().as_bytes())?;
            continue;
        }
        let text = String::from_utf8_lossy(&message);
        let spec = TestSpec::decode(&text).ok_or_else(|| format!("bad request from the client: {text:?}"))?;
        if spec.endpoints as usize > eps.len() {
            many::ensure_descriptors(spec.endpoints)?;
            many::accept_server_endpoints(&s, &mut eps, spec.endpoints, &accepts)?;
        }
        serve(&s, &eps[..spec.endpoints as usize], &spec).map_err(|e| format!("{}: {e}", spec.kind))?;
    }
    // The client closes; give it a moment so the last reply is not cut off by our close.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !s.peer_failed.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
        if s.worker.progress() == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    many::close_all(&s, eps, CloseMode::Force);
    drop(listener);
    Ok(())
}

fn parent_alive(pid: u32) -> bool {
    // SAFETY: getppid has no preconditions.
    (unsafe { libc::getppid() }) as u32 == pid
}

fn serve(s: &Session, eps: &[Endpoint], spec: &TestSpec) -> Result<(), String> {
    match spec.kind {
        TestKind::TagLat | TestKind::TagSyncLat if eps.len() > 1 => {
            tag_lat_many(s, eps, spec, spec.kind == TestKind::TagSyncLat)
        }
        TestKind::TagLat => tag_lat(s, spec, false),
        TestKind::TagSyncLat => tag_lat(s, spec, true),
        TestKind::TagBw => tag_bw(s, spec),
        TestKind::PutLat => put_lat(s, spec),
        TestKind::PutBw | TestKind::GetLat | TestKind::GetBw => one_sided(s, spec),
        TestKind::AtomicAddLat | TestKind::FaddLat | TestKind::CswapLat => one_sided(s, spec),
        TestKind::AmLat => am_lat(s, spec),
        TestKind::AmBw => am_bw(s, spec),
        TestKind::StreamLat => stream_lat(s, spec),
        TestKind::StreamBw => stream_bw(s, spec),
    }
}

/// Checks a received message: its length always, its bytes when validating.
fn check(spec: &TestSpec, bytes: &[u8], length: usize, n: u64) -> Result<(), String> {
    if length != spec.size {
        return Err(format!("message {n} has {length} bytes, expected {}", spec.size));
    }
    if spec.validate {
        pattern::check(spec.kind.name(), bytes, n, 0..0)?;
    }
    Ok(())
}

/// Writes message `n` into `buf` when validating.
fn fill(spec: &TestSpec, buf: &mut PerfBuf, n: u64) {
    if spec.validate {
        pattern::fill(buf.bytes_mut(), n, false);
    }
}

fn tag_lat(s: &Session, spec: &TestSpec, sync: bool) -> Result<(), String> {
    let post = |buf: PerfBuf| {
        s.worker
            .tag_recv(buf, TAG_DATA, u64::MAX, RequestParams::default())
            .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
    };
    let mut bufs = pool(s, spec.mem, 2, spec.size, true, 0x5A)?;
    let mut sbuf = bufs.pop();
    let mut recv = Some(post(bufs.pop().expect("two buffers"))?);
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for n in 0..spec.total() {
        let got = s.wait(recv.take().expect("posted"), "the ping")?;
        check(spec, got.buf.bytes(), got.info.length, n)?;
        // The pong goes first; the next ping's receive is posted while the pong travels.
        let mut buf = sbuf.take().expect("buffer");
        fill(spec, &mut buf, n);
        let send =
            s.ep.tag_send(buf, TAG_DATA, TagSendParams { sync, ..TagSendParams::default() })
                .map_err(|st| format!("tag_send failed: {}", detailed(st)))?;
        if n + 1 < spec.total() {
            recv = Some(post(got.buf)?);
        }
        sbuf = Some(s.wait(send, "the pong to leave")?.buf);
    }
    Ok(())
}

/// tag_lat over many endpoints: each message is answered on the endpoint its tag names, with its
/// tag.
fn tag_lat_many(s: &Session, eps: &[Endpoint], spec: &TestSpec, sync: bool) -> Result<(), String> {
    let post = |buf: PerfBuf| {
        s.worker
            .tag_recv(buf, TAG_MANY, TAG_MANY_MASK, RequestParams::default())
            .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
    };
    let mut bufs = pool(s, spec.mem, 2, spec.size, true, 0x5A)?;
    let mut sbuf = bufs.pop();
    let mut recv = Some(post(bufs.pop().expect("two buffers"))?);
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for n in 0..spec.total() {
        let got = s.wait(recv.take().expect("posted"), "the ping")?;
        check(spec, got.buf.bytes(), got.info.length, n)?;
        let tag = got.info.sender_tag;
        let ep = eps
            .get((tag & !TAG_MANY_MASK) as usize)
            .ok_or_else(|| format!("message {n} names endpoint {} of {}", tag & !TAG_MANY_MASK, eps.len()))?;
        let mut buf = sbuf.take().expect("buffer");
        fill(spec, &mut buf, n);
        let send = ep
            .tag_send(buf, tag, TagSendParams { sync, ..TagSendParams::default() })
            .map_err(|st| format!("tag_send failed: {}", detailed(st)))?;
        if n + 1 < spec.total() {
            recv = Some(post(got.buf)?);
        }
        sbuf = Some(s.wait(send, "the pong to leave")?.buf);
    }
    Ok(())
}

fn tag_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let window = spec.window as usize;
    // Without --validate, like ucx_perftest, every receive of the window lands in the same
    // registered buffer (a `MemSlice` may overlap others): the measurement is of the transfer,
    // not of a working set larger than the caches. Validated messages each need their own.
    let mut free = pool(s, spec.mem, window, spec.size, spec.validate, 0)?;
    let post = |buf| {
        s.worker
            .tag_recv(buf, TAG_DATA, u64::MAX, RequestParams::default())
            .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
    };
    receive_window(s, spec, &mut free, post)
}

fn put_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let region = s.remote_region(spec.size)?;
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let (rkey, base) = s.exchange_rkeys(&region)?;
    let offset = counter_offset(spec.size);
    // SAFETY: `offset + 8 <= size <= region length`, and the offset is 8-byte aligned.
    let mine = unsafe { region.address().add(offset) } as *const u64;
    let mut sbuf = pool(s, spec.mem, 1, spec.size, true, 0x5A)?.pop();
    let mut last = None;
    // As the client's: small answers are implicit puts, larger ones requests.
    let implicit = spec.size <= IMPLICIT_PUT_MAX;
    for n in 0..spec.total() {
        let seq = n + 1;
        // SAFETY: `mine` points into the live region; the client's puts write it.
        s.poll_until("the client's put", || unsafe { std::ptr::read_volatile(mine) } == seq)?;
        std::sync::atomic::fence(Ordering::Acquire);
        if spec.validate {
            // SAFETY: the region is mapped for `size` bytes; the client writes it again only
            // after our reply, so it is stable while we read it.
            let got = unsafe { std::slice::from_raw_parts(region.address(), spec.size) };
            pattern::check(spec.kind.name(), got, n, offset..offset + 8)?;
        }
        if let Some(put) = last.take() {
            sbuf = Some(s.wait(put, "the put's acknowledgement")?.buf);
        }
        let mut buf = sbuf.take().expect("buffer");
        fill(spec, &mut buf, n);
        buf.bytes_mut()[offset..offset + 8].copy_from_slice(&seq.to_ne_bytes());
        if implicit {
            s.ep.put_nbi(buf.bytes(), base, &rkey).map_err(|st| format!("put failed: {}", detailed(st)))?;
            sbuf = Some(buf);
            continue;
        }
        last = Some(
            s.ep.put(buf, base, &rkey, RequestParams::default())
                .map_err(|st| format!("put failed: {}", detailed(st)))?,
        );
    }
    if let Some(put) = last {
        s.wait(put, "the last put's acknowledgement")?;
    }
    let flush = s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?;
    s.wait(flush, "the flush of the puts")?;
    Ok(())
}

/// The target of put_bw, get_lat, get_bw and the atomic tests: exposes a region, lets the client
/// work on it until `end`, then checks what it holds and answers `ok` or `fail <reason>`.
fn one_sided(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let len = match spec.kind {
        _ if spec.kind.is_atomic() => 8,
        TestKind::PutBw if spec.validate => spec.size * spec.window as usize,
        _ => spec.size,
    };
    let region = s.remote_region(len)?;
    if spec.validate && matches!(spec.kind, TestKind::GetLat | TestKind::GetBw) {
        // SAFETY: the region is mapped read-write for `len` bytes and the client has no key yet.
        pattern::fill(unsafe { std::slice::from_raw_parts_mut(region.address(), len) }, 0, false);
    }
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let _keys = s.exchange_rkeys(&region)?;
    // The client's operations are applied while this waits (and progresses).
    s.expect_ctrl("end")?;
    let verdict = match verify_region(spec, &region) {
        Ok(()) => "ok".to_owned(),
        Err(reason) => format!("fail {reason}"),
    };
    s.send_ctrl(TAG_CTRL, verdict.as_bytes())?;
    match verdict.strip_prefix("fail ") {
        Some(reason) => Err(reason.to_owned()),
        None => Ok(()),
    }
}

/// What the region of a one-sided test must hold once the client is done: the count of atomic
/// increments, or (validating put_bw) the last window of puts' messages.
fn verify_region(spec: &TestSpec, region: &MemHandle) -> Result<(), String> {
    if spec.kind.is_atomic() {
        // SAFETY: the region is mapped, 8-byte aligned and at least 8 bytes long; the client's
        // operations are all acknowledged, so nothing writes it now.
        let word = unsafe { std::ptr::read_volatile(region.address() as *const u64) };
        let (got, expected) = if spec.size == 4 {
            (u64::from(word as u32), spec.total() & u64::from(u32::MAX))
        } else {
            (word, spec.total())
        };
        if got != expected {
            return Err(format!(
                "{}: the target word is {got} after {} operations, expected {expected}",
                spec.kind,
                spec.total()
            ));
        }
    } else if spec.kind == TestKind::PutBw && spec.validate {
        // Message n went to slot n % window: each slot holds the last message written to it.
        let window = u64::from(spec.window);
        for n in spec.total().saturating_sub(window)..spec.total() {
            let offset = (n % window) as usize * spec.size;
            // SAFETY: the region is mapped for `window * size` bytes; the client flushed before
            // `end`, so nothing writes it now.
            let got = unsafe { std::slice::from_raw_parts(region.address().add(offset), spec.size) };
            pattern::check(spec.kind.name(), got, n, 0..0)?;
        }
    }
    Ok(())
}

fn am_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let pings = AmSink::install(s, AM_PING, 1, spec.size, spec.validate.then_some(spec.kind.name()))?;
    let mut sbuf = pool(s, spec.mem, 1, spec.size, true, 0x5A)?.pop();
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for n in 0..spec.total() {
        pings.wait_for(s, n + 1)?;
        let mut buf = sbuf.take().expect("buffer");
        fill(spec, &mut buf, n);
        let send =
            s.ep.am_send(AM_PONG, &[], buf, AmSendParams::default())
                .map_err(|st| format!("am_send failed: {}", detailed(st)))?;
        sbuf = Some(s.wait(send, "the pong to leave")?.buf);
    }
    Ok(())
}

fn am_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let validate = spec.validate.then_some(spec.kind.name());
    let messages = AmSink::install(s, AM_PING, spec.window as usize, spec.size, validate)?;
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let mut expected = 0;
    for count in [spec.warmup, spec.iters] {
        if count == 0 {
            continue;
        }
        expected += count;
        messages.wait_for(s, expected)?;
        s.send_ctrl(TAG_ACK, b"ack")?;
    }
    Ok(())
}

fn stream_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let mut bufs = pool(s, spec.mem, 2, spec.size, true, 0x5A)?;
    let (mut sbuf, mut rbuf) = (bufs.pop(), bufs.pop());
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for n in 0..spec.total() {
        let recv =
            s.ep.stream_recv(rbuf.take().expect("buffer"), true, RequestParams::default())
                .map_err(|st| format!("stream_recv failed: {}", detailed(st)))?;
        let got = s.wait(recv, "the ping")?;
        check(spec, got.buf.bytes(), got.info.length, n)?;
        rbuf = Some(got.buf);
        let mut buf = sbuf.take().expect("buffer");
        fill(spec, &mut buf, n);
        let send =
            s.ep.stream_send(buf, RequestParams::default())
                .map_err(|st| format!("stream_send failed: {}", detailed(st)))?;
        sbuf = Some(s.wait(send, "the pong to leave")?.buf);
    }
    Ok(())
}

fn stream_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let window = spec.window as usize;
    let mut free = pool(s, spec.mem, window, spec.size, spec.validate, 0)?;
    let post = |buf| {
        s.ep.stream_recv(buf, true, RequestParams::default())
            .map_err(|st| format!("stream_recv failed: {}", detailed(st)))
    };
    receive_window(s, spec, &mut free, post)
}

/// The receiving side of tag_bw and stream_bw: keeps up to a window of receives posted with
/// `post`, checks every message in order (tag receives of one tag from one sender match in send
/// order; stream receives fill in posting order, each taking the next `size` bytes), and
/// acknowledges the warm-up and the measured phase each.
fn receive_window(
    s: &Session,
    spec: &TestSpec,
    free: &mut Vec<PerfBuf>,
    post: impl Fn(PerfBuf) -> Result<Request<PerfBuf>, String>,
) -> Result<(), String> {
    let window = spec.window as usize;
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let mut n = 0u64;
    for count in [spec.warmup, spec.iters] {
        if count == 0 {
            continue;
        }
        let mut posted = VecDeque::with_capacity(window);
        let mut issued = 0u64;
        while issued < count && !free.is_empty() {
            posted.push_back(post(free.pop().expect("a free buffer"))?);
            issued += 1;
        }
        while let Some(request) = posted.pop_front() {
            let done = s.wait(request, "a message of the stream")?;
            check(spec, done.buf.bytes(), done.info.length, n)?;
            n += 1;
            if issued < count {
                posted.push_back(post(done.buf)?);
                issued += 1;
            } else {
                free.push(done.buf);
            }
        }
        s.send_ctrl(TAG_ACK, b"ack")?;
    }
    Ok(())
}
