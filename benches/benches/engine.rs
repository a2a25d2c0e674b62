//! The protocol engine's per-message cost, with no transport: two `zcx_engine::Engine`s, the
//! frame carried between them by hand, as the worker will drive them.
//!
//! Run: `cargo bench -p zcx-benches --bench engine`. Each `eager_tag` figure is one 8-byte tag
//! message through both engines: posting the receive, sending (`tag_send_now`, whose frame comes
//! back at once on an idle endpoint), handling the frame and draining both sides' events;
//! `expected` posts the receive first, `unexpected` after the message arrived. `eager_stream` is
//! the same for one 8-byte stream message, its receive posted first.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use zcx_engine::{
    BulkMode, EndpointId, Engine, EngineConfig, LinkCaps, LinkId, RecvBuffer, SendBuffer, Sent, Start,
};

const LINK: LinkId = LinkId(1);

/// Two engines with an endpoint each on one link: `(a, a's endpoint, b, b's endpoint)`.
fn pair() -> (Engine, EndpointId, Engine, EndpointId) {
    let caps = LinkCaps {
        max_frame: 65536,
        rndv_threshold: 8192,
        native_put: false,
        native_get: false,
        native_atomics: false,
        bulk: BulkMode::SenderPush,
        placed: false,
        max_placed: 0,
        place_streams: false,
        peer_watched: false,
    };
    let mut a = Engine::new(EngineConfig::default(), Arc::new(Default::default()));
    let mut b = Engine::new(EngineConfig::default(), Arc::new(Default::default()));
    let ep = a.add_endpoint(LINK, caps, false, false);
    let b_ep = b.add_endpoint(LINK, caps, false, false);
    (a, ep, b, b_ep)
}

/// Sends one message from `a` and hands its frame to `b`, as a transport would.
fn carry(a: &mut Engine, ep: EndpointId, b: &mut Engine, data: &[u8], frame: &mut Vec<u8>) {
    // SAFETY: `data` outlives the call, which completes the eager send before returning.
    let send = unsafe { SendBuffer::new(data.as_ptr(), data.len()) };
    let Sent::Now(transmit) = a.tag_send_now(ep, send, 1, false).expect("a ready endpoint") else {
        panic!("an eager message on an idle endpoint went through the outbox");
    };
    frame.clear();
    frame.extend_from_slice(transmit.header.as_bytes());
    // SAFETY: an inline payload, read before the send returns to its user.
    frame.extend_from_slice(unsafe { transmit.payload.bytes() });
    b.handle_frame(LINK, frame);
}

fn eager_tag(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine/eager_tag");
    let data = [7u8; 8];
    group.bench_function("expected", |bench| {
        let (mut a, ep, mut b, _) = pair();
        let mut out = [0u8; 8];
        let mut frame = Vec::with_capacity(64);
        bench.iter(|| {
            // SAFETY: `out` outlives the receive, which completes inside this iteration.
            let recv = b.tag_recv(unsafe { RecvBuffer::new(out.as_mut_ptr(), out.len()) }, 1, u64::MAX);
            carry(&mut a, ep, &mut b, black_box(&data), &mut frame);
            while let Some(event) = b.poll_event() {
                black_box(event);
            }
            black_box(recv)
        })
    });
    group.bench_function("unexpected", |bench| {
        let (mut a, ep, mut b, _) = pair();
        let mut out = [0u8; 8];
        let mut frame = Vec::with_capacity(64);
        bench.iter(|| {
            carry(&mut a, ep, &mut b, black_box(&data), &mut frame);
            // SAFETY: as above; the message is waiting, so the receive completes at once.
            let recv = b.tag_recv(unsafe { RecvBuffer::new(out.as_mut_ptr(), out.len()) }, 1, u64::MAX);
            assert!(matches!(recv, Start::Done(..)));
            black_box(recv)
        })
    });
    group.finish();
}

/// One 8-byte stream message through both engines, the receive posted first: posting the
/// receive, sending (`stream_send_now`), handling the frame and draining the events.
fn eager_stream(c: &mut Criterion) {
    c.bench_function("engine/eager_stream/expected", |bench| {
        let (mut a, ep, mut b, b_ep) = pair();
        let data = [7u8; 8];
        let mut out = [0u8; 8];
        let mut frame = Vec::with_capacity(64);
        bench.iter(|| {
            // SAFETY: `out` outlives the receive, which completes inside this iteration.
            let recv = b.stream_recv(b_ep, unsafe { RecvBuffer::new(out.as_mut_ptr(), out.len()) }, true);
            // SAFETY: `data` outlives the call, which completes the eager send before returning.
            let send = unsafe { SendBuffer::new(black_box(&data).as_ptr(), data.len()) };
            let Ok(Sent::Now(transmit)) = a.stream_send_now(ep, send) else {
                panic!("a small stream send on an idle endpoint went through the outbox");
            };
            frame.clear();
            frame.extend_from_slice(transmit.header.as_bytes());
            // SAFETY: an inline payload, read before the send returns to its user.
            frame.extend_from_slice(unsafe { transmit.payload.bytes() });
            b.handle_frame(LINK, &frame);
            while let Some(event) = b.poll_event() {
                black_box(event);
            }
            black_box(recv)
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = eager_tag, eager_stream
}
criterion_main!(benches);
