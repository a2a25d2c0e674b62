//! The verbs transport between two Soft-RoCE devices in one process: links joined from each
//! other's addresses carry frames in order under credit flow control (far more frames than one
//! window), puts, gets and 64-bit atomics run as RDMA operations (the counters say so) and move
//! the right bytes, from registered and unregistered memory, past the 8 MiB a work request may
//! move; a range outside the key's region is refused before anything is posted, and a forged
//! rkey fails the link with the target's bytes unchanged. Run by `scripts/vm/verbs-test.sh`
//! inside the guest (`ZCX_VERBS_EXPECT=rxe0,rxe1`); elsewhere it prints `skipped:`.
#![cfg(feature = "verbs")]

#[path = "common/verbs_here.rs"]
mod verbs_here;

use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx_control::{TransportAddress, PROT_LOCAL_READ, PROT_LOCAL_WRITE, PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_dataplane::domain::{DomainRegistration, MemoryDomain, RegionToRegister};
use zcx_dataplane::proto::wire::AtomicOp;
use zcx_dataplane::verbs::{ProtectionDomain, VerbsConfig, VerbsDomain, VerbsRegistration, VerbsTransport};
use zcx_dataplane::{LinkId, LocalMem, Payload, RemoteMem, RmaOp, RmaOutcome, TlError, TlEvent, Transport};

struct Side {
    domain: VerbsDomain,
    tl: VerbsTransport,
    link: LinkId,
}

fn pair() -> Option<(Side, Side)> {
    if !verbs_here::verbs_here() {
        return None;
    }
    let open = |device: &str| {
        let pd = Arc::new(ProtectionDomain::open(device, 1).expect("opens"));
        let domain = VerbsDomain::new(Arc::clone(&pd), true);
        let config = VerbsConfig { gid_index: Some(0), device_atomics: true, ..VerbsConfig::default() };
        let mut tl = VerbsTransport::new(pd, Arc::clone(domain.regions()), config).expect("a transport");
        let (link, address) = tl.open_link().expect("opens a link");
        (domain, tl, link, address)
    };
    let (da, mut a, la, addr_a) = open("rxe0");
    let (db, mut b, lb, addr_b) = open("rxe1");
    assert!(
        matches!(addr_a, TransportAddress::Verbs { qpn, credit_rkey, .. } if qpn != 0 && credit_rkey != 0)
    );
    a.join_link(la, &addr_b).expect("a joins");
    b.join_link(lb, &addr_a).expect("b joins");
    Some((Side { domain: da, tl: a, link: la }, Side { domain: db, tl: b, link: lb }))
}

/// Owned copies of what a poll reported.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Frame(LinkId, Vec<u8>),
    RmaDone(u64, Result<u64, TlError>),
    Failed(LinkId, TlError),
}

fn poll(tl: &mut VerbsTransport, out: &mut Vec<Seen>) {
    tl.poll(&mut |event| match event {
        TlEvent::Frame { link, bytes } => out.push(Seen::Frame(link, bytes.to_vec())),
        TlEvent::RmaDone { token, result, .. } => out.push(Seen::RmaDone(token, result)),
        TlEvent::LinkFailed { link, error } => out.push(Seen::Failed(link, error)),
        other => panic!("unexpected event {other:?}"),
    });
}

/// Polls both sides until `a` reported the completion of `token` (at most 90 s: a 20 MiB read
/// over Soft-RoCE in an emulated guest took over 20 s on a loaded host, recovering dropped
/// packets).
fn wait_rma(a: &mut Side, b: &mut Side, token: u64) -> Result<u64, TlError> {
    wait_rma_seen(a, b, token).0
}

/// [`wait_rma`], with everything `a` reported meanwhile.
fn wait_rma_seen(a: &mut Side, b: &mut Side, token: u64) -> (Result<u64, TlError>, Vec<Seen>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    loop {
        poll(&mut a.tl, &mut seen_a);
        poll(&mut b.tl, &mut seen_b);
        if let Some(result) = seen_a.iter().find_map(|s| match s {
            Seen::RmaDone(t, result) if *t == token => Some(*result),
            _ => None,
        }) {
            return (result, seen_a);
        }
        assert!(Instant::now() < deadline, "no completion of {token} in 90 s: {seen_a:?}");
    }
}

fn counter(tl: &VerbsTransport, name: &str) -> u64 {
    tl.counters().into_iter().find(|(n, _)| *n == name).map(|(_, v)| v).expect("a counter")
}

/// A heap region registered with a side's domain, with `prot`.
struct Region {
    words: Vec<u64>,
    registration: Arc<dyn DomainRegistration>,
}

impl Region {
    fn new(side: &Side, words: usize, prot: u32) -> Region {
        let mut words: Vec<u64> = (0..words as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let region = RegionToRegister {
            start: words.as_mut_ptr() as usize,
            len: words.len() * 8,
            prot: PROT_LOCAL_READ | PROT_LOCAL_WRITE | prot,
            backing: None,
        };
        let registration = side.domain.register(&region).expect("registers");
        Region { words, registration }
    }
    fn base(&self) -> u64 {
        self.words.as_ptr() as u64
    }
    fn len(&self) -> u64 {
        self.words.len() as u64 * 8
    }
    fn key(&self) -> [u8; 4] {
        let mr: &VerbsRegistration = self.registration.as_any().downcast_ref().expect("verbs");
        mr.rkey().to_le_bytes()
    }
    fn remote<'a>(&self, key: &'a [u8], offset: u64, len: usize) -> RemoteMem<'a> {
        RemoteMem { region_base: self.base(), region_len: self.len(), addr: self.base() + offset, len, key }
    }
    fn read(&self, word: usize) -> u64 {
        // SAFETY: in bounds; the NIC wrote it before the completion that was polled.
        unsafe { std::ptr::read_volatile(self.words.as_ptr().add(word)) }
    }
    fn checksum(&self) -> u64 {
        (0..self.words.len()).fold(0u64, |acc, i| acc.rotate_left(5) ^ self.read(i))
    }
}

#[test]
fn frames_flow_both_ways_in_order_far_past_one_window() {
    let Some((mut a, mut b)) = pair() else { return };
    let frames = 2000usize;
    let frame = |i: usize| -> Vec<u8> { (0..(i * 37) % 8000 + 4).map(|j| (i + j) as u8).collect() };
    let (mut sent_a, mut sent_b) = (0, 0);
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while got_a.len() < frames || got_b.len() < frames {
        // Each side sends until its credits or buffers run out, as a worker would.
        while sent_a < frames {
            let bytes = frame(sent_a);
            match a.tl.send(a.link, &bytes[..4], Payload::Copy(&bytes[4..])) {
                Ok(_) => sent_a += 1,
                Err(TlError::NoResource) => break,
                Err(e) => panic!("a's send: {e}"),
            }
        }
        while sent_b < frames {
            let bytes = frame(sent_b);
            match b.tl.send(b.link, &bytes, Payload::None) {
                Ok(_) => sent_b += 1,
                Err(TlError::NoResource) => break,
                Err(e) => panic!("b's send: {e}"),
            }
        }
        poll(&mut a.tl, &mut got_a);
        poll(&mut b.tl, &mut got_b);
        assert!(Instant::now() < deadline, "a got {}, b got {} of {frames}", got_a.len(), got_b.len());
    }
    for (i, seen) in got_b.iter().enumerate() {
        assert_eq!(*seen, Seen::Frame(b.link, frame(i)), "frame {i} at b");
    }
    for (i, seen) in got_a.iter().enumerate() {
        assert_eq!(*seen, Seen::Frame(a.link, frame(i)), "frame {i} at a");
    }
    assert_eq!(counter(&a.tl, "verbs_sends"), frames as u64);
    assert!(
        counter(&b.tl, "verbs_credit_writes") >= (frames / 16) as u64,
        "credits came back by RDMA writes"
    );
    assert_eq!(counter(&a.tl, "verbs_rdma_writes"), 0, "frames are sends");
}

#[test]
fn puts_gets_and_atomics_run_as_rdma_and_move_the_right_bytes() {
    let Some((mut a, mut b)) = pair() else { return };
    let target = Region::new(&b, 3 << 20, PROT_REMOTE_READ | PROT_REMOTE_WRITE); // 24 MiB
    let key = target.key();
    let mut token = 0;
    // Puts from unregistered memory: inline, bounced, registered for the operation, and 20 MiB
    // (three work requests of at most 8 MiB).
    for (offset, len) in [(8u64, 24usize), (4096, 5000), (1 << 20, 1 << 20), (2 << 20, 20 << 20)] {
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        token += 1;
        // SAFETY: `src` lives and is unchanged until the completion is polled.
        let local = unsafe { LocalMem::new(src.as_ptr().cast_mut(), len) };
        let outcome =
            a.tl.rma(a.link, RmaOp::Put, local, target.remote(&key, offset, len), token).expect("put");
        assert_eq!(outcome, RmaOutcome::Pending);
        assert_eq!(wait_rma(&mut a, &mut b, token), Ok(0), "put of {len}");
        // SAFETY: the put completed; nothing writes the region now.
        let landed = unsafe { std::slice::from_raw_parts((target.base() + offset) as *const u8, len) };
        assert!(landed == &src[..], "put of {len} at {offset}");
        // And back with a get, into unregistered memory.
        let mut back = vec![0u8; len];
        token += 1;
        // SAFETY: `back` lives and nothing else touches it until the completion is polled.
        let local = unsafe { LocalMem::new(back.as_mut_ptr(), len) };
        a.tl.rma(a.link, RmaOp::Get, local, target.remote(&key, offset, len), token).expect("get");
        assert_eq!(wait_rma(&mut a, &mut b, token), Ok(0), "get of {len}");
        assert!(back == src, "get of {len} at {offset}");
    }
    // A put from a region a's domain registered goes from that registration.
    let source = Region::new(&a, 1 << 17, 0);
    token += 1;
    // SAFETY: `source` lives until the completion is polled.
    let local = unsafe { LocalMem::new(source.words.as_ptr().cast_mut().cast(), 1 << 20) };
    a.tl.rma(a.link, RmaOp::Put, local, target.remote(&key, 0, 1 << 20), token).expect("put");
    assert_eq!(wait_rma(&mut a, &mut b, token), Ok(0));
    assert!((0..1 << 17).all(|i| target.read(i) == source.read(i)), "put from a registered region");

    // 64-bit fetch-add and compare-and-swap on the NIC; swap is not the NIC's.
    let word = 1000u64;
    let before = target.read(word as usize);
    let atomic = |op, value, compare| RmaOp::Atomic { op, fetch: true, value, compare };
    let none = LocalMem::NONE;
    token += 1;
    a.tl.rma(a.link, atomic(AtomicOp::Add, 5, 0), none, target.remote(&key, word * 8, 8), token).unwrap();
    assert_eq!(wait_rma(&mut a, &mut b, token), Ok(before), "fetch-add returns the old value");
    assert_eq!(target.read(word as usize), before.wrapping_add(5));
    token += 1;
    let now = before.wrapping_add(5);
    let none = LocalMem::NONE;
    a.tl.rma(a.link, atomic(AtomicOp::Cswap, 77, now), none, target.remote(&key, word * 8, 8), token)
        .unwrap();
    assert_eq!(wait_rma(&mut a, &mut b, token), Ok(now));
    assert_eq!(target.read(word as usize), 77, "compare-and-swap that matched");
    let none = LocalMem::NONE;
    let refused = a.tl.rma(a.link, atomic(AtomicOp::Swap, 1, 0), none, target.remote(&key, word * 8, 8), 99);
    assert_eq!(refused, Err(TlError::Unsupported), "swap is not an RDMA atomic");
    let none = LocalMem::NONE;
    let refused = a.tl.rma(a.link, atomic(AtomicOp::Add, 1, 0), none, target.remote(&key, 4, 8), 99);
    assert_eq!(refused, Err(TlError::InvalidParam), "a misaligned atomic");

    assert_eq!(counter(&a.tl, "verbs_rdma_atomics"), 2);
    assert_eq!(counter(&a.tl, "verbs_rdma_writes"), 4 + 2 + 1, "20 MiB went as three writes");
    assert_eq!(counter(&a.tl, "verbs_rdma_reads"), 3 + 3, "20 MiB came back as three reads");
    assert_eq!(counter(&a.tl, "verbs_sends"), 0, "nothing went as a message");
}

/// A region of `len` bytes of a shared memfd mapping (as zcx's own allocations are), registered
/// with `side`'s domain; the mapping leaks, as the test process ends soon.
fn memfd_region(side: &Side, len: usize) -> (u64, [u8; 4], Arc<dyn DomainRegistration>) {
    // SAFETY: plain syscalls; the mapping is checked and never unmapped.
    let base = unsafe {
        let fd = libc::memfd_create(c"zcx-verbs-test".as_ptr(), 0);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as i64), 0);
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    };
    let region = RegionToRegister {
        start: base,
        len,
        prot: PROT_LOCAL_READ | PROT_LOCAL_WRITE | PROT_REMOTE_READ | PROT_REMOTE_WRITE,
        backing: None,
    };
    let registration = side.domain.register(&region).expect("registers");
    let mr: &VerbsRegistration = registration.as_any().downcast_ref().expect("verbs");
    let key = mr.rkey().to_le_bytes();
    (base as u64, key, registration)
}

#[test]
fn atomics_work_on_shared_memfd_memory_after_large_reads() {
    let Some((mut a, mut b)) = pair() else { return };
    let (base, key, _registration) = memfd_region(&b, 24 << 20);
    let remote = |offset: u64, len: usize| RemoteMem {
        region_base: base,
        region_len: 24 << 20,
        addr: base + offset,
        len,
        key: &key,
    };
    let mut back = vec![0u8; 20 << 20];
    // SAFETY: `back` lives until the completion is polled.
    let local = unsafe { LocalMem::new(back.as_mut_ptr(), back.len()) };
    a.tl.rma(a.link, RmaOp::Get, local, remote(0, 20 << 20), 1).expect("get");
    assert_eq!(wait_rma(&mut a, &mut b, 1), Ok(0));
    let atomic = RmaOp::Atomic { op: AtomicOp::Add, fetch: true, value: 2, compare: 0 };
    a.tl.rma(a.link, atomic, LocalMem::NONE, remote(20 << 20, 8), 2).expect("fetch-add");
    assert_eq!(wait_rma(&mut a, &mut b, 2), Ok(0));
    a.tl.rma(a.link, atomic, LocalMem::NONE, remote(20 << 20, 8), 3).expect("fetch-add");
    assert_eq!(wait_rma(&mut a, &mut b, 3), Ok(2));
}

#[test]
fn a_range_outside_the_key_is_refused_and_a_forged_rkey_fails_the_link_only() {
    let Some((mut a, mut b)) = pair() else { return };
    let target = Region::new(&b, 1 << 12, PROT_REMOTE_READ | PROT_REMOTE_WRITE);
    let key = target.key();
    let sum = target.checksum();
    let src = vec![0xAAu8; 4096];
    // SAFETY: `src` outlives every operation, none of which writes it.
    let local = || unsafe { LocalMem::new(src.as_ptr().cast_mut(), 64) };
    // Starts inside, ends outside; starts before; wraps around.
    for remote in [
        target.remote(&key, target.len() - 32, 64),
        RemoteMem { addr: target.base() - 8, ..target.remote(&key, 0, 64) },
        RemoteMem { addr: u64::MAX - 8, ..target.remote(&key, 0, 64) },
    ] {
        assert_eq!(
            a.tl.rma(a.link, RmaOp::Put, local(), remote, 1),
            Err(TlError::InvalidParam),
            "{remote:?}"
        );
    }
    let short = [1u8, 2, 3];
    assert_eq!(
        a.tl.rma(a.link, RmaOp::Put, local(), target.remote(&short, 0, 64), 1),
        Err(TlError::InvalidParam),
        "a key entry that is no rkey"
    );
    assert_eq!(counter(&a.tl, "verbs_posted"), 0, "nothing refused was posted");

    // A key edited to another rkey passes every check here and reaches b's NIC, which refuses it.
    let forged = (u32::from_le_bytes(key) ^ 0x5a00).to_le_bytes();
    a.tl.rma(a.link, RmaOp::Put, local(), target.remote(&forged, 0, 64), 7).expect("posted");
    let (result, mut seen) = wait_rma_seen(&mut a, &mut b, 7);
    assert_eq!(result, Err(TlError::ConnectionReset));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.iter().any(|s| matches!(s, Seen::Failed(..))) && Instant::now() < deadline {
        poll(&mut a.tl, &mut seen);
    }
    assert!(seen.contains(&Seen::Failed(a.link, TlError::ConnectionReset)), "{seen:?}");
    assert_eq!(target.checksum(), sum, "the target's bytes are unchanged");
    assert_eq!(a.tl.send(a.link, b"x", Payload::None), Err(TlError::ConnectionReset), "the link is dead");
    a.tl.close(a.link, true);
    b.tl.close(b.link, true);
}

/// Keys a peer edited past the initiator's checks reach the owner's NIC, which enforces the
/// owner's registration: a read-only region's key used for a put (edited protection), and a key
/// whose base was moved down to claim bytes before the region (edited base). Each fails the link
/// with CONNECTION_RESET, and the owner's bytes, in the region and just before it, are unchanged.
#[test]
fn an_edited_protection_or_base_is_refused_by_the_owners_nic() {
    for case in ["protection", "base"] {
        let Some((mut a, mut b)) = pair() else { return };
        // One allocation; only its second half is registered, read-only for the first case.
        let prot = if case == "protection" { PROT_REMOTE_READ } else { PROT_REMOTE_READ | PROT_REMOTE_WRITE };
        let whole = Region::new(&b, 1 << 12, 0);
        let half_start = whole.base() + (1 << 14);
        let region = RegionToRegister {
            start: half_start as usize,
            len: 1 << 14,
            prot: PROT_LOCAL_READ | PROT_LOCAL_WRITE | prot,
            backing: None,
        };
        let registration = b.domain.register(&region).expect("registers");
        let mr: &VerbsRegistration = registration.as_any().downcast_ref().expect("verbs");
        let key = mr.rkey().to_le_bytes();
        let sum = whole.checksum();
        let (region_base, addr) = match case {
            "protection" => (half_start, half_start),
            _ => (whole.base(), half_start - 64),
        };
        let remote = RemoteMem { region_base, region_len: 1 << 15, addr, len: 128, key: &key };
        let src = [0xEEu8; 128];
        // SAFETY: `src` outlives the operation, which only reads it.
        let local = unsafe { LocalMem::new(src.as_ptr().cast_mut(), 128) };
        a.tl.rma(a.link, RmaOp::Put, local, remote, 1).expect("passes the initiator's checks");
        assert_eq!(wait_rma(&mut a, &mut b, 1), Err(TlError::ConnectionReset), "edited {case}");
        assert_eq!(whole.checksum(), sum, "edited {case}: the owner's bytes changed");
        a.tl.close(a.link, true);
        b.tl.close(b.link, true);
    }
}
