//! Active messages: eager, both rendezvous kinds, declining, refusals.

use zcx_dataplane::proto::wire::Op;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who, LINK, RNDV};
use crate::{AmProtocol, Sent, Start, Status, MAX_AM_HEADER};

#[test]
fn eager_am_delivers_header_and_data_to_the_handler_id() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(60, 1);
    let send = p.a.engine.am_send(p.a.ep, 12, b"hdr", send_buf(&data), true).unwrap();
    let send = p.a.track(send);
    let bare = p.a.engine.am_send(p.a.ep, 13, b"", send_buf(&data), false).unwrap();
    let bare = p.a.track(bare);
    p.drive();
    assert_eq!((p.a.status(send), p.a.status(bare)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.ams.len(), 2);
    let am = &p.b.ams[0];
    assert_eq!((am.am_id, am.reply, am.ep), (12, true, p.b.ep));
    assert_eq!(am.header(), b"hdr");
    assert_eq!(am.data(), &data[..]);
    assert!(am.rndv.is_none());
    assert_eq!((p.b.ams[1].am_id, p.b.ams[1].header(), p.b.ams[1].data()), (13, &b""[..], &data[..]));
    p.assert_no_leaks();
}

/// A small active message on an idle, ready endpoint comes back as its frame, header and all;
/// one that must rendezvous, or that frames in the outbox are ahead of, queues; an eager-only
/// one too large for a frame is refused without touching the outbox.
#[test]
fn an_am_send_now_comes_back_as_its_frame_only_when_it_may_go_now() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(40, 5);
    let Ok(Sent::Now(transmit)) =
        p.a.engine.am_send_now(p.a.ep, 9, b"user-hdr", send_buf(&data), true, AmProtocol::Auto)
    else {
        panic!("a small active message on an idle endpoint went through the outbox");
    };
    let frame = [transmit.header.as_bytes(), b"user-hdr"].concat();
    assert_eq!(
        Op::decode(&frame).map(|(op, _)| op),
        Ok(Op::AmEager { am_id: 9, reply: true, header_len: 8 })
    );
    p.send_now_after(Who::A, transmit, b"user-hdr");
    let big = pattern(3000, 6);
    let Ok(Sent::Queued(start)) =
        p.a.engine.am_send_now(p.a.ep, 9, b"h", send_buf(&big), false, AmProtocol::Auto)
    else {
        panic!("a rendezvous-sized message came back as one frame");
    };
    let rndv = p.a.track(start);
    let behind = match p.a.engine.am_send_now(p.a.ep, 9, b"", send_buf(&data), false, AmProtocol::Auto) {
        Ok(Sent::Queued(start)) => p.a.track(start),
        other => panic!("a message overtook the frame in the outbox: {other:?}"),
    };
    let forced = p.a.engine.am_send_now(p.a.ep, 9, b"", send_buf(&data), false, AmProtocol::Rendezvous);
    assert!(matches!(forced, Ok(Sent::Queued(Start::Pending(_)))), "{forced:?}");
    let forced = p.a.track(
        forced
            .map(|sent| match sent {
                Sent::Queued(start) => start,
                Sent::Now(_) | Sent::NowAwaiting(..) => unreachable!(),
            })
            .unwrap(),
    );
    let huge = pattern(1 << 20, 7);
    let refused = p.a.engine.am_send_now(p.a.ep, 9, b"", send_buf(&huge), false, AmProtocol::Eager);
    assert!(matches!(refused, Err(Status::InvalidParam)), "{refused:?}");
    p.drive();
    assert_eq!(p.b.ams.len(), 4);
    let first = &p.b.ams[0];
    assert_eq!(
        (first.am_id, first.reply, first.header(), first.data()),
        (9, true, &b"user-hdr"[..], &data[..])
    );
    assert!(first.rndv.is_none());
    assert!(p.b.ams[1].rndv.is_some(), "the large message announced a rendezvous");
    assert_eq!(p.b.ams[2].data(), &data[..], "the message behind the outbox came after it");
    assert!(p.b.ams[3].rndv.is_some(), "a rendezvous asked for is a rendezvous");
    assert_eq!(p.a.status(behind), Status::Ok);
    while let Some(am) = p.b.ams.pop() {
        if let Some((desc, _)) = am.rndv {
            p.b.engine.am_decline(desc).unwrap();
        }
    }
    p.drive();
    assert_eq!((p.a.status(rndv), p.a.status(forced)), (Status::Ok, Status::Ok));
    p.assert_no_leaks();
}

#[test]
fn push_rendezvous_am_data_is_taken_into_the_handlers_buffer() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(3000, 2);
    let send = p.a.engine.am_send(p.a.ep, 1, b"h", send_buf(&data), false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert!(!p.a.done(send));
    assert!(matches!(p.log[0].1, Op::AmRts { total_len: 3000, header_len: 1, .. }));
    let am = p.b.ams.pop().expect("delivered");
    assert_eq!(am.header(), b"h");
    let (desc, len) = am.rndv.expect("a rendezvous");
    assert_eq!(len, 3000);
    let mut out = vec![0u8; 3000];
    let recv = pending(p.b.engine.am_recv_data(desc, recv_buf(&mut out)).unwrap());
    assert_eq!(recv, desc, "the data completes under the descriptor's id");
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.info(recv).length, 3000);
    assert_eq!(out, data);
    p.assert_no_leaks();
}

#[test]
fn pull_rendezvous_am_data_is_read_by_the_receiver() {
    let mut p = Pair::new(Net::native());
    let data = pattern(4096, 3);
    let buf = p.a.keyed(&data);
    let send = p.a.engine.am_send(p.a.ep, 2, b"head", buf, false).unwrap();
    let send = p.a.track(send);
    p.drive();
    assert!(matches!(p.log[0].1, Op::AmRtsPull { total_len: 4096, header_len: 4, .. }));
    let am = p.b.ams.pop().expect("delivered");
    assert_eq!(am.header(), b"head");
    let (desc, _) = am.rndv.expect("a rendezvous");
    let mut out = vec![0u8; 4096];
    let recv = pending(p.b.engine.am_recv_data(desc, recv_buf(&mut out)).unwrap());
    p.drive();
    assert_eq!((p.a.status(send), p.b.status(recv)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    assert!(p.log.iter().all(|(_, op)| !matches!(op, Op::RndvData { .. })));
    p.assert_no_leaks();
}

#[test]
fn declined_am_rendezvous_completes_the_sender_without_data() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let data = pattern(2 * RNDV, 4);
        let buf = p.a.keyed(&data);
        let send = p.a.engine.am_send(p.a.ep, 3, b"", buf, false).unwrap();
        let send = p.a.track(send);
        p.drive();
        let (desc, _) = p.b.ams.pop().expect("delivered").rndv.expect("a rendezvous");
        p.b.engine.am_decline(desc).unwrap();
        p.drive();
        assert_eq!(p.a.status(send), Status::Ok, "{net:?}");
        assert!(!p.b.done(desc), "a declined descriptor is no operation of the API's");
        assert!(p.log.iter().all(|(_, op)| !matches!(op, Op::RndvData { .. })));
        p.assert_no_leaks();
    }
}

#[test]
fn am_data_can_be_taken_or_declined_only_once() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(1000, 5);
    p.a.engine.am_send(p.a.ep, 3, b"", send_buf(&data), false).unwrap();
    p.drive();
    let (desc, _) = p.b.ams.pop().unwrap().rndv.unwrap();
    p.b.engine.am_decline(desc).unwrap();
    let mut out = vec![0u8; 1000];
    assert_eq!(p.b.engine.am_recv_data(desc, recv_buf(&mut out)), Err(Status::NoElem));
    assert_eq!(p.b.engine.am_decline(desc), Err(Status::NoElem));
    // An id that names another kind of operation is refused too.
    let mut small = vec![0u8; 4];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut small), 1, 0));
    assert_eq!(p.b.engine.am_recv_data(recv, recv_buf(&mut out)), Err(Status::InvalidParam));
    p.b.engine.cancel(recv);
    p.drive();
    p.assert_no_leaks();
}

#[test]
fn am_header_longer_than_the_limit_is_refused() {
    let mut p = Pair::new(Net::emulated());
    let header = vec![0u8; MAX_AM_HEADER + 1];
    assert_eq!(p.a.engine.am_send(p.a.ep, 1, &header, send_buf(&[]), false), Err(Status::InvalidParam));
    assert_eq!(p.a.engine.table_counts().ops, 0);
    p.assert_no_leaks();
}

#[test]
fn am_data_into_a_short_buffer_is_truncated() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(2000, 6);
    let send = p.a.engine.am_send(p.a.ep, 1, b"", send_buf(&data), false).unwrap();
    let send = p.a.track(send);
    p.drive();
    let (desc, _) = p.b.ams.pop().unwrap().rndv.unwrap();
    let mut out = vec![0u8; 500];
    let start = p.b.engine.am_recv_data(desc, recv_buf(&mut out)).unwrap();
    assert!(matches!(start, Start::Pending(_)));
    p.drive();
    assert_eq!(p.a.status(send), Status::Ok);
    assert_eq!(p.b.status(desc), Status::MessageTruncated);
    assert_eq!(&out[..], &data[..500]);
    p.assert_no_leaks();
}

/// The frame `engine` sends next, as bytes on the wire (its payload handed back if owned).
fn next_frame(engine: &mut crate::Engine) -> Vec<u8> {
    let transmit = engine.poll_transmit().expect("a frame to send");
    let mut frame = transmit.header.as_bytes().to_vec();
    // SAFETY: the command that queued the transmit has not returned to its user.
    frame.extend_from_slice(unsafe { transmit.payload.bytes() });
    if let crate::Payload::Owned(bytes) = transmit.payload {
        engine.reuse(bytes);
    }
    frame
}

/// An eager active message handed over in place: header and data are the frame's own bytes,
/// and the engine queues no delivery of its own.
#[test]
fn an_eager_am_is_lent_in_place_and_queues_nothing() {
    let mut p = Pair::new(Net::emulated());
    let data = pattern(50, 7);
    p.a.engine.am_send(p.a.ep, 21, b"head", send_buf(&data), true).unwrap();
    let frame = next_frame(&mut p.a.engine);
    let lent = p.b.engine.handle_frame_lending(LINK, &frame).expect("an eager AM is lent");
    assert_eq!((lent.ep, lent.am_id, lent.reply), (p.b.ep, 21, true));
    assert_eq!((lent.header, lent.data), (&b"head"[..], &data[..]));
    let range = frame.as_ptr_range();
    assert!(range.contains(&lent.header.as_ptr()) && range.contains(&lent.data.as_ptr()), "copied");
    assert!(p.b.engine.poll_event().is_none(), "a lent AM was also queued");
    p.assert_no_leaks();
}

/// Frames other than an eager AM are handled as `handle_frame` handles them; an AM on a link
/// without an endpoint is not lent, and the link is closed.
#[test]
fn frames_that_are_not_eager_ams_are_handled_as_usual() {
    let mut p = Pair::new(Net::emulated());
    let mut out = vec![0u8; 16];
    let recv = pending(p.b.engine.tag_recv(recv_buf(&mut out), 4, u64::MAX));
    p.a.engine.tag_send(p.a.ep, send_buf(&[9u8; 16]), 4, false).unwrap();
    let frame = next_frame(&mut p.a.engine);
    assert!(p.b.engine.handle_frame_lending(LINK, &frame).is_none());
    p.drive();
    assert_eq!(p.b.status(recv), Status::Ok);
    assert_eq!(out, [9u8; 16]);
    p.a.engine.am_send(p.a.ep, 1, b"", send_buf(&[1, 2, 3]), false).unwrap();
    let frame = next_frame(&mut p.a.engine);
    let stranger = crate::LinkId(LINK.0 + 1);
    assert!(p.b.engine.handle_frame_lending(stranger, &frame).is_none());
    p.drive();
    assert_eq!(p.b.closed_links, vec![(stranger, true)]);
    assert!(p.b.ams.is_empty());
}
