//! Two reliable-connected queue pairs, one on each Soft-RoCE device, connected to each other in
//! one process: RDMA write, read, fetch-add, compare-swap and send/receive move the right bytes,
//! a forged key or an address past the region fails the initiator's request with
//! CONNECTION_RESET while the target's bytes stay as they were, and sends land in a shared
//! receive queue and wake an armed completion channel. Run by `scripts/vm/verbs-test.sh`
//! inside the guest (`ZCX_VERBS_EXPECT=rxe0,rxe1`); elsewhere it prints `skipped:`.
#![cfg(feature = "verbs")]

#[path = "common/verbs_here.rs"]
mod verbs_here;

use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx_control::{PROT_LOCAL_READ, PROT_LOCAL_WRITE, PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_dataplane::domain::{MemoryDomain, RegionToRegister};
use zcx_dataplane::verbs::{
    CompletionChannel, CompletionQueue, Local, ProtectionDomain, QpCaps, RcQueuePair, Remote, RetryPolicy,
    SendOp, SharedReceiveQueue, VerbsDomain, VerbsRegistration, WorkCompletion,
};
use zcx_dataplane::TlError;

struct Side {
    domain: VerbsDomain,
    cq: Arc<CompletionQueue>,
    qp: RcQueuePair,
}

fn side(device: &str) -> Side {
    let pd = Arc::new(ProtectionDomain::open(device, 1).expect("opens"));
    let cq = CompletionQueue::new(&pd, 256).expect("a CQ");
    let qp = RcQueuePair::create(&pd, &cq, None, QpCaps { send_wr: 64, recv_wr: 64, inline: 256 }, 0)
        .expect("a QP");
    Side { domain: VerbsDomain::new(pd, true), cq, qp }
}

/// A heap buffer registered with the side's domain, all access allowed.
struct Buffer {
    bytes: Vec<u64>,
    registration: Arc<dyn zcx_dataplane::domain::DomainRegistration>,
}

impl Buffer {
    fn new(side: &Side, words: usize, fill: u64) -> Buffer {
        let mut bytes = vec![fill; words];
        let region = RegionToRegister {
            start: bytes.as_mut_ptr() as usize,
            len: words * 8,
            prot: PROT_LOCAL_READ | PROT_LOCAL_WRITE | PROT_REMOTE_READ | PROT_REMOTE_WRITE,
            backing: None,
        };
        let registration = side.domain.register(&region).expect("registers");
        Buffer { bytes, registration }
    }
    fn mr(&self) -> &VerbsRegistration {
        self.registration.as_any().downcast_ref().expect("a verbs registration")
    }
    fn local(&self, word: usize, len: u32) -> Local {
        Local { addr: self.bytes[word..].as_ptr() as u64, len, lkey: self.mr().lkey() }
    }
    fn remote(&self, word: usize) -> Remote {
        Remote { addr: self.bytes[word..].as_ptr() as u64, rkey: self.mr().rkey() }
    }
    fn read(&self, word: usize) -> u64 {
        // SAFETY: in bounds; the NIC wrote it before the completion that was polled.
        unsafe { std::ptr::read_volatile(self.bytes.as_ptr().add(word)) }
    }
    fn checksum(&self) -> u64 {
        (0..self.bytes.len()).fold(0u64, |acc, i| acc.rotate_left(5) ^ self.read(i))
    }
}

/// Waits (at most 10 s) for the completion of `wr_id` on `cq`, the only request outstanding on
/// it (anything else polled meanwhile is dropped).
fn wait(cq: &CompletionQueue, wr_id: u64) -> WorkCompletion {
    wait_all(cq, &[wr_id])[0]
}

/// Waits (at most 10 s) for the completions of every request in `wr_ids` on `cq`, in that order.
fn wait_all(cq: &CompletionQueue, wr_ids: &[u64]) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out =
        [WorkCompletion { wr_id: 0, result: Ok(()), status: 0, opcode: 0, byte_len: 0, qp_num: 0 }; 4];
    let mut found = std::collections::HashMap::new();
    while found.len() < wr_ids.len() {
        let n = cq.poll(&mut out).expect("polls");
        for done in &out[..n] {
            if wr_ids.contains(&done.wr_id) {
                found.insert(done.wr_id, *done);
            }
        }
        assert!(Instant::now() < deadline, "{} of {} completions in 10 s", found.len(), wr_ids.len());
        std::thread::yield_now();
    }
    wr_ids.iter().map(|id| found[id]).collect()
}

fn connected() -> Option<(Side, Side)> {
    if !verbs_here::verbs_here() {
        return None;
    }
    let (a, b) = (side("rxe0"), side("rxe1"));
    a.qp.connect(&b.qp.local_address(), RetryPolicy::default()).expect("a connects");
    b.qp.connect(&a.qp.local_address(), RetryPolicy::default()).expect("b connects");
    Some((a, b))
}

#[test]
fn writes_reads_atomics_and_sends_move_the_right_bytes() {
    let Some((a, b)) = connected() else { return };
    let src = Buffer::new(&a, 1 << 19, 0);
    // SAFETY: nothing else touches `src` while it is filled.
    unsafe {
        for i in 0..src.bytes.len() {
            std::ptr::write_volatile(src.bytes.as_ptr().add(i).cast_mut(), (i as u64) * 0x9e37_79b9);
        }
    }
    let dst = Buffer::new(&b, 1 << 19, 7);

    // Inline (32 bytes) and large (4 MiB) RDMA writes.
    for (id, words) in [(1u64, 4usize), (2, 1 << 19)] {
        // SAFETY: both buffers are registered and live until the completion is polled.
        unsafe { a.qp.post(id, SendOp::Write(dst.remote(0)), src.local(0, (words * 8) as u32), true) }
            .unwrap();
        assert_eq!(wait(&a.cq, id).result, Ok(()), "write of {words} words");
        assert!((0..words).all(|i| dst.read(i) == src.read(i)), "write of {words} words: bytes differ");
    }

    // RDMA read back into a fresh buffer.
    let back = Buffer::new(&a, 1024, 0);
    // SAFETY: as above; the NIC writes `back`.
    unsafe { a.qp.post(3, SendOp::Read(dst.remote(100)), back.local(0, 1024 * 8), true) }.unwrap();
    assert_eq!(wait(&a.cq, 3).result, Ok(()));
    assert!((0..1024).all(|i| back.read(i) == src.read(100 + i)), "read back differs");

    // 64-bit fetch-add and compare-swap on a word of b's, the old values landing in a's buffer.
    let word = Buffer::new(&b, 1, 40);
    let old = Buffer::new(&a, 2, 0);
    // SAFETY: as above.
    unsafe { a.qp.post(4, SendOp::FetchAdd(word.remote(0), 2), old.local(0, 8), true) }.unwrap();
    assert_eq!(wait(&a.cq, 4).result, Ok(()));
    assert_eq!((old.read(0), word.read(0)), (40, 42), "fetch-add");
    // SAFETY: as above.
    unsafe { a.qp.post(5, SendOp::CompareSwap(word.remote(0), 42, 1000), old.local(1, 8), true) }.unwrap();
    assert_eq!(wait(&a.cq, 5).result, Ok(()));
    assert_eq!((old.read(1), word.read(0)), (42, 1000), "compare-swap that matches");
    // SAFETY: as above.
    unsafe { a.qp.post(6, SendOp::CompareSwap(word.remote(0), 42, 5), old.local(1, 8), true) }.unwrap();
    assert_eq!(wait(&a.cq, 6).result, Ok(()));
    assert_eq!((old.read(1), word.read(0)), (1000, 1000), "compare-swap that does not match");

    // A send into a posted receive.
    let inbox = Buffer::new(&b, 64, 0);
    // SAFETY: `inbox` is registered and outlives the receive.
    unsafe { b.qp.post_recv(7, inbox.local(0, 64 * 8)) }.unwrap();
    // SAFETY: as above.
    unsafe { a.qp.post(8, SendOp::Send, src.local(10, 100), true) }.unwrap();
    assert_eq!(wait(&a.cq, 8).result, Ok(()));
    let received = wait(&b.cq, 7);
    assert_eq!((received.result, received.byte_len), (Ok(()), 100));
    // SAFETY: the receive completed; both are plain byte views of live buffers.
    let (sent, got) = unsafe {
        (
            std::slice::from_raw_parts(src.bytes[10..].as_ptr().cast::<u8>(), 100),
            std::slice::from_raw_parts(inbox.bytes.as_ptr().cast::<u8>(), 100),
        )
    };
    assert_eq!(sent, got, "sent bytes");
}

/// A key the peer edited, or a range past the region, is refused by the target's NIC: the
/// initiator's request fails with CONNECTION_RESET, the target's bytes are untouched, and later
/// requests on the dead queue pair are flushed (CANCELED) instead of hanging.
#[test]
fn a_forged_key_or_an_address_past_the_region_touches_nothing() {
    for forge in ["rkey", "past the end"] {
        let Some((a, b)) = connected() else { return };
        let src = Buffer::new(&a, 64, 0xdead_beef);
        let target = Buffer::new(&b, 64, 0x1111);
        let before = target.checksum();
        let remote = match forge {
            "rkey" => Remote { rkey: target.mr().rkey() ^ 0x5a, ..target.remote(0) },
            _ => Remote { addr: target.remote(0).addr + 64 * 8 - 8, ..target.remote(0) },
        };
        // SAFETY: `src` is registered and live; the target memory is the NIC's to protect.
        unsafe { a.qp.post(1, SendOp::Write(remote), src.local(0, 64), true) }.unwrap();
        let done = wait(&a.cq, 1);
        assert_eq!(done.result, Err(TlError::ConnectionReset), "{forge}: status {}", done.status);
        assert_eq!(target.checksum(), before, "{forge}: the target's bytes changed");
        // The queue pair is in error now: a further request completes flushed, it does not hang.
        // SAFETY: as above.
        if unsafe { a.qp.post(2, SendOp::Write(target.remote(0)), src.local(0, 64), true) }.is_ok() {
            assert_eq!(wait(&a.cq, 2).result, Err(TlError::Canceled), "{forge}: after the error");
        }
        assert_eq!(target.checksum(), before, "{forge}: bytes changed after the error");
    }
}

/// Sends into a queue pair whose receives come from a shared receive queue, refilled by one
/// chained post; and a sleeping side woken through its completion channel by the next message.
#[test]
fn sends_land_in_a_shared_receive_queue_and_an_armed_queue_wakes_its_channel() {
    if !verbs_here::verbs_here() {
        return;
    }
    let a = side("rxe0");
    let pd_b = Arc::new(ProtectionDomain::open("rxe1", 1).expect("opens"));
    let channel = CompletionChannel::new(&pd_b).expect("a channel");
    let cq_b = CompletionQueue::with_channel(&pd_b, 256, &channel).expect("a CQ on the channel");
    let srq = SharedReceiveQueue::new(&pd_b, 128).expect("an SRQ");
    assert!(srq.capacity() >= 128);
    let qp_b =
        RcQueuePair::create(&pd_b, &cq_b, Some(&srq), QpCaps { send_wr: 16, recv_wr: 0, inline: 64 }, 0)
            .expect("a QP on the SRQ");
    let b = Side { domain: VerbsDomain::new(Arc::clone(&pd_b), false), cq: Arc::clone(&cq_b), qp: qp_b };
    a.qp.connect(&b.qp.local_address(), RetryPolicy::default()).unwrap();
    b.qp.connect(&a.qp.local_address(), RetryPolicy::default()).unwrap();

    const MESSAGES: usize = 40;
    let inbox = Buffer::new(&b, MESSAGES * 8, 0);
    let receives: Vec<(u64, Local)> =
        (0..MESSAGES).map(|i| (1000 + i as u64, inbox.local(i * 8, 64))).collect();
    // SAFETY: `inbox` is registered and outlives every receive.
    assert_eq!(unsafe { srq.post_batch(&receives) }, Ok(MESSAGES), "one chained post");
    let src = Buffer::new(&a, MESSAGES * 8, 0);
    for i in 0..MESSAGES {
        // SAFETY: nothing else touches `src` while it is filled.
        unsafe { std::ptr::write_volatile(src.bytes.as_ptr().add(i * 8).cast_mut(), 0xabc0_0000 + i as u64) };
        // SAFETY: registered and live until the completion.
        unsafe { a.qp.post(i as u64, SendOp::Send, src.local(i * 8, 8 * (1 + i as u32 % 8)), true) }.unwrap();
        assert_eq!(wait(&a.cq, i as u64).result, Ok(()), "send {i}");
    }
    let ids: Vec<u64> = (0..MESSAGES).map(|i| 1000 + i as u64).collect();
    for (i, done) in wait_all(&b.cq, &ids).into_iter().enumerate() {
        assert_eq!((done.result, done.byte_len), (Ok(()), 8 * (1 + i as u32 % 8)), "receive {i}");
        assert_eq!(inbox.read(i * 8), 0xabc0_0000 + i as u64, "receive {i} landed in its own buffer");
    }

    // Asleep: nothing pending, the queue armed, the channel quiet.
    assert_eq!(channel.take_events(), Ok(0));
    b.cq.arm().unwrap();
    let readable = |timeout_ms: i32| {
        let mut pfd = libc::pollfd { fd: channel.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) == 1 }
    };
    assert!(!readable(0), "the channel is readable with nothing sent");
    // SAFETY: `inbox` is registered and outlives the receive.
    assert_eq!(unsafe { srq.post_batch(&[(2000, inbox.local(0, 64))]) }, Ok(1));
    // SAFETY: registered and live until the completion.
    unsafe { a.qp.post(99, SendOp::Send, src.local(0, 8), true) }.unwrap();
    assert!(readable(10_000), "the message did not wake the channel");
    assert_eq!(channel.take_events(), Ok(1));
    assert_eq!(wait(&b.cq, 2000).result, Ok(()));
    assert_eq!(wait(&a.cq, 99).result, Ok(()));
}
