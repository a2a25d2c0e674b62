//! The shm transport over real memfd segments and abstract Unix sockets, in one process and
//! across two.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zcx_control::{ShmLocator, TransportAddress};
use zcx_dataplane::proto::AtomicOp;
use zcx_dataplane::shm::conn::{self, Hello};
use zcx_dataplane::shm::segment::{segment_len, Segment};
use zcx_dataplane::{
    ConnectTarget, LargePayload, LendSlot, LinkId, ListenerId, LocalMem, Payload, PlaceTarget, RemoteMem,
    RmaOp, RmaOutcome, SameHostFastPath as _, SendOutcome, ShmConfig, ShmTransport, TlError, TlEvent,
    Transport, ZcopyPayload,
};

#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Connected(LinkId),
    Accepted(ListenerId, LinkId),
    Frame(LinkId, Vec<u8>),
    SendDone(LinkId, u64, Result<(), TlError>),
    /// Link, header, payload length, the token of the destination (`None`: dropped).
    Placed(LinkId, Vec<u8>, usize, Option<u64>),
    PlaceDone(LinkId, u64, Result<(), TlError>),
    Failed(LinkId, TlError),
}

struct Side {
    t: ShmTransport,
    ev: Vec<Ev>,
    /// Destinations of placed payloads, by token; after `t`, so the transport drops first.
    dests: Vec<Vec<u8>>,
}

/// Placed payloads are kept when their header starts with an even byte (or is empty).
fn keeps(header: &[u8]) -> bool {
    header.first().is_none_or(|b| b % 2 == 0)
}

fn small_cfg() -> ShmConfig {
    // Small rings, so back-pressure and wrap-around happen quickly.
    ShmConfig { ring_capacity: 1 << 20, socket_check_interval: 4, ..ShmConfig::default() }
}

impl Side {
    fn new() -> Side {
        Side::with(&small_cfg())
    }

    fn with(cfg: &ShmConfig) -> Side {
        Side { t: ShmTransport::new(cfg).expect("shm transport"), ev: Vec::new(), dests: Vec::new() }
    }

    fn poll(&mut self) {
        let (ev, dests) = (&mut self.ev, &mut self.dests);
        self.t.poll(&mut |e| match e {
            TlEvent::Placed { link, header, len, dest } => {
                let token = keeps(header).then(|| {
                    dests.push(vec![0xA5; len]);
                    let token = dests.len() - 1;
                    // SAFETY: the Vec's heap buffer never moves while `dests` lives, and `dests`
                    // outlives the transport.
                    dest.set(unsafe { PlaceTarget::new(dests[token].as_mut_ptr(), token as u64) });
                    token as u64
                });
                ev.push(Ev::Placed(link, header.to_vec(), len, token));
            }
            TlEvent::Connected { link } => ev.push(Ev::Connected(link)),
            TlEvent::Accepted { listener, link, .. } => ev.push(Ev::Accepted(listener, link)),
            TlEvent::Frame { link, bytes } => ev.push(Ev::Frame(link, bytes.to_vec())),
            TlEvent::SendDone { link, token, result } => ev.push(Ev::SendDone(link, token, result)),
            TlEvent::PlaceDone { link, token, result } => ev.push(Ev::PlaceDone(link, token, result)),
            // A shm operation completes inside `rma`: no completion event ever follows.
            TlEvent::RmaDone { link, token, .. } => panic!("RmaDone from shm (link {link:?}, token {token})"),
            TlEvent::LinkFailed { link, error } => ev.push(Ev::Failed(link, error)),
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

    /// How many frames arrived on `link`: what the pump loops wait for, without copying them
    /// all on every poll (quadratic in a long exchange, and slow enough under AddressSanitizer
    /// to run into the pumps' deadlines).
    fn frame_count(&self, link: LinkId) -> usize {
        self.ev.iter().filter(|e| matches!(e, Ev::Frame(l, _) if *l == link)).count()
    }

    fn failed(&self, link: LinkId) -> Option<TlError> {
        self.ev.iter().find_map(|e| match e {
            Ev::Failed(l, err) if *l == link => Some(*err),
            _ => None,
        })
    }

    fn accepted(&self) -> Option<LinkId> {
        self.ev.iter().find_map(|e| match e {
            Ev::Accepted(ListenerId(0), l) => Some(*l),
            _ => None,
        })
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

/// Polls both sides until `done` holds; fails after ten seconds.
fn pump(a: &mut Side, b: &mut Side, what: &str, mut done: impl FnMut(&Side, &Side) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(a) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; events: {:?}", brief(&a.ev));
        a.poll();
    }
}

/// Connects `b` to `a`'s worker address; returns (a's link, b's link).
fn pair(a: &mut Side, b: &mut Side) -> (LinkId, LinkId) {
    let addr = a.t.address().expect("address");
    let lb = b.t.connect(ConnectTarget::Address(&addr)).expect("connect");
    pump(a, b, "connect/accept", |a, b| a.accepted().is_some() && b.ev.contains(&Ev::Connected(lb)));
    let la = a.accepted().unwrap();
    a.ev.clear();
    b.ev.clear();
    (la, lb)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

#[test]
fn address_listen_and_sockaddr_are_as_documented() {
    let mut a = Side::new();
    let Some(TransportAddress::Shm { socket_name }) = a.t.address() else { panic!("not an shm address") };
    let prefix = format!("zcx-shm-{}-{}-", zcx_dataplane::shm::namespace_tag(), std::process::id());
    assert!(socket_name.starts_with(prefix.as_bytes()));
    assert!(ShmTransport::reaches(&TransportAddress::Shm { socket_name }));
    assert_eq!(a.t.listen("127.0.0.1:0".parse().unwrap()), Err(TlError::Unsupported));
    let sockaddr = ConnectTarget::Sockaddr { remote: "127.0.0.1:1".parse().unwrap(), local: None };
    assert_eq!(a.t.connect(sockaddr), Err(TlError::Unsupported));
    assert_eq!(a.t.caps().name, "shm");
    // Nobody listens on this name: a link id now, NotConnected from poll.
    let nowhere = TransportAddress::Shm { socket_name: b"zcx-shm-nobody-here".to_vec() };
    let l = a.t.connect(ConnectTarget::Address(&nowhere)).unwrap();
    pump_one(&mut a, "connect failure", |a| a.failed(l).is_some());
    assert_eq!(a.failed(l), Some(TlError::NotConnected));
}

/// Same host: a peer's registered region is mapped here, so put, get and every atomic of both
/// sizes, plain and fetching, are native (the `rma_*` tests below do each of them); large
/// payloads are pushed by the sender.
#[test]
fn caps_claim_native_one_sided_operations_and_sender_push() {
    let side = Side::new();
    let rma = side.t.caps().rma;
    assert!(rma.put && rma.get);
    for size in [4, 8] {
        for op in [AtomicOp::Add, AtomicOp::Swap, AtomicOp::Cswap, AtomicOp::And, AtomicOp::Or, AtomicOp::Xor]
        {
            for fetch in [false, true] {
                assert!(rma.atomics(size).contains(op, fetch), "{size} B {op:?} fetch {fetch}");
            }
        }
    }
    assert!(rma.max_rma >= 1 << 40, "a region as large as memory: {}", rma.max_rma);
    assert_eq!(side.t.caps().large_payload, LargePayload::SenderPush);
}

/// A set of shm and uring claims per link what the link's member does, and for the set as a
/// whole only what both do.
#[test]
fn a_set_answers_caps_per_link() {
    let uring = zcx_dataplane::UringTransport::new(&zcx_dataplane::UringConfig::default()).expect("uring");
    let shm = ShmTransport::new(&small_cfg()).expect("shm");
    let set = zcx_dataplane::TransportSet::new(vec![
        zcx_dataplane::SetMember::SameHost(Box::new(shm)),
        zcx_dataplane::SetMember::Plain(Box::new(uring)),
    ])
    .expect("set");
    let shm_link = LinkId(5);
    let uring_link = LinkId((1 << 28) | 5);
    assert!(set.link_caps(shm_link).rma.put && set.link_caps(shm_link).rma.get);
    assert_eq!(set.link_caps(uring_link).rma, zcx_dataplane::RmaCaps::NONE);
    assert_eq!(set.caps().rma, zcx_dataplane::RmaCaps::NONE);
    assert_eq!(set.caps().large_payload, LargePayload::SenderPush);
}

/// A set offers the same-host extension when a member has it, and forwards `rma` to the link's
/// member: the uring member refuses it as unsupported.
#[test]
fn a_set_offers_the_extension_only_with_a_member_that_has_it() {
    let uring = || zcx_dataplane::UringTransport::new(&zcx_dataplane::UringConfig::default()).expect("uring");
    let shm = ShmTransport::new(&small_cfg()).expect("shm");
    let mut with_shm = zcx_dataplane::TransportSet::new(vec![
        zcx_dataplane::SetMember::SameHost(Box::new(shm)),
        zcx_dataplane::SetMember::Plain(Box::new(uring())),
    ])
    .expect("set");
    assert!(with_shm.same_host_fast_path().is_some());
    let remote = RemoteMem { region_base: 0, region_len: 8, addr: 0, len: 8, key: &[] };
    let op = RmaOp::Atomic { op: AtomicOp::Add, fetch: false, value: 1, compare: 0 };
    let uring_link = LinkId((1 << 28) | 5);
    assert_eq!(with_shm.rma(uring_link, op, LocalMem::NONE, remote, 1), Err(TlError::Unsupported));
    // No such shm link: refused as a bad argument, not attempted.
    assert_eq!(with_shm.rma(LinkId(5), op, LocalMem::NONE, remote, 1), Err(TlError::InvalidParam));
    let mut without =
        zcx_dataplane::TransportSet::new(vec![zcx_dataplane::SetMember::Plain(Box::new(uring()))])
            .expect("set");
    assert!(without.same_host_fast_path().is_none());
}

#[test]
fn frames_of_every_size_both_ways_in_order() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let max = a.t.caps().max_frame;
    let sizes = [0usize, 1, 7, 8, 55, 56, 57, 63, 64, 4096, 65535, 200_000, max - 8];
    let mut expect = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let header = [i as u8; 8];
        let payload = pattern(n, i as u8);
        assert_eq!(a.t.send(la, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
        assert_eq!(b.t.send(lb, &header, Payload::Copy(&payload)), Ok(SendOutcome::Done));
        expect.push([&header[..], &payload].concat());
    }
    a.t.send(la, b"", Payload::None).unwrap();
    b.t.send(lb, b"", Payload::None).unwrap();
    expect.push(Vec::new());
    // A zero-copy payload through `send` is copied into the ring at once.
    let z = pattern(100_000, 3);
    // SAFETY: `z` outlives the call, and `send` copies it before returning (it says Done).
    let zp = unsafe { ZcopyPayload::new(z.as_ptr(), z.len(), 77) };
    assert_eq!(a.t.send(la, b"Z", Payload::Zcopy(zp)), Ok(SendOutcome::Done));
    // SAFETY: as above.
    let zp = unsafe { ZcopyPayload::new(z.as_ptr(), z.len(), 77) };
    assert_eq!(b.t.send(lb, b"Z", Payload::Zcopy(zp)), Ok(SendOutcome::Done));
    expect.push([&b"Z"[..], &z].concat());
    assert_eq!(a.t.send(la, b"HDR!!!!!!", Payload::Copy(&pattern(max - 8, 0))), Err(TlError::InvalidParam));
    let n = expect.len();
    pump(&mut a, &mut b, "all frames", |a, b| a.frame_count(la) == n && b.frame_count(lb) == n);
    assert!(a.frames(la) == expect, "frames to a differ");
    assert!(b.frames(lb) == expect, "frames to b differ");
    assert!(!a.ev.iter().any(|e| matches!(e, Ev::SendDone(..))), "no SendDone after Done");
}

/// A poll after an empty one takes one record and leaves the slot after it unread (a lone
/// message's answer goes out without waiting for that line); the next poll drains the burst.
#[test]
fn a_poll_after_an_empty_one_takes_one_record_and_the_next_drains_the_rest() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    b.poll();
    assert!(b.frames(lb).is_empty());
    for i in 0..5u8 {
        a.t.send(la, &[i], Payload::Copy(&[i; 8])).unwrap();
    }
    b.poll();
    assert_eq!(b.frames(lb), vec![[&[0u8][..], &[0; 8]].concat()], "one record after an empty poll");
    b.poll();
    let frames = b.frames(lb);
    assert_eq!(frames.len(), 5, "the next poll drains the burst");
    for (i, frame) in frames.iter().enumerate() {
        assert_eq!(frame[0], i as u8, "in order");
    }
    // Empty again, then a lone message: one poll delivers it.
    b.poll();
    b.ev.clear();
    a.t.send(la, b"x", Payload::None).unwrap();
    b.poll();
    assert_eq!(b.frames(lb), vec![b"x".to_vec()]);
}

/// Each doorbell names the link whose ring it watches, and `take_rung_frame` reads that link
/// alone: a frame waiting on another link stays for its own doorbell (or the general poll), and
/// a link gone since its doorbell was handed out hands nothing over.
#[test]
fn a_rung_take_reads_only_the_link_whose_doorbell_rang() {
    let (mut a, mut b, mut c) = (Side::new(), Side::new(), Side::new());
    let (la, lb_a) = pair(&mut a, &mut b);
    let (lc, lb_c) = pair(&mut c, &mut b);
    let mut bells = Vec::new();
    b.t.doorbells(&mut bells);
    let mut named: Vec<LinkId> = bells.iter().flat_map(|bell| bell.links()).collect();
    named.sort_by_key(|link| link.0);
    let mut links = vec![lb_a, lb_c];
    links.sort_by_key(|link| link.0);
    assert_eq!(named, links, "one doorbell per link, naming it");
    assert!(bells.iter().all(|bell| !bell.rang()));
    a.t.send(la, b"from a", Payload::None).unwrap();
    c.t.send(lc, b"from c", Payload::None).unwrap();
    assert!(bells.iter().all(|bell| bell.rang()), "both rings hold a record");
    let mut taken = Vec::new();
    let take = |t: &mut ShmTransport, rung: LinkId, taken: &mut Vec<(LinkId, Vec<u8>)>| {
        t.take_rung_frame(rung, &mut |link, bytes| taken.push((link, bytes.to_vec())), &LendSlot::new())
    };
    assert!(take(&mut b.t, lb_c, &mut taken));
    assert_eq!(taken, vec![(lb_c, b"from c".to_vec())], "the rung link's frame, not the first link's");
    assert!(!take(&mut b.t, lb_c, &mut taken), "nothing more on that link");
    assert!(take(&mut b.t, lb_a, &mut taken));
    assert_eq!(taken[1], (lb_a, b"from a".to_vec()));
    // A link closed since: its old doorbell may still ring, but its id leads nowhere.
    c.t.send(lc, b"late", Payload::None).unwrap();
    b.t.close(lb_c, true);
    b.poll();
    assert!(!take(&mut b.t, lb_c, &mut taken), "a closed link handed a frame over");
    assert_eq!(taken.len(), 2);
}

/// `take_rung_frame` hands over the frame at the head of a link and nothing past it; a frame
/// taken through the lend slot stays unreleased, and the link closed to further takes, until its
/// loan ends; a placement at the head is the general poll's, and so is the frame behind one in
/// progress; frames taken and polled together keep their order.
#[test]
fn a_rung_take_hands_over_the_head_frame_and_leaves_the_rest_to_the_poll() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let mut taken: Vec<Vec<u8>> = Vec::new();
    let take_all = |t: &mut ShmTransport, taken: &mut Vec<Vec<u8>>| {
        t.take_rung_frame(
            lb,
            &mut |link, bytes| {
                assert_eq!(link, lb);
                taken.push(bytes.to_vec());
            },
            &LendSlot::new(),
        )
    };
    assert!(!take_all(&mut b.t, &mut taken), "nothing waiting");
    for i in 0..5u8 {
        a.t.send(la, &[i], Payload::Copy(&[i; 8])).unwrap();
    }
    assert!(take_all(&mut b.t, &mut taken));
    assert!(take_all(&mut b.t, &mut taken));
    assert_eq!(taken.len(), 2, "one frame per take");
    // Lent: the frame stays where it is until the loan ends, and nothing more is handed over.
    let lend = LendSlot::new();
    let mut lent = None;
    assert!(b.t.take_rung_frame(
        lb,
        &mut |_, bytes| {
            assert!(lend.take(), "offered for lending");
            lent = Some((bytes.as_ptr(), bytes.to_vec()));
        },
        &lend
    ));
    let (ptr, bytes) = lent.expect("handed over");
    assert!(!take_all(&mut b.t, &mut taken), "a take past a loan");
    // SAFETY: the loan has not ended, so the record's bytes are still in place.
    assert_eq!(unsafe { std::slice::from_raw_parts(ptr, bytes.len()) }, &bytes[..], "lent bytes moved");
    b.t.end_lend(lb);
    taken.push(bytes);
    pump_one(&mut b, "the rest", |b| b.frame_count(lb) == 2);
    let order: Vec<u8> = taken.iter().chain(b.frames(lb).iter()).map(|frame| frame[0]).collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
    // A placement at the head is not a frame: declined. Once the poll started copying it (more
    // than one poll's worth), the frame behind it is not offered either: it would overtake it.
    let buf = pattern(20 << 20, 5);
    // SAFETY: `buf` lives and is unchanged until the SendDone awaited below.
    let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), 9) };
    assert_eq!(a.t.send_placed(la, &[2, 9], Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
    a.t.send(la, b"after", Payload::None).unwrap();
    taken.clear();
    b.ev.clear();
    assert!(!take_all(&mut b.t, &mut taken), "a placement at the head was offered");
    b.poll();
    assert!(matches!(b.ev[..], [Ev::Placed(..)]), "the copy started and is not done: {:?}", brief(&b.ev));
    assert!(!take_all(&mut b.t, &mut taken), "a frame overtook a placement in progress");
    pump(&mut a, &mut b, "the placement and the frame after it", |a, b| {
        a.ev.contains(&Ev::SendDone(la, 9, Ok(()))) && b.frame_count(lb) == 1
    });
    assert!(taken.is_empty());
    assert!(b.dests.last().is_some_and(|dest| *dest == buf), "placed payload differs");
    assert_eq!(b.frames(lb), vec![b"after".to_vec()]);
}

#[test]
fn more_than_a_ring_holds_is_queued_without_loss_or_reorder() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    // 16 MiB into a 1 MiB ring with the receiver not polling.
    let mut expect = Vec::new();
    for i in 0..800u32 {
        let payload = pattern(((i as usize) * 7919) % 40_000, i as u8);
        assert_eq!(b.t.send(lb, &i.to_le_bytes(), Payload::Copy(&payload)), Ok(SendOutcome::Done));
        expect.push([&i.to_le_bytes()[..], &payload].concat());
    }
    assert!(b.t.has_pending_sends(lb), "16 MiB fit in a 1 MiB ring");
    b.poll();
    pump(&mut a, &mut b, "800 frames", |a, _| a.frame_count(la) == 800);
    assert!(a.frames(la) == expect, "frames lost or reordered");
    pump(&mut a, &mut b, "queue drained", |_, b| !b.t.has_pending_sends(lb));
    // The queue is bounded: beyond max_queued_bytes, send says NoResource (back-pressure).
    let big = pattern(200_000, 1);
    let mut refused = false;
    for _ in 0..1000 {
        match b.t.send(lb, b"x", Payload::Copy(&big)) {
            Ok(_) => {}
            Err(TlError::NoResource) => {
                refused = true;
                break;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(refused, "the send queue is unbounded");
}

#[test]
fn placed_64_mib_arrives_byte_exact_with_a_single_copy() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let big = pattern(64 << 20, 5);
    // SAFETY: `big` is neither written nor freed until SendDone (awaited below).
    let z = unsafe { ZcopyPayload::new(big.as_ptr(), big.len(), 4242) };
    assert_eq!(b.t.send_placed(lb, b"\x02rndv", Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
    // A frame behind it arrives after it.
    b.t.send(lb, b"after", Payload::None).unwrap();
    assert!(b.t.has_pending_sends(lb));
    pump(&mut a, &mut b, "placement and release", |a, b| {
        b.ev.contains(&Ev::SendDone(lb, 4242, Ok(()))) && a.frame_count(la) == 1
    });
    let placed_at = a.ev.iter().position(|e| matches!(e, Ev::Placed(..))).unwrap();
    let done_at = a.ev.iter().position(|e| matches!(e, Ev::PlaceDone(..))).unwrap();
    let frame_at = a.ev.iter().position(|e| matches!(e, Ev::Frame(..))).unwrap();
    assert!(placed_at < done_at && done_at < frame_at, "order: {:?}", brief(&a.ev));
    assert_eq!(a.ev[placed_at], Ev::Placed(la, b"\x02rndv".to_vec(), 64 << 20, Some(0)));
    assert_eq!(a.ev[done_at], Ev::PlaceDone(la, 0, Ok(())));
    assert!(a.dests[0] == big, "placed bytes differ");
    assert!(!b.t.has_pending_sends(lb));

    // A copied payload too large for a frame is staged and placed too; `Done` at once.
    let copied = pattern(3 << 20, 9);
    assert_eq!(b.t.send_placed(lb, b"\x04copy", Payload::Copy(&copied)), Ok(SendOutcome::Done));
    // A small placed payload travels as an ordinary frame (the receiver accepts both forms).
    assert_eq!(b.t.send_placed(lb, b"\x06s", Payload::Copy(b"tiny")), Ok(SendOutcome::Done));
    pump(&mut a, &mut b, "staged placement", |a, _| a.frame_count(la) == 2);
    assert!(a.dests[1] == copied);
    assert_eq!(a.frames(la)[1], b"\x06stiny".to_vec());
    let too_big = a.t.caps().max_placed + 1;
    // SAFETY: refused before any byte is read.
    let z = unsafe { ZcopyPayload::new(big.as_ptr(), too_big, 1) };
    assert_eq!(b.t.send_placed(lb, b"\x02", Payload::Zcopy(z)), Err(TlError::InvalidParam));
}

#[test]
fn a_placement_revoked_by_a_force_close_mid_copy_is_not_reported_good() {
    // The receiver checks sockets rarely, so only the revoke word can tell it the sender gave up.
    let lazy = ShmConfig { socket_check_interval: 1 << 20, ..small_cfg() };
    let (mut a, mut b) = (Side::with(&lazy), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let big = pattern(64 << 20, 7);
    // SAFETY: `big` outlives both transports' use of it: it is dropped at the end of the test.
    let z = unsafe { ZcopyPayload::new(big.as_ptr(), big.len(), 77) };
    assert_eq!(b.t.send_placed(lb, b"\x02rndv", Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
    // The receiver takes the placement and copies its first chunk (8 MiB per poll).
    pump_one(&mut a, "the placement", |a| a.ev.iter().any(|e| matches!(e, Ev::Placed(..))));
    assert!(!a.ev.iter().any(|e| matches!(e, Ev::PlaceDone(..))), "copied at once: {:?}", brief(&a.ev));
    // The sender force-closes: its payload is cancelled, so its owner may reuse the memory now.
    b.t.close(lb, true);
    b.poll();
    assert!(b.ev.contains(&Ev::SendDone(lb, 77, Err(TlError::Canceled))), "{:?}", brief(&b.ev));
    // The receiver finishes its copy but must not call it good.
    pump_one(&mut a, "the placement's end", |a| a.ev.iter().any(|e| matches!(e, Ev::PlaceDone(..))));
    let done = a.ev.iter().find(|e| matches!(e, Ev::PlaceDone(..))).unwrap();
    assert!(matches!(done, Ev::PlaceDone(l, 0, Err(_)) if *l == la), "{done:?}");
}

#[test]
fn a_dropped_placement_still_releases_the_sender() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let buf = pattern(1 << 20, 1);
    for token in 0..3u64 {
        // Odd first header byte: the receiver drops it.
        // SAFETY: `buf` lives and is unchanged until the SendDone awaited below.
        let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), token) };
        assert_eq!(b.t.send_placed(lb, &[1, token as u8], Payload::Zcopy(z)), Ok(SendOutcome::InFlight));
    }
    b.t.send(lb, b"next", Payload::None).unwrap();
    pump(&mut a, &mut b, "releases", |a, b| {
        (0..3).all(|t| b.ev.contains(&Ev::SendDone(lb, t, Ok(())))) && a.frame_count(la) == 1
    });
    assert!(!a.ev.iter().any(|e| matches!(e, Ev::PlaceDone(..))), "no destination, no PlaceDone");
    assert_eq!(a.ev.iter().filter(|e| matches!(e, Ev::Placed(_, _, _, None))).count(), 3);
}

#[test]
fn local_close_is_seen_by_the_peer_after_the_frames_before_it() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    for i in 0..300u32 {
        b.t.send(lb, &i.to_le_bytes(), Payload::Copy(&pattern(10_000, i as u8))).unwrap();
    }
    b.t.close(lb, false);
    assert_eq!(b.t.send(lb, b"late", Payload::None), Err(TlError::InvalidParam));
    pump(&mut a, &mut b, "peer failure", |a, _| a.failed(la).is_some());
    assert_eq!(a.failed(la), Some(TlError::ConnectionReset));
    assert_eq!(a.frame_count(la), 300, "frames sent before the close were lost");
    assert!(b.failed(lb).is_none(), "no LinkFailed after a local close");
    assert_eq!(b.t.link_count(), 0);
    assert_eq!(a.t.link_count(), 0);

    // A forced close with a placement in flight cancels it locally; the peer fails its link.
    let (la, lb) = pair(&mut a, &mut b);
    let buf = pattern(1 << 20, 2);
    // SAFETY: `buf` outlives both transports' use of it (released by the cancel below).
    let z = unsafe { ZcopyPayload::new(buf.as_ptr(), buf.len(), 9) };
    b.t.send_placed(lb, b"\x02", Payload::Zcopy(z)).unwrap();
    b.t.close(lb, true);
    pump(&mut a, &mut b, "cancel and failure", |a, b| {
        b.ev.contains(&Ev::SendDone(lb, 9, Err(TlError::Canceled))) && a.failed(la).is_some()
    });
}

/// Counts this process's descriptors and shm segment mappings.
fn fds_and_maps() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    (fds, maps.lines().filter(|l| l.contains("zcx-shm")).count())
}

/// Runs `name` alone in a child process (fd counts are per process, and other tests run in
/// parallel threads); true in the child.
fn run_alone(name: &str) -> bool {
    if std::env::var("ZCX_SHM_ALONE").as_deref() == Ok(name) {
        return true;
    }
    if std::env::var("ZCX_SHM_ALONE").is_ok() || std::env::var("ZCX_SHM_PEER").is_ok() {
        return false;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("ZCX_SHM_ALONE", name)
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

/// The peer process of the two-process tests: connects to `ZCX_SHM_PEER`, sends frames and a
/// placed payload, then either waits to be killed or closes.
fn peer_main(name: &str, mode: &str) {
    let mut b = Side::new();
    let addr = TransportAddress::Shm { socket_name: name.as_bytes().to_vec() };
    let lb = b.t.connect(ConnectTarget::Address(&addr)).unwrap();
    for i in 0..500u32 {
        b.t.send(lb, &i.to_le_bytes(), Payload::Copy(&pattern((i as usize * 977) % 70_000, i as u8)))
            .unwrap();
    }
    let big = pattern(16 << 20, 7);
    // SAFETY: `big` lives until the end of this function, after SendDone or the kill.
    let z = unsafe { ZcopyPayload::new(big.as_ptr(), big.len(), 1) };
    b.t.send_placed(lb, b"\x02big", Payload::Zcopy(z)).unwrap();
    pump_one(&mut b, "release", |b| b.ev.contains(&Ev::SendDone(lb, 1, Ok(()))));
    b.t.send(lb, b"ready", Payload::None).unwrap();
    if mode == "wait" {
        // Polled until the parent kills us (bounded in case it never does).
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            b.poll();
            std::thread::sleep(Duration::from_millis(1));
        }
        std::process::exit(3);
    }
    pump_one(&mut b, "echo", |b| b.frame_count(lb) == 1);
    assert_eq!(b.frames(lb)[0], b"echo".to_vec());
    b.t.close(lb, false);
    pump_one(&mut b, "close", |b| b.t.link_count() == 0);
}

fn spawn_peer(test: &str, name: &[u8], mode: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env("ZCX_SHM_PEER", String::from_utf8(name.to_vec()).unwrap())
        .env("ZCX_SHM_PEER_MODE", mode)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Receives the peer's 500 frames and 16 MiB placement; returns the link.
fn receive_from_peer(a: &mut Side) -> LinkId {
    pump_one(a, "peer's frames", |a| a.accepted().is_some_and(|l| a.frame_count(l) == 501));
    let la = a.accepted().unwrap();
    let frames = a.frames(la);
    for (i, f) in frames[..500].iter().enumerate() {
        let expect = [&(i as u32).to_le_bytes()[..], &pattern((i * 977) % 70_000, i as u8)].concat();
        assert!(*f == expect, "frame {i} differs");
    }
    assert_eq!(frames[500], b"ready".to_vec());
    assert!(a.ev.contains(&Ev::PlaceDone(la, 0, Ok(()))));
    assert!(a.dests[0] == pattern(16 << 20, 7), "placed bytes from the other process differ");
    la
}

#[test]
fn two_processes_exchange_frames_and_a_placed_payload() {
    if let Ok(name) = std::env::var("ZCX_SHM_PEER") {
        if std::env::var("ZCX_SHM_PEER_MODE").as_deref() == Ok("close") {
            peer_main(&name, "close");
        }
        return;
    }
    let mut a = Side::new();
    let mut child =
        spawn_peer("two_processes_exchange_frames_and_a_placed_payload", a.t.socket_name(), "close");
    let la = receive_from_peer(&mut a);
    a.t.send(la, b"echo", Payload::None).unwrap();
    pump_one(&mut a, "peer's close", |a| a.failed(la).is_some());
    assert_eq!(a.failed(la), Some(TlError::ConnectionReset));
    assert!(child.wait().unwrap().success(), "peer process failed");
}

#[test]
fn a_killed_peer_fails_the_link_and_leaks_nothing() {
    if let Ok(name) = std::env::var("ZCX_SHM_PEER") {
        if std::env::var("ZCX_SHM_PEER_MODE").as_deref() == Ok("wait") {
            peer_main(&name, "wait");
        }
        return;
    }
    if !run_alone("a_killed_peer_fails_the_link_and_leaks_nothing") {
        return;
    }
    let mut a = Side::new();
    let before = fds_and_maps();
    let mut child = spawn_peer("a_killed_peer_fails_the_link_and_leaks_nothing", a.t.socket_name(), "wait");
    let la = receive_from_peer(&mut a);
    // An endpoint's direct way into the ring, held across the kill as an application's endpoint
    // handle would hold it.
    let lane = a.t.open_send_lane(la).expect("a live link opens its lane");
    assert!(lane.send(b"direct", b""), "a direct write into a live link's ring");
    let (fds, maps) = fds_and_maps();
    assert!(fds > before.0 && maps > before.1, "a link holds a socket and a mapping");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let killed = Instant::now();
    pump_one(&mut a, "link failure after the kill", |a| a.failed(la).is_some());
    assert!(killed.elapsed() < Duration::from_secs(2), "took {:?}", killed.elapsed());
    assert_eq!(a.failed(la), Some(TlError::ConnectionReset));
    let _ = child.wait();
    // The lane outlives its link but holds neither the socket (its duplicate) nor the mapping.
    assert_eq!(fds_and_maps(), before, "descriptors or mappings leaked");
    assert!(!lane.send(b"late", b""), "a lane wrote into a dead link's ring");
    assert!(a.t.open_send_lane(la).is_none(), "a failed link opened a lane");
    drop(lane);
}

#[test]
fn many_links_leave_no_descriptor_or_mapping_behind() {
    if !run_alone("many_links_leave_no_descriptor_or_mapping_behind") {
        return;
    }
    let before = fds_and_maps();
    {
        let (mut a, mut b) = (Side::new(), Side::new());
        let with_transports = fds_and_maps();
        for round in 0..20 {
            let (la, lb) = pair(&mut a, &mut b);
            b.t.send(lb, b"bye", Payload::Copy(&[round as u8; 1000])).unwrap();
            pump(&mut a, &mut b, "frame", |a, _| !a.frames(la).is_empty());
            if round % 2 == 0 {
                a.t.close(la, round % 4 == 0);
                pump(&mut a, &mut b, "peer failure", |_, b| b.failed(lb).is_some());
            } else {
                b.t.close(lb, false);
                pump(&mut a, &mut b, "peer failure", |a, _| a.failed(la).is_some());
            }
            a.ev.clear();
            b.ev.clear();
        }
        assert_eq!(fds_and_maps(), with_transports, "links leaked");
        // Live links are released with their transport.
        let _ = pair(&mut a, &mut b);
    }
    assert_eq!(fds_and_maps(), before, "dropped transports leaked");
}

/// Connects a raw socket to the transport's listener.
fn raw_connect(t: &ShmTransport) -> OwnedFd {
    conn::connect(t.socket_name()).expect("raw connect")
}

fn memfd(len: usize, seal: bool) -> OwnedFd {
    // SAFETY: memfd_create with a literal name; checked.
    let raw = unsafe { libc::memfd_create(c"test".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(raw >= 0);
    // SAFETY: a fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain calls on our descriptor.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
        if seal {
            libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
        }
    }
    fd
}

#[test]
fn hostile_connections_are_refused_without_harm() {
    if !run_alone("hostile_connections_are_refused_without_harm") {
        return;
    }
    let cfg = ShmConfig { hello_timeout: Duration::from_millis(200), ..small_cfg() };
    let mut a = Side::with(&cfg);
    let before = fds_and_maps();
    let cap = 1 << 20;
    let good = Hello { capacity: cap as u64, segment_len: segment_len(cap) as u64, max_frame: 4096 };
    let mut socks = Vec::new();
    // A forged hello with no descriptor.
    let s = raw_connect(&a.t);
    let mut forged = good.encode();
    forged[0] ^= 1;
    // SAFETY: send on our socket from a live buffer.
    unsafe { libc::send(s.as_raw_fd(), forged.as_ptr().cast(), forged.len(), 0) };
    socks.push(s);
    // A good hello with a memfd of the wrong size.
    let s = raw_connect(&a.t);
    conn::send_with_fd(s.as_raw_fd(), &good.encode(), memfd(4096, true).as_raw_fd()).unwrap();
    socks.push(s);
    // A good hello with an unsealed memfd of the right size.
    let s = raw_connect(&a.t);
    conn::send_with_fd(s.as_raw_fd(), &good.encode(), memfd(segment_len(cap), false).as_raw_fd()).unwrap();
    socks.push(s);
    // A good hello with a sealed memfd of the right size but no segment header.
    let s = raw_connect(&a.t);
    conn::send_with_fd(s.as_raw_fd(), &good.encode(), memfd(segment_len(cap), true).as_raw_fd()).unwrap();
    socks.push(s);
    // A good hello with something that is not a memfd (a pipe).
    let mut pipe = [0; 2];
    // SAFETY: pipe2 into a two-element array.
    assert_eq!(unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let s = raw_connect(&a.t);
    conn::send_with_fd(s.as_raw_fd(), &good.encode(), pipe[0]).unwrap();
    // SAFETY: closing our own pipe ends.
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    socks.push(s);
    // A hello that lies about the segment size of a real segment.
    let (seg, fd) = Segment::create(cap, false).unwrap();
    let lie = Hello { segment_len: seg.len() as u64 + 4096, ..good };
    let s = raw_connect(&a.t);
    conn::send_with_fd(s.as_raw_fd(), &lie.encode(), fd.as_raw_fd()).unwrap();
    socks.push(s);
    // Garbage bytes, and a connection that says nothing at all.
    let s = raw_connect(&a.t);
    // SAFETY: send on our socket from a live buffer.
    unsafe { libc::send(s.as_raw_fd(), [0xFFu8; 7].as_ptr().cast(), 7, 0) };
    socks.push(s);
    socks.push(raw_connect(&a.t));
    drop((seg, fd));
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        a.poll();
    }
    assert!(a.accepted().is_none(), "a hostile connection was accepted: {:?}", brief(&a.ev));
    // Each refused connection was closed: the other end reads end-of-file.
    for s in &socks {
        assert_eq!(conn::drain(s.as_raw_fd()), conn::SocketState::Closed);
    }
    drop(socks);
    assert_eq!(fds_and_maps(), before, "refused connections leaked");
    // And a real peer still gets in.
    let mut b = Side::new();
    let (la, lb) = pair(&mut a, &mut b);
    b.t.send(lb, b"fine", Payload::None).unwrap();
    pump(&mut a, &mut b, "frame", |a, _| a.frame_count(la) == 1);
}

#[test]
fn a_peer_corrupting_the_ring_fails_the_link_without_panic() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    b.t.send(lb, b"ok", Payload::None).unwrap();
    pump(&mut a, &mut b, "frame", |a, _| a.frame_count(la) == 1);
    // Find b's mapping of the segment and write a record header claiming far more than the ring
    // holds into ring 0's next slot (b is the connector: ring 0 is b → a). Both transports live in
    // this process, so the shared pages are reachable through b's mapping.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let starts: Vec<usize> = maps
        .lines()
        .filter(|l| l.contains("zcx-shm"))
        .map(|l| usize::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .collect();
    assert!(!starts.is_empty());
    // Ring 0 starts at offset 256; its data area follows its 192-byte header; the "ok" record
    // took the first 64-byte slot. Length 2^30, kind FRAME, first lap.
    let forged = (1u64 << 30) | (u64::from(zcx_dataplane::shm::ring::KIND_FRAME) << 32) | (1u64 << 48);
    for start in starts {
        // SAFETY: `start` is the base of a live zcx-shm mapping of this process (our two links'
        // segments), at least a page long; the slot is 8-byte aligned inside it.
        unsafe {
            ((start + 256 + zcx_dataplane::shm::ring::RING_HEADER + 64) as *mut u64).write_volatile(forged)
        };
    }
    pump(&mut a, &mut b, "link failure", |a, _| a.failed(la).is_some());
    assert_eq!(a.failed(la), Some(TlError::ConnectionReset));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn hello_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Hello::decode(&bytes);
        }

        #[test]
        fn mutated_hellos_decode_or_fail_cleanly(flip in 0usize..32, bit in 0u8..8, cap_log in 10u32..32) {
            let cap = 1usize << cap_log;
            let hello = Hello { capacity: cap as u64, segment_len: segment_len(cap) as u64, max_frame: 1 };
            let mut bytes = hello.encode();
            if (12..=30).contains(&cap_log) {
                prop_assert_eq!(Hello::decode(&bytes), Ok(hello));
            }
            bytes[flip] ^= 1 << bit;
            if let Ok(h) = Hello::decode(&bytes) {
                prop_assert!(h.capacity.is_power_of_two());
                prop_assert!(h.segment_len >= segment_len(h.capacity as usize) as u64);
            }
        }
    }
}

/// Waits up to `timeout` for `fd` to become readable.
fn readable_within(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) > 0 }
}

/// Waits in another thread (up to five seconds) for `efd` to become readable, while this one
/// sleeps `delay` and then calls `send`: whether it became readable, and after how long.
fn woken_by(efd: i32, delay: Duration, send: impl FnOnce()) -> (bool, Duration) {
    let sleeper = std::thread::spawn(move || {
        let start = Instant::now();
        (readable_within(efd, Duration::from_secs(5)), start.elapsed())
    });
    std::thread::sleep(delay);
    send();
    sleeper.join().unwrap()
}

#[test]
fn event_fd_wakes_a_sleeper_for_a_frame_and_for_a_dead_peer() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    for _ in 0..10 {
        a.poll();
    }
    let efd = a.t.event_fd().unwrap().as_raw_fd();
    // `arm`: nothing pending, so the worker may sleep.
    assert!(!a.t.has_events());
    assert!(!readable_within(efd, Duration::from_millis(50)), "readable with nothing to do");
    let (woken, after) = woken_by(efd, Duration::from_millis(150), || {
        b.t.send(lb, b"wake up", Payload::None).unwrap();
    });
    assert!(woken && after >= Duration::from_millis(100), "woken {woken} after {after:?}");
    pump_one(&mut a, "frame after wakeup", |a| a.frame_count(la) == 1);
    // A frame already waiting makes `arm` refuse to sleep.
    for _ in 0..10 {
        a.poll();
    }
    b.t.send(lb, b"pending", Payload::None).unwrap();
    assert!(a.t.has_events());
    pump_one(&mut a, "second frame", |a| a.frame_count(la) == 2);
    for _ in 0..10 {
        a.poll();
    }
    // The peer going away wakes a sleeper too.
    assert!(!a.t.has_events());
    drop(b);
    assert!(readable_within(efd, Duration::from_secs(5)), "not woken by the peer's close");
    pump_one(&mut a, "link failure", |a| a.failed(la).is_some());
}

/// Polls `side` once, offering its frames for loan; takes the first frame offered and returns
/// where its bytes are, recording the others as usual.
fn poll_taking_one(side: &mut Side) -> Option<(LinkId, *const u8, usize)> {
    let slot = zcx_dataplane::LendSlot::new();
    let mut taken = None;
    let ev = &mut side.ev;
    side.t.poll_lending(
        &mut |e| match e {
            TlEvent::Frame { link, bytes } if taken.is_none() && slot.take() => {
                taken = Some((link, bytes.as_ptr(), bytes.len()));
            }
            TlEvent::Frame { link, bytes } => ev.push(Ev::Frame(link, bytes.to_vec())),
            TlEvent::LinkFailed { link, error } => ev.push(Ev::Failed(link, error)),
            _ => {}
        },
        &slot,
    );
    taken
}

/// Polls `side`, offering its frames for loan, until one is taken (see [`poll_taking_one`]).
fn take_one(side: &mut Side) -> (LinkId, *const u8, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(taken) = poll_taking_one(side) {
            return taken;
        }
        assert!(Instant::now() < deadline, "no frame to lend");
    }
}

/// A lent frame stays where it is, unchanged, while the rest of its link waits; ending the loan
/// delivers the rest in order. A link closed while lent keeps its mapping until the loan ends,
/// then leaves no mapping or descriptor behind.
#[test]
fn a_lent_frame_stays_in_place_until_its_loan_ends() {
    if !run_alone("a_lent_frame_stays_in_place_until_its_loan_ends") {
        return;
    }
    let before = fds_and_maps();
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let frames: Vec<Vec<u8>> = (0..4u8).map(|i| pattern(100 + usize::from(i), i)).collect();
    for f in &frames {
        b.t.send(lb, b"", Payload::Copy(f)).unwrap();
    }
    let (link, ptr, len) = take_one(&mut a);
    assert_eq!(link, la);
    assert!(a.frames(la).is_empty(), "nothing after the lent frame is read");
    assert!(!a.t.is_quiet(), "a transport with a loan out is not quiet");
    for _ in 0..100 {
        a.poll();
        assert!(poll_taking_one(&mut a).is_none(), "one loan per link");
    }
    assert!(a.frames(la).is_empty(), "the link waits for the loan's end");
    // SAFETY: the loan is out, so the transport keeps these bytes as they are.
    assert_eq!(unsafe { std::slice::from_raw_parts(ptr, len) }, &frames[0][..]);
    a.t.end_lend(la);
    pump_one(&mut a, "the rest", |a| a.frame_count(la) == 3);
    assert_eq!(a.frames(la), frames[1..]);

    // Lent again, then the link closes under the loan: the bytes stay mapped until it ends.
    b.t.send(lb, b"", Payload::Copy(&frames[0])).unwrap();
    let (_, ptr, len) = take_one(&mut a);
    a.t.close(la, true);
    b.t.close(lb, true);
    for _ in 0..10 {
        a.poll();
        b.poll();
    }
    // SAFETY: as above: the closed link's mapping is kept for the loan.
    assert_eq!(unsafe { std::slice::from_raw_parts(ptr, len) }, &frames[0][..]);
    assert!(fds_and_maps().1 > before.1, "the lent frame's segment is still mapped");
    a.t.end_lend(la);
    drop((a, b));
    assert_eq!(fds_and_maps(), before, "descriptors or mappings left behind");
}

/// The remote address the test regions claim to start at in their owner's address space: what a
/// remote key records, unrelated to where anything is mapped here.
const REGION_BASE: u64 = 0x7f00_0000_0000;

/// A registered region as its owner has it: a sealed memfd mapped here (to see what operations
/// did to it) and the locator a packed remote key carries for it.
struct Region {
    _fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
    locator: ShmLocator,
}

impl Region {
    fn new(len: usize) -> Region {
        // SAFETY: memfd_create with a literal name; checked.
        let raw = unsafe {
            libc::memfd_create(c"zcx-rma-test".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain calls on our descriptor; `st` is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ptr = unsafe {
            assert_eq!(libc::ftruncate(raw, len as libc::off_t), 0);
            assert_eq!(libc::fcntl(raw, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW), 0);
            assert_eq!(libc::fstat(raw, &mut st), 0);
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        let pid = std::process::id();
        let locator = ShmLocator {
            boot_id: zcx_control::local_boot_id().expect("boot id"),
            pid,
            pid_start_time: zcx_control::process_start_time(pid).expect("start time"),
            fd: raw,
            inode: st.st_ino,
            dev: st.st_dev,
            map_offset: 0,
            map_len: len as u64,
            page_size: 4096,
        };
        Region { _fd: fd, ptr: ptr.cast(), len, locator }
    }

    /// The region's bytes as they are now.
    fn bytes(&self) -> Vec<u8> {
        // SAFETY: the mapping is live; the transport under test runs in this thread only.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }

    fn fill(&self, byte: u8) {
        // SAFETY: the whole live mapping.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    fn word64(&self, offset: usize) -> u64 {
        u64::from_le_bytes(self.bytes()[offset..offset + 8].try_into().unwrap())
    }

    fn set_word64(&self, offset: usize, value: u64) {
        // SAFETY: 8 bytes inside the mapping, written while no operation runs.
        unsafe { std::ptr::copy_nonoverlapping(value.to_le_bytes().as_ptr(), self.ptr.add(offset), 8) };
    }

    /// `len` bytes at `offset` of the region, as the owner's key (here its whole memfd) names them.
    fn remote<'a>(&self, key: &'a [u8], offset: u64, len: usize) -> RemoteMem<'a> {
        RemoteMem {
            region_base: REGION_BASE,
            region_len: self.len as u64,
            addr: REGION_BASE + offset,
            len,
            key,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn put(
    t: &mut ShmTransport,
    link: LinkId,
    data: &[u8],
    remote: RemoteMem<'_>,
) -> Result<RmaOutcome, TlError> {
    // SAFETY: `data` is readable and outlives the call, in which a shm put completes.
    let local = unsafe { LocalMem::new(data.as_ptr().cast_mut(), data.len()) };
    t.rma(link, RmaOp::Put, local, remote, 1)
}

fn get(
    t: &mut ShmTransport,
    link: LinkId,
    into: &mut [u8],
    remote: RemoteMem<'_>,
) -> Result<RmaOutcome, TlError> {
    // SAFETY: `into` is writable and outlives the call, in which a shm get completes.
    let local = unsafe { LocalMem::new(into.as_mut_ptr(), into.len()) };
    t.rma(link, RmaOp::Get, local, remote, 2)
}

fn atomic(
    t: &mut ShmTransport,
    link: LinkId,
    op: AtomicOp,
    fetch: bool,
    (value, compare): (u64, u64),
    remote: RemoteMem<'_>,
) -> Result<RmaOutcome, TlError> {
    t.rma(link, RmaOp::Atomic { op, fetch, value, compare }, LocalMem::NONE, remote, 3)
}

/// What `op` leaves in a word of `size` bytes holding `old`.
fn applied(op: AtomicOp, size: usize, old: u64, value: u64, compare: u64) -> u64 {
    let mask = if size == 4 { u64::from(u32::MAX) } else { u64::MAX };
    let (old, value, compare) = (old & mask, value & mask, compare & mask);
    match op {
        AtomicOp::Add => old.wrapping_add(value) & mask,
        AtomicOp::Swap => value,
        AtomicOp::Cswap if old == compare => value,
        AtomicOp::Cswap => old,
        AtomicOp::And => old & value,
        AtomicOp::Or => old | value,
        AtomicOp::Xor => old ^ value,
    }
}

/// Put, get, and every atomic of both sizes in both forms, natively on a peer's region: what the
/// shm caps claim, done.
#[test]
fn rma_put_get_and_atomics_of_both_sizes_on_a_peers_region() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (_la, lb) = pair(&mut a, &mut b);
    let region = Region::new(2 * 4096);
    let key = region.locator.to_bytes();
    let data = pattern(3000, 7);
    assert_eq!(
        put(&mut b.t, lb, &data, region.remote(&key, 100, data.len())),
        Ok(RmaOutcome::Done { fetched: 0 })
    );
    assert!(region.bytes()[100..3100] == data[..], "the put's bytes are in the region");
    assert!(region.bytes()[..100].iter().all(|&b| b == 0) && region.bytes()[3100..].iter().all(|&b| b == 0));
    let mut back = vec![0u8; 5000];
    assert_eq!(
        get(&mut b.t, lb, &mut back, region.remote(&key, 0, 5000)),
        Ok(RmaOutcome::Done { fetched: 0 })
    );
    assert!(back == region.bytes()[..5000], "the get read the region");
    // The last bytes of the region are reachable, and an empty range anywhere inside it.
    assert!(put(&mut b.t, lb, &[9; 8], region.remote(&key, 8184, 8)).is_ok());
    assert!(put(&mut b.t, lb, &[], region.remote(&key, 8192, 0)).is_ok());
    assert_eq!(region.word64(8184), u64::from_le_bytes([9; 8]));

    let ops = [AtomicOp::Add, AtomicOp::Swap, AtomicOp::Cswap, AtomicOp::And, AtomicOp::Or, AtomicOp::Xor];
    let old = 0x8000_0001_f0f0_0ff1u64;
    for size in [4usize, 8] {
        for op in ops {
            for fetch in [false, true] {
                // Compare-and-swap both with the current value (swaps) and without (keeps it).
                for compare in [old, 17] {
                    let offset = 4096 + 8 * size;
                    region.set_word64(offset, old);
                    let value = 0x1234_5678_9abc_def3;
                    let outcome = atomic(
                        &mut b.t,
                        lb,
                        op,
                        fetch,
                        (value, compare),
                        region.remote(&key, offset as u64, size),
                    );
                    let mask = if size == 4 { u64::from(u32::MAX) } else { u64::MAX };
                    let fetched = if fetch { old & mask } else { 0 };
                    assert_eq!(outcome, Ok(RmaOutcome::Done { fetched }), "{size} B {op:?} fetch {fetch}");
                    let expect = applied(op, size, old, value, compare) | (old & !mask);
                    assert_eq!(
                        region.word64(offset),
                        expect,
                        "{size} B {op:?} fetch {fetch} compare {compare:#x}"
                    );
                }
            }
        }
    }
}

/// A range that starts inside the region and ends outside it, or lies before it, or wraps the
/// address space, is refused, and no byte of the region or of the local memory is touched.
#[test]
fn rma_refuses_a_range_reaching_past_its_region_without_touching_a_byte() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (_la, lb) = pair(&mut a, &mut b);
    let region = Region::new(4096);
    region.fill(0xAA);
    let key = region.locator.to_bytes();
    let before = region.bytes();
    let past_end = region.remote(&key, 4090, 16);
    assert_eq!(put(&mut b.t, lb, &[0x55; 16], past_end), Err(TlError::InvalidParam));
    let mut local = [0x55u8; 16];
    assert_eq!(get(&mut b.t, lb, &mut local, past_end), Err(TlError::InvalidParam));
    assert_eq!(local, [0x55; 16], "a refused get wrote local memory");
    let last_word = region.remote(&key, 4092, 8);
    assert_eq!(atomic(&mut b.t, lb, AtomicOp::Swap, true, (0, 0), last_word), Err(TlError::InvalidParam));
    let before_base = RemoteMem { addr: REGION_BASE - 8, ..region.remote(&key, 0, 16) };
    assert_eq!(put(&mut b.t, lb, &[0x55; 16], before_base), Err(TlError::InvalidParam));
    let wrapping = RemoteMem { addr: u64::MAX - 3, ..region.remote(&key, 0, 16) };
    assert_eq!(put(&mut b.t, lb, &[0x55; 16], wrapping), Err(TlError::InvalidParam));
    // The region the key records may be smaller than its memfd: its end is the limit.
    let small = RemoteMem { region_len: 100, ..region.remote(&key, 96, 8) };
    assert_eq!(put(&mut b.t, lb, &[0x55; 8], small), Err(TlError::InvalidParam));
    // A misaligned or odd-sized atomic, a put whose lengths differ.
    assert_eq!(
        atomic(&mut b.t, lb, AtomicOp::Add, false, (1, 0), region.remote(&key, 4, 8)),
        Err(TlError::InvalidParam)
    );
    assert_eq!(
        atomic(&mut b.t, lb, AtomicOp::Add, false, (1, 0), region.remote(&key, 0, 2)),
        Err(TlError::InvalidParam)
    );
    assert_eq!(put(&mut b.t, lb, &[0x55; 8], region.remote(&key, 0, 16)), Err(TlError::InvalidParam));
    assert!(region.bytes() == before, "a refused operation changed the region");
    // Still usable for a range inside.
    assert!(put(&mut b.t, lb, &[0x55; 16], region.remote(&key, 4080, 16)).is_ok());
}

/// A key edited to claim a bigger region than the owner registered cannot reach past the memfd:
/// a region longer than the mapping its locator claims is refused, and a locator claiming more
/// than the file holds is not mapped.
#[test]
fn rma_with_a_key_edited_to_a_bigger_length_is_refused_by_the_mapping_bounds() {
    let (mut a, mut b) = (Side::new(), Side::new());
    let (_la, lb) = pair(&mut a, &mut b);
    let region = Region::new(4096);
    let before = region.bytes();
    let key = region.locator.to_bytes();
    let longer = RemoteMem { region_len: 8192, ..region.remote(&key, 5000, 8) };
    assert_eq!(put(&mut b.t, lb, &[1; 8], longer), Err(TlError::InvalidParam));
    let mut bigger_map = region.locator;
    bigger_map.map_len = 8192;
    let key = bigger_map.to_bytes();
    let longer = RemoteMem { region_len: 8192, ..region.remote(&key, 5000, 8) };
    assert_eq!(put(&mut b.t, lb, &[1; 8], longer), Err(TlError::InvalidParam));
    let inside = RemoteMem { region_len: 8192, ..region.remote(&key, 0, 8) };
    assert_eq!(
        put(&mut b.t, lb, &[1; 8], inside),
        Err(TlError::InvalidParam),
        "an oversized locator was mapped"
    );
    // A locator naming a process other than the link's peer, or garbage, is refused too.
    let mut other = region.locator;
    other.pid = 1;
    let key = other.to_bytes();
    assert_eq!(put(&mut b.t, lb, &[1; 8], region.remote(&key, 0, 8)), Err(TlError::InvalidParam));
    assert_eq!(put(&mut b.t, lb, &[1; 8], region.remote(b"not a locator", 0, 8)), Err(TlError::InvalidParam));
    assert!(region.bytes() == before, "a refused operation changed the region");
}

/// Once a link is closed its operations fail with a clear error, and the peer regions it mapped
/// are unmapped.
#[test]
fn rma_on_a_closed_link_fails_and_its_mappings_go() {
    if !run_alone("rma_on_a_closed_link_fails_and_its_mappings_go") {
        return;
    }
    let mapped = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().filter(|l| l.contains("zcx-rma-test")).count()
    };
    let (mut a, mut b) = (Side::new(), Side::new());
    let (la, lb) = pair(&mut a, &mut b);
    let region = Region::new(4096);
    let key = region.locator.to_bytes();
    assert_eq!(mapped(), 1, "the owner's own mapping");
    assert!(put(&mut b.t, lb, &[1; 8], region.remote(&key, 0, 8)).is_ok());
    assert!(put(&mut b.t, lb, &[2; 8], region.remote(&key, 8, 8)).is_ok());
    assert_eq!(mapped(), 2, "the link maps the region once and keeps it");
    b.t.close(lb, true);
    assert_eq!(mapped(), 1, "closing the link unmapped its peer region");
    assert_eq!(put(&mut b.t, lb, &[3; 8], region.remote(&key, 0, 8)), Err(TlError::InvalidParam));
    assert_eq!(region.word64(0), u64::from_le_bytes([1; 8]));
    // The peer's end, once it saw the close, fails too.
    pump(&mut a, &mut b, "close seen", |a, _| a.ev.iter().any(|e| matches!(e, Ev::Failed(l, _) if *l == la)));
    assert_eq!(put(&mut a.t, la, &[3; 8], region.remote(&key, 0, 8)), Err(TlError::InvalidParam));
}

/// The bells of `side`: how many watch one ring each, and the links its board watches.
fn bells_of(side: &Side) -> (usize, Vec<LinkId>) {
    let mut bells = Vec::new();
    side.t.doorbells(&mut bells);
    let single = bells.iter().filter(|b| !b.is_board()).count();
    let boards: Vec<_> = bells.iter().filter(|b| b.is_board()).collect();
    assert!(boards.len() <= 1, "one board per transport: {bells:?}");
    (single, boards.first().map(|b| b.links()).unwrap_or_default())
}

/// Once a transport has `BOARD_MIN_LINKS` links, the rings of the next ones are watched through
/// its board, on both sides: a record sets its ring's bit, the bit stays while the ring holds
/// a record and is cleared once it is empty, and the earlier links keep their own doorbells.
#[test]
fn links_past_the_first_few_are_watched_through_the_board() {
    use zcx_dataplane::shm::board::BOARD_MIN_LINKS;
    let (mut a, mut b) = (Side::new(), Side::new());
    let extra = 3;
    let links: Vec<(LinkId, LinkId)> = (0..BOARD_MIN_LINKS + extra).map(|_| pair(&mut a, &mut b)).collect();
    let late: Vec<LinkId> = links[BOARD_MIN_LINKS..].iter().map(|l| l.0).collect();
    pump(&mut a, &mut b, "the offers to settle", |a, b| {
        bells_of(a).1.len() == extra && bells_of(b).1.len() == extra
    });
    let (single, mut boarded) = bells_of(&a);
    boarded.sort();
    let mut expect = late.clone();
    expect.sort();
    assert_eq!((single, boarded), (BOARD_MIN_LINKS, expect), "a's bells");
    assert_eq!(bells_of(&b).0, BOARD_MIN_LINKS, "b's bells");
    assert_eq!((a.t.peer_board_count(), b.t.peer_board_count()), (1, 1), "one mapping per peer");
    let mut bells = Vec::new();
    a.t.doorbells(&mut bells);
    let board = bells.iter().find(|b| b.is_board()).expect("a board bell");
    let lend = LendSlot::new();
    for (la, lb) in &links[BOARD_MIN_LINKS..] {
        assert_eq!(board.rung(), None, "nothing sent yet");
        b.t.send(*lb, b"one", Payload::None).unwrap();
        b.t.send(*lb, b"two", Payload::None).unwrap();
        for expect in [&b"one"[..], b"two"] {
            assert_eq!(board.rung(), Some(*la), "a record waits on {la:?}");
            let mut got = Vec::new();
            assert!(a.t.take_rung_frame(*la, &mut |_, bytes| got.push(bytes.to_vec()), &lend));
            assert_eq!(got, vec![expect.to_vec()]);
        }
        assert_eq!(board.rung(), None, "the ring is empty again");
    }
    // An early link rings its own bell, not the board.
    let (la, lb) = links[0];
    b.t.send(lb, b"early", Payload::None).unwrap();
    assert_eq!(board.rung(), None);
    let own = bells.iter().find(|bell| bell.links() == vec![la]).expect("its own bell");
    assert_eq!(own.rung(), Some(la));
    pump_one(&mut a, "the early frame", |a| a.frame_count(la) == 1);
    // The general poll reads the marked rings too, and leaves the board clear behind it.
    for (i, (_, lb)) in links[BOARD_MIN_LINKS..].iter().enumerate() {
        for _ in 0..=i {
            b.t.send(*lb, b"polled", Payload::None).unwrap();
        }
    }
    pump_one(&mut a, "the polled frames", |a| {
        links[BOARD_MIN_LINKS..].iter().enumerate().all(|(i, (la, _))| a.frame_count(*la) == i + 1)
    });
    a.poll();
    assert_eq!(board.rung(), None, "nothing left marked");
    // The mapping of a peer's board goes with the last link that rings it.
    for (la, _) in &links {
        a.t.close(*la, true);
    }
    pump_one(&mut a, "the links to close", |a| a.t.link_count() == 0);
    assert_eq!(a.t.peer_board_count(), 0);
}

/// A peer that edits the board offer it writes gets its ring refused the board, and one that
/// answers "ringing" without ever setting its bit delays only its own messages, which a full
/// poll still reads. Bits set for slots the board does not watch cost a look and are cleared.
#[test]
fn a_hostile_board_offer_or_answer_harms_only_its_sender() {
    use zcx_dataplane::shm::board::{offer, BOARD_MIN_LINKS, BOARD_SLOTS};
    use zcx_dataplane::shm::ring::{Producer, KIND_FRAME};
    let (mut a, mut b) = (Side::new(), Side::new());
    let honest: Vec<(LinkId, LinkId)> = (0..BOARD_MIN_LINKS).map(|_| pair(&mut a, &mut b)).collect();
    // The hostile connector: a segment of its own, offered to `a` with a descriptor that is not
    // a board (its own segment's).
    let cap = 1 << 20;
    let (seg, fd) = Segment::create(cap, false).unwrap();
    let s = raw_connect(&a.t);
    let hello = Hello { capacity: cap as u64, segment_len: seg.len() as u64, max_frame: 4096 };
    let theirs = seg.board_offer(1);
    theirs[0].store(u64::from(fd.as_raw_fd() as u32) | 3 << 32, std::sync::atomic::Ordering::Relaxed);
    theirs[1].store(1, std::sync::atomic::Ordering::Relaxed);
    theirs[2].store(2, std::sync::atomic::Ordering::Relaxed);
    theirs[3].store(offer::OFFERED, std::sync::atomic::Ordering::Release);
    conn::send_with_fd(s.as_raw_fd(), &hello.encode(), fd.as_raw_fd()).unwrap();
    pump_one(&mut a, "the hostile link", |a| {
        a.ev.iter().filter(|e| matches!(e, Ev::Accepted(..))).count() == 1
    });
    let hostile = a.accepted().unwrap();
    let ours = seg.board_offer(0);
    pump_one(&mut a, "a's answer and offer", |_| {
        theirs[3].load(std::sync::atomic::Ordering::Acquire) != offer::OFFERED
            && ours[3].load(std::sync::atomic::Ordering::Acquire) == offer::OFFERED
    });
    assert_eq!(theirs[3].load(std::sync::atomic::Ordering::Acquire), offer::REFUSED, "not a board");
    // It claims to ring a's board, and never does.
    ours[3].store(offer::RINGING, std::sync::atomic::Ordering::Release);
    pump_one(&mut a, "the ring to move onto the board", |a| bells_of(a).1 == vec![hostile]);
    // Every bit of a's board set, through the board's own descriptor.
    let first = ours[0].load(std::sync::atomic::Ordering::Relaxed);
    let path = format!("/proc/self/fd/{}", first as u32);
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("a's board");
    // SAFETY: a shared mapping of a sealed page-long file; the kernel picks the address.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    // SAFETY: the mapping is 4096 bytes long and writable.
    unsafe { std::ptr::write_bytes(page.cast::<u8>().add(64), 0xFF, BOARD_SLOTS / 8) };
    let mut bells = Vec::new();
    a.t.doorbells(&mut bells);
    let board = bells.iter().find(|b| b.is_board()).expect("a board bell");
    assert_eq!(board.rung(), None, "bits with no record behind them");
    // SAFETY: as above; the words are read after the scan.
    let left = unsafe { std::slice::from_raw_parts(page.cast::<u64>().add(8), BOARD_SLOTS / 64) };
    // The scan reads only the words of the slots it watches (the hostile link's is the last):
    // it cleared those, and the flood past them costs nothing.
    assert_eq!(left[0], 0, "the watched word's false bits are cleared");
    assert!(left[1..].iter().all(|&w| w == u64::MAX), "words past the watched slots are not read");
    // A frame without its bit: the board does not ring, a full poll still reads it.
    // SAFETY: ring 0 of the hostile side's own segment, which only it produces into.
    let mut tx = unsafe { Producer::new(seg.ring_base(0), cap) };
    assert_eq!(tx.push(KIND_FRAME, &[b"unannounced"]), Ok(true));
    assert_eq!(board.rung(), None);
    pump_one(&mut a, "the unannounced frame", |a| a.frame_count(hostile) == 1);
    // The honest links are untouched.
    let (la, lb) = honest[BOARD_MIN_LINKS - 1];
    b.t.send(lb, b"still fine", Payload::None).unwrap();
    pump(&mut a, &mut b, "an honest frame", |a, _| a.frame_count(la) == 1);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(page, 4096) };
    drop((s, seg, fd));
}

/// A worker with many links announces sleep once on its board for the rings the board watches
/// (and on each other ring): a frame on a board-watched ring wakes it, as one on an early ring
/// does, and a frame already waiting on either keeps it up.
#[test]
fn a_sleeper_with_many_links_is_woken_through_its_board() {
    use zcx_dataplane::shm::board::BOARD_MIN_LINKS;
    let (mut a, mut b) = (Side::new(), Side::new());
    let links: Vec<(LinkId, LinkId)> = (0..BOARD_MIN_LINKS + 2).map(|_| pair(&mut a, &mut b)).collect();
    pump(&mut a, &mut b, "the offers to settle", |a, _| bells_of(a).1.len() == 2);
    let efd = a.t.event_fd().unwrap().as_raw_fd();
    let (early, late) = (links[0], links[BOARD_MIN_LINKS + 1]);
    for (round, (la, lb)) in [late, early, late].into_iter().enumerate() {
        for _ in 0..10 {
            a.poll();
        }
        assert!(!a.t.has_events(), "round {round}: nothing pending");
        let (woken, after) = woken_by(efd, Duration::from_millis(100), || {
            b.t.send(lb, b"wake up", Payload::None).unwrap();
        });
        assert!(woken && after >= Duration::from_millis(50), "round {round}: woken {woken} after {after:?}");
        let before = a.frame_count(la);
        pump_one(&mut a, "the frame after the wakeup", |a| a.frame_count(la) == before + 1);
        // Drain the wake byte: the next round's sleeper must be woken anew.
        for _ in 0..10 {
            a.poll();
        }
    }
    for (la, lb) in [late, early] {
        b.t.send(lb, b"pending", Payload::None).unwrap();
        assert!(a.t.has_events(), "a waiting frame on {la:?} keeps the worker up");
        let before = a.frame_count(la);
        pump_one(&mut a, "the pending frame", |a| a.frame_count(la) == before + 1);
        for _ in 0..10 {
            a.poll();
        }
    }
}
