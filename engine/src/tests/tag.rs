//! Tag messages: eager, sender-push and receiver-pull rendezvous, matching, sync sends.

use zcx_dataplane::proto::wire::Op;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who, RNDV};
use crate::{Sent, Start, Status};

const ALL: u64 = u64::MAX;

#[test]
fn eager_message_lands_in_a_receive_posted_before_it() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 64];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 42, ALL));
    let data = pattern(40, 1);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 42, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(p.b.info(recv).length, 40);
    assert_eq!(p.b.info(recv).sender_tag, 42);
    assert_eq!(&out[..40], &data[..]);
    p.assert_no_leaks();
}

#[test]
fn unexpected_eager_message_waits_for_its_receive() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(100, 2);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 7, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.b.engine.tag_probe(7, ALL).map(|(_, tag, len)| (tag, len)), Some((7, 100)));
    let mut out = vec![0u8; 100];
    let start = p.b.engine.tag_recv(recv_buf(&mut out), 7, ALL);
    assert_eq!(start, Start::Done(Status::Ok, crate::OpInfo { length: 100, sender_tag: 7, value: 0 }));
    assert_eq!(out, data);
    assert_eq!(p.b.engine.tag_probe(7, ALL), None);
    p.assert_no_leaks();
}

#[test]
fn wildcard_receive_takes_the_oldest_matching_message() {
    let mut p = Pair::new(Net::emulated());
    let (one, two, three) = (vec![1u8; 8], vec![2u8; 8], vec![3u8; 8]);
    p.a.engine.tag_send(p.a.ep, send_buf(&one), 0x100, false).unwrap();
    p.a.engine.tag_send(p.a.ep, send_buf(&two), 0x201, false).unwrap();
    p.a.engine.tag_send(p.a.ep, send_buf(&three), 0x202, false).unwrap();
    p.drive();
    let mut out = vec![0u8; 8];
    // Matches 0x2xx: the oldest of those is 0x201.
    let start = p.b.engine.tag_recv(recv_buf(&mut out), 0x200, 0xF00);
    assert!(matches!(start, Start::Done(Status::Ok, info) if info.sender_tag == 0x201));
    assert_eq!(out, two);
    let start = p.b.engine.tag_recv(recv_buf(&mut out), 0, 0);
    assert!(matches!(start, Start::Done(Status::Ok, info) if info.sender_tag == 0x100));
    let start = p.b.engine.tag_recv(recv_buf(&mut out), 0x202, ALL);
    assert!(matches!(start, Start::Done(Status::Ok, info) if info.sender_tag == 0x202));
    p.assert_no_leaks();
}

#[test]
fn posted_wildcard_receives_take_messages_in_posting_order() {
    let mut p = Pair::new(Net::emulated());
    let (mut first, mut second) = (vec![0u8; 4], vec![0u8; 4]);
    let r1 = pending(p.b.engine.tag_recv(recv_buf(&mut first), 0, 0));
    let r2 = pending(p.b.engine.tag_recv(recv_buf(&mut second), 5, ALL));
    let (x, y) = (vec![9u8; 4], vec![8u8; 4]);
    p.a.engine.tag_send(p.a.ep, send_buf(&x), 5, false).unwrap();
    p.a.engine.tag_send(p.a.ep, send_buf(&y), 5, false).unwrap();
    p.drive();
    assert_eq!((p.b.status(r1), p.b.status(r2)), (Status::Ok, Status::Ok));
    assert_eq!((first, second), (x, y));
    p.assert_no_leaks();
}

#[test]
fn message_longer_than_the_receive_is_truncated() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 10];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let data = pattern(30, 3);
    p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    p.drive();
    assert_eq!(p.b.status(recv), Status::MessageTruncated);
    assert_eq!(p.b.info(recv).length, 10);
    assert_eq!(&out[..], &data[..10]);
    p.assert_no_leaks();
}

#[test]
fn sync_eager_send_completes_only_once_the_receiver_matched_it() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(16, 4);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 9, true).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert!(!p.a.done(send), "completed before the receiver matched it");
    let mut out = vec![0u8; 16];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut out), 9, ALL), Start::Done(Status::Ok, _)));
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.a.info(send).length, 16);
    assert!(p.log.iter().any(|(who, op)| *who == Who::B && matches!(op, Op::SyncAck { .. })));
    p.assert_no_leaks();
}

#[test]
fn sync_rendezvous_send_completes_only_once_matched() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let data = pattern(3 * RNDV, 5);
        let buf = p.a.keyed(&data);
        let send = p.a.engine.tag_send(p.a.ep, buf, 9, true).unwrap();
        let send = p.a.track(send);
        p.drive();
        assert!(!p.a.done(send), "completed before the receiver matched it ({net:?})");
        let mut out = vec![0u8; data.len()];
        let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 9, ALL));
        p.drive();
        assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
        assert_eq!(out, data);
        p.assert_no_leaks();
    }
}

#[test]
fn push_rendezvous_sends_rts_then_fragments_after_rtr() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(5000, 6);
    let mut out = vec![0u8; 5000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 3, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 3, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.info(recv).length, 5000);
    assert_eq!(out, data);
    let kinds: Vec<&Op> = p.log.iter().map(|(_, op)| op).collect();
    assert!(matches!(kinds[0], Op::TagRts { total_len: 5000, .. }));
    assert!(matches!(kinds[1], Op::Rtr { accept_len: 5000, .. }));
    let fragments = kinds.iter().filter(|op| matches!(op, Op::RndvData { .. })).count();
    assert!(fragments >= 5, "5000 bytes in frames of 1024 take 5 fragments, got {fragments}");
    p.assert_no_leaks();
}

#[test]
fn push_rendezvous_waits_unexpected_until_a_receive_is_posted() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(2000, 7);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 11, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert!(!p.a.done(send));
    assert_eq!(p.b.engine.tag_probe(11, ALL).map(|(_, _, len)| len), Some(2000));
    let mut out = vec![0u8; 2000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 11, ALL));
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    p.assert_no_leaks();
}

#[test]
fn push_rendezvous_into_a_short_buffer_takes_what_fits() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(3000, 8);
    let mut out = vec![0u8; 1500];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.b.status(recv), Status::MessageTruncated);
    assert_eq!(p.b.info(recv).length, 1500);
    assert_eq!(&out[..], &data[..1500]);
    p.assert_no_leaks();
}

#[test]
fn placed_fragments_land_straight_in_the_receive_buffer() {
    let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
    let data = pattern(4000, 9);
    let mut out = vec![0u8; 4000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    p.assert_no_leaks();
}

#[test]
fn pull_rendezvous_is_read_by_the_receiver_and_released_by_pull_done() {
    let mut p = Pair::new(Net::native());
    let data = pattern(6000, 10);
    let buf = p.a.keyed(&data);
    let mut out = vec![0u8; 6000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 77, ALL));
    let send = p.a.engine.tag_send(p.a.ep, buf, 77, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.info(recv).length, 6000);
    assert_eq!(p.b.info(recv).sender_tag, 77);
    assert_eq!(out, data);
    let ops: Vec<&Op> = p.log.iter().map(|(_, op)| op).collect();
    assert!(matches!(ops[0], Op::TagRtsPull { total_len: 6000, .. }));
    assert!(matches!(ops[1], Op::PullDone { status: 0, .. }));
    assert_eq!(ops.len(), 2, "no data frames cross: {ops:?}");
    p.assert_no_leaks();
}

#[test]
fn pull_rendezvous_into_a_short_buffer_truncates_and_releases_the_sender() {
    let mut p = Pair::new(Net::native());
    let data = pattern(2048, 11);
    let buf = p.a.keyed(&data);
    let send = p.a.engine.tag_send(p.a.ep, buf, 5, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    let mut out = vec![0u8; 300];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 5, ALL));
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.b.status(recv), Status::MessageTruncated);
    assert_eq!(&out[..], &data[..300]);
    p.assert_no_leaks();
}

#[test]
fn pull_link_pushes_a_buffer_without_a_key() {
    let mut p = Pair::new(Net::native());
    let data = pattern(1000, 12);
    let mut out = vec![0u8; 1000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 5, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 5, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    assert!(matches!(p.log[0].1, Op::TagRts { .. }));
    p.assert_no_leaks();
}

#[test]
fn eager_send_is_done_at_once_and_its_bytes_go_inline() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let mut data = pattern(50, 13);
    let start = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    assert_eq!(start, Start::Done(Status::Ok, crate::OpInfo { length: 50, ..Default::default() }));
    let transmit = p.a.engine.poll_transmit().expect("the eager frame");
    assert!(matches!(transmit.payload, crate::Payload::Inline { len: 50, .. }));
    // SAFETY: the send's buffer is unchanged until this copy.
    let copy = unsafe { transmit.payload.bytes() }.to_vec();
    // The caller sent (copied) the frame before returning: the buffer is the user's again.
    data.fill(0);
    assert_eq!(copy, pattern(50, 13));
    assert_eq!(p.a.engine.table_counts().ops, 0, "an eager send keeps no record");
    p.assert_no_leaks();
}

#[test]
fn rendezvous_lends_at_most_a_window_of_fragments_at_once() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let data = pattern(20 * 1000, 14);
    let mut out = vec![0u8; data.len()];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    let window = crate::EngineConfig::default().fragment_window as usize;
    let fragments = p.log.iter().filter(|(_, op)| matches!(op, Op::RndvData { .. })).count();
    assert_eq!(fragments, window, "only a window of fragments may be out before any comes back");
    for _ in 0..100 {
        if p.a.done(send) {
            break;
        }
        p.return_payloads();
        p.drive();
    }
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    p.assert_no_leaks();
}

#[test]
fn cancelled_tag_receive_completes_canceled_once() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 8];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    assert!(p.b.engine.cancel(recv));
    assert!(!p.b.engine.cancel(recv));
    p.drive();
    assert_eq!(p.b.status(recv), Status::Canceled);
    // A message sent now is unexpected: the cancelled receive took nothing.
    let data = vec![1u8; 8];
    p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    p.drive();
    assert_eq!(out, vec![0u8; 8]);
    assert!(p.b.engine.tag_probe(1, ALL).is_some());
    let _ = p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL);
    p.assert_no_leaks();
}

#[test]
fn pull_read_refused_by_the_owner_fails_both_sides_once() {
    let mut p = Pair::new(Net::native());
    let data = pattern(1000, 15);
    let mut buf = p.a.keyed(&data);
    // The packed key names a region the sender never registered: its owner refuses the read.
    buf = buf.with_key(std::sync::Arc::from(vec![0xEEu8; 24]));
    let mut out = vec![0u8; 1000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, buf, 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!(p.b.status(recv), Status::InvalidParam);
    assert_eq!(p.a.status(send), Status::InvalidParam);
    assert!(out.iter().all(|&b| b == 0));
    assert!(p.a.errors.is_empty() && p.b.errors.is_empty(), "a refused read is not a failed link");
    p.assert_no_leaks();
}

#[test]
fn probed_messages_are_received_or_dropped_by_their_id() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let (small, big) = (pattern(10, 16), pattern(2000, 17));
        let big_buf = p.a.keyed(&big);
        let small_send = p.a.engine.tag_send(p.a.ep, send_buf(&small), 1, false).unwrap();
        let _ = p.a.track(small_send);
        let big_send = pending(p.a.engine.tag_send(p.a.ep, big_buf, 2, false).unwrap());
        let dropped = p.a.keyed(&big);
        let dropped_send = pending(p.a.engine.tag_send(p.a.ep, dropped, 3, false).unwrap());
        p.drive();
        let (id, sender, tag, len) = p.b.engine.tag_probe_remove(2, ALL).expect("the rendezvous");
        assert_eq!((sender, tag, len), (p.b.ep, 2, 2000));
        assert!(p.b.engine.tag_probe(2, ALL).is_none(), "a removed message is still matchable");
        let mut out = vec![0u8; 2000];
        let recv = pending(p.b.engine.tag_msg_recv(id, recv_buf(&mut out)).unwrap());
        assert_eq!(recv, id);
        let (small_id, _, _, _) = p.b.engine.tag_probe_remove(1, ALL).expect("the eager message");
        let mut small_out = vec![0u8; 10];
        let start = p.b.engine.tag_msg_recv(small_id, recv_buf(&mut small_out)).unwrap();
        assert!(matches!(start, Start::Done(Status::Ok, info) if info.length == 10 && info.sender_tag == 1));
        let (drop_id, _, _, _) = p.b.engine.tag_probe_remove(3, ALL).expect("the other rendezvous");
        p.b.engine.tag_msg_drop(drop_id).unwrap();
        assert_eq!(p.b.engine.tag_msg_drop(drop_id), Err(Status::NoElem));
        p.drive();
        assert_eq!((p.a.status(big_send), p.b.status(recv)), (Status::Ok, Status::Ok), "{net:?}");
        assert_eq!(p.a.status(dropped_send), Status::Ok, "a dropped rendezvous releases its sender");
        assert_eq!(out, big);
        assert_eq!(small_out, small);
        p.assert_no_leaks();
    }
}

/// An eager send on a ready endpoint with nothing queued comes back as its frame, which the
/// caller sends; the engine keeps nothing of it.
#[test]
fn an_eager_send_now_comes_back_as_its_frame() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 64];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 5, ALL));
    let data = pattern(48, 3);
    let Ok(Sent::Now(transmit)) = p.a.engine.tag_send_now(p.a.ep, send_buf(&data), 5, false) else {
        panic!("an eager message on an idle ready endpoint went through the outbox");
    };
    assert_eq!(transmit.header.op(), Some(Op::TagEager { tag: 5, sync: false, sender_req: 0 }));
    assert!(p.a.engine.poll_transmit().is_none(), "the frame was also queued");
    p.send_now(Who::A, transmit);
    p.drive();
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(&out[..48], &data[..]);
    p.assert_no_leaks();
}

/// A synchronous eager send on an idle ready endpoint comes back as its frame too, naming the
/// operation that completes once the receiver matched the message, and only then.
#[test]
fn a_sync_send_now_comes_back_as_its_frame_and_completes_on_the_answer() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(24, 7);
    let Ok(Sent::NowAwaiting(transmit, op)) = p.a.engine.tag_send_now(p.a.ep, send_buf(&data), 4, true)
    else {
        panic!("a synchronous eager message on an idle ready endpoint went through the outbox");
    };
    assert_eq!(transmit.header.op(), Some(Op::TagEager { tag: 4, sync: true, sender_req: op.raw() }));
    assert!(p.a.engine.poll_transmit().is_none(), "the frame was also queued");
    p.send_now(Who::A, transmit);
    p.drive();
    assert!(!p.a.done(op), "completed before the receiver matched it");
    let mut out = vec![0u8; 24];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut out), 4, ALL), Start::Done(Status::Ok, _)));
    p.drive();
    assert_eq!((p.a.status(op), p.a.info(op).length), (Status::Ok, 24));
    assert_eq!(out, data);
    p.assert_no_leaks();
}

/// With a frame waiting in the outbox, an eager send queues behind it rather than overtake it;
/// a message that is not eager goes as `tag_send` sends it.
#[test]
fn a_send_now_never_overtakes_the_outbox() {
    let mut p = Pair::new(Net::emulated());
    let (mut first, mut second) = (vec![0u8; 64], vec![0u8; 64]);
    let r1 = pending(p.b.engine.tag_recv(recv_buf(&mut first), 0, 0));
    let r2 = pending(p.b.engine.tag_recv(recv_buf(&mut second), 0, 0));
    let (older, newer) = (pattern(10, 4), pattern(20, 5));
    let sync = p.a.engine.tag_send(p.a.ep, send_buf(&older), 1, true).unwrap();
    let sync = p.a.track(sync);
    match p.a.engine.tag_send_now(p.a.ep, send_buf(&newer), 2, false) {
        Ok(Sent::Queued(Start::Done(Status::Ok, info))) => assert_eq!(info.length, 20),
        other => panic!("{other:?}"),
    }
    p.drive();
    assert_eq!((p.b.info(r1).sender_tag, p.b.info(r1).length), (1, 10));
    assert_eq!((p.b.info(r2).sender_tag, p.b.info(r2).length), (2, 20));
    assert_eq!(p.a.status(sync), Status::Ok);
    let big = pattern(RNDV, 6);
    let mut out = vec![0u8; RNDV];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 3, ALL));
    let Ok(Sent::Queued(start)) = p.a.engine.tag_send_now(p.a.ep, send_buf(&big), 3, false) else {
        panic!("a rendezvous message came back as one frame");
    };
    let send = p.a.track(start);
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, big);
    p.assert_no_leaks();
}
