//! The protocol engine (`zcx_engine::Engine`) on frames from a hostile peer, stateful:
//!
//! - whatever frames arrive (whole or placed, valid or not, for operations that exist or not),
//!   the engine never panics, never writes outside a receive buffer (each buffer sits between
//!   guard bytes that must stay untouched), and every operation it was given completes exactly
//!   once;
//! - after the endpoint is closed and released, and what peers left (unexpected messages, AM
//!   data) is taken, the engine holds nothing.
#![no_main]

use std::collections::HashSet;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use zcx_engine::{
    BulkMode, CloseMode, Engine, EngineConfig, Event, LinkCaps, LinkId, OpId, Payload, Received, RecvBuffer,
    SendBuffer, Start, Status,
};

const LINK: LinkId = LinkId(1);
const GUARD: u8 = 0xA7;
const GUARD_LEN: usize = 16;

/// A receive buffer of `len` bytes between guards.
struct Guarded(Vec<u8>);

impl Guarded {
    fn new(len: usize) -> Guarded {
        Guarded(vec![GUARD; len + 2 * GUARD_LEN])
    }

    fn buf(&mut self) -> RecvBuffer {
        let len = self.0.len() - 2 * GUARD_LEN;
        // SAFETY: the bytes between the guards stay allocated, unmoved and untouched by the
        // target until the engine is dropped.
        unsafe { RecvBuffer::new(self.0.as_mut_ptr().add(GUARD_LEN), len) }
    }

    fn guards_intact(&self) -> bool {
        let n = self.0.len();
        self.0[..GUARD_LEN].iter().chain(&self.0[n - GUARD_LEN..]).all(|&b| b == GUARD)
    }
}

/// Drains every output, answering what must be answered, and records completions.
fn drain(engine: &mut Engine, done: &mut HashSet<OpId>) {
    loop {
        let mut moved = false;
        while let Some(transmit) = engine.poll_transmit() {
            moved = true;
            match transmit.payload {
                Payload::Borrowed { op, .. } => engine.send_done(op, Ok(())),
                Payload::Owned(bytes) => engine.reuse(bytes),
                Payload::None | Payload::Inline { .. } => {}
            }
        }
        while let Some(request) = engine.poll_rma() {
            moved = true;
            engine.rma_done(request.token, Status::InvalidParam, 0);
        }
        while let Some(event) = engine.poll_event() {
            moved = true;
            match event {
                Event::Completion(c) => assert!(done.insert(c.op), "{} completed twice", c.op),
                Event::Am(am) => {
                    if let Some((desc, _)) = am.rndv {
                        let _ = engine.am_decline(desc);
                    }
                }
                _ => {}
            }
        }
        if !moved {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else { return };
    let native = mode & 1 != 0;
    let caps = LinkCaps {
        max_frame: 512,
        rndv_threshold: 128,
        native_put: native,
        native_get: native,
        native_atomics: native,
        bulk: if native { BulkMode::ReceiverPull } else { BulkMode::SenderPush },
        placed: mode & 2 != 0,
        max_placed: if mode & 4 != 0 { 2048 } else { 0 },
        place_streams: mode & 2 != 0 && mode & 64 != 0,
        peer_watched: mode & 32 != 0,
    };
    // How frames are handed over: queued events only, or the direct entry points whose one
    // completion comes back from the call.
    let direct = mode & 8 != 0;
    let mut engine = Engine::new(EngineConfig::default(), Arc::new(Default::default()));
    let ep = engine.add_endpoint(LINK, caps, false, true);
    let mut bufs: Vec<Guarded> = (0..4).map(|i| Guarded::new([0, 7, 200, 1000][i])).collect();
    let source = vec![0x5Au8; 600];
    let mut started = Vec::new();
    for (i, buf) in bufs.iter_mut().enumerate() {
        let start = if i % 2 == 0 {
            engine.tag_recv(buf.buf(), i as u64 % 3, if mode & 4 != 0 { 0 } else { u64::MAX })
        } else {
            engine.stream_recv(ep, buf.buf(), mode & 8 != 0).expect("a ready endpoint")
        };
        if let Start::Pending(op) = start {
            started.push(op);
        }
    }
    // SAFETY: `source` lives until the end of this run, unchanged.
    let send = unsafe { SendBuffer::new(source.as_ptr(), source.len()) };
    if let Ok(Start::Pending(op)) = engine.tag_send(ep, send, 1, mode & 16 != 0) {
        started.push(op);
    }
    let mut done = HashSet::new();
    drain(&mut engine, &mut done);
    // The rest: frames, each a length byte and a kind bit, then its bytes.
    while let Some((&head, tail)) = rest.split_first() {
        let len = usize::from(head & 0x7F).min(tail.len());
        let (frame, next) = tail.split_at(len);
        rest = next;
        if head & 0x80 != 0 {
            // A placed fragment: the header is the frame, the payload as long as its last byte.
            let payload_len = usize::from(frame.last().copied().unwrap_or(0));
            if let Some(placement) = engine.handle_placed(LINK, frame, payload_len) {
                // SAFETY: the engine vouches that the destination holds `payload_len` bytes of
                // a live receive buffer until `place_done`.
                unsafe { std::ptr::write_bytes(placement.dest, 0xEE, payload_len) };
                engine.place_done(placement.token, Ok(()));
            }
        } else if direct {
            let completion = match engine.handle_frame_lending_direct(LINK, frame) {
                Received::Completed(c) => Some(c),
                Received::Lent(_) | Received::Nothing => None,
            };
            if let Some(c) = completion {
                assert!(done.insert(c.op), "{} completed twice", c.op);
            }
        } else {
            engine.handle_frame(LINK, frame);
        }
        drain(&mut engine, &mut done);
    }
    for op in &started {
        if !done.contains(op) {
            engine.cancel(*op);
        }
    }
    drain(&mut engine, &mut done);
    let _ = engine.close(ep, CloseMode::Force);
    engine.link_failed(LINK, Status::ConnectionReset);
    drain(&mut engine, &mut done);
    for op in &started {
        assert!(done.contains(op), "{op} never completed");
    }
    engine.release_endpoint(ep);
    let mut sink = Guarded::new(1000);
    while engine.table_counts().tag_unexpected > 0 {
        match engine.tag_recv(sink.buf(), 0, 0) {
            Start::Done(..) => {}
            Start::Pending(op) => {
                engine.cancel(op);
                break;
            }
        }
    }
    drain(&mut engine, &mut done);
    assert!(engine.table_counts().is_empty(), "left behind: {:?}", engine.table_counts());
    assert!(bufs.iter().all(Guarded::guards_intact) && sink.guards_intact(), "wrote outside a buffer");
});
