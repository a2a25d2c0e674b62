//! Real process and connection failures, with UCX's semantics: no listener, a rejected request, a
//! peer killed mid-rendezvous, a peer that goes silent (keepalive), closes racing each other, a
//! close from inside the error handler, and a peer closing gracefully.
//!
//! Every wait is bounded: a test that would hang fails with a message instead.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use zcx::{
    CloseMode, Config, Context, ContextParams, Endpoint, EpParams, Features, ListenerParams, MemMapParams,
    Prot, Request, RequestParams, Status, TagSendParams, Worker, WorkerParams,
};

const BIG: usize = 64 << 20;
/// The parent's message to the frozen child: more than the child can pull over shared memory in
/// the few progress calls it makes before it freezes (a receiver copies a few MiB per call), so
/// the transfer is still under way when the child dies, whichever transport carries it.
const HUGE: usize = 4 * BIG;

fn context_with(keepalive: Option<&str>) -> Context {
    let mut config = Config::from_vars(std::env::vars()).expect("config");
    if let Some(interval) = keepalive {
        config.modify("KEEPALIVE_INTERVAL", interval).expect("keepalive interval");
    }
    let features = Features::TAG | Features::STREAM | Features::AM | Features::RMA;
    Context::new(&ContextParams::new(features), &config).expect("context")
}

fn worker(ctx: &Context) -> Worker {
    ctx.create_worker(&WorkerParams::default()).expect("worker")
}

/// Progresses `workers` until `done`, panicking after `timeout`.
fn progress_until(workers: &[&Worker], what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        for w in workers {
            w.progress();
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
    }
}

/// Progresses `workers` for `duration`.
fn progress_for(workers: &[&Worker], duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        for w in workers {
            w.progress();
        }
    }
}

/// The final status of `request` (OK or the error), progressing `workers` meanwhile.
fn status_of<B: Send + 'static>(workers: &[&Worker], what: &str, request: Request<B>) -> Status {
    progress_until(workers, what, Duration::from_secs(10), || request.is_done());
    request.status()
}

/// Records every call of an endpoint's error handler.
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<Status>>>);

impl Errors {
    fn handler(&self) -> impl Fn(&Endpoint, Status) + Send + Sync + 'static {
        let calls = Arc::clone(&self.0);
        move |_ep: &Endpoint, status| calls.lock().unwrap().push(status)
    }

    fn calls(&self) -> Vec<Status> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A client/server pair over 127.0.0.1 in this process; the server endpoint is accepted with
/// `server_params` (its conn request filled in).
struct Pair {
    client: Worker,
    server: Worker,
    client_ep: Endpoint,
    server_ep: Endpoint,
    _listener: zcx::Listener,
}

impl Pair {
    fn new(client_errors: Option<&Errors>, server_errors: Option<&Errors>) -> Pair {
        Pair::with_keepalive(client_errors, server_errors, None)
    }

    fn with_keepalive(
        client_errors: Option<&Errors>,
        server_errors: Option<&Errors>,
        keepalive: Option<&str>,
    ) -> Pair {
        let ctx = context_with(keepalive);
        let client = worker(&ctx);
        let server = worker(&ctx);
        let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
        let slot = Arc::clone(&accepted);
        let server_clone = server.clone();
        let server_handler = server_errors.map(Errors::handler).map(|h| Arc::new(h) as zcx::ErrHandler);
        let listener = server
            .listen(ListenerParams {
                sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                conn_handler: Some(Box::new(move |request| {
                    let mut params = EpParams::conn_request(request);
                    if let Some(handler) = &server_handler {
                        params.err_mode = zcx::ErrMode::Peer;
                        params.err_handler = Some(Arc::clone(handler));
                    }
                    let ep = server_clone.create_endpoint(params).expect("accept");
                    *slot.lock().unwrap() = Some(ep);
                })),
                ..Default::default()
            })
            .unwrap();
        let mut params = EpParams::sockaddr(listener.sockaddr());
        if let Some(errors) = client_errors {
            params = params.with_err_handler(errors.handler());
        }
        let client_ep = client.create_endpoint(params).unwrap();
        progress_until(&[&client, &server], "accept", Duration::from_secs(10), || {
            accepted.lock().unwrap().is_some()
        });
        let server_ep = accepted.lock().unwrap().take().unwrap();
        progress_until(&[&client, &server], "client connected", Duration::from_secs(10), || {
            client_ep.query().unwrap().status == Status::Ok
        });
        Pair { client, server, client_ep, server_ep, _listener: listener }
    }

    fn both(&self) -> [&Worker; 2] {
        [&self.client, &self.server]
    }
}

/// A port on 127.0.0.1 nobody listens on (bound, then released).
fn closed_port() -> SocketAddr {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    drop(socket);
    addr
}

/// Asserts that the endpoint keeps failing with `status`: new operations fail at once.
fn assert_ep_fails_with(ep: &Endpoint, status: Status) {
    assert_eq!(ep.tag_send(b"late".to_vec(), 9, TagSendParams::default()).unwrap_err(), status);
    assert_eq!(ep.tag_send(vec![0u8; 1 << 20], 9, TagSendParams::default()).unwrap_err(), status);
    assert_eq!(ep.stream_send(b"late".to_vec(), RequestParams::default()).unwrap_err(), status);
    assert_eq!(ep.query().unwrap().status, status);
}

// ---------------------------------------------------------------------------------------------
// 1. No listener.

#[test]
fn connecting_to_a_closed_port_fails_every_operation_once() {
    let ctx = context_with(None);
    let w = worker(&ctx);
    let errors = Errors::default();
    let ep = w
        .create_endpoint(EpParams::sockaddr(closed_port()).with_err_handler(errors.handler()))
        .expect("create succeeds; the failure comes from progress");
    // Issued while connecting: queued, then failed with the connection's status.
    let early = ep.tag_send(b"early".to_vec(), 1, TagSendParams::default());
    progress_until(&[&w], "the error handler", Duration::from_secs(10), || errors.count() > 0);
    progress_for(&[&w], Duration::from_millis(100));
    let calls = errors.calls();
    assert_eq!(calls.len(), 1, "error handler calls: {calls:?}");
    let status = calls[0];
    assert!(matches!(status, Status::NotConnected | Status::Unreachable), "{status:?}");
    let early_status = match early {
        Ok(request) => status_of(&[&w], "the early send", request),
        Err(s) => s,
    };
    assert_eq!(early_status, status);
    assert_ep_fails_with(&ep, status);
    // Closing a failed endpoint completes at once.
    let close = ep.close(CloseMode::Force).unwrap();
    assert!(close.is_done());
    assert_eq!(errors.count(), 1);
}

// ---------------------------------------------------------------------------------------------
// 2. Rejected by the server.

#[test]
fn a_rejected_request_fails_the_queued_sends_with_rejected() {
    for explicit in [true, false] {
        let ctx = context_with(None);
        let client = worker(&ctx);
        let server = worker(&ctx);
        let requests: Arc<Mutex<Vec<zcx::ConnRequest>>> = Arc::default();
        let pending = Arc::clone(&requests);
        let listener = server
            .listen(ListenerParams {
                sockaddr: Some("127.0.0.1:0".parse().unwrap()),
                conn_handler: Some(Box::new(move |request| {
                    if explicit {
                        // Answered later with `Listener::reject`.
                        pending.lock().unwrap().push(request);
                    } else {
                        drop(request);
                    }
                })),
                ..Default::default()
            })
            .unwrap();
        let errors = Errors::default();
        let ep = client
            .create_endpoint(EpParams::sockaddr(listener.sockaddr()).with_err_handler(errors.handler()))
            .unwrap();
        // Everything issued before the answer queues on the connecting endpoint.
        let eager = ep.tag_send(b"eager".to_vec(), 1, TagSendParams::default()).unwrap();
        let sync =
            ep.tag_send(b"sync".to_vec(), 2, TagSendParams { sync: true, ..Default::default() }).unwrap();
        let rndv = ep.tag_send(vec![7u8; 1 << 20], 3, TagSendParams::default()).unwrap();
        let stream = ep.stream_send(b"stream".to_vec(), RequestParams::default()).unwrap();
        let stream_recv = ep.stream_recv(vec![0u8; 8], false, RequestParams::default()).unwrap();
        let flush = ep.flush().unwrap();
        let workers = [&client, &server];
        if explicit {
            progress_until(&workers, "the conn request", Duration::from_secs(10), || {
                !requests.lock().unwrap().is_empty()
            });
            assert_eq!(errors.count(), 0, "failed before the server answered");
            let request = requests.lock().unwrap().pop().unwrap();
            listener.reject(request);
        }
        progress_until(&workers, "the error handler", Duration::from_secs(10), || errors.count() > 0);
        progress_for(&workers, Duration::from_millis(100));
        assert_eq!(errors.calls(), vec![Status::Rejected], "explicit reject: {explicit}");
        assert_eq!(status_of(&workers, "eager", eager), Status::Rejected);
        assert_eq!(status_of(&workers, "sync", sync), Status::Rejected);
        assert_eq!(status_of(&workers, "rndv", rndv), Status::Rejected);
        assert_eq!(status_of(&workers, "stream", stream), Status::Rejected);
        assert_eq!(status_of(&workers, "stream recv", stream_recv), Status::Rejected);
        assert_eq!(status_of(&workers, "flush", flush), Status::Rejected);
        assert_ep_fails_with(&ep, Status::Rejected);
        assert_eq!(errors.count(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes for tests 3 and 4.

/// A re-executed copy of this test binary playing a server role; killed (after SIGCONT) on drop.
struct ChildProc {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl ChildProc {
    fn spawn(test_name: &str, role: &str) -> ChildProc {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
            .env(common::ROLE_VAR, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some((_, answer)) = line.split_once('@') {
                    if tx.send(answer.to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildProc { child, lines }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// The child's next answer, progressing `workers` while waiting.
    fn answer(&self, workers: &[&Worker], what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.lines.try_recv() {
                Ok(line) => return line,
                Err(mpsc::TryRecvError::Disconnected) => panic!("child exited before {what}"),
                Err(mpsc::TryRecvError::Empty) => {}
            }
            for w in workers {
                w.progress();
            }
            assert!(Instant::now() < deadline, "timed out waiting for the child's {what}");
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of our own child, which is not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0, "kill({signal})");
    }

    /// SIGKILL and reap.
    fn kill_and_reap(&mut self) {
        self.signal(libc::SIGKILL);
        let status = self.child.wait().expect("wait for the child");
        assert!(!status.success());
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: as in `signal`; the child is not reaped (try_wait said so).
            unsafe { libc::kill(self.pid(), libc::SIGCONT) };
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The child side of tests 3 and 4: a server worker that prints its port, accepts one client,
/// and plays `role`. It gives up on its own after 30 s.
fn child_server(role: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ctx = context_with(Some("100ms"));
    let w = worker(&ctx);
    let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let slot = Arc::clone(&accepted);
    let wc = w.clone();
    let listener = w
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            conn_handler: Some(Box::new(move |request| {
                let params = EpParams::conn_request(request).with_err_handler(|_, _| {});
                *slot.lock().unwrap() = Some(wc.create_endpoint(params).expect("accept"));
            })),
            ..Default::default()
        })
        .unwrap();
    common::answer(&format!("port {}", listener.sockaddr().port()));
    let ep = loop {
        w.progress();
        if let Some(ep) = accepted.lock().unwrap().take() {
            break ep;
        }
        if Instant::now() > deadline {
            return;
        }
    };
    let mut keep = Vec::new();
    match role {
        "rndv" => {
            // Wait for the parent's large message, accept it (the RTR goes out), then announce one
            // of our own and a marker behind it, and freeze mid-transfer.
            while w.tag_probe(1, u64::MAX).is_none() {
                w.progress();
                if Instant::now() > deadline {
                    return;
                }
            }
            let msg = w.tag_probe_remove(1, u64::MAX).unwrap();
            keep.push(msg.recv(vec![0u8; HUGE], RequestParams::default()).unwrap());
            // Over TCP a few progress calls push out what the socket did not take at once. Over
            // shared memory every frame is in the ring when the call returns, and progress would
            // pull the parent's payload: none, so the transfer is surely under way at the kill.
            let rounds = if ep.query().unwrap().transports == ["shm"] { 0 } else { 5 };
            for _ in 0..rounds {
                w.progress();
            }
            let send = ep.tag_send(vec![0x5au8; BIG], 2, TagSendParams::default()).unwrap();
            let marker = ep.tag_send(b"marker".to_vec(), 3, TagSendParams::default()).unwrap();
            for _ in 0..2 * rounds {
                w.progress();
            }
            common::answer("stopping");
            // SAFETY: raise(2) with a valid signal; the parent kills us while we are stopped.
            unsafe { libc::raise(libc::SIGSTOP) };
            drop((send, marker));
        }
        "idle" => common::answer("ready"),
        "helper" => {
            // A target that busy-polls, so it takes part in the parent's large puts and gets, until
            // the parent kills it.
            let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
            let region = ctx.mem_map(&MemMapParams::alloc(HELPED_PUT).prot(prot)).expect("target region");
            let packed = region.rkey_pack().expect("pack");
            common::answer(&format!("rkey {:x} {}", region.address() as usize, common::to_hex(&packed)));
            while Instant::now() < deadline {
                w.progress();
            }
            return;
        }
        other => panic!("unknown role {other}"),
    }
    // Sleep between events rather than spin, so the parent (and other tests on a small machine)
    // get the CPU: keepalive timers wake `wait` too.
    while Instant::now() < deadline {
        w.progress();
        w.wait().expect("wait");
    }
    drop(keep);
}

// ---------------------------------------------------------------------------------------------
// 3b. SIGKILL of a put (get) target while it copies part of the initiator's large puts (gets).

const HELPED_PUT: usize = 4 << 20;

/// Large puts over shared memory are copied by both sides (`ZCX_SHM_HELP`). A target killed
/// while the initiator keeps putting leaves no put hanging: each one completes or fails at once,
/// the endpoint fails through the error handler, and the loop ends in bounded time.
#[test]
fn a_put_target_killed_mid_help_leaves_no_put_hanging() {
    if let Some(role) = common::child_role() {
        return child_server(&role);
    }
    target_killed_mid_help("a_put_target_killed_mid_help_leaves_no_put_hanging", false);
}

/// As [`a_put_target_killed_mid_help_leaves_no_put_hanging`], for large gets: the target copies
/// part of each get into the initiator's region until it is killed.
#[test]
fn a_get_target_killed_mid_help_leaves_no_get_hanging() {
    if let Some(role) = common::child_role() {
        return child_server(&role);
    }
    target_killed_mid_help("a_get_target_killed_mid_help_leaves_no_get_hanging", true);
}

/// Large puts (gets, with `get`) to a helping target that is killed after a few of them: each
/// one around the kill completes or fails at once, and the endpoint fails through its handler.
fn target_killed_mid_help(test: &str, get: bool) {
    let mut child = ChildProc::spawn(test, "helper");
    let ctx = context_with(Some("100ms"));
    let a = worker(&ctx);
    let workers = [&a];
    let port: u16 = child.answer(&workers, "port").strip_prefix("port ").unwrap().parse().unwrap();
    let errors = Errors::default();
    let ep = a
        .create_endpoint(
            EpParams::sockaddr(SocketAddr::from(([127, 0, 0, 1], port))).with_err_handler(errors.handler()),
        )
        .unwrap();
    let answer = child.answer(&workers, "rkey");
    let mut words = answer.strip_prefix("rkey ").unwrap().split(' ');
    let base = u64::from_str_radix(words.next().unwrap(), 16).unwrap();
    let packed = common::from_hex(words.next().unwrap());
    progress_until(&workers, "the connection", Duration::from_secs(10), || {
        ep.query().unwrap().status == Status::Ok
    });
    if ep.query().unwrap().transports != ["shm"] {
        eprintln!("skipped: the endpoint is not on shared memory here");
        return;
    }
    let rkey = ep.rkey_unpack(&packed).unwrap();
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    let local = ctx.mem_map(&MemMapParams::alloc(HELPED_PUT).prot(prot)).unwrap();
    let transfer = |what| {
        let slice = local.slice(0, HELPED_PUT).unwrap();
        let request = if get {
            ep.get(slice, base, &rkey, RequestParams::default()).map(|r| status_of(&workers, what, r))
        } else {
            ep.put(slice, base, &rkey, RequestParams::default()).map(|r| status_of(&workers, what, r))
        };
        request.unwrap_or_else(|status| status)
    };
    // The first goes through the target, which vouches for the key; the next go direct.
    assert_eq!(transfer("the vouching operation"), Status::Ok);
    for _ in 0..20 {
        assert_eq!(transfer("one before the kill"), Status::Ok);
    }
    let pid = child.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: kill(2) on our own child, not reaped before this thread is joined.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let start = Instant::now();
    let mut after_failure = 0;
    while after_failure < 20 {
        let failed_before = errors.count() > 0;
        let status = transfer("one around the kill");
        // As an application's loop would: the worker notices the death on a progress call.
        a.progress();
        assert!(
            matches!(status, Status::Ok | Status::EndpointTimeout | Status::ConnectionReset),
            "one around the kill: {status:?}"
        );
        if failed_before {
            after_failure += 1;
            assert_ne!(status, Status::Ok, "one on the failed endpoint succeeded");
        }
        assert!(start.elapsed() < Duration::from_secs(10), "operations still running 10 s after the kill");
    }
    killer.join().unwrap();
    child.kill_and_reap();
    let status = errors.calls()[0];
    assert!(matches!(status, Status::ConnectionReset | Status::EndpointTimeout), "{status:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. SIGKILL of the peer mid-rendezvous.

#[test]
fn peer_killed_mid_rendezvous_fails_every_request_and_the_worker_goes_on() {
    if let Some(role) = common::child_role() {
        return child_server(&role);
    }
    let mut child =
        ChildProc::spawn("peer_killed_mid_rendezvous_fails_every_request_and_the_worker_goes_on", "rndv");
    let ctx = context_with(None);
    let a = worker(&ctx);
    // A second, healthy connection of the same worker, to another worker of this process.
    let b = worker(&ctx);
    let healthy_slot: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let slot = Arc::clone(&healthy_slot);
    let b_listener = b
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
            ..Default::default()
        })
        .unwrap();
    let healthy = a.create_endpoint(EpParams::sockaddr(b_listener.sockaddr())).unwrap();
    let workers = [&a, &b];
    let exchange = |round: u64| {
        let recv = b.tag_recv(vec![0u8; 5], 100 + round, u64::MAX, RequestParams::default()).unwrap();
        let send = healthy.tag_send(b"hello".to_vec(), 100 + round, TagSendParams::default()).unwrap();
        assert_eq!(status_of(&workers, "healthy message", recv), Status::Ok);
        assert_eq!(status_of(&workers, "healthy send", send), Status::Ok);
    };
    exchange(0);

    let port: u16 = child.answer(&workers, "port").strip_prefix("port ").unwrap().parse().unwrap();
    // Posted before connecting, so the child's announcement matches them as it arrives.
    let big_recv = a.tag_recv(vec![0u8; BIG], 2, u64::MAX, RequestParams::default()).unwrap();
    let marker = a.tag_recv(vec![0u8; 16], 3, u64::MAX, RequestParams::default()).unwrap();
    let unmatched = a.tag_recv(vec![0u8; 16], 4, u64::MAX, RequestParams::default()).unwrap();
    let errors = Errors::default();
    let ep = a
        .create_endpoint(
            EpParams::sockaddr(SocketAddr::from(([127, 0, 0, 1], port))).with_err_handler(errors.handler()),
        )
        .unwrap();
    let stream_recv = ep.stream_recv(vec![0u8; 16], false, RequestParams::default()).unwrap();
    let big_send = ep.tag_send(vec![0xa5u8; HUGE], 1, TagSendParams::default()).unwrap();
    assert_eq!(child.answer(&workers, "stop"), "stopping");
    progress_until(&workers, "the marker behind the child's announcement", Duration::from_secs(10), || {
        marker.is_done()
    });
    assert_eq!(marker.status(), Status::Ok);
    // The child is frozen: our 64 MiB fill the socket and stall, its 64 MiB never come.
    progress_for(&workers, Duration::from_millis(30));
    assert!(!big_send.is_done(), "the send ended before the kill: {:?}", big_send.status());
    assert!(!big_recv.is_done(), "the receive ended before the kill: {:?}", big_recv.status());
    assert_eq!(errors.count(), 0);
    child.kill_and_reap();

    progress_until(&workers, "the error handler", Duration::from_secs(10), || errors.count() > 0);
    let status = errors.calls()[0];
    assert!(matches!(status, Status::ConnectionReset | Status::EndpointTimeout), "{status:?}");
    assert_eq!(status_of(&workers, "the large send", big_send), status);
    assert_eq!(status_of(&workers, "the large receive", big_recv), status);
    assert_eq!(status_of(&workers, "the stream receive", stream_recv), status);
    progress_for(&workers, Duration::from_millis(100));
    assert_eq!(errors.count(), 1, "{:?}", errors.calls());
    assert_ep_fails_with(&ep, status);
    // A receive not matched to the dead peer belongs to the worker, not the endpoint: still posted.
    assert!(!unmatched.is_done());
    unmatched.cancel();
    assert_eq!(status_of(&workers, "the cancelled receive", unmatched), Status::Canceled);
    // The worker serves its other connection as before.
    exchange(1);
    assert_eq!(healthy.query().unwrap().status, Status::Ok);
    assert_eq!(errors.count(), 1);
}

// ---------------------------------------------------------------------------------------------
// 4. A silent peer, caught by keepalive.

#[test]
fn a_stopped_peer_fails_with_endpoint_timeout_after_three_keepalives() {
    if let Some(role) = common::child_role() {
        return child_server(&role);
    }
    let interval = Duration::from_millis(100);
    let child = ChildProc::spawn("a_stopped_peer_fails_with_endpoint_timeout_after_three_keepalives", "idle");
    let ctx = context_with(Some("100ms"));
    let w = worker(&ctx);
    let workers = [&w];
    let port: u16 = child.answer(&workers, "port").strip_prefix("port ").unwrap().parse().unwrap();
    let errors = Errors::default();
    let ep = w
        .create_endpoint(
            EpParams::sockaddr(SocketAddr::from(([127, 0, 0, 1], port))).with_err_handler(errors.handler()),
        )
        .unwrap();
    assert_eq!(child.answer(&workers, "ready"), "ready");
    assert_eq!(status_of(&workers, "a flush round trip", ep.flush().unwrap()), Status::Ok);
    // Idle but alive for 10 intervals: keepalives flow both ways, nothing fails.
    progress_for(&workers, interval * 10);
    assert_eq!(errors.count(), 0, "a live idle peer failed: {:?}", errors.calls());
    let stream_recv = ep.stream_recv(vec![0u8; 8], false, RequestParams::default()).unwrap();

    child.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    progress_until(&workers, "the keepalive timeout", Duration::from_secs(5), || errors.count() > 0);
    let elapsed = stopped.elapsed();
    assert_eq!(errors.calls(), vec![Status::EndpointTimeout]);
    assert!(elapsed >= interval, "failed after {elapsed:?}, before the peer could be silent long");
    assert!(elapsed <= interval * 3 + Duration::from_millis(700), "failed only after {elapsed:?}");
    assert_eq!(status_of(&workers, "the stream receive", stream_recv), Status::EndpointTimeout);
    progress_for(&workers, interval * 3);
    assert_eq!(errors.count(), 1);
    assert_ep_fails_with(&ep, Status::EndpointTimeout);
    // Cleanup (SIGCONT + SIGKILL) happens when `child` drops.
}

#[test]
fn a_peer_progressed_only_now_and_then_is_not_taken_for_dead() {
    // A worker with nothing to do skips most of its polls (see the worker's quiet watch); its
    // keepalive timer must still run every few progress calls, however far apart they are.
    let interval = Duration::from_millis(100);
    let server_errors = Errors::default();
    let pair = Pair::with_keepalive(None, Some(&server_errors), Some("100ms"));
    let until = Instant::now() + interval * 10;
    while Instant::now() < until {
        // The client progresses every 5 ms, the server all the time: a quiet client's timers
        // would otherwise run only every 256 calls, more than 1 s apart here.
        let spin = Instant::now() + Duration::from_millis(5);
        while Instant::now() < spin {
            pair.server.progress();
        }
        pair.client.progress();
    }
    assert_eq!(
        server_errors.count(),
        0,
        "a live but sparsely progressed peer failed: {:?}",
        server_errors.calls()
    );
    drop(pair);
}

#[test]
fn a_peer_that_spends_long_between_progress_calls_is_not_taken_for_dead() {
    // Calls 30 ms apart against a 100 ms keepalive (300 ms of silence fails an endpoint). The
    // timers run by time, not every n calls: over TCP the client is never quiet, and its timers
    // used to run every 16th call, 480 ms apart here, so it neither pinged nor stamped what it
    // had received in time. A quiet client (shared memory) runs them every fifth call.
    let interval = Duration::from_millis(100);
    let client_errors = Errors::default();
    let server_errors = Errors::default();
    let pair = Pair::with_keepalive(Some(&client_errors), Some(&server_errors), Some("100ms"));
    progress_until(&[&pair.client, &pair.server], "the client to connect", Duration::from_secs(10), || {
        pair.client_ep.query().unwrap().status == Status::Ok
    });
    let until = Instant::now() + interval * 15;
    while Instant::now() < until {
        let spin = Instant::now() + Duration::from_millis(30);
        while Instant::now() < spin {
            pair.server.progress();
        }
        pair.client.progress();
    }
    assert_eq!(client_errors.count(), 0, "the client failed its live peer: {:?}", client_errors.calls());
    assert_eq!(server_errors.count(), 0, "the server failed its live peer: {:?}", server_errors.calls());
    drop(pair);
}

// ---------------------------------------------------------------------------------------------
// 5. Concurrent closes, and force close of outstanding requests.

fn close_ok(status: Status) -> bool {
    matches!(status, Status::Ok | Status::Canceled | Status::ConnectionReset)
}

#[test]
fn both_sides_closing_at_once_complete_without_hanging() {
    for round in 0..10 {
        let pair = Pair::new(None, None);
        // Some traffic in flight both ways when the closes start.
        // Worker-level receives: not bound to an endpoint until a message matches them.
        let recvs = [
            pair.server.tag_recv(vec![0u8; 4 << 20], 1, u64::MAX, RequestParams::default()).unwrap(),
            pair.client.tag_recv(vec![0u8; 64], 2, u64::MAX, RequestParams::default()).unwrap(),
        ];
        let requests = [
            pair.client_ep.tag_send(vec![1u8; 4 << 20], 1, TagSendParams::default()).unwrap(),
            pair.server_ep.tag_send(vec![2u8; 64], 2, TagSendParams::default()).unwrap(),
            pair.client_ep.stream_send(vec![3u8; 100], RequestParams::default()).unwrap(),
        ];
        let barrier = Arc::new(Barrier::new(2));
        let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sides =
            [(pair.client.clone(), pair.client_ep.clone()), (pair.server.clone(), pair.server_ep.clone())];
        let threads: Vec<_> = sides
            .into_iter()
            .map(|(w, ep)| {
                let barrier = Arc::clone(&barrier);
                let finished = Arc::clone(&finished);
                std::thread::spawn(move || {
                    barrier.wait();
                    let close = ep.close(CloseMode::Flush).expect("close");
                    // Each thread progresses its own worker until both closes completed: a side
                    // whose close is done still has to deliver its disconnect.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let mut counted = false;
                    while !counted || finished.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                        w.progress();
                        if !counted && close.is_done() {
                            counted = true;
                            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        assert!(
                            Instant::now() < deadline,
                            "round {round}: close of {} timed out ({}): endpoint {:?}",
                            w.name(),
                            if counted { "the other side's" } else { "its own" },
                            ep.query()
                        );
                    }
                    close.status()
                })
            })
            .collect();
        for t in threads {
            let status = t.join().expect("closing thread panicked");
            assert!(close_ok(status), "round {round}: close completed with {status:?}");
        }
        // Whatever was in flight on the endpoints ended, one way or another.
        for (i, request) in requests.into_iter().enumerate() {
            let status = status_of(&pair.both(), &format!("send {i} in flight at close"), request);
            assert_ne!(status, Status::InProgress);
        }
        // A receive ended if its message arrived before the close (even partly: a matched
        // rendezvous belongs to the endpoint); one whose message never came stays posted, as in
        // UCP, until cancelled.
        progress_for(&pair.both(), Duration::from_millis(20));
        for (i, recv) in recvs.into_iter().enumerate() {
            recv.cancel();
            let status = status_of(&pair.both(), &format!("receive {i}"), recv);
            assert_ne!(status, Status::InProgress);
        }
        for ep in [&pair.client_ep, &pair.server_ep] {
            assert_ne!(ep.query().unwrap().status, Status::Ok, "round {round}: still usable after close");
        }
    }
}

#[test]
fn a_flush_close_ends_receives_posted_on_the_endpoint() {
    let pair = Pair::new(None, None);
    let stream_recv = pair.client_ep.stream_recv(vec![0u8; 8], false, RequestParams::default()).unwrap();
    let close = pair.client_ep.close(CloseMode::Flush).unwrap();
    assert!(close_ok(status_of(&pair.both(), "the close", close)));
    assert_eq!(status_of(&pair.both(), "the stream receive", stream_recv), Status::Canceled);
}

#[test]
fn a_flush_close_ends_an_incoming_rendezvous() {
    let pair = Pair::new(None, None);
    let recv = pair.server.tag_recv(vec![0u8; BIG], 1, u64::MAX, RequestParams::default()).unwrap();
    let send = pair.client_ep.tag_send(vec![1u8; BIG], 1, TagSendParams::default()).unwrap();
    // Until the server matched the announcement and asked for the data.
    for _ in 0..20 {
        pair.client.progress();
        pair.server.progress();
    }
    // The receiver closes its endpoint while the data comes in.
    let close = pair.server_ep.close(CloseMode::Flush).unwrap();
    assert!(close_ok(status_of(&pair.both(), "the close", close)));
    let recv_status = status_of(&pair.both(), "the incoming rendezvous", recv);
    let send_status = status_of(&pair.both(), "the outgoing rendezvous", send);
    if recv_status != Status::Ok {
        assert_ne!(send_status, Status::InProgress);
    }
}

#[test]
fn a_force_close_cancels_outstanding_requests() {
    let pair = Pair::new(None, None);
    let server_recv = pair.server.tag_recv(vec![0u8; BIG], 1, u64::MAX, RequestParams::default()).unwrap();
    let stream_recv = pair.client_ep.stream_recv(vec![0u8; 8], false, RequestParams::default()).unwrap();
    progress_until(&pair.both(), "the client to connect", Duration::from_secs(10), || {
        pair.client_ep.query().unwrap().status == Status::Ok
    });
    let send = pair.client_ep.tag_send(vec![1u8; BIG], 1, TagSendParams::default()).unwrap();
    // Enough rounds for the announcement to match and the first fragments to move, far too few
    // for 64 MiB: over TCP the socket buffers fill, over shared memory the receiver pulls a few
    // MiB per progress.
    for _ in 0..3 {
        pair.client.progress();
        pair.server.progress();
    }
    // The receiver stops reading: the transfer stalls mid-way.
    progress_for(&[&pair.client], Duration::from_millis(20));
    assert!(!send.is_done(), "the 64 MiB send ended early: {:?}", send.status());
    let close = pair.client_ep.close(CloseMode::Force).unwrap();
    assert_eq!(status_of(&pair.both(), "the force close", close), Status::Ok);
    assert_eq!(status_of(&pair.both(), "the stream receive", stream_recv), Status::Canceled);
    assert_eq!(status_of(&pair.both(), "the rendezvous send", send), Status::Canceled);
    // The peer's side of the transfer fails instead of waiting forever.
    let server_status = status_of(&pair.both(), "the server's receive", server_recv);
    assert!(
        matches!(server_status, Status::ConnectionReset | Status::Canceled),
        "server receive: {server_status:?}"
    );
    assert_eq!(
        pair.client_ep.tag_send(b"x".to_vec(), 1, TagSendParams::default()).unwrap_err(),
        Status::Canceled
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Closing an endpoint from its own error handler.

#[test]
fn the_error_handler_may_close_and_drop_its_endpoint() {
    let closes: Arc<Mutex<Vec<Request<()>>>> = Arc::default();
    let statuses: Arc<Mutex<Vec<Status>>> = Arc::default();
    let slot: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let ctx = context_with(None);
    let client = worker(&ctx);
    let server = worker(&ctx);
    let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let acc = Arc::clone(&accepted);
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| *acc.lock().unwrap() = Some(ep))),
            ..Default::default()
        })
        .unwrap();
    let (c, s, held) = (Arc::clone(&closes), Arc::clone(&statuses), Arc::clone(&slot));
    let handler = move |ep: &Endpoint, status: Status| {
        s.lock().unwrap().push(status);
        // The application's own handle, dropped here after the close.
        let own = held.lock().unwrap().take();
        let close = ep.close(CloseMode::Force).expect("close from the error handler");
        c.lock().unwrap().push(close);
        drop(own);
    };
    let ep =
        client.create_endpoint(EpParams::sockaddr(listener.sockaddr()).with_err_handler(handler)).unwrap();
    progress_until(&[&client, &server], "accept", Duration::from_secs(10), || {
        accepted.lock().unwrap().is_some()
    });
    progress_until(&[&client, &server], "connected", Duration::from_secs(10), || {
        ep.query().unwrap().status == Status::Ok
    });
    *slot.lock().unwrap() = Some(ep);
    // The handler runs on a progress thread.
    let thread = client.start_progress_thread().unwrap();
    let server_ep = accepted.lock().unwrap().take().unwrap();
    let close = server_ep.close(CloseMode::Force).unwrap();
    assert_eq!(status_of(&[&server], "the server's close", close), Status::Ok);
    progress_until(&[&server], "the client's error handler", Duration::from_secs(10), || {
        !statuses.lock().unwrap().is_empty()
    });
    progress_until(&[&server], "the close started in the handler", Duration::from_secs(10), || {
        closes.lock().unwrap().iter().all(Request::is_done)
    });
    for close in closes.lock().unwrap().drain(..) {
        assert!(close_ok(close.status()), "{:?}", close.status());
    }
    // Nobody holds the endpoint any more: the worker forgets it.
    progress_until(&[&server], "the endpoint to be released", Duration::from_secs(10), || {
        client.endpoint_count() == 0
    });
    drop(thread);
    assert_eq!(*statuses.lock().unwrap(), vec![Status::ConnectionReset]);
    assert!(slot.lock().unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// 7. The peer closing gracefully.

#[test]
fn a_graceful_close_reaches_the_peer_as_connection_reset_once() {
    for mode in [CloseMode::Flush, CloseMode::Force] {
        let client_errors = Errors::default();
        let server_errors = Errors::default();
        let pair = Pair::new(Some(&client_errors), Some(&server_errors));
        let server_recv = pair.server_ep.stream_recv(vec![0u8; 64], true, RequestParams::default()).unwrap();
        pair.client_ep.stream_send(vec![5u8; 10], RequestParams::default()).unwrap();
        let close = pair.client_ep.close(mode).unwrap();
        assert!(close_ok(status_of(&pair.both(), "the client's close", close)), "{mode:?}");
        progress_until(&pair.both(), "the server's error handler", Duration::from_secs(10), || {
            server_errors.count() > 0
        });
        progress_for(&pair.both(), Duration::from_millis(200));
        assert_eq!(server_errors.calls(), vec![Status::ConnectionReset], "{mode:?}");
        assert_eq!(client_errors.count(), 0, "closing ran our own error handler ({mode:?})");
        assert_eq!(
            status_of(&pair.both(), "the server's stream receive", server_recv),
            Status::ConnectionReset
        );
        assert_ep_fails_with(&pair.server_ep, Status::ConnectionReset);
    }
}
