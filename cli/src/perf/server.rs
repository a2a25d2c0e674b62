//! The server side: accepts one client and answers the tests it asks for until it says `done`.

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zcx::{AmSendParams, CloseMode, Endpoint, EpParams, ListenerParams, RequestParams, TagSendParams};

use crate::perf::am::AmSink;
use crate::perf::args::{TestKind, TestSpec};
use crate::perf::client::counter_offset;
use crate::perf::session::{self, detailed, Session, AM_PING, AM_PONG, TAG_ACK, TAG_CTRL, TAG_DATA};

/// Listens on `bind`, prints `zcx-perf-server listening port=<port>` on stdout once it does, serves
/// one client and returns when the client is done or gone.
pub fn run(bind: SocketAddr, timeout: Duration, parent_pid: Option<u32>) -> Result<(), String> {
    let ctx = session::context()?;
    let worker = session::worker(&ctx, "zcx-perf-server")?;
    let peer_failed = Arc::new(AtomicBool::new(false));
    let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let (slot, flag, server) = (accepted.clone(), peer_failed.clone(), worker.clone());
    let listener = worker
        .listen(ListenerParams {
            sockaddr: Some(bind),
            conn_handler: Some(Box::new(move |request| {
                let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_some() {
                    return; // one client per run; dropping the request rejects it
                }
                let flag = flag.clone();
                let params = EpParams::conn_request(request)
                    .with_err_handler(move |_, _| flag.store(true, Ordering::Relaxed));
                match server.create_endpoint(params) {
                    Ok(ep) => *slot = Some(ep),
                    Err(status) => eprintln!("zcx perf server: cannot accept a client: {}", detailed(status)),
                }
            })),
            ..Default::default()
        })
        .map_err(|s| format!("cannot listen on {bind}: {}", detailed(s)))?;
    println!("zcx-perf-server listening port={}", listener.sockaddr().port());
    let _ = std::io::stdout().flush();
    let ep = loop {
        if let Some(ep) = accepted.lock().unwrap_or_else(|p| p.into_inner()).take() {
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
        let text = String::from_utf8_lossy(&message);
        let spec = TestSpec::decode(&text).ok_or_else(|| format!("bad request from the client: {text:?}"))?;
        serve(&s, &spec).map_err(|e| format!("{}: {e}", spec.kind))?;
    }
    // The client closes; give it a moment so the last reply is not cut off by our close.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !s.peer_failed.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
        if s.worker.progress() == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    if let Ok(close) = s.ep.close(CloseMode::Force) {
        let _ = s.wait(close, "the endpoint to close");
    }
    drop(listener);
    Ok(())
}

fn parent_alive(pid: u32) -> bool {
    // SAFETY: getppid has no preconditions.
    (unsafe { libc::getppid() }) as u32 == pid
}

fn serve(s: &Session, spec: &TestSpec) -> Result<(), String> {
    match spec.kind {
        TestKind::TagLat => tag_lat(s, spec),
        TestKind::TagBw => tag_bw(s, spec),
        TestKind::PutLat => put_lat(s, spec),
        TestKind::PutBw => put_bw(s, spec),
        TestKind::AmLat => am_lat(s, spec),
        TestKind::AmBw => am_bw(s, spec),
    }
}

fn tag_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let total = spec.warmup + spec.iters;
    let post = |buf: Vec<u8>| {
        s.worker
            .tag_recv(buf, TAG_DATA, u64::MAX, RequestParams::default())
            .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
    };
    let mut recv = Some(post(vec![0u8; spec.size])?);
    let mut sbuf = Some(vec![0x5Au8; spec.size]);
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for i in 0..total {
        let got = s.wait(recv.take().expect("posted"), "the ping")?;
        if i + 1 < total {
            recv = Some(post(got.buf)?);
        }
        let send =
            s.ep.tag_send(sbuf.take().expect("buffer"), TAG_DATA, TagSendParams::default())
                .map_err(|st| format!("tag_send failed: {}", detailed(st)))?;
        sbuf = Some(s.wait(send, "the pong to leave")?.buf);
    }
    Ok(())
}

fn tag_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let window = spec.window as usize;
    // Like ucx_perftest, every receive of the window lands in the same buffer: registered memory
    // is shared by design (a `MemSlice` may overlap others), and the measurement is of the
    // transfer, not of a working set larger than the caches.
    let region = s.remote_region(spec.size)?;
    let slot = || region.slice(0, spec.size).map_err(|st| format!("cannot slice: {st}"));
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for count in [spec.warmup, spec.iters] {
        if count == 0 {
            continue;
        }
        let mut posted = VecDeque::with_capacity(window);
        let mut issued = 0u64;
        let post = |buf| {
            s.worker
                .tag_recv(buf, TAG_DATA, u64::MAX, RequestParams::default())
                .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
        };
        while issued < count && posted.len() < window {
            posted.push_back(post(slot()?)?);
            issued += 1;
        }
        while let Some(request) = posted.pop_front() {
            let done = s.wait(request, "a message of the stream")?;
            if issued < count {
                posted.push_back(post(done.buf)?);
                issued += 1;
            }
        }
        s.send_ctrl(TAG_ACK, b"ack")?;
    }
    Ok(())
}

fn put_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let region = s.remote_region(spec.size)?;
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let (rkey, base) = s.exchange_rkeys(&region)?;
    let offset = counter_offset(spec.size);
    // SAFETY: `offset + 8 <= size <= region length`, and the offset is 8-byte aligned.
    let mine = unsafe { region.address().add(offset) } as *const u64;
    let mut sbuf = Some(vec![0x5Au8; spec.size]);
    let mut last = None;
    for seq in 1..=spec.warmup + spec.iters {
        // SAFETY: `mine` points into the live region; the client's puts write it.
        s.poll_until("the client's put", || unsafe { std::ptr::read_volatile(mine) } == seq)?;
        std::sync::atomic::fence(Ordering::Acquire);
        if let Some(put) = last.take() {
            sbuf = Some(s.wait(put, "the put's acknowledgement")?.buf);
        }
        let mut buf = sbuf.take().expect("buffer");
        buf[offset..offset + 8].copy_from_slice(&seq.to_ne_bytes());
        last = Some(
            s.ep.put(buf, base, &rkey, RequestParams::default())
                .map_err(|st| format!("put failed: {}", detailed(st)))?,
        );
    }
    if let Some(put) = last {
        s.wait(put, "the last put's acknowledgement")?;
    }
    Ok(())
}

fn put_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let region = s.remote_region(spec.size)?;
    s.send_ctrl(TAG_CTRL, b"ready")?;
    let _keys = s.exchange_rkeys(&region)?;
    // The puts are applied while this waits (and progresses).
    s.expect_ctrl("end")
}

fn am_lat(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let pings = AmSink::install(s, AM_PING, 1, spec.size)?;
    let data: Arc<[u8]> = vec![0x5Au8; spec.size].into();
    s.send_ctrl(TAG_CTRL, b"ready")?;
    for seq in 1..=spec.warmup + spec.iters {
        pings.wait_for(s, seq)?;
        let send =
            s.ep.am_send(AM_PONG, &[], data.clone(), AmSendParams::default())
                .map_err(|st| format!("am_send failed: {}", detailed(st)))?;
        s.wait(send, "the pong to leave")?;
    }
    Ok(())
}

fn am_bw(s: &Session, spec: &TestSpec) -> Result<(), String> {
    let messages = AmSink::install(s, AM_PING, spec.window as usize, spec.size)?;
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
