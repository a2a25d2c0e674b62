//! Completion callbacks: a plain function with a word of context, and a callback set after the
//! operation was issued. Each runs once, from progress, never for an operation that completed at
//! once.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::net::progress_until;
use zcx::{
    Callback, Context, EpParams, Features, OpInfo, RequestParams, Status, TagSendParams, WorkerParams,
};

static PLAIN_RUNS: AtomicUsize = AtomicUsize::new(0);

fn count_plain(arg: usize, status: Status, info: &OpInfo) {
    assert_eq!((arg, status, info.length), (7, Status::Ok, 3));
    PLAIN_RUNS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn callbacks_given_at_issue_or_set_later_run_once_from_progress() {
    let ctx = Context::with_features(Features::TAG).unwrap();
    let one = ctx.create_worker(&WorkerParams::default()).unwrap();
    let two = ctx.create_worker(&WorkerParams::default()).unwrap();
    let ep = one.create_endpoint(EpParams::remote_address(two.address())).unwrap();

    // A plain function and its word, given at issue.
    let recv = two.tag_recv(vec![0u8; 3], 1, u64::MAX, RequestParams::with_fn(count_plain, 7)).unwrap();
    ep.tag_send(b"abc".to_vec(), 1, TagSendParams::default()).unwrap();
    progress_until(&[&one, &two], "the plain callback", || PLAIN_RUNS.load(Ordering::SeqCst) == 1);
    assert!(recv.is_done());

    // Set after issue, before the message arrives.
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        Callback::Boxed(Box::new(move |status, _: &OpInfo| {
            assert_eq!(status, Status::Ok);
            runs.fetch_add(1, Ordering::SeqCst);
        }))
    };
    let recv = two.tag_recv(vec![0u8; 3], 2, u64::MAX, RequestParams::default()).unwrap();
    assert!(recv.set_callback(counter(&runs)).is_ok());
    ep.tag_send(b"def".to_vec(), 2, TagSendParams::default()).unwrap();
    progress_until(&[&one, &two], "the callback set after issue", || runs.load(Ordering::SeqCst) == 1);

    // Set after the operation completed (no progress of this thread has run it): it still runs,
    // from the next progress, not from the call that set it.
    let recv = two.tag_recv(vec![0u8; 3], 3, u64::MAX, RequestParams::default()).unwrap();
    ep.tag_send(b"ghi".to_vec(), 3, TagSendParams::default()).unwrap();
    progress_until(&[&one, &two], "the receive", || recv.is_done());
    assert!(recv.set_callback(counter(&runs)).is_ok());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran inside set_callback");
    progress_until(&[&two], "the late callback", || runs.load(Ordering::SeqCst) == 2);

    // A receive that completed at once gives its callback back.
    ep.tag_send(b"jkl".to_vec(), 4, TagSendParams::default()).unwrap();
    let probe = || two.tag_probe(4, u64::MAX).is_some();
    progress_until(&[&one, &two], "the unexpected message", probe);
    let recv = two.tag_recv(vec![0u8; 3], 4, u64::MAX, RequestParams::default()).unwrap();
    assert!(recv.completed_at_once());
    assert!(recv.set_callback(counter(&runs)).is_err());
    for _ in 0..100 {
        two.progress();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
