//! The API's names for operations (cookies): given with an operation's buffer, handed back in
//! its completion, whichever way it ends.

use std::num::NonZeroUsize;

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, RNDV};
use crate::{Cookie, Status};

const ALL: u64 = u64::MAX;

fn cookie(n: usize) -> Cookie {
    Cookie::new(NonZeroUsize::new(n).expect("non-zero"))
}

/// Tag receives matched by an eager message or by a rendezvous (pushed or pulled), and the
/// rendezvous and synchronous sends, complete with the cookie their buffer carried.
#[test]
fn tag_completions_carry_their_cookies() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let (mut small, mut large) = (vec![0u8; 64], vec![0u8; RNDV * 3]);
        let eager_recv = pending(p.b.engine.tag_recv(recv_buf(&mut small).with_cookie(cookie(1)), 1, ALL));
        let rndv_recv = pending(p.b.engine.tag_recv(recv_buf(&mut large).with_cookie(cookie(2)), 2, ALL));
        let (short, long) = (pattern(40, 1), pattern(RNDV * 3, 2));
        let sync = p.a.engine.tag_send(p.a.ep, send_buf(&short).with_cookie(cookie(3)), 1, true).unwrap();
        let sync = pending(sync);
        let keyed = p.a.keyed(&long).with_cookie(cookie(4));
        let rndv_send = pending(p.a.engine.tag_send(p.a.ep, keyed, 2, false).unwrap());
        p.drive();
        for (side, op, expected) in
            [(&p.b, eager_recv, 1), (&p.b, rndv_recv, 2), (&p.a, sync, 3), (&p.a, rndv_send, 4)]
        {
            let done = side.completion(op).expect("completed");
            assert_eq!((done.status, done.cookie), (Status::Ok, Some(cookie(expected))), "{net:?}");
        }
        assert_eq!(large, long);
        p.assert_no_leaks();
    }
}

/// A cancelled tag or stream receive, and a stream receive failed with its link, carry their
/// cookies too; an operation started without one completes without one.
#[test]
fn cancelled_and_failed_receives_carry_their_cookies() {
    let mut p = Pair::new(Net::emulated());
    let (mut a, mut b, mut c, mut d) = (vec![0u8; 8], vec![0u8; 8], vec![0u8; 8], vec![0u8; 8]);
    let tag = pending(p.b.engine.tag_recv(recv_buf(&mut a).with_cookie(cookie(5)), 9, ALL));
    let stream =
        pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut b).with_cookie(cookie(6)), true).unwrap());
    let failed =
        pending(p.b.engine.stream_recv(p.b.ep, recv_buf(&mut c).with_cookie(cookie(7)), true).unwrap());
    let plain = pending(p.b.engine.tag_recv(recv_buf(&mut d), 10, ALL));
    assert!(p.b.engine.cancel(tag));
    assert!(p.b.engine.cancel(stream));
    assert!(p.b.engine.cancel(plain));
    p.drive();
    p.fail_link();
    p.drive();
    for (op, expected) in [(tag, Some(cookie(5))), (stream, Some(cookie(6))), (plain, None)] {
        let done = p.b.completion(op).expect("completed");
        assert_eq!((done.status, done.cookie), (Status::Canceled, expected));
    }
    let done = p.b.completion(failed).expect("completed when the link failed");
    assert_ne!(done.status, Status::Ok);
    assert_eq!(done.cookie, Some(cookie(7)));
}

/// Stream sends pushed in fragments and stream receives, puts and gets carry their cookies.
#[test]
fn stream_and_rma_completions_carry_their_cookies() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let data = pattern(RNDV * 4, 3);
        let mut out = vec![0u8; RNDV * 4];
        let recv = p.b.engine.stream_recv(p.b.ep, recv_buf(&mut out).with_cookie(cookie(8)), true);
        let recv = pending(recv.unwrap());
        let send = pending(p.a.engine.stream_send(p.a.ep, send_buf(&data).with_cookie(cookie(9))).unwrap());
        let region = p.b.register_rw(RNDV);
        let (addr, key) = (p.b.region(region).addr(0), p.b.region(region).key.clone());
        let put =
            p.a.engine.put(p.a.ep, send_buf(&data[..RNDV]).with_cookie(cookie(10)), addr, &key).unwrap();
        p.drive();
        let mut back = vec![0u8; RNDV];
        let get = p.a.engine.get(p.a.ep, recv_buf(&mut back).with_cookie(cookie(11)), addr, &key).unwrap();
        p.drive();
        for (side, op, expected) in [(&p.b, recv, 8), (&p.a, send, 9), (&p.a, put, 10), (&p.a, get, 11)] {
            let done = side.completion(op).expect("completed");
            assert_eq!((done.status, done.cookie), (Status::Ok, Some(cookie(expected))), "{net:?}");
        }
        assert_eq!((out, back), (data.clone(), data[..RNDV].to_vec()));
        p.assert_no_leaks();
    }
}

/// An active message's rendezvous send, and the receive the handler took its data into, carry
/// their cookies.
#[test]
fn am_rendezvous_completions_carry_their_cookies() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let data = pattern(RNDV * 2, 4);
        let keyed = p.a.keyed(&data).with_cookie(cookie(12));
        let send = pending(p.a.engine.am_send(p.a.ep, 3, b"h", keyed, false).unwrap());
        p.drive();
        let (desc, _) = p.b.ams.pop().expect("delivered").rndv.expect("a rendezvous");
        let mut out = vec![0u8; RNDV * 2];
        let recv = p.b.engine.am_recv_data(desc, recv_buf(&mut out).with_cookie(cookie(13))).unwrap();
        let recv = pending(recv);
        p.drive();
        for (side, op, expected) in [(&p.a, send, 12), (&p.b, recv, 13)] {
            let done = side.completion(op).expect("completed");
            assert_eq!((done.status, done.cookie), (Status::Ok, Some(cookie(expected))), "{net:?}");
        }
        assert_eq!(out, data);
        p.assert_no_leaks();
    }
}
