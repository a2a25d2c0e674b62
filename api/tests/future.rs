//! A `Request` is a `Future`: awaited on a minimal executor while a progress thread drives the
//! worker, it resolves to the same completion `wait` would give.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use common::net::accepting_listener;
use zcx::{Context, EpParams, Features, RequestParams, TagSendParams, WorkerParams};

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on this thread, parking between polls (a 10 s bound turns a lost
/// wakeup into a failure instead of a hang).
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(Instant::now() < deadline, "future never completed (lost wakeup?)");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn awaiting_requests_with_a_progress_thread() {
    let ctx = Context::with_features(Features::TAG).unwrap();
    let server = ctx.create_worker(&WorkerParams::default()).unwrap();
    let client = ctx.create_worker(&WorkerParams::default()).unwrap();
    let (listener, _accepted) = accepting_listener(&server);
    let _p1 = server.start_progress_thread().unwrap();
    let _p2 = client.start_progress_thread().unwrap();
    let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();

    let recv = server.tag_recv(vec![0u8; 300_000], 3, u64::MAX, RequestParams::default()).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
    let send = ep.tag_send(data.clone(), 3, TagSendParams::default()).unwrap();
    let (sent, got) = block_on(async { (send.await, recv.await) });
    assert_eq!(sent.unwrap().buf, data);
    let got = got.unwrap();
    assert_eq!(got.info.length, 300_000);
    assert!(got.buf == data);
}
