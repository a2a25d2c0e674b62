//! Frames a peer should never send: each closes the link (failing its endpoint) with a clear
//! error, completes what was waiting once, and never panics.

use std::sync::Arc;

use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::RemoteAccessTable;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who, LINK};
use crate::{Engine, EngineConfig, Event, LinkId, Phase, Status};

const ALL: u64 = u64::MAX;

fn frame(op: &Op, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = op.encode(&mut header);
    let mut bytes = header[..n].to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

/// Injects `bytes` from A and checks B failed its endpoint and closed the link.
fn assert_refused(net: Net, bytes: Vec<u8>) -> Pair {
    let mut p = Pair::new(net);
    let mut out = vec![0u8; 64];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    p.inject(Who::A, bytes);
    p.drive();
    assert_eq!(p.b.engine.phase(p.b.ep), Some(Phase::Dead(Status::ConnectionReset)));
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    assert!(p.b.closed_links.contains(&(LINK, true)), "the link was not closed: {:?}", p.b.closed_links);
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert_eq!(p.a.errors, vec![(p.a.ep, Status::ConnectionReset)], "the peer saw its link fail");
    p
}

#[test]
fn truncated_frame_closes_the_link() {
    let full = frame(&Op::TagRts { tag: 1, sync: false, sender_req: 1, total_len: 10 }, &[]);
    let mut p = assert_refused(Net::emulated(), full[..full.len() - 3].to_vec());
    p.assert_no_leaks();
    let eager = frame(&Op::TagEager { tag: 1, sync: false, sender_req: 0 }, &[]);
    let mut p = assert_refused(Net::emulated(), eager[..5].to_vec());
    p.assert_no_leaks();
}

#[test]
fn unknown_op_code_closes_the_link() {
    let mut p = assert_refused(Net::emulated(), vec![0xEE, 1, 2, 3]);
    p.assert_no_leaks();
    let mut p = assert_refused(Net::emulated(), Vec::new());
    p.assert_no_leaks();
}

#[test]
fn fragment_outside_its_message_fails_the_receive_once_and_closes_the_link() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 2000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    p.inject(Who::A, frame(&Op::TagRts { tag: 1, sync: false, sender_req: 99, total_len: 2000 }, &[]));
    p.drive();
    assert!(!p.b.done(recv));
    let past_end = frame(&Op::RndvData { recv_req: recv.raw(), offset: 1990 }, &[0xAB; 100]);
    p.inject(Who::A, past_end);
    p.drive();
    assert_eq!(p.b.status(recv), Status::IoError);
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    assert!(p.b.closed_links.contains(&(LINK, true)));
    assert!(out.iter().all(|&b| b == 0), "bytes of a refused fragment were written");
    p.assert_no_leaks();
}

#[test]
fn placed_fragment_outside_its_message_is_refused_before_anything_is_written() {
    let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
    let mut out = vec![0u8; 2000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    p.inject(Who::A, frame(&Op::TagRts { tag: 1, sync: false, sender_req: 99, total_len: 2000 }, &[]));
    p.drive();
    let header = frame(&Op::RndvData { recv_req: recv.raw(), offset: u64::MAX - 10 }, &[]);
    assert!(p.b.engine.handle_placed(LINK, &header, 100).is_none());
    p.drive();
    assert_eq!(p.b.status(recv), Status::IoError);
    assert!(out.iter().all(|&b| b == 0));
    // A placed frame that is not a data fragment is refused too.
    let mut q = Pair::new(Net { placed: true, ..Net::emulated() });
    assert!(q.b.engine.handle_placed(LINK, &frame(&Op::Keepalive, &[]), 8).is_none());
    q.drive();
    assert_eq!(q.b.errors, vec![(q.b.ep, Status::ConnectionReset)]);
    p.assert_no_leaks();
    q.assert_no_leaks();
}

/// The last placed fragment of a receive is counted when its header comes, so the receive has
/// its result then; when the link fails before the payload is all written, the receive fails
/// with the link's error, never OK over bytes that never arrived.
#[test]
fn a_placed_fragment_cut_short_fails_the_receive_it_completed() {
    let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
    let mut out = vec![0u8; 2000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    p.inject(Who::A, frame(&Op::TagRts { tag: 1, sync: false, sender_req: 99, total_len: 2000 }, &[]));
    p.drive();
    let header = frame(&Op::RndvData { recv_req: recv.raw(), offset: 0 }, &[]);
    let placement = p.b.engine.handle_placed(LINK, &header, 2000).expect("a placement");
    p.drive();
    assert!(!p.b.done(recv), "completed before its payload was written");
    p.b.engine.place_done(placement.token, Err(Status::ConnectionReset));
    p.b.engine.link_failed(LINK, Status::ConnectionReset);
    p.drive();
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    p.b.engine.release_endpoint(p.b.ep);
    p.drive();
}

#[test]
fn data_for_an_unknown_operation_closes_the_link() {
    let mut p =
        assert_refused(Net::emulated(), frame(&Op::RndvData { recv_req: 4242, offset: 0 }, &[1, 2, 3]));
    p.assert_no_leaks();
    let mut p = assert_refused(Net::emulated(), frame(&Op::GetData { req: 7, offset: 0 }, &[1]));
    p.assert_no_leaks();
}

#[test]
fn data_for_an_operation_that_takes_none_closes_the_link() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(10, 1);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, true).unwrap();
    let send = p.a.track(send);
    p.drive();
    // B names A's sync send, which receives nothing.
    p.inject(Who::B, frame(&Op::GetData { req: send.raw(), offset: 0 }, &[9]));
    p.drive();
    assert_eq!(p.a.status(send), Status::ConnectionReset);
    assert_eq!(p.a.errors, vec![(p.a.ep, Status::ConnectionReset)]);
    let mut out = vec![0u8; 10];
    let _ = p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL);
    p.assert_no_leaks();
}

#[test]
fn pull_request_on_a_link_that_cannot_pull_closes_it() {
    let rts = Op::TagRtsPull { tag: 1, sync: false, sender_req: 1, total_len: 4096, addr: 0x1000 };
    let mut p = assert_refused(Net::emulated(), frame(&rts, &[1; 24]));
    p.assert_no_leaks();
    let stream = Op::StreamRtsPull { sender_req: 1, total_len: 10, addr: 0x1000 };
    let mut p = assert_refused(Net::emulated(), frame(&stream, &[1; 24]));
    p.assert_no_leaks();
}

#[test]
fn stream_pull_larger_than_allowed_closes_the_link() {
    let huge = Op::StreamRtsPull { sender_req: 1, total_len: u64::MAX, addr: 0x1000 };
    let mut p = assert_refused(Net::native(), frame(&huge, &[1; 24]));
    p.assert_no_leaks();
}

#[test]
fn stray_answers_for_unknown_operations_are_ignored() {
    let mut p = Pair::new(Net::emulated());
    for op in [
        Op::Rtr { sender_req: 555, recv_req: 1, accept_len: 10 },
        Op::SyncAck { sender_req: 556 },
        Op::RmaAck { req: 557, status: -3, value: 1 },
        Op::FlushAck { id: 558 },
        Op::PullDone { sender_req: 559, status: 0 },
    ] {
        p.inject(Who::A, frame(&op, &[]));
    }
    p.drive();
    assert!(p.b.errors.is_empty());
    assert_eq!(p.b.engine.phase(p.b.ep), Some(Phase::Ready));
    let data = pattern(20, 2);
    let mut out = vec![0u8; 20];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 3, ALL));
    p.a.engine.tag_send(p.a.ep, send_buf(&data), 3, false).unwrap();
    p.drive();
    assert_eq!(p.b.status(recv), Status::Ok);
    p.assert_no_leaks();
}

/// An acknowledgement names the sender's operation in the peer's bytes: one naming another
/// operation, or one of another kind, completes nothing; the real one completes the send once.
#[test]
fn forged_sync_acks_complete_nothing_but_their_own_send() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(16, 8);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 6, true).unwrap();
    let send = p.a.track(send);
    let big = pattern(3 * 16 * 1024, 9);
    let rndv = p.a.engine.tag_send(p.a.ep, send_buf(&big), 7, true).unwrap();
    let rndv = p.a.track(rndv);
    p.drive();
    for sender_req in [send.raw() + 1, send.raw().wrapping_sub(1), rndv.raw(), u64::MAX] {
        p.inject(Who::B, frame(&Op::SyncAck { sender_req }, &[]));
    }
    p.drive();
    assert!(!p.a.done(send) && !p.a.done(rndv), "a forged acknowledgement completed a send");
    assert_eq!(p.a.engine.phase(p.a.ep), Some(Phase::Ready));
    let mut out = vec![0u8; 16];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut out), 6, ALL), crate::Start::Done(Status::Ok, _)));
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    // A replayed acknowledgement finds nothing left to complete.
    p.inject(Who::B, frame(&Op::SyncAck { sender_req: send.raw() }, &[]));
    p.drive();
    assert!(p.a.errors.is_empty());
    let mut big_out = vec![0u8; big.len()];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut big_out), 7, ALL), crate::Start::Pending(_)));
    p.drive();
    assert_eq!(p.a.status(rndv), Status::Ok);
    assert_eq!(big_out, big);
    p.assert_no_leaks();
}

/// An acknowledgement carries no payload: one with a byte after it is refused, whichever
/// decoder reads it.
#[test]
fn a_sync_ack_with_trailing_bytes_closes_the_link() {
    let mut p = assert_refused(Net::emulated(), frame(&Op::SyncAck { sender_req: 1 }, &[0]));
    p.assert_no_leaks();
}

#[test]
fn frames_on_a_link_without_an_endpoint_close_it_and_handshakes_are_handed_over() {
    let mut engine = Engine::new(EngineConfig::default(), Arc::new(RemoteAccessTable::new()));
    engine.handle_frame(LinkId(3), &frame(&Op::Keepalive, &[]));
    assert!(matches!(engine.poll_event(), Some(Event::CloseLink { link: LinkId(3), force: true })));
    engine.handle_frame(LinkId(4), &frame(&Op::Hello, b"hi"));
    assert!(
        matches!(engine.poll_event(), Some(Event::Handshake { link: LinkId(4), ref payload }) if payload == b"hi")
    );
    assert!(engine.table_counts().is_empty());
}

#[test]
fn random_frames_never_panic_and_leave_nothing_behind() {
    // A fixed-seed generator: the same frames every run.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..400 {
        let net = if round % 2 == 0 { Net::emulated() } else { Net::native() };
        let mut p = Pair::new(net);
        let mut out = vec![0u8; 300];
        let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 0, 0));
        for _ in 0..4 {
            let len = (next() % 80) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(first) = bytes.first_mut() {
                // Mostly known op codes, so the decoders get past the first byte.
                *first = (*first % 0x1A).max(2);
            }
            p.inject(Who::A, bytes);
        }
        p.drive();
        if !p.b.done(recv) {
            p.b.engine.cancel(recv);
        }
        p.drive();
        while p.b.engine.table_counts().tag_unexpected > 0 {
            let mut sink = vec![0u8; 300];
            if let crate::Start::Pending(op) = p.b.engine.tag_recv(recv_buf(&mut sink), 0, 0) {
                p.b.engine.cancel(op);
                p.drive();
                break;
            }
        }
        for am in std::mem::take(&mut p.b.ams) {
            if let Some((desc, _)) = am.rndv {
                let _ = p.b.engine.am_decline(desc);
            }
        }
        p.drive();
        p.finish_rma();
        p.drive();
        p.assert_no_leaks();
    }
}
