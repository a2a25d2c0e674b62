//! Driving workers in tests: progress with a deadline, waiting for a request, a listener that keeps
//! the endpoint it accepts. A deadline turns a hang into a failure with a message.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcx::{Completion, Endpoint, Listener, ListenerParams, Request, Status, Worker};

/// How long any single wait in a test may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Progresses `workers` until `done` says so; panics naming `what` after [`DEADLINE`].
pub fn progress_until(workers: &[&Worker], what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        for w in workers {
            w.progress();
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// Progresses `workers` until `request` completes, and returns its result.
pub fn wait<B: Send + 'static>(workers: &[&Worker], request: Request<B>) -> Result<Completion<B>, Status> {
    let mut request = request;
    let deadline = Instant::now() + DEADLINE;
    loop {
        request = match request.try_take() {
            Ok(result) => return result,
            Err(r) => r,
        };
        for w in workers {
            w.progress();
        }
        assert!(Instant::now() < deadline, "request timed out");
    }
}

/// The slot an accept handler puts its endpoint in.
pub type Accepted = Arc<Mutex<Option<Endpoint>>>;

/// A listener on 127.0.0.1 (free port) whose accept handler keeps the endpoint in the slot.
pub fn accepting_listener(server: &Worker) -> (Listener, Accepted) {
    let accepted: Accepted = Arc::default();
    let slot = Arc::clone(&accepted);
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
            ..Default::default()
        })
        .unwrap();
    (listener, accepted)
}

/// Every endpoint an accept handler got, in order.
pub type AcceptedAll = Arc<Mutex<Vec<Endpoint>>>;

/// A listener on 127.0.0.1 (free port) whose accept handler keeps every endpoint it accepts.
pub fn collecting_listener(server: &Worker) -> (Listener, AcceptedAll) {
    let accepted: AcceptedAll = Arc::default();
    let slot = Arc::clone(&accepted);
    let listener = server
        .listen(ListenerParams {
            sockaddr: Some("127.0.0.1:0".parse().unwrap()),
            accept_handler: Some(Box::new(move |ep| slot.lock().unwrap().push(ep))),
            ..Default::default()
        })
        .unwrap();
    (listener, accepted)
}
