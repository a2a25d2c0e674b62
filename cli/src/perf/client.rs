//! The client side: connects, asks the server for each test, drives it and reports.

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx::{AmSendParams, CloseMode, EpParams, MemSlice, Request, RequestParams, TagSendParams};

use crate::perf::am::AmSink;
use crate::perf::args::{PerfArgs, TestKind, TestSpec};
use crate::perf::report::{Bandwidth, BatchClock, Latency, Report};
use crate::perf::session::{self, detailed, Session, AM_PING, AM_PONG, TAG_ACK, TAG_CTRL, TAG_DATA};

/// Connects to the server at `addr`, runs `specs` in order, printing each result line as it
/// comes, and tells the server it is done.
pub fn run(args: &PerfArgs, addr: SocketAddr, specs: &[TestSpec]) -> Result<Vec<Report>, String> {
    let ctx = session::context()?;
    let worker = session::worker(&ctx, "zcx-perf-client")?;
    let peer_failed = Arc::new(AtomicBool::new(false));
    let flag = peer_failed.clone();
    let params = EpParams::sockaddr(addr).with_err_handler(move |_, _| flag.store(true, Ordering::Relaxed));
    let ep =
        worker.create_endpoint(params).map_err(|s| format!("cannot connect to {addr}: {}", detailed(s)))?;
    let session = Session { ctx, worker, ep, peer_failed, timeout: Duration::from_secs(args.timeout) };
    let mut reports = Vec::with_capacity(specs.len());
    for spec in specs {
        session.send_ctrl(TAG_CTRL, spec.encode().as_bytes()).map_err(|e| format!("{addr}: {e}"))?;
        session.expect_ctrl("ready")?;
        let report = match spec.kind {
            TestKind::TagLat => Report::Latency(tag_lat(&session, spec, args.batch)?),
            TestKind::TagBw => Report::Bandwidth(tag_bw(&session, spec)?),
            TestKind::PutLat => Report::Latency(put_lat(&session, spec, args.batch)?),
            TestKind::PutBw => Report::Bandwidth(put_bw(&session, spec)?),
            TestKind::AmLat => Report::Latency(am_lat(&session, spec, args.batch)?),
            TestKind::AmBw => Report::Bandwidth(am_bw(&session, spec)?),
        };
        println!("{report}");
        let _ = std::io::stdout().flush();
        reports.push(report);
    }
    session.send_ctrl(TAG_CTRL, b"done")?;
    session.expect_ctrl("bye")?;
    let close = session.ep.close(CloseMode::Flush).map_err(|s| format!("close failed: {}", detailed(s)))?;
    // The server may hang up first; a reset while closing is fine.
    let _ = session.wait(close, "the endpoint to close");
    Ok(reports)
}

/// Runs `round` `warmup` times, then `iters` times under a batch clock.
fn ping_pong(
    spec: &TestSpec,
    batch: u64,
    mut round: impl FnMut(u64) -> Result<(), String>,
) -> Result<Latency, String> {
    let mut seq = 0u64;
    for _ in 0..spec.warmup {
        seq += 1;
        round(seq)?;
    }
    let mut clock = BatchClock::start(spec.iters, batch);
    for _ in 0..spec.iters {
        seq += 1;
        round(seq)?;
        clock.tick();
    }
    Ok(Latency { spec: *spec, batches: clock.finish() })
}

/// Runs the warm-up phase, then times the measured one.
fn streamed(spec: &TestSpec, mut phase: impl FnMut(u64) -> Result<(), String>) -> Result<Bandwidth, String> {
    if spec.warmup > 0 {
        phase(spec.warmup)?;
    }
    let start = Instant::now();
    phase(spec.iters)?;
    Ok(Bandwidth { spec: *spec, elapsed: start.elapsed() })
}

/// Issues `count` operations with at most `window` outstanding and waits for all of them.
fn windowed<B: Send + 'static>(
    s: &Session,
    count: u64,
    window: u32,
    mut issue: impl FnMut() -> Result<Request<B>, String>,
) -> Result<(), String> {
    let mut inflight = VecDeque::with_capacity(window as usize);
    for _ in 0..count {
        if inflight.len() == window as usize {
            let oldest = inflight.pop_front().expect("the window is full");
            s.wait(oldest, "an operation of the window")?;
        }
        inflight.push_back(issue()?);
    }
    while let Some(request) = inflight.pop_front() {
        s.wait(request, "the window to drain")?;
    }
    Ok(())
}

fn tag_lat(s: &Session, spec: &TestSpec, batch: u64) -> Result<Latency, String> {
    let mut sbuf = Some(vec![0xA5u8; spec.size]);
    let mut rbuf = Some(vec![0u8; spec.size]);
    ping_pong(spec, batch, |_| {
        let recv = s
            .worker
            .tag_recv(rbuf.take().expect("buffer"), TAG_DATA, u64::MAX, RequestParams::default())
            .map_err(|st| format!("tag_recv failed: {}", detailed(st)))?;
        let send =
            s.ep.tag_send(sbuf.take().expect("buffer"), TAG_DATA, TagSendParams::default())
                .map_err(|st| format!("tag_send failed: {}", detailed(st)))?;
        sbuf = Some(s.wait(send, "the ping to leave")?.buf);
        rbuf = Some(s.wait(recv, "the pong")?.buf);
        Ok(())
    })
}

fn tag_bw(s: &Session, spec: &TestSpec) -> Result<Bandwidth, String> {
    let region = s.remote_region(spec.size)?;
    streamed(spec, |count| {
        let ack = s.post_ctrl(TAG_ACK)?;
        windowed(s, count, spec.window, || {
            s.ep.tag_send(slice(&region, spec.size)?, TAG_DATA, TagSendParams::default())
                .map_err(|st| format!("tag_send failed: {}", detailed(st)))
        })?;
        s.take_ctrl(ack, "the server's acknowledgement").map(drop)
    })
}

fn put_lat(s: &Session, spec: &TestSpec, batch: u64) -> Result<Latency, String> {
    let region = s.remote_region(spec.size)?;
    let (rkey, base) = s.exchange_rkeys(&region)?;
    let offset = counter_offset(spec.size);
    // SAFETY: `offset + 8 <= size <= region length`, and the offset is 8-byte aligned.
    let mine = unsafe { region.address().add(offset) } as *const u64;
    let mut sbuf = Some(vec![0xA5u8; spec.size]);
    let latency = ping_pong(spec, batch, |seq| {
        let mut buf = sbuf.take().expect("buffer");
        buf[offset..offset + 8].copy_from_slice(&seq.to_ne_bytes());
        let put =
            s.ep.put(buf, base, &rkey, RequestParams::default())
                .map_err(|st| format!("put failed: {}", detailed(st)))?;
        // SAFETY: `mine` points into the live region; the peer's puts write it, so read it volatile.
        s.poll_until("the peer's put", || unsafe { std::ptr::read_volatile(mine) } == seq)?;
        std::sync::atomic::fence(Ordering::Acquire);
        sbuf = Some(s.wait(put, "the put's acknowledgement")?.buf);
        Ok(())
    })?;
    drop(rkey);
    Ok(latency)
}

fn put_bw(s: &Session, spec: &TestSpec) -> Result<Bandwidth, String> {
    let region = s.remote_region(spec.size)?;
    let (rkey, base) = s.exchange_rkeys(&region)?;
    let bw = streamed(spec, |count| {
        windowed(s, count, spec.window, || {
            s.ep.put(slice(&region, spec.size)?, base, &rkey, RequestParams::default())
                .map_err(|st| format!("put failed: {}", detailed(st)))
        })?;
        let flush = s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?;
        s.wait(flush, "the flush").map(drop)
    })?;
    s.send_ctrl(TAG_CTRL, b"end")?;
    Ok(bw)
}

fn am_lat(s: &Session, spec: &TestSpec, batch: u64) -> Result<Latency, String> {
    let pongs = AmSink::install(s, AM_PONG, 1, spec.size)?;
    let data: Arc<[u8]> = vec![0xA5u8; spec.size].into();
    ping_pong(spec, batch, |seq| {
        let send =
            s.ep.am_send(AM_PING, &[], data.clone(), AmSendParams::default())
                .map_err(|st| format!("am_send failed: {}", detailed(st)))?;
        pongs.wait_for(s, seq)?;
        s.wait(send, "the ping to leave").map(drop)
    })
}

fn am_bw(s: &Session, spec: &TestSpec) -> Result<Bandwidth, String> {
    let region = s.remote_region(spec.size)?;
    streamed(spec, |count| {
        let ack = s.post_ctrl(TAG_ACK)?;
        windowed(s, count, spec.window, || {
            s.ep.am_send(AM_PING, &[], slice(&region, spec.size)?, AmSendParams::default())
                .map_err(|st| format!("am_send failed: {}", detailed(st)))
        })?;
        s.take_ctrl(ack, "the server's acknowledgement").map(drop)
    })
}

/// The first `len` bytes of a registered region as an operation buffer (no allocation).
pub fn slice(region: &zcx::MemHandle, len: usize) -> Result<MemSlice, String> {
    region.slice(0, len).map_err(|s| format!("cannot slice the region: {}", detailed(s)))
}

/// Where the 8-byte sequence number of put_lat sits in a message of `size` bytes: its last
/// aligned word.
pub fn counter_offset(size: usize) -> usize {
    (size - 8) & !7
}
