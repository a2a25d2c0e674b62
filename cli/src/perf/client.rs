//! The client side: connects, asks the server for each test, drives it and reports.
//!
//! Messages of a test are numbered from 0, warm-up included; with `--validate` message `n`
//! carries [`pattern`]'s bytes for `n` and the receiver checks them.

use std::collections::VecDeque;
use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx::{
    AmSendParams, AtomicOp, AtomicSize, CloseMode, Completion, EpParams, EpRkey, Request, RequestParams,
    TagSendParams,
};

use crate::perf::am::AmSink;
use crate::perf::args::{batch_for, PerfArgs, TestKind, TestSpec};
use crate::perf::buf::IMPLICIT_PUT_MAX;
use crate::perf::buf::{pool, PerfBuf};
use crate::perf::many::{self, EndpointCost, PerEndpoint, ProcStats, TAG_MANY};
use crate::perf::pattern;
use crate::perf::report::{Bandwidth, Format, LatClock, Latency, Report};
use crate::perf::session::{self, detailed, Session, AM_PING, AM_PONG, TAG_ACK, TAG_CTRL, TAG_DATA};

/// How the client prints what it measured.
pub struct Output {
    pub format: Format,
    /// The transports in use, for the CSV and JSON records.
    pub tls: String,
    /// Show the progress line on stderr.
    pub progress: bool,
}

impl Output {
    /// The output `args` ask for.
    pub fn new(args: &PerfArgs) -> Output {
        let format = if args.csv {
            Format::Csv
        } else if args.json {
            Format::Json
        } else {
            Format::Text
        };
        let tls = args.tls.clone().or_else(|| std::env::var("ZCX_TLS").ok()).unwrap_or_else(|| "all".into());
        Output { format, tls, progress: args.progress || std::io::stderr().is_terminal() }
    }

    /// A `#` comment line of text output (nothing in CSV or JSON, whose lines are records).
    fn note(&self, line: &str) {
        if self.format == Format::Text {
            println!("{line}");
            let _ = std::io::stdout().flush();
        }
    }

    fn print(&self, report: &Report) {
        match self.format {
            Format::Text => println!("{report}"),
            Format::Csv => println!("{}", report.csv(&self.tls)),
            Format::Json => println!("{}", report.json(&self.tls)),
        }
        let _ = std::io::stdout().flush();
    }
}

/// Connects to the server at `addr`, runs `specs` in order, printing each result as it comes,
/// and tells the server it is done.
pub fn run(
    args: &PerfArgs,
    addr: SocketAddr,
    specs: &[TestSpec],
    out: &Output,
) -> Result<Vec<Report>, String> {
    let ctx = session::context()?;
    let worker = session::worker(&ctx, "zcx-perf-client")?;
    let peer_failed = Arc::new(AtomicBool::new(false));
    let flag = peer_failed.clone();
    let params = EpParams::sockaddr(addr).with_err_handler(move |_, _| flag.store(true, Ordering::Relaxed));
    let ep =
        worker.create_endpoint(params).map_err(|s| format!("cannot connect to {addr}: {}", detailed(s)))?;
    let session = Session { ctx, worker, ep, peer_failed, timeout: Duration::from_secs(args.timeout) };
    // Every endpoint the tests send over, the session's first (see `many`).
    let mut eps = vec![session.ep.clone()];
    let mut reports = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        // Endpoints to open for this test, and the figures before, to tell what they cost.
        let before = if spec.endpoints as usize > eps.len() {
            many::ensure_descriptors(spec.endpoints)?;
            Some((eps.len() as u64, ProcStats::now()?, many::server_stats(&session)?))
        } else {
            None
        };
        session.send_ctrl(TAG_CTRL, spec.encode().as_bytes()).map_err(|e| format!("{addr}: {e}"))?;
        many::open_client_endpoints(&session, &mut eps, spec.endpoints, addr)?;
        session.expect_ctrl("ready")?;
        if i == 0 {
            // The server answered on the endpoint's final lane: say which transport it is on.
            check_transport(&session, out)?;
        }
        let t = Test {
            s: &session,
            eps: &eps[..spec.endpoints as usize],
            spec: *spec,
            batch: batch_for(args.batch, spec.iters),
            progress: Progress::new(out.progress, spec),
        };
        let report = t.run().map_err(|e| {
            t.progress.clear();
            if session.peer_failed.load(Ordering::Relaxed) {
                format!("{}: {e} (the server's error, if it had one, is above)", spec.kind)
            } else {
                format!("{}: {e}", spec.kind)
            }
        })?;
        t.progress.clear();
        out.print(&report);
        if let Some((had, client_before, server_before)) = before {
            // After the test: every endpoint's rings were used, so their memory is resident.
            let opened = eps.len() as u64 - had;
            let cost = EndpointCost {
                endpoints: spec.endpoints,
                opened,
                client: PerEndpoint::between(client_before, ProcStats::now()?, opened),
                server: PerEndpoint::between(server_before, many::server_stats(&session)?, opened),
            };
            out.note(&cost.to_string());
        }
        reports.push(report);
    }
    let counters = session.worker.transport_counters();
    if out.format == Format::Text && !counters.is_empty() {
        // What the transports did (verbs: RDMA writes, reads and atomics), so a run shows how
        // its operations went.
        let line: Vec<String> = counters.iter().map(|(name, value)| format!("{name}={value}")).collect();
        println!("# transport counters: {}", line.join(" "));
    }
    session.send_ctrl(TAG_CTRL, b"done")?;
    session.expect_ctrl("bye")?;
    many::close_all(&session, eps.split_off(1), CloseMode::Flush);
    let close = session.ep.close(CloseMode::Flush).map_err(|s| format!("close failed: {}", detailed(s)))?;
    // The server may hang up first; a reset while closing is fine.
    let _ = session.wait(close, "the endpoint to close");
    Ok(reports)
}

/// Prints the transport the endpoint runs on (text output), and fails when `--tls` asked for DPDK
/// or verbs alone (besides the TCP that carries connection setup) and the endpoint is on
/// something else.
fn check_transport(session: &Session, out: &Output) -> Result<(), String> {
    let attr = session.ep.query().map_err(|s| format!("cannot query the endpoint: {}", detailed(s)))?;
    let on = attr.transports.join(",");
    if out.format == Format::Text {
        println!("# endpoint transports={on}");
    }
    let data: Vec<&str> =
        out.tls.split(',').map(str::trim).filter(|t| !matches!(*t, "tcp" | "uring" | "")).collect();
    if data == ["dpdk"] && attr.transports != ["dpdk"] {
        return Err(format!(
            "--tls {} asked for DPDK but the endpoint runs on {on} (is ZCX_DPDK_PORT set on both sides?)",
            out.tls
        ));
    }
    if data == ["verbs"] && attr.transports != ["verbs"] {
        return Err(format!(
            "--tls {} asked for verbs but the endpoint runs on {on} (do both sides have a device, and \
             GIDs that reach each other? see ZCX_VERBS_DEVICE and ZCX_VERBS_GID_INDEX)",
            out.tls
        ));
    }
    Ok(())
}

/// The progress line on stderr: redrawn at most every 200 ms, erased when the test ends.
pub struct Progress {
    enabled: bool,
    label: String,
    total: u64,
    last: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    fn new(enabled: bool, spec: &TestSpec) -> Progress {
        Progress {
            enabled,
            label: format!("{} size={}", spec.kind, spec.size),
            total: spec.total(),
            last: std::cell::Cell::new(None),
        }
    }

    /// Called now and then with the messages done so far (warm-up included).
    #[inline]
    fn update(&self, done: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self.last.get().is_some_and(|t| now - t < Duration::from_millis(200)) {
            return;
        }
        self.last.set(Some(now));
        let pct = done as f64 * 100.0 / self.total.max(1) as f64;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{}: {done}/{} ({pct:.0}%)", self.label, self.total);
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.enabled && self.last.get().is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// One test being run by the client.
struct Test<'a> {
    s: &'a Session,
    /// The endpoints messages go over, round-robin: the session's alone but with `--endpoints`.
    eps: &'a [zcx::Endpoint],
    spec: TestSpec,
    batch: u64,
    progress: Progress,
}

impl Test<'_> {
    fn run(&self) -> Result<Report, String> {
        Ok(match self.spec.kind {
            TestKind::TagLat => Report::Latency(self.tag_lat(false)?),
            TestKind::TagSyncLat => Report::Latency(self.tag_lat(true)?),
            TestKind::TagBw => Report::Bandwidth(self.tag_bw()?),
            TestKind::PutLat => Report::Latency(self.put_lat()?),
            TestKind::PutBw => Report::Bandwidth(self.put_bw()?),
            TestKind::GetLat => Report::Latency(self.get_lat()?),
            TestKind::GetBw => Report::Bandwidth(self.get_bw()?),
            TestKind::AtomicAddLat | TestKind::FaddLat | TestKind::CswapLat => {
                Report::Latency(self.atomic_lat()?)
            }
            TestKind::AmLat => Report::Latency(self.am_lat()?),
            TestKind::AmBw => Report::Bandwidth(self.am_bw()?),
            TestKind::StreamLat => Report::Latency(self.stream_lat()?),
            TestKind::StreamBw => Report::Bandwidth(self.stream_bw()?),
        })
    }

    fn name(&self) -> &'static str {
        self.spec.kind.name()
    }

    /// Writes message `n` into `buf` when validating (the client's messages may be corrupted on
    /// purpose, see [`pattern`]).
    fn fill(&self, buf: &mut PerfBuf, n: u64) {
        if self.spec.validate {
            pattern::fill(buf.bytes_mut(), n, true);
        }
    }

    /// Checks a received message: its length always, its bytes when validating.
    fn check(&self, bytes: &[u8], length: usize, n: u64) -> Result<(), String> {
        if length != self.spec.size {
            return Err(format!("message {n} has {length} bytes, expected {}", self.spec.size));
        }
        if self.spec.validate {
            pattern::check(self.name(), bytes, n, 0..0)?;
        }
        Ok(())
    }

    /// Runs `round(n)` for the warm-up messages, then for the measured ones under the clock.
    fn ping_pong(&self, mut round: impl FnMut(u64) -> Result<(), String>) -> Result<Latency, String> {
        let spec = &self.spec;
        for n in 0..spec.warmup {
            round(n)?;
            if n % 1024 == 0 {
                self.progress.update(n);
            }
        }
        let mut clock = LatClock::start(spec.iters, self.batch);
        for n in spec.warmup..spec.total() {
            round(n)?;
            clock.tick();
            if n % 1024 == 0 {
                self.progress.update(n);
            }
        }
        let (batches, hist) = clock.finish();
        Ok(Latency { spec: *spec, batches, hist })
    }

    /// Runs `phase(first, count)` for the warm-up messages, then times it for the measured ones.
    fn streamed(&self, mut phase: impl FnMut(u64, u64) -> Result<(), String>) -> Result<Bandwidth, String> {
        let spec = &self.spec;
        if spec.warmup > 0 {
            phase(0, spec.warmup)?;
        }
        let start = Instant::now();
        phase(spec.warmup, spec.iters)?;
        Ok(Bandwidth { spec: *spec, elapsed: start.elapsed() })
    }

    /// Issues messages `first..first + count` with at most a window of them outstanding, each
    /// with a buffer of `bufs`, and hands each completion to `done` with its message number.
    fn windowed(
        &self,
        bufs: &mut Vec<PerfBuf>,
        first: u64,
        count: u64,
        mut issue: impl FnMut(PerfBuf, u64) -> Result<Request<PerfBuf>, String>,
        mut done: impl FnMut(&Completion<PerfBuf>, u64) -> Result<(), String>,
    ) -> Result<(), String> {
        let window = bufs.len();
        let period = self.progress_period();
        let mut inflight: VecDeque<(u64, Request<PerfBuf>)> = VecDeque::with_capacity(window);
        // Hands a completion to `done` and its buffer back to the pool.
        let mut retire = |completion: Completion<PerfBuf>, n: u64, bufs: &mut Vec<PerfBuf>| {
            done(&completion, n)?;
            bufs.push(completion.buf);
            Ok::<(), String>(())
        };
        for n in first..first + count {
            if bufs.is_empty() {
                let (n, request) = inflight.pop_front().expect("an operation is in flight");
                retire(self.s.wait(request, "an operation of the window")?, n, bufs)?;
            }
            let mut buf = bufs.pop().expect("a free buffer");
            self.fill(&mut buf, n);
            let request = issue(buf, n)?;
            if inflight.is_empty() && request.completed_at_once() {
                // Done already (a shared-memory put or get): its buffer is free again at once,
                // without a trip through the window's queue (completions stay in order: none is
                // queued before it).
                retire(self.s.wait(request, "an operation of the window")?, n, bufs)?;
            } else {
                inflight.push_back((n, request));
            }
            // Operations that complete at once (shared-memory puts and gets) never wait, so the
            // worker is progressed here too: it keeps sending keepalives, without which the
            // server would take the silence for a dead client (see `progress_period`).
            if n % period == 0 {
                self.s.worker.progress();
            }
            if n % 64 == 0 {
                self.progress.update(n);
            }
        }
        while let Some((n, request)) = inflight.pop_front() {
            retire(self.s.wait(request, "an operation of the window")?, n, bufs)?;
        }
        Ok(())
    }

    /// Tells the server a one-sided test is over and returns its verdict on what it found in its
    /// memory.
    fn end_one_sided(&self) -> Result<(), String> {
        self.s.send_ctrl(TAG_CTRL, b"end")?;
        let verdict = self.s.recv_ctrl(TAG_CTRL, "the server's verdict")?;
        match verdict.strip_prefix(b"fail ") {
            Some(reason) => Err(format!("the server found: {}", String::from_utf8_lossy(reason))),
            None if verdict == b"ok" => Ok(()),
            None => Err(format!("unexpected verdict {:?}", String::from_utf8_lossy(&verdict))),
        }
    }

    fn tag_lat(&self, sync: bool) -> Result<Latency, String> {
        let s = self.s;
        if self.eps.len() > 1 {
            return self.tag_lat_many(sync);
        }
        self.message_ping_pong(
            |buf, _| {
                s.ep.tag_send(buf, TAG_DATA, TagSendParams { sync, ..TagSendParams::default() })
                    .map_err(|st| format!("tag_send failed: {}", detailed(st)))
            },
            |buf, _| {
                s.worker
                    .tag_recv(buf, TAG_DATA, u64::MAX, RequestParams::default())
                    .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
            },
        )
    }

    /// tag_lat over many endpoints: message `n` over endpoint `n mod N`, tagged with that index,
    /// and its answer received by that tag.
    fn tag_lat_many(&self, sync: bool) -> Result<Latency, String> {
        let (s, eps) = (self.s, self.eps);
        let count = eps.len() as u64;
        self.message_ping_pong(
            |buf, n| {
                let index = n % count;
                eps[index as usize]
                    .tag_send(buf, TAG_MANY | index, TagSendParams { sync, ..TagSendParams::default() })
                    .map_err(|st| format!("tag_send failed: {}", detailed(st)))
            },
            |buf, n| {
                s.worker
                    .tag_recv(buf, TAG_MANY | (n % count), u64::MAX, RequestParams::default())
                    .map_err(|st| format!("tag_recv failed: {}", detailed(st)))
            },
        )
    }

    /// A ping-pong of two-sided messages: `send` issues the ping, then `recv` posts the receive
    /// for the pong while the ping travels, as ucx_perftest does, so posting is not part of the
    /// round trip.
    fn message_ping_pong(
        &self,
        send: impl Fn(PerfBuf, u64) -> Result<Request<PerfBuf>, String>,
        recv: impl Fn(PerfBuf, u64) -> Result<Request<PerfBuf>, String>,
    ) -> Result<Latency, String> {
        let s = self.s;
        let mut bufs = pool(s, self.spec.mem, 2, self.spec.size, true, 0xA5)?;
        let (mut sbuf, mut rbuf) = (bufs.pop(), bufs.pop());
        self.ping_pong(|n| {
            let mut buf = sbuf.take().expect("buffer");
            self.fill(&mut buf, n);
            let ping = send(buf, n)?;
            let pong = recv(rbuf.take().expect("buffer"), n)?;
            sbuf = Some(s.wait(ping, "the ping to leave")?.buf);
            let pong = s.wait(pong, "the pong")?;
            self.check(pong.buf.bytes(), pong.info.length, n)?;
            rbuf = Some(pong.buf);
            Ok(())
        })
    }

    fn tag_bw(&self) -> Result<Bandwidth, String> {
        let s = self.s;
        self.message_stream(|buf| {
            s.ep.tag_send(buf, TAG_DATA, TagSendParams::default())
                .map_err(|st| format!("tag_send failed: {}", detailed(st)))
        })
    }

    /// A bandwidth test of two-sided messages: a window of `send`s, then the server's
    /// acknowledgement that it received them all, for the warm-up and the measured phase.
    fn message_stream(
        &self,
        send: impl Fn(PerfBuf) -> Result<Request<PerfBuf>, String>,
    ) -> Result<Bandwidth, String> {
        let s = self.s;
        let spec = self.spec;
        let mut bufs = pool(s, spec.mem, spec.window as usize, spec.size, spec.validate, 0xA5)?;
        self.streamed(|first, count| {
            let ack = s.post_ctrl(TAG_ACK)?;
            self.windowed(&mut bufs, first, count, |buf, _| send(buf), |_, _| Ok(()))?;
            s.take_ctrl(ack, "the server's acknowledgement").map(drop)
        })
    }

    fn put_lat(&self) -> Result<Latency, String> {
        let s = self.s;
        let size = self.spec.size;
        let region = s.remote_region(size)?;
        let (rkey, base) = s.exchange_rkeys(&region)?;
        let offset = counter_offset(size);
        // SAFETY: `offset + 8 <= size <= region length`, and the offset is 8-byte aligned.
        let mine = unsafe { region.address().add(offset) } as *const u64;
        let mut sbuf = pool(s, self.spec.mem, 1, size, true, 0xA5)?.pop();
        // Small puts are implicit, as ucx_perftest's (nothing waits for their acknowledgement:
        // the peer's answering put is what each iteration waits for); the flush at the end
        // reports any refusal. Larger ones are zero-copy requests, waited for each time.
        let implicit = size <= IMPLICIT_PUT_MAX;
        let latency = self.ping_pong(|n| {
            let seq = n + 1;
            let mut buf = sbuf.take().expect("buffer");
            self.fill(&mut buf, n);
            buf.bytes_mut()[offset..offset + 8].copy_from_slice(&seq.to_ne_bytes());
            let put = if implicit {
                s.ep.put_nbi(buf.bytes(), base, &rkey)
                    .map_err(|st| format!("put failed: {}", detailed(st)))?;
                sbuf = Some(buf);
                None
            } else {
                Some(
                    s.ep.put(buf, base, &rkey, RequestParams::default())
                        .map_err(|st| format!("put failed: {}", detailed(st)))?,
                )
            };
            // SAFETY: `mine` points into the live region; the peer's puts write it, so read it volatile.
            s.poll_until("the peer's put", || unsafe { std::ptr::read_volatile(mine) } == seq)?;
            std::sync::atomic::fence(Ordering::Acquire);
            if self.spec.validate {
                // SAFETY: the region is mapped for `size` bytes; the server writes it again only
                // after our next put, so it is stable while we read it.
                let got = unsafe { std::slice::from_raw_parts(region.address(), size) };
                pattern::check(self.name(), got, n, offset..offset + 8)?;
            }
            if let Some(put) = put {
                sbuf = Some(s.wait(put, "the put's acknowledgement")?.buf);
            }
            Ok(())
        })?;
        let flush = s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?;
        s.wait(flush, "the flush of the puts")?;
        drop(rkey);
        Ok(latency)
    }

    /// Puts of up to [`IMPLICIT_PUT_MAX`] bytes are implicit (`put_nbi`, one buffer reused at
    /// once, as `ucx_perftest` reuses its one buffer), with a flush every few windows for flow
    /// control; larger ones go through requests, sent from a window of registered buffers
    /// without a copy.
    fn put_bw(&self) -> Result<Bandwidth, String> {
        let s = self.s;
        let spec = self.spec;
        let (rkey, base) = s.exchange_rkeys(&s.remote_region(8)?)?;
        // Validated puts go to one of `window` slots of the server's region, so the last window
        // of messages can be checked there; otherwise all to its start.
        let slot = |n: u64| if spec.validate { (n % u64::from(spec.window)) * spec.size as u64 } else { 0 };
        let bw = if spec.size <= IMPLICIT_PUT_MAX {
            let mut buf = pool(s, spec.mem, 1, spec.size, spec.validate, 0xA5)?.pop().expect("one buffer");
            self.streamed(|first, count| {
                self.implicit_puts(&mut buf, first, count, |buf, n| {
                    if spec.validate && n > 0 && n % u64::from(spec.window) == 0 {
                        // The slots are used again: UCP orders puts (implicit ones are not
                        // waited for) only across a fence, as ucp_worker_fence says.
                        s.worker.fence().map_err(|st| format!("fence failed: {}", detailed(st)))?;
                    }
                    s.ep.put_nbi(buf, base + slot(n), &rkey)
                        .map_err(|st| format!("put failed: {}", detailed(st)))
                })
            })?
        } else {
            let mut bufs = pool(s, spec.mem, spec.window as usize, spec.size, spec.validate, 0xA5)?;
            self.streamed(|first, count| {
                self.windowed(
                    &mut bufs,
                    first,
                    count,
                    |buf, n| {
                        s.ep.put(buf, base + slot(n), &rkey, RequestParams::default())
                            .map_err(|st| format!("put failed: {}", detailed(st)))
                    },
                    |_, _| Ok(()),
                )?;
                let flush = s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?;
                s.wait(flush, "the flush").map(drop)
            })?
        };
        self.end_one_sided()?;
        Ok(bw)
    }

    /// Issues messages `first..first + count` from `buf`, each filled (when validating) just
    /// before `issue` and free again when it returns; then a flush, whose status is theirs.
    /// Every [`Test::flush_period`] messages a flush starts ([`FlushPacer`]).
    fn implicit_puts(
        &self,
        buf: &mut PerfBuf,
        first: u64,
        count: u64,
        mut issue: impl FnMut(&[u8], u64) -> Result<(), String>,
    ) -> Result<(), String> {
        let s = self.s;
        let mut pacer = FlushPacer::new(self.flush_period());
        let period = self.progress_period();
        for n in first..first + count {
            self.fill(buf, n);
            issue(buf.bytes(), n)?;
            // For the keepalives (see `windowed`).
            if n % period == 0 {
                s.worker.progress();
            }
            if pacer.issued(s)? {
                self.progress.update(n);
            }
        }
        pacer.finish(s)
    }

    /// Operations issued between two calls of the worker's progress where nothing else calls
    /// it (operations done at once): up to 64 KiB of them, at most 16. A quiet worker's call is
    /// a look at its doorbells, about half of an 8-byte direct put's instructions, which
    /// `ucx_perftest` does not spend (it progresses only when its window is full); a 1 MiB
    /// operation still progresses every time, since a validating debug run spends tens of
    /// milliseconds on one, and the worker's timers (its keepalives) run only every few calls.
    fn progress_period(&self) -> u64 {
        ((64 << 10) / self.spec.size.max(1) as u64).clamp(1, 16)
    }

    /// Implicit operations between two flushes: a window's worth of 64 KiB, at least a window of
    /// messages and at most 4096 (a flush is a round trip: rarely, for small messages).
    fn flush_period(&self) -> u64 {
        let window = u64::from(self.spec.window).max(1);
        let per_window = ((64 << 10) / self.spec.size.max(1) as u64).clamp(1, 4096);
        (window * per_window).min(4096).max(window)
    }

    /// Gets read the server's region, which holds message 0's pattern for the whole test.
    fn get_lat(&self) -> Result<Latency, String> {
        let s = self.s;
        let (rkey, base) = s.exchange_rkeys(&s.remote_region(8)?)?;
        let mut rbuf = pool(s, self.spec.mem, 1, self.spec.size, true, 0)?.pop();
        let latency = self.ping_pong(|_| {
            let mut buf = rbuf.take().expect("buffer");
            // As `ucp_get_nbx` returning UCS_OK: a get done before the call returns (over shared
            // memory, once the owner vouched for the key) needs no request; any other is one,
            // waited for.
            match s.ep.get_direct(buf.bytes_mut(), base, &rkey) {
                Some(Ok(())) => {}
                Some(Err(st)) => return Err(format!("get failed: {}", detailed(st))),
                None => {
                    let get =
                        s.ep.get(buf, base, &rkey, RequestParams::default())
                            .map_err(|st| format!("get failed: {}", detailed(st)))?;
                    buf = s.wait(get, "the get")?.buf;
                }
            }
            if self.spec.validate {
                pattern::check(self.name(), buf.bytes(), 0, 0..0)?;
            }
            rbuf = Some(buf);
            Ok(())
        })?;
        self.end_one_sided()?;
        Ok(latency)
    }

    fn get_bw(&self) -> Result<Bandwidth, String> {
        let s = self.s;
        let spec = self.spec;
        let (rkey, base) = s.exchange_rkeys(&s.remote_region(8)?)?;
        let mut bufs = pool(s, spec.mem, spec.window as usize, spec.size, spec.validate, 0)?;
        let bw = self.streamed(|first, count| {
            self.windowed(
                &mut bufs,
                first,
                count,
                |buf, _| {
                    s.ep.get(buf, base, &rkey, RequestParams::default())
                        .map_err(|st| format!("get failed: {}", detailed(st)))
                },
                |done, _| {
                    if spec.validate {
                        pattern::check(self.name(), done.buf.bytes(), 0, 0..0)?;
                    }
                    Ok(())
                },
            )
        })?;
        self.end_one_sided()?;
        Ok(bw)
    }

    /// atomic_add_lat, fadd_lat, cswap_lat on the server's zeroed word; the server checks that
    /// it ends up counting every operation.
    ///
    /// fadd_lat and cswap_lat issue one operation at a time and wait for its fetched value, which
    /// is checked, as `ucx_perftest`'s ucp_fadd and ucp_cswap do (their window is one request).
    /// Every CSWAP compares with the current value, so each one stores.
    ///
    /// atomic_add_lat is `ucx_perftest`'s ucp_add: adds whose result nobody waits for, issued
    /// back to back, and the time per add includes the flush that ends the run (and the
    /// warm-up), which completes once the target applied every add. zcx has no separate
    /// non-fetching atomic (`ucp_atomic_op_nbx` without a reply buffer is the same operation
    /// with the request freed, in the C library too): each add's request is dropped at once,
    /// `ucp_request_free`, and the operation goes on. As for implicit puts, a flush starts every
    /// few thousand adds so the transport never queues a whole run's ([`FlushPacer`]): flushes
    /// `ucx_perftest` does not do, so zcx's side does more, not less.
    fn atomic_lat(&self) -> Result<Latency, String> {
        let s = self.s;
        let (rkey, base): (EpRkey, u64) = s.exchange_rkeys(&s.remote_region(8)?)?;
        let (size, mask) = if self.spec.size == 4 {
            (AtomicSize::U32, u64::from(u32::MAX))
        } else {
            (AtomicSize::U64, u64::MAX)
        };
        let kind = self.spec.kind;
        let spec = self.spec;
        let mut pacer = FlushPacer::new(self.flush_period());
        let period = self.progress_period();
        let latency = if kind == TestKind::AtomicAddLat {
            self.ping_pong(|n| {
                // Done at once on the mapped word when it can be (as `ucp_atomic_op_nbx` without a
                // reply buffer completes at once); otherwise a request freed at once: the add goes
                // on, and nothing waits for the value it fetches.
                match s.ep.atomic_direct(AtomicOp::Add, size, 1, 0, base, &rkey) {
                    Some(done) => drop(done.map_err(|st| format!("atomic add failed: {}", detailed(st)))?),
                    None => {
                        let add =
                            s.ep.atomic(AtomicOp::Add, size, 1, 0, base, &rkey, RequestParams::default());
                        drop(add.map_err(|st| format!("atomic add failed: {}", detailed(st)))?);
                    }
                }
                // For the keepalives (see `windowed`).
                if n % period == 0 {
                    s.worker.progress();
                }
                pacer.issued(s)?;
                if n + 1 == spec.warmup || n + 1 == spec.total() {
                    pacer.finish(s)?;
                }
                Ok(())
            })?
        } else {
            self.ping_pong(|n| {
                let (op, value, compare) = match kind {
                    TestKind::CswapLat => (AtomicOp::Cswap, (n + 1) & mask, n & mask),
                    _ => (AtomicOp::Add, 1, 0),
                };
                // As `ucp_atomic_op_nbx` returning UCS_OK: an atomic done before the call returns
                // (on the mapped word, over shared memory) needs no request; any other is one.
                let fetched = match s.ep.atomic_direct(op, size, value, compare, base, &rkey) {
                    Some(done) => done.map_err(|st| format!("atomic failed: {}", detailed(st)))?,
                    None => {
                        let request =
                            s.ep.atomic(op, size, value, compare, base, &rkey, RequestParams::default())
                                .map_err(|st| format!("atomic failed: {}", detailed(st)))?;
                        s.wait(request, "the atomic")?.info.value
                    }
                };
                if fetched != n & mask {
                    return Err(format!("atomic {n} fetched {fetched}, expected {}", n & mask));
                }
                Ok(())
            })?
        };
        self.end_one_sided()?;
        Ok(latency)
    }

    fn am_lat(&self) -> Result<Latency, String> {
        let s = self.s;
        let validate = self.spec.validate.then_some(self.name());
        let pongs = AmSink::install(s, AM_PONG, 1, self.spec.size, validate)?;
        let mut sbuf = pool(s, self.spec.mem, 1, self.spec.size, true, 0xA5)?.pop();
        self.ping_pong(|n| {
            let mut buf = sbuf.take().expect("buffer");
            self.fill(&mut buf, n);
            let send =
                s.ep.am_send(AM_PING, &[], buf, AmSendParams::default())
                    .map_err(|st| format!("am_send failed: {}", detailed(st)))?;
            pongs.wait_for(s, n + 1)?;
            sbuf = Some(s.wait(send, "the ping to leave")?.buf);
            Ok(())
        })
    }

    fn am_bw(&self) -> Result<Bandwidth, String> {
        let s = self.s;
        self.message_stream(|buf| {
            s.ep.am_send(AM_PING, &[], buf, AmSendParams::default())
                .map_err(|st| format!("am_send failed: {}", detailed(st)))
        })
    }

    fn stream_lat(&self) -> Result<Latency, String> {
        let s = self.s;
        self.message_ping_pong(
            |buf, _| {
                s.ep.stream_send(buf, RequestParams::default())
                    .map_err(|st| format!("stream_send failed: {}", detailed(st)))
            },
            |buf, _| {
                s.ep.stream_recv(buf, true, RequestParams::default())
                    .map_err(|st| format!("stream_recv failed: {}", detailed(st)))
            },
        )
    }

    fn stream_bw(&self) -> Result<Bandwidth, String> {
        let s = self.s;
        self.message_stream(|buf| {
            s.ep.stream_send(buf, RequestParams::default())
                .map_err(|st| format!("stream_send failed: {}", detailed(st)))
        })
    }
}

/// The flushes that bound a run of implicit operations (puts with `put_nbi`, atomics whose
/// requests were freed): one starts every `period` operations and the oldest is waited for when
/// more than two run, which bounds what the transport holds (copies queued for a socket) while
/// the next operations go out during the flushes' round trips.
struct FlushPacer {
    period: u64,
    until_flush: u64,
    flushes: VecDeque<Request<()>>,
}

impl FlushPacer {
    fn new(period: u64) -> FlushPacer {
        let period = period.max(1);
        FlushPacer { period, until_flush: period, flushes: VecDeque::with_capacity(3) }
    }

    /// Counts one operation issued on `s`'s endpoint; true when it started a flush.
    fn issued(&mut self, s: &Session) -> Result<bool, String> {
        self.until_flush -= 1;
        if self.until_flush > 0 {
            return Ok(false);
        }
        self.until_flush = self.period;
        self.flushes.push_back(s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?);
        if self.flushes.len() > 2 {
            s.wait(self.flushes.pop_front().expect("a flush"), "a flush of the operations")?;
        }
        Ok(true)
    }

    /// Starts a last flush and waits for every flush: then every operation issued so far has
    /// completed at the target, and any refusal was reported by its flush.
    fn finish(&mut self, s: &Session) -> Result<(), String> {
        self.flushes.push_back(s.ep.flush().map_err(|st| format!("flush failed: {}", detailed(st)))?);
        while let Some(flush) = self.flushes.pop_front() {
            s.wait(flush, "a flush of the operations")?;
        }
        self.until_flush = self.period;
        Ok(())
    }
}

/// Where the 8-byte sequence number of put_lat sits in a message of `size` bytes: its last
/// aligned word.
pub fn counter_offset(size: usize) -> usize {
    (size - 8) & !7
}
