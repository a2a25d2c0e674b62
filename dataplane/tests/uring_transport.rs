//! The io_uring transport over real sockets on 127.0.0.1 and ::1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use zcx_control::TransportAddress;
use zcx_dataplane::proto::AtomicOp;
use zcx_dataplane::{
    ConnectTarget, LargePayload, LinkId, ListenerId, LocalMem, Payload, PlaceTarget, RemoteMem, RmaCaps,
    RmaOp, SendOutcome, TlError, TlEvent, Transport, UringConfig, UringTransport, ZcopyPayload,
    MAX_HANDSHAKE_FRAME,
};

#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Connected(LinkId),
    Accepted(ListenerId, LinkId),
    Frame(LinkId, Vec<u8>),
    SendDone(LinkId, u64, Result<(), TlError>),
    /// A placed header: link, header, payload length, the token of the destination (`None`:
    /// dropped).
    Placed(LinkId, Vec<u8>, usize, Option<u64>),
    PlaceDone(LinkId, u64, Result<(), TlError>),
    Failed(LinkId, TlError),
}

fn own(ev: TlEvent<'_>) -> Ev {
    match ev {
        TlEvent::Connected { link } => Ev::Connected(link),
        TlEvent::Accepted { listener, link, .. } => Ev::Accepted(listener, link),
        TlEvent::Frame { link, bytes } => Ev::Frame(link, bytes.to_vec()),
        TlEvent::SendDone { link, token, result } => Ev::SendDone(link, token, result),
        TlEvent::Placed { link, header, len, .. } => Ev::Placed(link, header.to_vec(), len, None),
        TlEvent::PlaceDone { link, token, result } => Ev::PlaceDone(link, token, result),
        TlEvent::LinkFailed { link, error } => Ev::Failed(link, error),
        TlEvent::RmaDone { link, token, .. } => {
            panic!("RmaDone from uring, which has no rma (link {link:?}, token {token})")
        }
    }
}

struct Side {
    t: UringTransport,
    ev: Vec<Ev>,
    /// Destinations of placed payloads, by token. Declared after `t`, so the transport (which
    /// writes into them until `PlaceDone`) is dropped first.
    dests: Vec<Vec<u8>>,
}

/// Placed payloads are kept when their header starts with an even byte (or is empty).
fn keeps(header: &[u8]) -> bool {
    header.first().is_none_or(|b| b % 2 == 0)
}

impl Side {
    fn new() -> Side {
        let cfg = UringConfig { advertise_ip: Some("127.0.0.1".parse().unwrap()), ..UringConfig::default() };
        Side { t: UringTransport::new(&cfg).expect("io_uring transport"), ev: Vec::new(), dests: Vec::new() }
    }

    fn poll(&mut self) {
        let (ev, dests) = (&mut self.ev, &mut self.dests);
        self.t.poll(&mut |e| match e {
            TlEvent::Placed { link, header, len, dest } => {
                let token = keeps(header).then(|| {
                    // A marker shows bytes that were never written.
                    dests.push(vec![0xA5; len]);
                    let token = dests.len() - 1;
                    // SAFETY: the Vec's heap buffer never moves or shrinks while `dests` lives,
                    // and `dests` outlives the transport.
                    dest.set(unsafe { PlaceTarget::new(dests[token].as_mut_ptr(), token as u64) });
                    token as u64
                });
                ev.push(Ev::Placed(link, header.to_vec(), len, token));
            }
            other => ev.push(own(other)),
        });
    }

    fn frames(&self, link: LinkId) -> Vec<Vec<u8>> {
        self.ev
            .iter()
            .filter_map(|e| match e {
                Ev::Frame(l, b) if *l == link => Some(b.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Polls both sides until `done` holds; fails after five seconds.
fn pump(a: &mut Side, b: &mut Side, what: &str, mut done: impl FnMut(&Side, &Side) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(a, b) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; a: {:?}, b: {:?}",
            brief(&a.ev),
            brief(&b.ev)
        );
        a.poll();
        b.poll();
    }
}

fn pump_one(a: &mut Side, what: &str, mut done: impl FnMut(&Side) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(a) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; events: {:?}", brief(&a.ev));
        a.poll();
    }
}

fn brief(ev: &[Ev]) -> Vec<String> {
    ev.iter()
        .map(|e| match e {
            Ev::Frame(l, b) => format!("Frame({l:?}, {} bytes)", b.len()),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Connects `b` to a listener of `a` on `ip`; returns (a's link, b's link).
fn pair(a: &mut Side, b: &mut Side, ip: &str) -> (LinkId, LinkId) {
    let (lid, bound) = a.t.listen(format!("{ip}:0").parse().unwrap()).expect("listen");
    let lb = b.t.connect(ConnectTarget::Sockaddr { remote: bound, local: None }).expect("connect");
    let mut la = None;
    pump(a, b, "connect/accept", |a, b| {
        la = a.ev.iter().find_map(|e| match e {
            Ev::Accepted(l, link) if *l == lid => Some(*link),
            _ => None,
        });
        la.is_some() && b.ev.contains(&Ev::Connected(lb))
    });
    // Accepted connections outlive their listener.
    a.t.close_listener(lid);
    // The protocol layer's handshake is not run here: the accepted link takes any frame at once.
    a.t.link_established(la.unwrap());
    (la.unwrap(), lb)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn sizes_both_ways(ip: &str) {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, ip);
    let sizes = [0usize, 1, 4096, 65535, 256 * 1024];
    let mut expect = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let header = [i as u8; 8];
        let payload = pattern(n, i as u8);
        assert_eq!(a.t.send(la, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
        assert_eq!(b.t.send(lb, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
        expect.push([&header[..], &payload].concat());
    }
    // A header-only frame, and a frame of exactly max_frame bytes.
    a.t.send(la, b"only-header", Payload::None).unwrap();
    b.t.send(lb, b"only-header", Payload::None).unwrap();
    expect.push(b"only-header".to_vec());
    let max = a.t.caps().max_frame;
    let big = pattern(max - 4, 9);
    a.t.send(la, b"HDR!", Payload::Copy(&big)).unwrap();
    b.t.send(lb, b"HDR!", Payload::Copy(&big)).unwrap();
    expect.push([&b"HDR!"[..], &big].concat());
    assert_eq!(a.t.send(la, b"HDR!!", Payload::Copy(&big)), Err(TlError::InvalidParam));
    let n = expect.len();
    pump(&mut a, &mut b, "all frames", |a, b| a.frames(la).len() == n && b.frames(lb).len() == n);
    assert!(a.frames(la) == expect, "frames to a differ");
    assert!(b.frames(lb) == expect, "frames to b differ");
    assert!(!a.t.has_pending_sends(la));
    let (local, peer) = b.t.link_addrs(lb);
    assert_eq!(peer, a.t.link_addrs(la).0);
    assert_eq!(local, a.t.link_addrs(la).1);
}

/// `rma` over a socket is refused as unsupported, as its caps say, even on a live link.
#[test]
fn rma_is_unsupported() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let addr = a.t.address().expect("address");
    let lb = b.t.connect(ConnectTarget::Address(&addr)).expect("connect");
    let remote = RemoteMem { region_base: 0, region_len: 8, addr: 0, len: 8, key: &[] };
    let op = RmaOp::Atomic { op: AtomicOp::Add, fetch: true, value: 1, compare: 0 };
    assert_eq!(b.t.rma(lb, op, LocalMem::NONE, remote, 1), Err(TlError::Unsupported));
    let _ = &mut a;
}

/// A socket has no one-sided operation: put, get and atomics are emulated by the protocol
/// layer, and the uring `rma` says so; large payloads are pushed by the sender.
#[test]
fn caps_claim_no_one_sided_operation_and_sender_push() {
    let side = Side::new();
    let caps = side.t.caps();
    assert_eq!(caps.name, "uring");
    assert_eq!(caps.rma, RmaCaps::NONE);
    assert!(caps.rma.atomics(4).is_empty() && caps.rma.atomics(8).is_empty());
    assert_eq!(caps.large_payload, LargePayload::SenderPush);
}

#[test]
fn frames_of_every_size_both_ways_ipv4() {
    sizes_both_ways("127.0.0.1");
}

#[test]
fn frames_of_every_size_both_ways_ipv6() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return;
    }
    sizes_both_ways("[::1]");
}

#[test]
fn worker_address_listener_accepts() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let addr = a.t.address().expect("address");
    let TransportAddress::Uring { addr: sa } = &addr else { panic!("not a uring address: {addr:?}") };
    assert_ne!(sa.port(), 0);
    let lb = b.t.connect(ConnectTarget::Address(&addr)).unwrap();
    b.t.send(lb, b"early", Payload::None).unwrap();
    pump(&mut a, &mut b, "accept on ListenerId(0)", |a, _| {
        a.ev.iter().any(|e| matches!(e, Ev::Accepted(ListenerId(0), _)))
            && a.ev.iter().any(|e| matches!(e, Ev::Frame(_, f) if f == b"early"))
    });
    let pos_conn = b.ev.iter().position(|e| *e == Ev::Connected(lb));
    assert!(pos_conn.is_some());
}

#[test]
fn small_frames_interleave_with_large_and_batch_in_order() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let mut expect = Vec::new();
    for i in 0..1000u32 {
        let payload = if i % 97 == 0 { pattern(200_000, i as u8) } else { i.to_le_bytes().to_vec() };
        b.t.send(lb, &i.to_be_bytes(), Payload::Copy(&payload)).unwrap();
        expect.push([&i.to_be_bytes()[..], &payload].concat());
    }
    assert!(b.t.has_pending_sends(lb));
    pump(&mut a, &mut b, "1000 frames", |a, _| a.frames(la).len() == 1000);
    assert!(a.frames(la) == expect, "frames differ or are out of order");
    pump(&mut a, &mut b, "send queue to drain", |_, b| !b.t.has_pending_sends(lb));
}

#[test]
fn zero_copy_sends_report_send_done() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let bufs: Vec<Vec<u8>> = (0..4).map(|i| pattern(200_000 + i, i as u8)).collect();
    let small = pattern(100, 3);
    let mut expect = Vec::new();
    for (i, buf) in bufs.iter().enumerate() {
        // SAFETY: `bufs` outlives the loop below that waits for every SendDone.
        let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), i as u64) };
        assert_eq!(b.t.send(lb, b"zc", Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
        expect.push([&b"zc"[..], buf].concat());
    }
    // SAFETY: `small` outlives the wait for its SendDone.
    let z = unsafe { ZcopyPayload::new(small.as_ptr(), small.len(), 99) };
    b.t.send(lb, b"s", Payload::Zcopy(z)).unwrap();
    expect.push([&b"s"[..], &small].concat());
    pump(&mut a, &mut b, "zero-copy frames and SendDone", |a, b| {
        a.frames(la).len() == 5 && b.ev.iter().filter(|e| matches!(e, Ev::SendDone(..))).count() == 5
    });
    assert!(a.frames(la) == expect);
    for token in [0u64, 1, 2, 3, 99] {
        assert_eq!(
            b.ev.iter().filter(|e| **e == Ev::SendDone(lb, token, Ok(()))).count(),
            1,
            "token {token}"
        );
    }
}

#[test]
fn connect_to_closed_port_fails_once() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut a = Side::new();
    let remote: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let l = a.t.connect(ConnectTarget::Sockaddr { remote, local: None }).unwrap();
    a.t.send(l, b"queued", Payload::None).unwrap();
    let buf = [1u8; 10];
    // SAFETY: `buf` outlives the wait for its SendDone.
    let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), 5) };
    a.t.send(l, b"", Payload::Zcopy(z)).unwrap();
    pump_one(&mut a, "LinkFailed", |a| a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        a.poll();
    }
    assert_eq!(
        a.ev,
        vec![Ev::SendDone(l, 5, Err(TlError::NotConnected)), Ev::Failed(l, TlError::NotConnected)]
    );
    assert!(a.t.send(l, b"x", Payload::None).is_err());
}

#[test]
fn listen_on_busy_port_is_busy_and_bind_conflict_too() {
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let mut a = Side::new();
    assert_eq!(a.t.listen(addr).map(|_| ()), Err(TlError::Busy));
    let (_, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_eq!(a.t.listen(bound).map(|_| ()), Err(TlError::Busy));
    assert_eq!(
        a.t.connect(ConnectTarget::Sockaddr { remote: bound, local: Some(addr) }).map(|_| ()),
        Err(TlError::Busy)
    );
    let other = TransportAddress::Shm { socket_name: b"peer".to_vec() };
    assert_eq!(a.t.connect(ConnectTarget::Address(&other)).map(|_| ()), Err(TlError::Unsupported));
}

#[test]
fn peer_close_fails_the_link_once_and_local_close_reports_nothing() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    b.t.send(lb, b"last words", Payload::None).unwrap();
    b.t.close(lb, false);
    pump(&mut a, &mut b, "LinkFailed on a", |a, _| a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        a.poll();
        b.poll();
    }
    assert_eq!(a.frames(la), vec![b"last words".to_vec()]);
    assert_eq!(a.ev.iter().filter(|e| matches!(e, Ev::Failed(..))).count(), 1);
    assert!(a.ev.contains(&Ev::Failed(la, TlError::ConnectionReset)));
    assert!(
        !b.ev.iter().any(|e| matches!(e, Ev::Failed(..))),
        "no LinkFailed after a local close: {:?}",
        b.ev
    );
}

#[test]
fn force_close_cancels_queued_zero_copy_sends() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (_la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    // Fill the socket (the receiver does not poll), so the zero-copy frame has to wait in the
    // queue instead of going out directly.
    let filler = pattern(200_000, 2);
    while !b.t.has_pending_sends(lb) {
        b.t.send(lb, b"f", Payload::Copy(&filler)).unwrap();
    }
    let buf = pattern(300, 1);
    // SAFETY: `buf` outlives the wait for its SendDone.
    let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), 77) };
    assert_eq!(b.t.send(lb, b"h", Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
    b.t.close(lb, true);
    pump(&mut a, &mut b, "SendDone(Canceled)", |_, b| {
        b.ev.contains(&Ev::SendDone(lb, 77, Err(TlError::Canceled)))
    });
    assert!(!b.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
    assert_eq!(b.t.send(lb, b"x", Payload::None), Err(TlError::InvalidParam));
}

/// A link closed while a send request moves data to a reading peer is reaped and gives every
/// zero-copy payload back. Many rounds: the order of the send's and the cancel's completions is
/// the kernel's (the unit test in `uring::transport` pins the one that used to strand a link).
#[test]
fn close_with_a_send_request_out_returns_every_payload() {
    let big = pattern(1 << 20, 3);
    for round in 0..40u64 {
        let (mut a, mut b) = (Side::new(), Side::new());
        let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
        let mut tokens = Vec::new();
        // The receiver never reads: the socket fills and a send request stays in the kernel.
        while tokens.len() < 64 {
            let token = round * 1000 + tokens.len() as u64;
            // SAFETY: `big` outlives the wait for every SendDone below.
            let z = unsafe { ZcopyPayload::new(big.as_ptr(), big.len(), token) };
            match b.t.send_placed(lb, b"z", Payload::Zcopy(z)) {
                Ok(SendOutcome::InFlight) => tokens.push(token),
                Ok(SendOutcome::Done) => {}
                Err(TlError::NoResource) => break,
                Err(e) => panic!("round {round}: send failed: {e:?}"),
            }
            b.poll();
        }
        assert!(b.t.has_pending_sends(lb), "round {round}: nothing waits in the kernel");
        // The receiver reads and says goodbye; the sender closes when the goodbye arrives, its
        // send request still moving data.
        a.t.send(la, b"bye", Payload::None).unwrap();
        pump(&mut a, &mut b, "the goodbye", |_, b| b.frames(lb).iter().any(|f| f == b"bye"));
        b.t.close(lb, true);
        pump(&mut a, &mut b, "every zero-copy payload back", |_, b| {
            tokens
                .iter()
                .all(|t| b.ev.iter().any(|e| matches!(e, Ev::SendDone(l, tok, _) if *l == lb && tok == t)))
        });
    }
}

#[test]
fn placed_payloads_land_in_place_in_order_with_ordinary_frames() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let sizes = [0usize, 1, 4096, 40_000, 300_000, 1 << 20];
    let bufs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
    let mut inflight = 0;
    for round in 0..2u8 {
        for (i, buf) in bufs.iter().enumerate() {
            // Even first byte: kept; odd (only the 4 KiB one): dropped by the receiver.
            let header = [round * 2 + u8::from(i == 2), i as u8];
            let payload = if i % 2 == 0 {
                Payload::Copy(buf)
            } else {
                inflight += 1;
                // SAFETY: `bufs` outlives the wait for every SendDone below.
                Payload::Zcopy(unsafe {
                    ZcopyPayload::new(buf.as_ptr(), buf.len(), (round as u64) << 8 | i as u64)
                })
            };
            b.t.send_placed(lb, &header, payload).unwrap();
            b.t.send(lb, &[0xEE, round, i as u8], Payload::Copy(&buf[..buf.len().min(100)])).unwrap();
        }
    }
    let placed = 2 * sizes.len();
    pump(&mut a, &mut b, "placed frames", |a, b| {
        a.frames(la).len() == placed
            && a.ev.iter().filter(|e| matches!(e, Ev::PlaceDone(..))).count()
                == a.ev.iter().filter(|e| matches!(e, Ev::Placed(_, _, _, Some(_)))).count()
            && b.ev.iter().filter(|e| matches!(e, Ev::SendDone(..))).count() == inflight
    });
    // Every placed header, then (if kept) its PlaceDone, then the ordinary frame sent after it.
    let mut events = a.ev.iter().filter(|e| !matches!(e, Ev::Accepted(..)));
    for round in 0..2u8 {
        for (i, buf) in bufs.iter().enumerate() {
            let header = vec![round * 2 + u8::from(i == 2), i as u8];
            let Some(Ev::Placed(l, h, len, token)) = events.next() else {
                panic!("no Placed for {round}/{i}")
            };
            assert_eq!((*l, h, *len), (la, &header, buf.len()));
            if let Some(token) = token {
                assert_eq!(events.next(), Some(&Ev::PlaceDone(la, *token, Ok(()))), "{round}/{i}");
                assert!(a.dests[*token as usize] == *buf, "payload {round}/{i} differs");
            } else {
                assert!(!keeps(&header));
            }
            let frame = [&[0xEE, round, i as u8][..], &buf[..buf.len().min(100)]].concat();
            assert_eq!(events.next(), Some(&Ev::Frame(la, frame)), "{round}/{i}");
        }
    }
    assert_eq!(events.next(), None);
}

/// Once the kernel has reported copying a zero-copy send (always on loopback), zero-copy payloads
/// go straight to the socket: those it takes whole are `Done` at once, and the rest of one it
/// takes in part stays referenced until its `SendDone`. Nothing is lost or reordered either way.
#[test]
fn zero_copy_payloads_the_kernel_copies_go_out_directly() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let probe = pattern(100_000, 1);
    // SAFETY: `probe` outlives the wait for its SendDone.
    let z = unsafe { ZcopyPayload::new(probe.as_ptr(), probe.len(), 1000) };
    b.t.send(lb, b"p", Payload::Zcopy(z)).unwrap();
    pump(&mut a, &mut b, "the probe", |a, b| {
        a.frames(la).len() == 1 && b.ev.contains(&Ev::SendDone(lb, 1000, Ok(())))
    });
    let bufs: Vec<Vec<u8>> = (0..24).map(|i| pattern(1 << 20, i as u8)).collect();
    let mut outcomes = Vec::new();
    for (i, buf) in bufs.iter().enumerate() {
        // SAFETY: `bufs` outlives the wait for every SendDone below.
        let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), i as u64) };
        outcomes.push(b.t.send_placed(lb, &[0, i as u8], Payload::Zcopy(z)).unwrap());
    }
    // The receiver has not polled: the socket fills up, so the first sends went out whole and the
    // later ones had to wait.
    assert_eq!(outcomes[0], SendOutcome::Done, "{outcomes:?}");
    assert_eq!(outcomes[23], SendOutcome::InFlight, "{outcomes:?}");
    let inflight = outcomes.iter().filter(|o| **o == SendOutcome::InFlight).count();
    pump(&mut a, &mut b, "24 placed payloads", |a, b| {
        a.ev.iter().filter(|e| matches!(e, Ev::PlaceDone(..))).count() == 24
            && b.ev.iter().filter(|e| matches!(e, Ev::SendDone(..))).count() == 1 + inflight
    });
    for (i, buf) in bufs.iter().enumerate() {
        assert!(a.dests[i] == *buf, "payload {i} differs");
        let done = b.ev.iter().filter(|e| **e == Ev::SendDone(lb, i as u64, Ok(()))).count();
        assert_eq!(done, usize::from(outcomes[i] == SendOutcome::InFlight), "SendDone of {i}");
    }
}

#[test]
fn send_placed_refuses_oversized_payloads_and_headers() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (_la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let max = b.t.caps().max_placed;
    assert!(max >= 1 << 20);
    let big = vec![0u8; max + 1];
    assert_eq!(b.t.send_placed(lb, b"h", Payload::Copy(&big)), Err(TlError::InvalidParam));
    assert_eq!(b.t.send_placed(lb, &[0u8; 4096], Payload::None), Err(TlError::InvalidParam));
    assert_eq!(b.t.send_placed(LinkId(12345), b"h", Payload::None), Err(TlError::InvalidParam));
}

/// A raw peer announces a placed payload of 1 MiB, sends part of it and dies: the destination is
/// handed back with an error before the link is reported failed, and nothing was written past
/// what arrived.
#[test]
fn a_peer_dying_mid_placement_returns_the_destination_with_an_error() {
    for sent in [100usize, 200_000] {
        let mut a = Side::new();
        let (_lid, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut peer = TcpStream::connect(bound).unwrap();
        let header = [2u8, 7];
        let len = 1usize << 20;
        let mut wire = ((4 + header.len()) as u32 | 1 << 31).to_le_bytes().to_vec();
        wire.extend_from_slice(&(len as u32).to_le_bytes());
        wire.extend_from_slice(&header);
        wire.extend_from_slice(&pattern(sent, 9));
        peer.write_all(&wire).unwrap();
        pump_one(&mut a, "Placed", |a| a.ev.iter().any(|e| matches!(e, Ev::Placed(..))));
        drop(peer);
        pump_one(&mut a, "LinkFailed", |a| a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
        let link = match a.ev[0] {
            Ev::Accepted(_, link) => link,
            ref other => panic!("expected Accepted first, got {other:?}"),
        };
        assert_eq!(
            a.ev[1..],
            [
                Ev::Placed(link, header.to_vec(), len, Some(0)),
                Ev::PlaceDone(link, 0, Err(TlError::ConnectionReset)),
                Ev::Failed(link, TlError::ConnectionReset),
            ]
        );
        let dest = &a.dests[0];
        assert!(dest[..sent] == pattern(sent, 9)[..]);
        assert!(dest[sent..].iter().all(|&b| b == 0xA5), "bytes written past what arrived");
    }
}

#[test]
fn huge_length_prefix_fails_the_link() {
    let mut a = Side::new();
    let (lid, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut peer = TcpStream::connect(bound).unwrap();
    peer.write_all(&[0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3]).unwrap();
    pump_one(&mut a, "LinkFailed", |a| a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
    let link = match a.ev[0] {
        Ev::Accepted(l, link) if l == lid => link,
        ref other => panic!("expected Accepted first, got {other:?}"),
    };
    assert_eq!(a.ev[1..], [Ev::Failed(link, TlError::InvalidParam)]);
    // The transport closed the socket: the peer reads EOF (or a reset).
    peer.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut byte = [0u8; 1];
    assert!(matches!(peer.read(&mut byte), Ok(0) | Err(_)));
}

/// A link a listener accepted is anyone's until the protocol layer says its handshake is done:
/// until then a frame larger than a handshake fails it, whatever the transport's largest frame.
#[test]
fn accepted_links_refuse_frames_larger_than_a_handshake_until_established() {
    let mut a = Side::new();
    let (lid, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let accepted = |a: &Side, n: usize| -> Vec<LinkId> {
        let links: Vec<LinkId> =
            a.ev.iter()
                .filter_map(|e| match e {
                    Ev::Accepted(l, link) if *l == lid => Some(*link),
                    _ => None,
                })
                .collect();
        assert!(links.len() <= n, "{links:?}");
        links
    };

    // Five bytes: a frame of 200 KiB announced (below max_frame) and its first byte.
    let mut liar = TcpStream::connect(bound).unwrap();
    liar.write_all(&[&(200u32 << 10).to_le_bytes()[..], &[0xAB]].concat()).unwrap();
    pump_one(&mut a, "the liar's link failed", |a| a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
    let link = accepted(&a, 1)[0];
    assert_eq!(a.ev, [Ev::Accepted(lid, link), Ev::Failed(link, TlError::InvalidParam)]);
    liar.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(matches!(liar.read(&mut [0u8; 1]), Ok(0) | Err(_)), "the liar's socket is still open");

    // A frame as large as a handshake passes; once established, a large one too.
    a.ev.clear();
    let mut honest = TcpStream::connect(bound).unwrap();
    let hello = pattern(MAX_HANDSHAKE_FRAME, 1);
    honest.write_all(&[&(hello.len() as u32).to_le_bytes()[..], &hello].concat()).unwrap();
    pump_one(&mut a, "the handshake-sized frame", |a| a.ev.iter().any(|e| matches!(e, Ev::Frame(..))));
    let link = accepted(&a, 1)[0];
    assert!(a.frames(link) == [hello]);
    a.t.link_established(link);
    let big = pattern(200 << 10, 2);
    honest.write_all(&[&(big.len() as u32).to_le_bytes()[..], &big].concat()).unwrap();
    pump_one(&mut a, "the large frame", |a| a.frames(link).len() == 2);
    assert!(a.frames(link)[1] == big);
    assert!(!a.ev.iter().any(|e| matches!(e, Ev::Failed(..))));
}

#[test]
fn event_fd_wakes_a_sleeping_thread() {
    let mut a = Side::new();
    let (_, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut peer = TcpStream::connect(bound).unwrap();
    pump_one(&mut a, "Accepted", |a| a.ev.iter().any(|e| matches!(e, Ev::Accepted(..))));
    // Let the receive request settle before sleeping.
    for _ in 0..10 {
        a.poll();
    }
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut wire = 5u32.to_le_bytes().to_vec();
        wire.extend_from_slice(b"hello");
        peer.write_all(&wire).unwrap();
        peer
    });
    let mut slept = 0;
    let start = Instant::now();
    while !a.t.has_events() {
        let mut pfd =
            libc::pollfd { fd: a.t.event_fd().unwrap().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, 2000) };
        slept += 1;
        assert!(rc > 0, "no wakeup within 2 s (rc {rc})");
        assert!(start.elapsed() < Duration::from_secs(1), "woken too late: {:?}", start.elapsed());
    }
    assert!(slept >= 1, "the thread never slept");
    // Woken by the data, not by something earlier.
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "woken before the data was sent: {:?}",
        start.elapsed()
    );
    pump_one(&mut a, "frame after wakeup", |a| {
        a.ev.iter().any(|e| matches!(e, Ev::Frame(_, f) if f == b"hello"))
    });
    drop(writer.join().unwrap());
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Runs `name` alone in a child process (fd counts are per process, and other tests run in
/// parallel threads).
fn run_alone(name: &str) -> bool {
    if std::env::var("ZCX_URING_CHILD").as_deref() == Ok(name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("ZCX_URING_CHILD", name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[test]
fn links_do_not_leak_descriptors() {
    if !run_alone("links_do_not_leak_descriptors") {
        return;
    }
    let before = fd_count();
    {
        let (mut a, mut b) = (Side::new(), Side::new());
        let with_transports = fd_count();
        for round in 0..20 {
            let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
            b.t.send(lb, b"bye", Payload::Copy(&[round as u8; 1000])).unwrap();
            pump(&mut a, &mut b, "frame", |a, _| !a.frames(la).is_empty());
            if round % 2 == 0 {
                a.t.close(la, round % 4 == 0);
                pump(&mut a, &mut b, "peer failure", |_, b| {
                    b.ev.iter().any(|e| matches!(e, Ev::Failed(l, _) if *l == lb))
                });
            } else {
                b.t.close(lb, false);
                pump(&mut a, &mut b, "peer failure", |a, _| {
                    a.ev.iter().any(|e| matches!(e, Ev::Failed(l, _) if *l == la))
                });
                a.t.close(la, false);
            }
            for _ in 0..50 {
                a.poll();
                b.poll();
            }
            a.ev.clear();
            b.ev.clear();
        }
        // A failed connect and a closed listener leave nothing behind either.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let l =
            a.t.connect(ConnectTarget::Sockaddr {
                remote: format!("127.0.0.1:{port}").parse().unwrap(),
                local: None,
            })
            .unwrap();
        pump_one(&mut a, "connect failure", |a| a.ev.contains(&Ev::Failed(l, TlError::NotConnected)));
        let (lid, _) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        a.t.close_listener(lid);
        for _ in 0..50 {
            a.poll();
            b.poll();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while fd_count() != with_transports && Instant::now() < deadline {
            a.poll();
            b.poll();
        }
        assert_eq!(fd_count(), with_transports, "descriptors leaked by links");
    }
    assert_eq!(fd_count(), before, "descriptors leaked by dropped transports");
}

#[test]
fn echo_with_a_second_process() {
    if let Ok(addr) = std::env::var("ZCX_URING_PEER") {
        // The child: connect, send 200 frames, expect each echoed, then close.
        let mut b = Side::new();
        let remote: SocketAddr = addr.parse().unwrap();
        let lb = b.t.connect(ConnectTarget::Sockaddr { remote, local: None }).unwrap();
        let mut expect = Vec::new();
        for i in 0..200u32 {
            let payload = pattern((i as usize * 977) % 70_000, i as u8);
            b.t.send(lb, &i.to_le_bytes(), Payload::Copy(&payload)).unwrap();
            expect.push([&i.to_le_bytes()[..], &payload].concat());
        }
        pump_one(&mut b, "echoes", |b| b.frames(lb).len() == 200);
        assert!(b.frames(lb) == expect, "echoes differ");
        b.t.close(lb, false);
        pump_one(&mut b, "flush", |b| !b.t.has_pending_sends(lb));
        return;
    }
    if std::env::var("ZCX_URING_CHILD").is_ok() {
        return;
    }
    let mut a = Side::new();
    let (_, bound) = a.t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "echo_with_a_second_process", "--test-threads=1"])
        .env("ZCX_URING_PEER", bound.to_string())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut echoed = 0;
    let mut failed = None;
    while failed.is_none() {
        assert!(Instant::now() < deadline, "echo timed out after {echoed} frames");
        a.poll();
        for e in std::mem::take(&mut a.ev) {
            match e {
                // Reported before any receive of the link completes.
                Ev::Accepted(_, l) => a.t.link_established(l),
                Ev::Frame(l, f) => {
                    a.t.send(l, &f, Payload::None).unwrap();
                    echoed += 1;
                }
                Ev::Failed(_, err) => failed = Some(err),
                _ => {}
            }
        }
    }
    assert_eq!(echoed, 200);
    assert_eq!(failed, Some(TlError::ConnectionReset));
    assert!(child.wait().unwrap().success(), "child process failed");
}

#[test]
fn transports_keep_working_on_another_thread_after_their_creator_exits() {
    // Created and connected on a thread that then exits: its receives and accepts die with it
    // (io_uring cancels a thread's requests when it exits), and polling from here re-arms them.
    let (mut a, mut b, la, lb) = std::thread::spawn(|| {
        let (mut a, mut b) = (Side::new(), Side::new());
        let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
        (a, b, la, lb)
    })
    .join()
    .unwrap();
    let mut expect = Vec::new();
    for i in 0..300u32 {
        let payload = if i % 50 == 0 { pattern(150_000, i as u8) } else { pattern(i as usize, i as u8) };
        b.t.send(lb, &i.to_be_bytes(), Payload::Copy(&payload)).unwrap();
        expect.push([&i.to_be_bytes()[..], &payload].concat());
        // Interleave polling so links switch between multishot and bulk receives as they go.
        if i % 7 == 0 {
            a.poll();
            b.poll();
        }
    }
    pump(&mut a, &mut b, "300 frames", |a, _| a.frames(la).len() == 300);
    assert!(a.frames(la) == expect, "frames differ or are out of order");
    // And back, polled from yet another thread.
    let handle = std::thread::spawn(move || {
        for i in 0..100u32 {
            a.t.send(la, &i.to_le_bytes(), Payload::None).unwrap();
        }
        pump(&mut a, &mut b, "100 replies", |_, b| b.frames(lb).len() == 100);
    });
    handle.join().unwrap();
}

#[test]
fn a_send_waiting_for_room_survives_the_exit_of_the_thread_that_submitted_it() {
    let big = pattern(200_000, 9);
    let sent = big.clone();
    let (mut a, mut b, la, lb) = std::thread::spawn(move || {
        let (mut a, mut b) = (Side::new(), Side::new());
        let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
        // `a` does not read: the socket buffers fill and b's send request waits for room.
        for i in 0..100u32 {
            b.t.send(lb, &i.to_be_bytes(), Payload::Copy(&sent)).unwrap();
            b.poll();
        }
        assert!(b.t.has_pending_sends(lb), "the socket took 20 MB without a reader");
        (a, b, la, lb)
    })
    .join()
    .unwrap();
    pump(&mut a, &mut b, "100 frames", |a, _| a.frames(la).len() == 100);
    for (i, f) in a.frames(la).iter().enumerate() {
        assert!(f[..4] == (i as u32).to_be_bytes() && f[4..] == big[..], "frame {i} differs");
    }
    assert!(!b.ev.iter().any(|e| matches!(e, Ev::Failed(..))), "{:?}", brief(&b.ev));
    pump(&mut a, &mut b, "send queue to drain", |_, b| !b.t.has_pending_sends(lb));
}

/// A busy-polled link moves its receives out of the ring (spin mode), keeps every frame in
/// order across a large frame (bulk mode) and back, and returns to the ring before sleeping, so
/// that a frame sent to a sleeper wakes it.
#[test]
fn spin_mode_keeps_order_across_bulk_frames_and_hands_back_for_sleep() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b, "127.0.0.1");
    let mut sent = Vec::new();
    let mut spun = (false, false);
    let big = pattern(200 * 1024, 7);
    for round in 0..2000usize {
        // A ping-pong of small frames, with a large one now and then.
        let ping = if round % 500 == 250 { big.clone() } else { pattern(8 + round % 40, round as u8) };
        a.t.send(la, &(round as u32).to_le_bytes(), Payload::Copy(&ping)).unwrap();
        sent.push([&(round as u32).to_le_bytes()[..], &ping].concat());
        pump(&mut a, &mut b, "the ping", |_, b| b.frames(lb).len() == round + 1);
        b.t.send(lb, b"pong", Payload::None).unwrap();
        pump(&mut a, &mut b, "the pong", |a, _| a.frames(la).len() == round + 1);
        spun.0 |= a.t.spinning_links() > 0;
        spun.1 |= b.t.spinning_links() > 0;
    }
    assert!(spun.0 && spun.1, "no side went to spin mode: {spun:?}");
    assert!(b.frames(lb) == sent, "frames arrived out of order or damaged");

    b.t.prepare_sleep();
    assert_eq!(b.t.spinning_links(), 0, "spin mode left for sleeping");
    for _ in 0..10 {
        b.poll();
    }
    assert!(!b.t.has_events());
    let before = b.frames(lb).len();
    let fd = b.t.event_fd().unwrap().as_raw_fd();
    let start = Instant::now();
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        a.t.send(la, b"wake", Payload::None).unwrap();
        // Keep the sender's transport alive (and flushing) until the frame is out.
        for _ in 0..100 {
            a.poll();
        }
        a
    });
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, 3000) };
    assert!(rc > 0, "the sleeper was not woken (rc {rc})");
    assert!(start.elapsed() >= Duration::from_millis(50), "woken before the frame was sent");
    pump_one(&mut b, "the frame sent to the sleeper", |b| b.frames(lb).len() == before + 1);
    assert_eq!(b.frames(lb).last().unwrap(), b"wake");
    drop(sender.join().unwrap());
}

/// A submission queue of 8 entries (the least `UringConfig` allows) serving 48 links at once: one
/// poll has far more requests to submit than the queue holds, and their completions overflow the
/// completion queue (16 entries) many times over. Every frame must still arrive, in order, on
/// every link: no request may be lost when the queue is full or the kernel is busy.
#[test]
fn a_tiny_ring_loses_no_request_under_many_links() {
    const LINKS: usize = 48;
    const FRAMES: usize = 40;
    let tiny = |ip: &str| {
        let cfg = UringConfig {
            ring_entries: 8,
            spin_recv: false,
            recv_buffer_count: 8,
            advertise_ip: Some(ip.parse().unwrap()),
            ..UringConfig::default()
        };
        Side { t: UringTransport::new(&cfg).expect("io_uring transport"), ev: Vec::new(), dests: Vec::new() }
    };
    let (mut a, mut b) = (tiny("127.0.0.1"), tiny("127.0.0.1"));
    let links: Vec<(LinkId, LinkId)> = (0..LINKS).map(|_| pair(&mut a, &mut b, "127.0.0.1")).collect();
    let mut expect = vec![Vec::new(); LINKS];
    for round in 0..FRAMES {
        for (i, &(la, lb)) in links.iter().enumerate() {
            let payload = pattern(1 + (round * 131 + i * 17) % 3000, (round + i) as u8);
            let header = [(round as u8), i as u8, 0xEE];
            assert_eq!(a.t.send(la, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
            assert_eq!(b.t.send(lb, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
            expect[i].push([&header[..], &payload].concat());
        }
        // Some rounds are sent before the other side polls, so requests pile up.
        if round % 8 == 0 {
            a.poll();
            b.poll();
        }
    }
    pump(&mut a, &mut b, "every frame on every link", |a, b| {
        links.iter().all(|&(la, lb)| a.frames(la).len() == FRAMES && b.frames(lb).len() == FRAMES)
    });
    for (i, &(la, lb)) in links.iter().enumerate() {
        assert!(a.frames(la) == expect[i], "frames to a on link {i} differ");
        assert!(b.frames(lb) == expect[i], "frames to b on link {i} differ");
    }
    assert!(!a.ev.iter().chain(&b.ev).any(|e| matches!(e, Ev::Failed(..))), "a link failed");
    pump(&mut a, &mut b, "send queues to drain", |a, b| {
        links.iter().all(|&(la, lb)| !a.t.has_pending_sends(la) && !b.t.has_pending_sends(lb))
    });
}

/// Completions that arrive while nobody polls overflow a small completion queue (48 receives
/// against 16 entries), and the kernel holds the rest back: a poll must bring them in, with no
/// request of its own to submit.
#[test]
fn completions_held_back_by_a_full_queue_are_polled_in() {
    const LINKS: usize = 48;
    let cfg = UringConfig {
        ring_entries: 8,
        spin_recv: false,
        advertise_ip: Some("127.0.0.1".parse().unwrap()),
        ..UringConfig::default()
    };
    let side = || Side {
        t: UringTransport::new(&cfg).expect("io_uring transport"),
        ev: Vec::new(),
        dests: Vec::new(),
    };
    let (mut a, mut b) = (side(), side());
    let links: Vec<(LinkId, LinkId)> = (0..LINKS).map(|_| pair(&mut a, &mut b, "127.0.0.1")).collect();
    // Every link's receive is armed and idle.
    for _ in 0..10 {
        a.poll();
        b.poll();
    }
    for (i, &(la, _)) in links.iter().enumerate() {
        a.t.send(la, &[i as u8], Payload::None).unwrap();
    }
    // The frames arrive and their receives complete while `b` does not poll.
    std::thread::sleep(Duration::from_millis(200));
    pump_one(&mut b, "every link's frame", |b| links.iter().all(|&(_, lb)| b.frames(lb).len() == 1));
    for (i, &(_, lb)) in links.iter().enumerate() {
        assert_eq!(b.frames(lb), vec![vec![i as u8]]);
    }
}
