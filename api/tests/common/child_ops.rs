//! What the children of the two-process endpoint tests (DPDK, verbs) do the same way: progress
//! until something happened, wait for a request, receive a tag message, check the transport an
//! endpoint is on. Each call gives up after [`PATIENCE`], failing the child.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use zcx::{Endpoint, Request, RequestParams, Status, Worker};

/// Everything one child may take for one step (emulated machines are slow).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// One progress call, and the CPU given up when it found nothing: a software NIC (Soft-RoCE) is
/// the kernel's work on the guest's CPUs, which two busy-polling processes would otherwise
/// starve into spurious retransmission timeouts.
pub fn progress(worker: &Worker) {
    if worker.progress() == 0 {
        std::thread::yield_now();
    }
}

/// Progresses until `done`.
pub fn progress_until(worker: &Worker, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        progress(worker);
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// How `request` ends, success or not.
pub fn finish<B: Send + 'static>(worker: &Worker, request: Request<B>) -> Result<zcx::Completion<B>, Status> {
    let mut request = request;
    let deadline = Instant::now() + PATIENCE;
    loop {
        request = match request.try_take() {
            Ok(result) => return result,
            Err(r) => r,
        };
        progress(worker);
        assert!(Instant::now() < deadline, "request timed out");
    }
}

/// The completion of `request`, which must succeed.
pub fn wait<B: Send + 'static>(worker: &Worker, request: Request<B>) -> zcx::Completion<B> {
    finish(worker, request).expect("request failed")
}

/// The next tag message with `tag`, of at most `len` bytes.
pub fn recv_tag(worker: &Worker, tag: u64, len: usize) -> Vec<u8> {
    let done =
        wait(worker, worker.tag_recv(vec![0u8; len], tag, u64::MAX, RequestParams::default()).unwrap());
    let mut buf = done.buf;
    buf.truncate(done.info.length);
    buf
}

/// Asserts that `ep` is connected and on `transport` alone.
pub fn assert_on(ep: &Endpoint, transport: &str, who: &str) {
    let attr = ep.query().unwrap();
    assert_eq!(attr.status, Status::Ok, "{who}: {attr:?}");
    assert_eq!(attr.transports, [transport], "{who} endpoint is not on {transport}: {attr:?}");
}

/// Messages AM handler collected: `(header, data)`, data empty for a rendezvous one.
pub type AmSeen = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;
/// The receives of rendezvous AM data the handler started.
pub type AmPending = std::sync::Arc<std::sync::Mutex<Vec<Request<Vec<u8>>>>>;

/// Sets AM handler `id`: an eager message is kept whole, a rendezvous one by its header while
/// its data is received into a buffer (the request waits in the second list).
pub fn collect_ams(worker: &Worker, id: u16) -> (AmSeen, AmPending) {
    let seen: AmSeen = Default::default();
    let pending: AmPending = Default::default();
    let (s, p) = (seen.clone(), pending.clone());
    worker.set_am_handler(
        id,
        Some(Box::new(move |msg: &mut zcx::AmMessage| {
            let header = msg.header().to_vec();
            if msg.is_rndv() {
                let len = msg.data_len();
                s.lock().unwrap().push((header, Vec::new()));
                p.lock().unwrap().push(msg.recv_data(vec![0u8; len]).unwrap());
            } else {
                s.lock().unwrap().push((header, msg.data().unwrap().to_vec()));
            }
            Status::Ok
        })),
    );
    (seen, pending)
}

/// A server's listener for its one client, and what became of the connection.
pub struct Accepting {
    /// Listens on loopback.
    pub listener: zcx::Listener,
    /// The endpoint accepted, once the client connected.
    pub endpoint: std::sync::Arc<std::sync::Mutex<Option<Endpoint>>>,
    /// The status the endpoint's error handler got, once it ran.
    pub failed: std::sync::Arc<std::sync::Mutex<Option<Status>>>,
}

impl Accepting {
    /// Progresses until the client connected; its endpoint.
    pub fn endpoint(&self, worker: &Worker) -> Endpoint {
        progress_until(worker, "the client's endpoint", || self.endpoint.lock().unwrap().is_some());
        self.endpoint.lock().unwrap().take().unwrap()
    }
}

/// Listens on loopback for one client, accepting it with an error handler, and writes the
/// listening address to `server.port` in `dir` (atomically: the client reads it once it exists).
pub fn listen_for_one(worker: &Worker, dir: &std::path::Path) -> Accepting {
    let endpoint: std::sync::Arc<std::sync::Mutex<Option<Endpoint>>> = Default::default();
    let failed: std::sync::Arc<std::sync::Mutex<Option<Status>>> = Default::default();
    let (slot, fail_slot, w) = (endpoint.clone(), failed.clone(), worker.clone());
    let listener = worker
        .listen(zcx::ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            conn_handler: Some(Box::new(move |request| {
                let fail_slot = fail_slot.clone();
                let params = zcx::EpParams::conn_request(request)
                    .with_err_handler(move |_, status| *fail_slot.lock().unwrap() = Some(status));
                *slot.lock().unwrap() = Some(w.create_endpoint(params).unwrap());
            })),
            ..Default::default()
        })
        .unwrap();
    let port_tmp = dir.join("server.port.tmp");
    std::fs::write(&port_tmp, listener.sockaddr().to_string()).unwrap();
    std::fs::rename(&port_tmp, dir.join("server.port")).unwrap();
    Accepting { listener, endpoint, failed }
}
