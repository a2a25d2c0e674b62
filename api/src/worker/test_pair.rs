//! Two workers of one process connected over shared memory, for tests of the paths only a
//! shared-memory link takes.

use std::sync::{Arc, Mutex};

use crate::{
    Context, ContextParams, Endpoint, EpParams, Features, ListenerParams, Request, Status, Worker,
    WorkerParams,
};

/// Progresses `workers` until `done` holds; fails the test after 20 s.
pub(crate) fn progress_until(workers: &[&Worker], what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        for w in workers {
            w.progress();
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// A client and a server worker of one process, connected over shared memory.
pub(crate) fn shm_pair() -> Option<(Worker, Worker, Endpoint, Endpoint, crate::Listener)> {
    let config = crate::Config::from_vars([("ZCX_TLS", "shm,tcp")]).expect("config");
    let ctx = Context::new(&ContextParams::new(Features::TAG | Features::STREAM | Features::AM), &config)
        .expect("context");
    let client = ctx.create_worker(&WorkerParams::default()).expect("client worker");
    let server = ctx.create_worker(&WorkerParams::default()).expect("server worker");
    let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let slot = Arc::clone(&accepted);
    let acceptor = server.clone();
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().expect("address")),
            conn_handler: Some(Box::new(move |request| {
                *slot.lock().expect("slot") =
                    Some(acceptor.create_endpoint(EpParams::conn_request(request)).expect("accept"));
            })),
            ..Default::default()
        })
        .expect("listener");
    let client_ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).expect("connect");
    progress_until(&[&client, &server], "the accept", || accepted.lock().expect("slot").is_some());
    let server_ep = accepted.lock().expect("slot").take().expect("accepted");
    progress_until(&[&client, &server], "the connection", || {
        client_ep.query().expect("query").status == Status::Ok
    });
    if client_ep.query().expect("query").transports != ["shm"] {
        eprintln!("skipped: same-host endpoints are not on shared memory here");
        return None;
    }
    Some((client, server, client_ep, server_ep, listener))
}

/// Progresses `workers` until `request` completes.
pub(crate) fn wait<B: Send + 'static>(
    workers: &[&Worker],
    request: Request<B>,
) -> crate::Result<crate::Completion<B>> {
    let mut request = Some(request);
    let mut result = None;
    progress_until(workers, "a request", || match request.take().map(Request::try_take) {
        Some(Ok(done)) => {
            result = Some(done);
            true
        }
        Some(Err(pending)) => {
            request = Some(pending);
            false
        }
        None => true,
    });
    result.expect("taken")
}
