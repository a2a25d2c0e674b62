//! Close (flush, force, both sides, during rendezvous, from an error handler), link failure,
//! keepalive and connecting endpoints.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::RemoteAccessTable;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who, LINK};
use crate::{CloseMode, Engine, EngineConfig, Event, LinkId, Phase, Status};

const ALL: u64 = u64::MAX;

#[test]
fn flush_close_waits_for_a_rendezvous_then_disconnects() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(3000, 1);
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    let close = p.a.engine.close(p.a.ep, CloseMode::Flush).unwrap().expect("a close to wait for");
    assert_eq!(p.a.engine.tag_send(p.a.ep, send_buf(&data), 2, false), Err(Status::Canceled));
    p.drive();
    assert!(!p.a.done(close), "closed before the rendezvous finished");
    let mut out = vec![0u8; 3000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    p.drive();
    assert_eq!((p.a.status(send), p.a.status(close), p.b.status(recv)), (Status::Ok, Status::Ok, Status::Ok));
    assert_eq!(out, data);
    assert!(matches!(p.log.last(), Some((Who::A, Op::Disconnect { force: false }))));
    assert_eq!(p.a.closed_links, vec![(LINK, false)]);
    assert!(p.a.errors.is_empty(), "a closing endpoint reported an error");
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    p.assert_no_leaks();
}

#[test]
fn close_from_both_sides_at_once_completes_both_without_errors() {
    let mut p = Pair::new(Net::emulated());
    let a = p.a.engine.close(p.a.ep, CloseMode::Flush).unwrap().unwrap();
    let b = p.b.engine.close(p.b.ep, CloseMode::Flush).unwrap().unwrap();
    p.drive();
    assert_eq!((p.a.status(a), p.b.status(b)), (Status::Ok, Status::Ok));
    assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
    assert_eq!(p.a.engine.phase(p.a.ep), Some(Phase::Dead(Status::Canceled)));
    assert_eq!(p.b.engine.phase(p.b.ep), Some(Phase::Dead(Status::Canceled)));
    p.assert_no_leaks();
}

#[test]
fn close_from_both_sides_while_rendezvous_are_in_flight() {
    for net in [Net::emulated(), Net { rma_later: true, ..Net::native() }] {
        let mut p = Pair::new(net);
        let (x, y) = (pattern(2000, 2), pattern(2000, 3));
        let (bx, by) = (p.a.keyed(&x), p.b.keyed(&y));
        let (mut ox, mut oy) = (vec![0u8; 2000], vec![0u8; 2000]);
        let rb = pending(p.b.engine.tag_recv(recv_buf(&mut ox), 1, ALL));
        let ra = pending(p.a.engine.tag_recv(recv_buf(&mut oy), 2, ALL));
        let sa = p.a.engine.tag_send(p.a.ep, bx, 1, false).unwrap();
        let sa = p.a.track(sa);
        let sb = p.b.engine.tag_send(p.b.ep, by, 2, false).unwrap();
        let sb = p.b.track(sb);
        p.drive();
        let ca = p.a.engine.close(p.a.ep, CloseMode::Flush).unwrap().unwrap();
        let cb = p.b.engine.close(p.b.ep, CloseMode::Flush).unwrap().unwrap();
        p.drive();
        p.finish_rma();
        p.drive();
        assert_eq!((p.a.status(sa), p.b.status(sb)), (Status::Ok, Status::Ok), "{net:?}");
        assert_eq!((p.a.status(ca), p.b.status(cb)), (Status::Ok, Status::Ok), "{net:?}");
        // Each receive either got its message before the other side's disconnect or was ended.
        for (side, recv) in [(&p.a, ra), (&p.b, rb)] {
            assert!(side.done(recv), "{net:?}: a receive never completed");
        }
        assert!(p.a.errors.is_empty() && p.b.errors.is_empty(), "{net:?}");
        p.assert_no_leaks();
    }
}

#[test]
fn force_close_during_rendezvous_cancels_the_sender_and_resets_the_receiver() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let data = pattern(20_000, 4);
    let mut out = vec![0u8; 20_000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert!(p.log.iter().any(|(_, op)| matches!(op, Op::RndvData { .. })), "the rendezvous started");
    assert_eq!(p.a.engine.close(p.a.ep, CloseMode::Force), Ok(None));
    p.drive();
    assert_eq!(p.a.status(send), Status::Canceled);
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert!(p.a.errors.is_empty(), "a force close is not the peer's failure");
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    p.assert_no_leaks();
}

#[test]
fn flush_close_during_a_pull_waits_for_the_receivers_read() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let data = pattern(5000, 5);
    let buf = p.a.keyed(&data);
    let mut out = vec![0u8; 5000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, buf, 1, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    let close = p.a.engine.close(p.a.ep, CloseMode::Flush).unwrap().unwrap();
    p.drive();
    assert!(!p.a.done(close) && !p.a.done(send));
    p.finish_rma();
    p.drive();
    assert_eq!((p.a.status(send), p.a.status(close), p.b.status(recv)), (Status::Ok, Status::Ok, Status::Ok));
    assert_eq!(out, data);
    p.assert_no_leaks();
}

#[test]
fn close_from_inside_the_error_handler_completes_nothing_twice() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let answers = Rc::new(RefCell::new(Vec::new()));
    let seen = answers.clone();
    p.b.on_error = Some(Box::new(move |engine: &mut Engine, ep, _status| {
        seen.borrow_mut().push(engine.close(ep, CloseMode::Flush));
        seen.borrow_mut().push(engine.close(ep, CloseMode::Force));
    }));
    let data = pattern(3000, 6);
    let mut out = vec![0u8; 3000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let mut stream_out = vec![0u8; 10];
    let stream = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut stream_out), true).unwrap());
    let send = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(send);
    p.fail_on = Some(Box::new(|from, op| from == Who::A && matches!(op, Op::RndvData { .. })));
    p.drive();
    assert_eq!(*answers.borrow(), vec![Ok(None), Ok(None)], "closing a dead endpoint is done at once");
    assert_eq!(p.b.errors.len(), 1);
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert_eq!(p.b.status(stream), Status::ConnectionReset);
    assert_eq!(p.a.status(send), Status::ConnectionReset);
    p.assert_no_leaks();
}

#[test]
fn link_failure_mid_push_rendezvous_completes_every_operation_once_and_leaks_nothing() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let region = p.b.register_rw(512);
    let key = p.b.region(region).key.clone();
    let big = pattern(30_000, 7);
    let small = pattern(30, 8);
    let mut out = vec![0u8; 30_000];
    let mut get_out = vec![0u8; 2000];
    // Larger than the stream send: it cannot fill before the link fails.
    let mut stream_out = vec![0u8; 40_000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let b_stream = pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut stream_out), true).unwrap());
    let e = p.a.ep;
    let pending_send = |start: Result<crate::Start, Status>| pending(start.unwrap());
    let ops = [
        pending_send(p.a.engine.tag_send(e, send_buf(&big), 1, false)),
        pending_send(p.a.engine.tag_send(e, send_buf(&small), 2, true)),
        pending_send(p.a.engine.stream_send(e, send_buf(&big))),
        p.a.engine.put(e, send_buf(&big[..3000]), p.b.region(region).addr(0), &key).unwrap(),
        p.a.engine.get(e, recv_buf(&mut get_out), p.b.region(region).addr(0), &key).unwrap(),
        p.a.engine.flush(e, false).unwrap(),
    ];
    p.fail_after = Some(6);
    for _ in 0..20 {
        p.drive();
        p.return_payloads();
    }
    p.drive();
    for op in ops {
        assert!(p.a.status(op) != Status::Ok, "{op} survived the link");
    }
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert_eq!(p.b.status(b_stream), Status::ConnectionReset);
    assert_eq!(p.a.errors, vec![(p.a.ep, Status::ConnectionReset)]);
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    assert_eq!(p.a.engine.tag_send(e, send_buf(&small), 3, false), Err(Status::ConnectionReset));
    // The synchronous eager message had arrived whole: a receive still takes it, and its
    // acknowledgement goes nowhere.
    let mut late = vec![0u8; 30];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut late), 2, ALL), crate::Start::Done(Status::Ok, _)));
    p.assert_no_leaks();
}

#[test]
fn link_failure_mid_pull_completes_both_sides_once_after_the_read_returns() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let data = pattern(8000, 9);
    let buf = p.a.keyed(&data);
    let mut out = vec![0u8; 8000];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL));
    let send = p.a.engine.tag_send(p.a.ep, buf, 1, false).unwrap();
    let send = p.a.track(send);
    let stream = p.a.keyed(&data);
    let pulled_stream = p.a.engine.stream_send(p.a.ep, stream).unwrap();
    let pulled_stream = p.a.track(pulled_stream);
    p.drive();
    assert_eq!(p.held_rma(), 2, "the receiver's reads are out");
    // The link fails under the receiver: its reads are still with the transport.
    p.b.engine.link_failed(LINK, Status::ConnectionReset);
    while let Some(event) = p.b.engine.poll_event() {
        assert!(!matches!(event, Event::Completion(c) if c.op == recv), "completed while its read was out");
    }
    p.fail_link();
    p.drive();
    assert_eq!(p.b.status(recv), Status::ConnectionReset);
    assert_eq!(p.a.status(send), Status::ConnectionReset);
    assert_eq!(p.a.status(pulled_stream), Status::ConnectionReset);
    p.assert_no_leaks();
}

#[test]
fn a_failed_endpoint_waits_for_its_lent_payloads_before_completing() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let data = pattern(3000, 10);
    let send = pending(p.a.engine.stream_send(p.a.ep, send_buf(&data)).unwrap());
    p.drive();
    p.a.engine.link_failed(LINK, Status::ConnectionReset);
    while let Some(event) = p.a.engine.poll_event() {
        assert!(
            !matches!(event, Event::Completion(c) if c.op == send),
            "completed while the transport held its bytes"
        );
    }
    p.return_payloads();
    p.drive();
    assert_eq!(p.a.status(send), Status::ConnectionReset);
    p.fail_link();
    p.assert_no_leaks();
}

#[test]
fn unexpected_rendezvous_of_a_failed_endpoint_is_dropped_and_eager_kept() {
    let mut p = Pair::new(Net::emulated());
    let (big, small) = (pattern(1000, 11), pattern(10, 12));
    p.a.engine.tag_send(p.a.ep, send_buf(&big), 1, false).unwrap();
    p.a.engine.tag_send(p.a.ep, send_buf(&small), 2, false).unwrap();
    p.drive();
    assert_eq!(p.b.engine.table_counts().tag_unexpected, 2);
    p.fail_link();
    p.drive();
    assert_eq!(p.b.engine.table_counts().tag_unexpected, 1, "the rendezvous can never be fetched");
    let mut out = vec![0u8; 10];
    assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut out), 2, ALL), crate::Start::Done(Status::Ok, _)));
    assert_eq!(out, small);
    p.assert_no_leaks();
}

#[test]
fn closing_again_waits_for_nothing_and_a_released_endpoint_is_unknown() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(1000, 13);
    p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    assert!(p.a.engine.close(p.a.ep, CloseMode::Flush).unwrap().is_some());
    assert_eq!(p.a.engine.close(p.a.ep, CloseMode::Flush), Ok(None));
    assert_eq!(p.a.engine.close(p.a.ep, CloseMode::Force), Ok(None));
    let mut out = vec![0u8; 1000];
    p.b.engine.tag_recv(recv_buf(&mut out), 1, ALL);
    p.assert_no_leaks();
    assert_eq!(p.a.engine.close(p.a.ep, CloseMode::Flush), Err(Status::NotConnected));
}

#[test]
fn keepalive_probes_an_idle_endpoint_and_a_silent_one_times_out() {
    let config = EngineConfig {
        keepalive_interval: Some(Duration::from_secs(1)),
        keepalive_timeout: Duration::from_secs(3),
        ..EngineConfig::default()
    };
    let mut p = Pair::with_config(Net::emulated(), config);
    let t0 = Instant::now();
    p.a.engine.handle_timeout(t0);
    assert_eq!(p.a.engine.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    p.a.engine.handle_timeout(t0 + Duration::from_millis(1100));
    p.drive();
    assert!(matches!(p.log.last(), Some((Who::A, Op::Keepalive))), "no probe on an idle endpoint");
    assert!(p.b.errors.is_empty());
    // B hears the probe: its clock restarts. A hears nothing from B for the timeout.
    p.a.engine.handle_timeout(t0 + Duration::from_millis(3100));
    p.drive();
    assert_eq!(p.a.errors, vec![(p.a.ep, Status::EndpointTimeout)]);
    assert_eq!(p.b.errors, vec![(p.b.ep, Status::ConnectionReset)]);
    p.assert_no_leaks();
}

#[test]
fn a_link_whose_transport_watches_the_peer_probes_but_never_times_out_on_silence() {
    let config = EngineConfig {
        keepalive_interval: Some(Duration::from_secs(1)),
        keepalive_timeout: Duration::from_secs(3),
        ..EngineConfig::default()
    };
    let mut p = Pair::with_config(Net { peer_watched: true, ..Net::emulated() }, config);
    let t0 = Instant::now();
    p.a.engine.handle_timeout(t0);
    p.a.engine.handle_timeout(t0 + Duration::from_millis(1100));
    p.drive();
    assert!(matches!(p.log.last(), Some((Who::A, Op::Keepalive))), "no probe on an idle endpoint");
    // B stays silent far past the timeout (as a peer busy serving A's RDMA would): A probes on,
    // and only its transport may declare B dead.
    for second in 2..30 {
        p.a.engine.handle_timeout(t0 + Duration::from_secs(second) + Duration::from_millis(200));
        assert!(p.a.errors.is_empty(), "timed out on silence at {second} s");
    }
    let next = p.a.engine.poll_timeout().expect("probes stay due");
    assert!(next <= t0 + Duration::from_secs(31), "only the next probe is due: {next:?}");
    p.drive();
    assert!(p.log.iter().filter(|(who, op)| *who == Who::A && matches!(op, Op::Keepalive)).count() > 5);
    assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
}

#[test]
fn connecting_endpoint_holds_its_frames_until_ready_on_the_answering_link() {
    let table = Arc::new(RemoteAccessTable::new());
    let mut engine = Engine::new(EngineConfig::default(), table);
    let caps = Net::emulated().caps();
    let ep = engine.add_endpoint(LinkId(1), caps, true, false);
    let data = pattern(16, 14);
    let send = engine.tag_send(ep, send_buf(&data), 5, false).unwrap();
    let crate::Start::Pending(send) = send else {
        panic!("an eager send of a connecting endpoint is done at once")
    };
    assert!(engine.poll_transmit().is_none(), "a connecting endpoint sent");
    assert!(engine.poll_event().is_none(), "the held send completed before the answer");
    engine.endpoint_ready(ep, LinkId(2), caps);
    let Some(crate::Event::Completion(done)) = engine.poll_event() else { panic!("no completion") };
    assert_eq!((done.op, done.status, done.info.length), (send, Status::Ok, data.len()));
    let transmit = engine.poll_transmit().expect("released");
    assert_eq!(transmit.link, LinkId(2));
    assert!(matches!(transmit.header.op(), Some(Op::TagEager { tag: 5, .. })));
    // The engine kept its own copy of the held bytes: the caller's buffer was free at once.
    assert!(matches!(&transmit.payload, crate::Payload::Owned(bytes) if *bytes == data));
    assert_eq!(engine.close(ep, CloseMode::Force), Ok(None));
    engine.release_endpoint(ep);
    while engine.poll_event().is_some() {}
    assert!(engine.table_counts().is_empty(), "{:?}", engine.table_counts());
}

#[test]
fn endpoint_closed_while_connecting_sends_its_held_frames_once_answered_then_closes() {
    let table = Arc::new(RemoteAccessTable::new());
    let mut engine = Engine::new(EngineConfig::default(), table);
    let caps = Net::emulated().caps();
    let ep = engine.add_endpoint(LinkId(1), caps, true, true);
    let data = pattern(2000, 15);
    let send = pending(engine.tag_send(ep, send_buf(&data), 5, false).unwrap());
    let close = engine.close(ep, CloseMode::Flush).unwrap().expect("waits for the held send");
    assert!(engine.poll_transmit().is_none());
    engine.endpoint_ready(ep, LinkId(1), caps);
    let transmit = engine.poll_transmit().expect("the held request");
    assert!(matches!(transmit.header.op(), Some(Op::TagRts { tag: 5, .. })));
    let flush = engine.poll_transmit().expect("the close's flush");
    let Some(Op::FlushReq { id: flush_id }) = flush.header.op() else { panic!("no flush before the close") };
    assert!(engine.poll_transmit().is_none(), "disconnected before the send finished");
    // The receiver declines: the send is done; it answers the flush: then the close.
    let decline = Op::Rtr { sender_req: send.raw(), recv_req: 0, accept_len: 0 };
    let mut header = [0u8; zcx_dataplane::proto::MAX_HEADER_LEN];
    let n = decline.encode(&mut header);
    engine.handle_frame(LinkId(1), &header[..n]);
    assert!(engine.poll_transmit().is_none(), "disconnected before the peer answered the flush");
    let n = Op::FlushAck { id: flush_id }.encode(&mut header);
    engine.handle_frame(LinkId(1), &header[..n]);
    let disconnect = engine.poll_transmit().expect("the disconnect");
    assert_eq!(disconnect.header.op(), Some(Op::Disconnect { force: false }));
    let mut completed = Vec::new();
    while let Some(event) = engine.poll_event() {
        if let Event::Completion(c) = event {
            completed.push((c.op, c.status));
        }
    }
    assert_eq!(completed, vec![(send, Status::Ok), (close, Status::Ok)]);
    engine.release_endpoint(ep);
    assert!(engine.table_counts().is_empty(), "{:?}", engine.table_counts());
}

/// A worker's new endpoint to a peer that had connected to it first takes over the peer's
/// connection: what it sent while waiting goes out on that link, stream bytes that arrived there
/// before are the first it reads, and the merged endpoint's id finds it.
#[test]
fn an_endpoint_absorbs_the_one_its_peer_connected_first() {
    let mut p = Pair::new(Net::emulated());
    let early = pattern(12, 9);
    p.a.engine.stream_send(p.a.ep, send_buf(&early)).unwrap();
    p.drive();
    let accepted = p.b.ep;
    let own_link = LinkId(99);
    let mine = p.b.engine.add_endpoint(own_link, Net::emulated().caps(), true, false);
    let reply = pattern(8, 40);
    let sent = p.b.engine.stream_send(mine, send_buf(&reply)).unwrap();
    let held = p.b.track(sent);
    let mut first = vec![0u8; 12];
    let recv = pending(p.b.engine.stream_recv(mine, recv_buf(&mut first), true).unwrap());
    let mut got = vec![0u8; 8];
    let at_a = pending(p.a.engine.stream_recv(p.a.ep, recv_buf(&mut got), true).unwrap());
    p.drive();
    assert!(!p.a.done(at_a), "a connecting endpoint sent before its answer");
    assert!(!p.b.engine.absorb_endpoint(accepted, mine), "only a connecting endpoint absorbs");
    assert!(p.b.engine.absorb_endpoint(mine, accepted));
    assert_eq!(p.b.engine.link_of(mine), Some(LINK));
    assert_eq!(p.b.engine.link_of(accepted), Some(LINK), "the merged id finds the endpoint");
    assert!(!p.b.engine.absorb_endpoint(mine, accepted), "nothing left to absorb");
    p.drive();
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(first, early);
    assert_eq!(p.b.status(held), Status::Ok);
    assert_eq!(p.a.status(at_a), Status::Ok);
    assert_eq!(got, reply);
    p.b.ep = mine;
    p.assert_no_leaks();
}

/// A rendezvous message that arrived on the merged endpoint before the merge, matched after it:
/// its operation is the surviving endpoint's, so the data that follows on the link finds it.
#[test]
fn a_rendezvous_that_arrived_before_the_merge_completes_after_it() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let data = pattern(5000, 8);
        let buf = p.a.keyed(&data);
        let sent = p.a.engine.tag_send(p.a.ep, buf, 4, false).unwrap();
        let send = p.a.track(sent);
        p.drive();
        let accepted = p.b.ep;
        let mine = p.b.engine.add_endpoint(LinkId(99), net.caps(), true, false);
        assert!(p.b.engine.absorb_endpoint(mine, accepted));
        let mut out = vec![0u8; data.len()];
        let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 4, ALL));
        p.drive();
        assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok), "{net:?}");
        assert_eq!(out, data);
        p.b.ep = mine;
        p.assert_no_leaks();
    }
}
