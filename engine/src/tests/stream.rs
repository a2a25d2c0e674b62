//! Stream endpoints: order, waitall, pushed and pulled large sends.

use zcx_dataplane::proto::wire::Op;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who, LINK};
use crate::output::{Header, Placement};
use crate::{EngineConfig, Event, Phase, Sent, Start, Status};

#[test]
fn small_sends_fill_one_receive_in_order() {
    let mut p = Pair::new(Net::emulated());
    let (one, two) = (pattern(10, 1), pattern(10, 50));
    let mut out = vec![0u8; 20];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    p.a.engine.stream_send(p.a.ep, send_buf(&one)).unwrap();
    p.drive();
    assert!(!p.b.done(recv), "a waitall receive completed with half its bytes");
    p.a.engine.stream_send(p.a.ep, send_buf(&two)).unwrap();
    p.drive();
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(p.b.info(recv).length, 20);
    assert_eq!(&out[..10], &one[..]);
    assert_eq!(&out[10..], &two[..]);
    p.assert_no_leaks();
}

#[test]
fn receive_without_waitall_completes_with_what_arrived() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 100];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), false).unwrap());
    let data = pattern(30, 2);
    p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap();
    p.drive();
    assert_eq!(p.b.info(recv).length, 30);
    assert_eq!(&out[..30], &data[..]);
    p.assert_no_leaks();
}

#[test]
fn bytes_that_arrived_first_complete_a_receive_at_once_and_keep_the_rest() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(50, 3);
    p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap();
    p.drive();
    assert_eq!(p.b.engine.table_counts().stream_unread, 50);
    let mut head = vec![0u8; 20];
    let start = p.b.engine.stream_recv(p.b.ep, recv_buf(&mut head), true).unwrap();
    assert!(matches!(start, Start::Done(Status::Ok, info) if info.length == 20));
    assert_eq!(p.b.engine.table_counts().stream_unread, 30);
    let mut tail = vec![0u8; 30];
    let start = p.b.engine.stream_recv(p.b.ep, recv_buf(&mut tail), true).unwrap();
    assert!(matches!(start, Start::Done(Status::Ok, _)));
    assert_eq!([head, tail].concat(), data);
    p.assert_no_leaks();
}

#[test]
fn large_pushed_send_keeps_order_with_a_small_send_after_it() {
    for placed in [false, true] {
        large_pushed_send_then_small(Net { payloads_later: true, placed, ..Net::emulated() });
    }
}

fn large_pushed_send_then_small(net: Net) {
    let mut p = Pair::new(net);
    let big = pattern(5000, 4);
    let small = pattern(10, 5);
    let s1 = p.a.engine.stream_send(p.a.ep, send_buf(&big)).unwrap();
    let s1 = p.a.track(s1);
    let s2 = p.a.engine.stream_send(p.a.ep, send_buf(&small)).unwrap();
    let s2 = p.a.track(s2);
    let mut out = vec![0u8; 5010];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    for _ in 0..100 {
        p.drive();
        p.return_payloads();
    }
    p.drive();
    assert_eq!((p.a.status(s1), p.a.status(s2), p.b.status(recv)), (Status::Ok, Status::Ok, Status::Ok));
    assert_eq!(&out[..5000], &big[..]);
    assert_eq!(&out[5000..], &small[..]);
    assert!(p.log.iter().filter(|(_, op)| matches!(op, Op::Stream)).count() >= 6);
    p.assert_no_leaks();
}

#[test]
fn pulled_send_holds_later_bytes_behind_it_until_read() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let big = pattern(3000, 6);
    let small = pattern(7, 7);
    let buf = p.a.keyed(&big);
    let s1 = p.a.engine.stream_send(p.a.ep, buf).unwrap();
    let s1 = p.a.track(s1);
    p.drive();
    // The small send goes eagerly while the pull is still reading.
    let s2 = p.a.engine.stream_send(p.a.ep, send_buf(&small)).unwrap();
    let s2 = p.a.track(s2);
    let mut out = vec![0u8; 3007];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), false).unwrap());
    p.drive();
    assert_eq!(p.held_rma(), 1);
    assert!(!p.b.done(recv), "bytes sent after the pulled ones overtook them");
    assert!(!p.a.done(s1));
    p.finish_rma();
    p.drive();
    assert_eq!((p.a.status(s1), p.a.status(s2)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.info(recv).length, 3007);
    assert_eq!(&out[..3000], &big[..]);
    assert_eq!(&out[3000..], &small[..]);
    assert!(matches!(p.log[0].1, Op::StreamRtsPull { total_len: 3000, .. }));
    p.assert_no_leaks();
}

#[test]
fn pulls_read_straight_into_the_receives_they_complete_while_later_bytes_go_on() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let (big1, big2, small) = (pattern(3000, 21), pattern(2000, 22), pattern(7, 23));
    let (mut out1, mut out2, mut out3) = (vec![0u8; 3000], vec![0u8; 2500], vec![0u8; 100]);
    // Waitall and exactly the pull's size; without waitall and larger than it; then any.
    let r1 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out1), true).unwrap());
    let r2 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out2), false).unwrap());
    let r3 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out3), false).unwrap());
    let sends = [p.a.keyed(&big1), p.a.keyed(&big2), send_buf(&small)]
        .map(|buf| p.a.engine.stream_send(p.a.ep, buf).unwrap())
        .map(|start| p.a.track(start));
    p.drive();
    assert_eq!(p.held_rma_locals(), vec![out1.as_mut_ptr(), out2.as_mut_ptr()], "not read straight in");
    // The small send's bytes come after both pulls' in the stream, so they are the third
    // receive's at once, while the reads are still out.
    assert_eq!(p.b.status(r3), Status::Ok);
    assert!(!p.b.done(r1) && !p.b.done(r2), "a receive completed before its read returned");
    p.finish_rma();
    p.drive();
    assert_eq!((p.b.info(r1).length, p.b.info(r2).length, p.b.info(r3).length), (3000, 2000, 7));
    assert_eq!((out1, &out2[..2000], &out3[..7]), (big1, &big2[..], &small[..]));
    assert!(sends.iter().all(|&send| p.a.status(send) == Status::Ok));
    assert_eq!(p.b.engine.table_counts().stream_unread, 0);
    p.assert_no_leaks();
}

#[test]
fn a_pull_that_would_not_complete_the_waiting_receive_is_read_into_a_copy() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let (big, small) = (pattern(3000, 24), pattern(7, 25));
    let mut out = vec![0u8; 3007];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    let sends = [p.a.keyed(&big), send_buf(&small)]
        .map(|buf| p.a.engine.stream_send(p.a.ep, buf).unwrap())
        .map(|start| p.a.track(start));
    p.drive();
    assert_eq!(p.held_rma(), 1);
    assert_ne!(
        p.held_rma_locals(),
        vec![out.as_mut_ptr()],
        "a waitall receive bigger than the pull was read into"
    );
    assert!(!p.b.done(recv), "bytes sent after the pulled ones overtook them");
    p.finish_rma();
    p.drive();
    assert_eq!(p.b.info(recv).length, 3007);
    assert_eq!(out, [big, small].concat());
    assert!(sends.iter().all(|&send| p.a.status(send) == Status::Ok));
    p.assert_no_leaks();
}

#[test]
fn a_receive_read_into_when_the_link_fails_completes_once_after_the_read_returns() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let data = pattern(4000, 26);
    let mut out = vec![0u8; 4000];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    let buf = p.a.keyed(&data);
    let send = p.a.engine.stream_send(p.a.ep, buf).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert_eq!(p.held_rma_locals(), vec![out.as_mut_ptr()]);
    p.b.engine.link_failed(LINK, Status::ConnectionReset);
    while let Some(event) = p.b.engine.poll_event() {
        assert!(!matches!(event, Event::Completion(c) if c.op == recv), "completed while its read was out");
    }
    p.fail_link();
    p.drive();
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert_eq!(p.a.status(send), Status::ConnectionReset);
    assert_eq!(p.b.order.iter().filter(|&&op| op == recv).count(), 1);
    p.assert_no_leaks();
}

/// A `Stream` frame's bytes: its header, then `payload`.
fn stream_frame(payload: &[u8]) -> Vec<u8> {
    let mut bytes = Header::of(&Op::Stream).as_bytes().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

/// Writes `payload` where `placement` says, as a transport does.
fn write_placed(placement: &Placement, payload: &[u8]) {
    // SAFETY: the engine lends `dest..dest + len` of the fragment until `place_done`.
    unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), placement.dest, payload.len()) };
}

#[test]
fn placed_stream_fragments_are_written_straight_into_waiting_receives_in_order() {
    let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
    let header = Header::of(&Op::Stream);
    let (first, middle, last) = (pattern(4000, 31), pattern(2000, 32), pattern(50, 33));
    let (mut out1, mut out2) = (vec![0u8; 6000], vec![0u8; 100]);
    let r1 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out1), true).unwrap());
    let r2 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out2), false).unwrap());
    let placed = p.b.engine.handle_placed(LINK, header.as_bytes(), first.len()).expect("a placement");
    assert_eq!(placed.dest, out1.as_mut_ptr(), "not written straight into the first receive");
    // While the transport writes it, a frame and another placed fragment come after it: both
    // wait behind it.
    p.inject(Who::A, stream_frame(&middle));
    p.drive();
    let behind = p.b.engine.handle_placed(LINK, header.as_bytes(), last.len()).expect("a placement");
    assert!(![out1.as_mut_ptr(), out2.as_mut_ptr()].contains(&behind.dest), "placed ahead of earlier bytes");
    write_placed(&behind, &last);
    p.b.engine.place_done(behind.token, Ok(()));
    p.drive();
    assert!(!p.b.done(r1) && !p.b.done(r2), "bytes overtook a fragment still being written");
    write_placed(&placed, &first);
    p.b.engine.place_done(placed.token, Ok(()));
    p.drive();
    assert_eq!((p.b.info(r1).length, p.b.info(r2).length), (6000, 50));
    assert_eq!(out1, [first, middle].concat());
    assert_eq!(&out2[..50], &last[..]);
    assert_eq!(p.b.engine.table_counts().stream_unread, 0);
    p.assert_no_leaks();
}

#[test]
fn a_fragment_that_completes_its_receive_lets_the_next_go_straight_into_the_next_receive() {
    let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
    let header = Header::of(&Op::Stream);
    let (one, two) = (pattern(3000, 34), pattern(2500, 35));
    let (mut out1, mut out2) = (vec![0u8; 3000], vec![0u8; 2600]);
    let r1 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out1), true).unwrap());
    let r2 = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out2), false).unwrap());
    let first = p.b.engine.handle_placed(LINK, header.as_bytes(), one.len()).expect("a placement");
    // The first fragment fills the waitall receive exactly: the next bytes are the second's.
    let second = p.b.engine.handle_placed(LINK, header.as_bytes(), two.len()).expect("a placement");
    assert_eq!((first.dest, second.dest), (out1.as_mut_ptr(), out2.as_mut_ptr()));
    write_placed(&second, &two);
    p.b.engine.place_done(second.token, Ok(()));
    p.drive();
    assert!(p.b.done(r2) && !p.b.done(r1), "a receive completed before its bytes were written");
    write_placed(&first, &one);
    p.b.engine.place_done(first.token, Ok(()));
    p.drive();
    assert_eq!((p.b.info(r1).length, p.b.info(r2).length), (3000, 2500));
    assert_eq!((out1, &out2[..2500]), (one, &two[..]));
    p.assert_no_leaks();
}

#[test]
fn a_placed_stream_fragment_that_fails_fails_its_receive_once_and_the_endpoint() {
    for link_first in [false, true] {
        let mut p = Pair::new(Net { placed: true, ..Net::emulated() });
        let mut out = vec![0u8; 3000];
        let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
        let placed =
            p.b.engine.handle_placed(LINK, Header::of(&Op::Stream).as_bytes(), 3000).expect("a placement");
        if link_first {
            // The link fails under the receiver while the transport still writes the payload.
            p.b.engine.link_failed(LINK, Status::ConnectionReset);
            while let Some(event) = p.b.engine.poll_event() {
                assert!(
                    !matches!(event, Event::Completion(c) if c.op == recv),
                    "completed while written into"
                );
            }
        }
        p.b.engine.place_done(placed.token, Err(Status::ConnectionReset));
        p.fail_link();
        p.drive();
        assert_eq!(p.b.status(recv), Status::ConnectionReset, "link failed first: {link_first}");
        assert_eq!(p.b.order.iter().filter(|&&op| op == recv).count(), 1);
        assert_eq!(p.b.engine.phase(p.b.ep), Some(Phase::Dead(Status::ConnectionReset)));
        p.assert_no_leaks();
    }
}

#[test]
fn a_placed_stream_fragment_larger_than_allowed_closes_the_link_before_any_buffer() {
    let config = EngineConfig { max_stream_pull: 4096, ..EngineConfig::default() };
    let mut p = Pair::with_config(Net { placed: true, ..Net::emulated() }, config);
    let mut out = vec![0u8; 64];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    assert!(p.b.engine.handle_placed(LINK, Header::of(&Op::Stream).as_bytes(), 4097).is_none());
    p.drive();
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert!(p.b.closed_links.contains(&(LINK, true)));
    assert_eq!(p.b.engine.table_counts().ops, 0);
    p.assert_no_leaks();
}

#[test]
fn cancelled_stream_receive_completes_canceled_with_its_bytes() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 100];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    let data = pattern(40, 8);
    p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap();
    p.drive();
    assert!(p.b.engine.cancel(recv));
    p.drive();
    assert_eq!(p.b.status(recv), Status::Canceled);
    assert_eq!(p.b.info(recv).length, 40);
    p.assert_no_leaks();
}

/// A small stream send on an idle endpoint comes back as its frame; behind a large send's
/// fragments, or with frames in the outbox, it queues so the bytes keep their order.
#[test]
fn a_stream_send_now_comes_back_as_its_frame_only_when_nothing_is_ahead() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    // More fragments than the window lets out before their payloads come back.
    let (small, big, last) = (pattern(30, 7), pattern(8000, 8), pattern(20, 9));
    let mut out = vec![0u8; 8050];
    let recv = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out), true).unwrap());
    let Ok(Sent::Now(transmit)) = p.a.engine.stream_send_now(p.a.ep, send_buf(&small)) else {
        panic!("a small send on an idle endpoint went through the outbox");
    };
    assert_eq!(transmit.header.op(), Some(Op::Stream));
    p.send_now(Who::A, transmit);
    let Ok(Sent::Queued(start)) = p.a.engine.stream_send_now(p.a.ep, send_buf(&big)) else {
        panic!("a large send came back as one frame");
    };
    let large = pending(start);
    p.drive();
    let behind = match p.a.engine.stream_send_now(p.a.ep, send_buf(&last)) {
        Ok(Sent::Queued(start)) => p.a.track(start),
        other => panic!("a small send overtook the fragments still to send: {other:?}"),
    };
    while !p.b.done(recv) {
        p.return_payloads();
        p.drive();
    }
    p.return_payloads();
    p.drive();
    assert_eq!((p.a.status(large), p.a.status(behind)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(out, [small, big, last].concat());
    p.assert_no_leaks();
}

/// `ucp_stream_worker_poll`: an endpoint with unread bytes is reported once per arrival, and not
/// at all once its bytes were read.
#[test]
fn stream_poll_reports_an_endpoint_once_per_arrival_of_unread_bytes() {
    let mut p = Pair::new(Net::emulated());
    let poll = |p: &mut Pair| {
        let mut ready = Vec::new();
        p.b.engine.stream_poll(8, &mut ready);
        ready
    };
    assert!(poll(&mut p).is_empty());
    let data = pattern(10, 5);
    p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap();
    p.drive();
    assert_eq!(poll(&mut p), vec![p.b.ep]);
    assert!(poll(&mut p).is_empty(), "reported again without new bytes");
    p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap();
    p.drive();
    let mut none = Vec::new();
    p.b.engine.stream_poll(0, &mut none);
    assert!(none.is_empty(), "more than max");
    let mut all = vec![0u8; 20];
    let start = p.b.engine.stream_recv(p.b.ep, recv_buf(&mut all), true).unwrap();
    assert!(matches!(start, Start::Done(Status::Ok, _)));
    assert!(poll(&mut p).is_empty(), "reported with nothing left to read");
    p.assert_no_leaks();
}
