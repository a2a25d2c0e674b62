//! Stress of the shm ring over a real memfd segment: producer and consumer on two threads, and in
//! two processes (the child maps the parent's memfd through /proc). Every frame carries a sequence
//! number and a pattern derived from it and its length; the consumer checks both.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use zcx_dataplane::shm::ring::{Consumer, Producer, KIND_FRAME};
use zcx_dataplane::shm::segment::Segment;

const CAPACITY: usize = 256 << 10;
/// Frames each run tries to move; the deadline bounds the time on a slow or busy machine.
const TARGET_FRAMES: u64 = 2_000_000;
const DEADLINE: Duration = Duration::from_secs(3);
/// The last frame: its sequence number says "stop".
const STOP: u64 = u64::MAX;

/// A cheap deterministic size for frame `seq`: mostly small, sometimes up to 3000 bytes, so the
/// ring wraps at every offset.
fn size_of(seq: u64) -> usize {
    let x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    if x % 16 == 0 {
        (x % 3000) as usize
    } else {
        (x % 120) as usize
    }
}

fn fill(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8).wrapping_mul(13);
    }
}

fn check(seq: u64, bytes: &[u8]) {
    assert!(bytes.len() >= 8, "frame {seq} too short");
    let got = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    if got == STOP {
        return;
    }
    assert_eq!(got, seq, "frame out of order");
    let payload = &bytes[8..];
    assert_eq!(payload.len(), size_of(seq), "frame {seq} has the wrong length");
    for (i, &b) in payload.iter().enumerate() {
        assert_eq!(b, (seq as u8).wrapping_add(i as u8).wrapping_mul(13), "frame {seq} byte {i} differs");
    }
}

/// Produces until the target or the deadline, then a stop frame; returns frames sent.
fn produce(mut p: Producer) -> u64 {
    let start = Instant::now();
    let mut buf = vec![0u8; 4096];
    let mut seq = 0u64;
    while seq < TARGET_FRAMES && (seq % 1024 != 0 || start.elapsed() < DEADLINE) {
        let n = size_of(seq);
        fill(seq, &mut buf[..n]);
        // Both ways of writing a record (the transport's frame path uses `push2`).
        let push = |p: &mut Producer| {
            if seq % 2 == 0 {
                p.push2(KIND_FRAME, &seq.to_le_bytes(), &buf[..n])
            } else {
                p.push(KIND_FRAME, &[&seq.to_le_bytes(), &buf[..n]])
            }
        };
        while !push(&mut p).expect("ring intact") {
            assert!(start.elapsed() < DEADLINE * 3, "consumer stalled");
            std::hint::spin_loop();
        }
        seq += 1;
    }
    while !p.push(KIND_FRAME, &[&STOP.to_le_bytes()]).expect("ring intact") {
        assert!(start.elapsed() < DEADLINE * 3, "consumer stalled");
    }
    seq
}

/// Consumes and checks until the stop frame; returns frames received.
fn consume(mut c: Consumer) -> u64 {
    let start = Instant::now();
    let mut seq = 0u64;
    loop {
        let mut stop = false;
        let mut batch = 0;
        while let Some((kind, bytes)) = c.next_record().expect("ring intact") {
            assert_eq!(kind, KIND_FRAME);
            if u64::from_le_bytes(bytes[..8].try_into().unwrap()) == STOP {
                stop = true;
                break;
            }
            check(seq, bytes);
            seq += 1;
            batch += 1;
            if batch == 64 {
                break;
            }
        }
        c.release();
        if stop {
            return seq;
        }
        assert!(start.elapsed() < DEADLINE * 3, "producer stalled at frame {seq}");
        if batch == 0 {
            std::hint::spin_loop();
        }
    }
}

fn ends(seg: &Segment) -> (Producer, Consumer) {
    // SAFETY: ring 0 of a live segment, which outlives both ends in these tests (joined before it
    // drops); one producer and one consumer.
    unsafe {
        (Producer::new(seg.ring_base(0), CAPACITY), Consumer::new(seg.ring_base(0), CAPACITY, usize::MAX))
    }
}

#[test]
fn two_threads_move_frames_in_order() {
    let (seg, _fd) = Segment::create(CAPACITY, false).expect("segment");
    let (p, c) = ends(&seg);
    let consumer = std::thread::spawn(move || consume(c));
    let sent = produce(p);
    let received = consumer.join().expect("consumer thread");
    assert_eq!(sent, received);
    assert!(sent > 10_000, "only {sent} frames in the time allowed");
    eprintln!("two threads: {sent} frames");
}

#[test]
fn two_processes_move_frames_in_order() {
    if let Ok(spec) = std::env::var("ZCX_SHM_RING_CHILD") {
        // The child: map the parent's memfd and consume ring 0.
        let mut it = spec.split(':');
        let (pid, fd, len): (u32, i32, usize) = (
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap().parse().unwrap(),
        );
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/fd/{fd}"))
            .expect("open the parent's memfd");
        let fd = OwnedFd::from(file);
        let seg = Segment::attach(&fd, CAPACITY, len).expect("attach");
        // SAFETY: ring 0 of the mapped segment, which lives until the end of this function; the
        // parent is the only producer.
        let c = unsafe { Consumer::new(seg.ring_base(0), CAPACITY, usize::MAX) };
        let n = consume(c);
        println!("@received {n}");
        return;
    }
    let (seg, fd) = Segment::create(CAPACITY, false).expect("segment");
    let (p, _) = ends(&seg);
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "two_processes_move_frames_in_order", "--nocapture", "--test-threads=1"])
        .env("ZCX_SHM_RING_CHILD", format!("{}:{}:{}", std::process::id(), fd.as_raw_fd(), seg.len()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let sent = produce(p);
    let out = child.wait_with_output().expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("@received {sent}")), "child saw a different count: {stdout}");
    assert!(sent > 10_000, "only {sent} frames in the time allowed");
    eprintln!("two processes: {sent} frames");
}

#[test]
fn segments_are_sealed_against_resizing() {
    let (seg, fd) = Segment::create(CAPACITY, false).expect("segment");
    // SAFETY: ftruncate on our own descriptor; the seals must refuse it.
    let shrink = unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) };
    assert_eq!(shrink, -1, "a sealed segment shrank");
    // SAFETY: as above.
    let grow = unsafe { libc::ftruncate(fd.as_raw_fd(), (seg.len() * 2) as libc::off_t) };
    assert_eq!(grow, -1, "a sealed segment grew");
    // The peer's view checks the same.
    assert!(Segment::attach(&fd, CAPACITY, seg.len()).is_ok());
    assert!(Segment::attach(&fd, CAPACITY * 2, seg.len()).is_err());
    assert!(Segment::attach(&fd, CAPACITY, seg.len() + 4096).is_err());
}

#[test]
fn huge_page_segments_when_the_host_has_them() {
    let (seg, fd) = Segment::create(CAPACITY, true).expect("segment");
    if !seg.is_huge() {
        let reserved = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap_or_default();
        eprintln!("skipped: no 2 MiB huge page could back a segment (nr_hugepages = {})", reserved.trim());
        return;
    }
    assert_eq!(seg.len() % (2 << 20), 0);
    let peer = Segment::attach(&fd, CAPACITY, seg.len()).expect("attach a huge page segment");
    let (p, _) = ends(&seg);
    // SAFETY: ring 0 of the peer's mapping of the same memfd; one consumer.
    let c = unsafe { Consumer::new(peer.ring_base(0), CAPACITY, usize::MAX) };
    let consumer = std::thread::spawn(move || consume(c));
    let sent = produce_some(p, 10_000);
    assert_eq!(consumer.join().unwrap(), sent);
}

/// Produces `n` frames and the stop frame.
fn produce_some(mut p: Producer, n: u64) -> u64 {
    let mut buf = vec![0u8; 4096];
    for seq in 0..n {
        let len = size_of(seq);
        fill(seq, &mut buf[..len]);
        while !p.push(KIND_FRAME, &[&seq.to_le_bytes(), &buf[..len]]).unwrap() {
            std::hint::spin_loop();
        }
    }
    while !p.push(KIND_FRAME, &[&STOP.to_le_bytes()]).unwrap() {}
    n
}
