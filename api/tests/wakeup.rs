//! `ucp_worker_get_efd` / `_arm` / `_wait` / `_signal` with UCX's semantics: arm reports BUSY while
//! events are pending (a signal counts, and arm consumes it), signals coalesce, the event fd wakes
//! a sleeper when a message arrives.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcx::{
    Context, Endpoint, EpParams, Features, ListenerParams, RequestParams, Status, TagSendParams, Worker,
    WorkerParams,
};

fn readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    n == 1
}

fn idle_worker() -> Worker {
    let ctx = Context::with_features(Features::TAG | Features::WAKEUP).unwrap();
    let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
    // Let the transport settle (its first submissions), then drain.
    for _ in 0..10 {
        worker.progress();
    }
    while worker.arm() == Err(Status::Busy) {
        worker.progress();
    }
    worker
}

#[test]
fn signal_arm_poll_sequences() {
    let worker = idle_worker();
    let efd = worker.event_fd();
    assert!(!readable(efd, 0), "idle armed worker reports events");
    assert_eq!(worker.arm(), Ok(()));
    assert!(!readable(efd, 0));

    worker.signal();
    assert!(readable(efd, 0), "signal did not make the event fd readable");
    assert_eq!(worker.arm(), Err(Status::Busy), "arm must report the pending signal");
    assert!(!readable(efd, 0), "arm must consume the signal");
    assert_eq!(worker.arm(), Ok(()));

    // Two signals before the next arm coalesce into one wakeup.
    worker.signal();
    worker.signal();
    assert!(readable(efd, 0));
    assert_eq!(worker.arm(), Err(Status::Busy));
    assert!(!readable(efd, 0));
    assert_eq!(worker.arm(), Ok(()));
}

#[test]
fn signal_from_another_thread_wakes_wait() {
    let worker = idle_worker();
    let other = worker.clone();
    let start = Instant::now();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        other.signal();
    });
    worker.wait().unwrap();
    t.join().unwrap();
    assert!(start.elapsed() >= Duration::from_millis(90), "wait returned before the signal");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Server and client workers connected over loopback.
/// The fourth element is the server's endpoint, kept alive by the caller.
fn connected() -> (Worker, Worker, Endpoint, (zcx::Listener, Endpoint)) {
    let ctx = Context::with_features(Features::TAG | Features::AM | Features::WAKEUP).unwrap();
    let server = ctx.create_worker(&WorkerParams::default()).unwrap();
    let client = ctx.create_worker(&WorkerParams::default()).unwrap();
    let accepted = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&accepted);
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
            ..Default::default()
        })
        .unwrap();
    let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while accepted.lock().unwrap().is_none() || ep.query().unwrap().status != Status::Ok {
        server.progress();
        client.progress();
        assert!(Instant::now() < deadline, "connect timed out");
    }
    let server_ep = accepted.lock().unwrap().take().unwrap();
    (server, client, ep, (listener, server_ep))
}

#[test]
fn arriving_message_makes_arm_busy_and_wakes_the_event_fd() {
    let (server, client, ep, _listener) = connected();
    while server.arm() == Err(Status::Busy) {
        server.progress();
    }
    let recv = server.tag_recv(vec![0u8; 8], 5, u64::MAX, RequestParams::default()).unwrap();
    assert!(!readable(server.event_fd(), 0));
    ep.tag_send(b"wake up!".to_vec(), 5, TagSendParams::default()).unwrap();
    // The client must push its frame out; the server only sleeps.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !readable(server.event_fd(), 10) {
        client.progress();
        assert!(Instant::now() < deadline, "event fd never became readable");
    }
    assert_eq!(server.arm(), Err(Status::Busy), "arm must report the arrived message");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !recv.is_done() {
        server.progress();
        assert!(Instant::now() < deadline);
    }
    assert_eq!(recv.status(), Status::Ok);
}

#[test]
fn wait_returns_when_a_message_arrives_from_another_thread() {
    let (server, client, ep, _listener) = connected();
    let recv = server.tag_recv(vec![0u8; 4], 6, u64::MAX, RequestParams::default()).unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        ep.tag_send(b"ping".to_vec(), 6, TagSendParams::default()).unwrap();
        for _ in 0..1000 {
            client.progress();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !recv.is_done() {
        server.progress();
        if server.arm().is_ok() {
            server.wait().unwrap();
        }
        assert!(Instant::now() < deadline, "message never woke the worker");
    }
    sender.join().unwrap();
    assert_eq!(recv.status(), Status::Ok);
}

/// Active messages already in the server's receive path keep `arm` busy until every one has run
/// its handler, however they are delivered (over shared memory the handler reads each in place,
/// and the link waits behind it until the next call): a worker never goes to sleep with a
/// message waiting.
#[test]
fn arm_stays_busy_until_every_arrived_active_message_ran_its_handler() {
    let (server, client, ep, _listener) = connected();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    server.set_am_handler(
        3,
        Some(Box::new(move |msg: &mut zcx::AmMessage| {
            s.lock().unwrap().push(msg.header().to_vec());
            Status::Ok
        })),
    );
    for i in 0..3u8 {
        ep.am_send(3, &[i], Vec::new(), zcx::AmSendParams::default()).unwrap();
    }
    // Until the client has nothing left to push, the messages may still be on its side.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.arm() == Err(Status::Busy) {
        client.progress();
        assert!(Instant::now() < deadline, "the client never went quiet");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.lock().unwrap().len() < 3 {
        server.progress();
        if seen.lock().unwrap().len() < 3 {
            assert_eq!(server.arm(), Err(Status::Busy), "armed with {:?} delivered", seen.lock().unwrap());
        }
        assert!(Instant::now() < deadline, "the messages never all ran");
    }
    assert_eq!(*seen.lock().unwrap(), [[0u8], [1], [2]]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.arm() == Err(Status::Busy) {
        server.progress();
        assert!(Instant::now() < deadline, "the server never went quiet");
    }
}
