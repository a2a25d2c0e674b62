//! The DPDK transport between two processes over `net_memif`: the test runs its own binary as a
//! server and a client (each with its own EAL, `--file-prefix` and `--lcores`; the memif socket in
//! a temporary directory), three times: without loss, then with 1 % and 10 % of received frames
//! dropped on both sides. Each time the client connects, both send frames of 0 B to 1 MiB at
//! once and check what arrives byte for byte, in order and exactly once (the second round of
//! sizes as placed frames, whose payloads each side receives straight into a buffer of its own,
//! counted in `placed_frames`); then the client exits
//! without closing and the server must report `LinkFailed { Timeout }` within the configured
//! dead-peer timeout.
#![cfg(feature = "dpdk")]
// Built without DPDK only the skip remains.
#![cfg_attr(zcx_dpdk_missing, allow(dead_code, unused_imports))]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// This test's name, which the children are started with (`--exact`).
const TEST: &str = "dpdk_transport_between_two_processes";
const ROLE_ENV: &str = "ZCX_DPDK_TL_ROLE";
const DIR_ENV: &str = "ZCX_DPDK_TL_DIR";
const LOSS_ENV: &str = "ZCX_DPDK_TL_LOSS";
const MAC_ENV: &str = "ZCX_DPDK_TL_SERVER_MAC";
/// The session id the client names for the server's end.
const SERVER_SESSION: u32 = 7;
const MTU_ENV: &str = "ZCX_DPDK_TL_MTU";
/// The standard MTU, and a jumbo one (memif carries it with buffers that large).
const MTUS: [usize; 2] = [1500, 9000];
/// The memif buffer size for jumbo frames: one descriptor per frame.
const JUMBO_BSIZE: usize = 9216;

/// Frame sizes sent each way, twice (the second time placed): empty, tiny, one message (MTU −
/// headers − 1 is the largest single fragment), one byte more, 64 KiB and 1 MiB.
fn sizes() -> [usize; 8] {
    let mtu = mtu();
    [0, 1, 60, mtu - 40 - 1, mtu - 40, 64 << 10, 1 << 20, 3]
}

/// The MTU of this process's pair (set by the parent for its children).
fn mtu() -> usize {
    std::env::var(MTU_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(MTUS[0])
}
const ROUNDS: usize = 2;

/// Prints why the test cannot run here, or fails when `ZCX_REQUIRE_DPDK=1` says DPDK must work.
fn skip(reason: &str) {
    if std::env::var("ZCX_REQUIRE_DPDK").is_ok_and(|v| v == "1") {
        panic!("ZCX_REQUIRE_DPDK=1 but the DPDK test cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
}

#[test]
fn dpdk_transport_between_two_processes() {
    if let Some(why) = zcx_dpdk_sys::DPDK_MISSING {
        skip(&format!("zcx-dpdk-sys was built without DPDK: {why}"));
        return;
    }
    // Without DPDK nothing below may even be linked (the build script sets this cfg).
    #[cfg(not(zcx_dpdk_missing))]
    run();
}

#[cfg(not(zcx_dpdk_missing))]
fn run() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server") => child::server(),
        Ok("client") => child::client(),
        Ok(other) => panic!("unknown {ROLE_ENV}={other}"),
        Err(_) => {
            // Every loss rate at the standard MTU; jumbo frames without and with some loss.
            for (loss, mtu) in
                [(0u32, MTUS[0]), (10_000, MTUS[0]), (100_000, MTUS[0]), (0, MTUS[1]), (10_000, MTUS[1])]
            {
                if !pair(loss, mtu) {
                    return;
                }
            }
        }
    }
}

#[cfg(not(zcx_dpdk_missing))]
/// Runs one server/client pair with `loss` per million received frames dropped and frames of
/// `mtu`; false when it skipped.
fn pair(loss: u32, mtu: usize) -> bool {
    let dir = std::env::temp_dir().join(format!(
        "zcx-dpdk-tl-{}-{}-{loss}-{mtu}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str, mac: &str| -> Child {
        let out = std::fs::File::create(dir.join(format!("{role}.log"))).unwrap();
        Command::new(&exe)
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(DIR_ENV, &dir)
            .env(LOSS_ENV, loss.to_string())
            .env(MTU_ENV, mtu.to_string())
            .env(MAC_ENV, mac)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap()
    };
    let log = |role: &str| std::fs::read_to_string(dir.join(format!("{role}.log"))).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut server = spawn("server", "");
    let mac_file = dir.join("server.mac");
    // The server writes its MAC once its transport (and the memif socket) exist.
    while !mac_file.exists() && Instant::now() < deadline && server.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mac = std::fs::read_to_string(&mac_file).ok();
    let mut client = mac.as_deref().map(|mac| spawn("client", mac.trim()));
    let mut wait = |child: &mut Child| loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            // Our own child, ended through its handle (its pid).
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let client_status = client.as_mut().map(&mut wait);
    let server_status = wait(&mut server);
    let (server_log, client_log) = (log("server"), log("client"));
    for (role, text) in [("server", &server_log), ("client", &client_log)] {
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("skipped: ")) {
            eprintln!("[loss {loss} ppm, MTU {mtu}, {role}] {line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for text in [&server_log, &client_log] {
        if let Some(line) = text.lines().find(|l| l.starts_with("skipped: ")) {
            skip(&format!("a DPDK process could not run: {}", &line["skipped: ".len()..]));
            return false;
        }
    }
    assert!(mac.is_some(), "the server never wrote its MAC");
    assert!(client_status.flatten().is_some_and(|s| s.success()), "client failed: {client_status:?}");
    assert!(server_status.is_some_and(|s| s.success()), "server failed or timed out: {server_status:?}");
    let frames = sizes().len() * ROUNDS;
    assert!(client_log.contains(&format!("client: verified {frames} frames")));
    assert!(server_log.contains(&format!("server: verified {frames} frames")));
    assert!(server_log.contains("server: link failed with Timeout"));
    true
}

#[cfg(not(zcx_dpdk_missing))]
/// Byte `i` of frame `n` (of `len` bytes) sent by `from`.
fn pattern(from: u8, n: usize, len: usize, i: usize) -> u8 {
    (i as u32).wrapping_mul(131).wrapping_add((n as u32) * 7 + len as u32 + u32::from(from) * 101) as u8
}

#[cfg(not(zcx_dpdk_missing))]
fn frame(from: u8, n: usize) -> Vec<u8> {
    let len = sizes()[n % sizes().len()];
    (0..len).map(|i| pattern(from, n, len, i)).collect()
}

#[cfg(not(zcx_dpdk_missing))]
mod child {
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    use zcx_dataplane::dpdk::{DpdkConfig, DpdkPeer, DpdkTransport};
    use zcx_dataplane::proto::reliable;
    use zcx_dataplane::{LinkId, Payload, PlaceTarget, TlError, TlEvent, Transport};
    use zcx_dpdk_sys as sys;

    use super::*;

    /// How long the exchange may take (loss makes it slow, it is not a speed test).
    const PATIENCE: Duration = Duration::from_secs(90);
    const SERVER: u8 = 1;
    const CLIENT: u8 = 2;
    /// The server's last frame: the client exits without closing when it sees it.
    const EXIT: &[u8] = b"exit now";

    #[derive(Debug)]
    enum Ev {
        Connected(LinkId),
        Accepted(LinkId),
        Frame(LinkId, Vec<u8>),
        Failed(LinkId, TlError),
    }

    fn config() -> DpdkConfig {
        let loss: u32 = std::env::var(LOSS_ENV).unwrap().parse().unwrap();
        DpdkConfig {
            port_name: "net_memif0".to_owned(),
            mtu: mtu(),
            reliable: reliable::Config {
                rto_ns: 5_000_000,
                max_rto_ns: 50_000_000,
                dead_after_rtos: 12,
                ..reliable::Config::default()
            },
            drop_per_million: loss,
            drop_seed: u64::from(loss) ^ std::process::id() as u64,
            ..DpdkConfig::default()
        }
    }

    /// EAL with a memif port in `role`, then the transport on it.
    fn start(role: &str) -> Option<(sys::Eal, DpdkTransport)> {
        let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).unwrap());
        let socket = dir.join("memif.sock");
        let bsize = if mtu() > MTUS[0] { format!(",bsize={JUMBO_BSIZE}") } else { String::new() };
        let vdev = format!(
            "--vdev=net_memif0,role={role},id=0{bsize},socket={},socket-abstract=no",
            socket.display()
        );
        let args = sys::vdev_eal_args(&format!("tl-{role}"), &[vdev]);
        let eal = match sys::Eal::init(&args) {
            Ok(eal) => eal,
            Err(e @ sys::EalError::Init { .. }) => {
                println!("skipped: EAL did not initialise here with {args:?}: {e}");
                return None;
            }
            Err(e) => panic!("EAL init: {e}"),
        };
        // SAFETY: EAL is initialised, and the transport is dropped before the Eal (see `finish`).
        let transport = unsafe { DpdkTransport::new(&eal, config()) }.expect("DPDK transport");
        Some((eal, transport))
    }

    fn finish(eal: sys::Eal, transport: DpdkTransport) {
        drop(transport);
        drop(eal);
    }

    thread_local! {
        /// The placed frame being received: its header, and the buffer its payload lands in.
        static PLACING: RefCell<Option<(Vec<u8>, Vec<u8>)>> = const { RefCell::new(None) };
    }

    /// Polls once; a placed frame is reported as the `Frame` of its header and payload once its
    /// payload is all in the buffer given for it.
    fn poll(t: &mut DpdkTransport, out: &mut Vec<Ev>) {
        let n = t.poll(&mut |e| match e {
            TlEvent::Connected { link } => out.push(Ev::Connected(link)),
            TlEvent::Accepted { link, .. } => out.push(Ev::Accepted(link)),
            TlEvent::Frame { link, bytes } => out.push(Ev::Frame(link, bytes.to_vec())),
            TlEvent::Placed { header, len, dest, .. } => PLACING.with_borrow_mut(|placing| {
                assert!(placing.is_none(), "a placed frame inside another");
                let (header, mut buf) = (header.to_vec(), vec![0u8; len]);
                // SAFETY: `buf` has `len` bytes and stays in PLACING, untouched (moving the Vec
                // does not move its heap bytes), until PlaceDone takes it out.
                dest.set(unsafe { PlaceTarget::new(buf.as_mut_ptr(), len as u64) });
                *placing = Some((header, buf));
            }),
            TlEvent::PlaceDone { link, token, result } => {
                assert_eq!(result, Ok(()), "placement failed");
                let (mut frame, buf) = PLACING.take().expect("PlaceDone without Placed");
                assert_eq!(token, buf.len() as u64);
                frame.extend_from_slice(&buf);
                out.push(Ev::Frame(link, frame));
            }
            TlEvent::LinkFailed { link, error } => out.push(Ev::Failed(link, error)),
            other => panic!("unexpected event {other:?}"),
        });
        if n == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Sends `frame` (split into header and payload at an arbitrary point), `placed` or not,
    /// polling while the link pushes back.
    fn send(
        t: &mut DpdkTransport,
        link: LinkId,
        frame: &[u8],
        placed: bool,
        events: &mut Vec<Ev>,
        deadline: Instant,
    ) {
        let split = frame.len().min(9);
        loop {
            let (header, payload) = (&frame[..split], Payload::Copy(&frame[split..]));
            let sent =
                if placed { t.send_placed(link, header, payload) } else { t.send(link, header, payload) };
            match sent {
                Ok(_) => return,
                Err(TlError::NoResource) => {
                    assert!(Instant::now() < deadline, "send pushed back for too long");
                    poll(t, events);
                }
                Err(e) => panic!("send: {e:?}"),
            }
        }
    }

    /// Sends every frame of `from` and checks every frame of the other side, in order, exactly
    /// once; returns once all arrived and everything sent was acknowledged.
    fn exchange(t: &mut DpdkTransport, link: LinkId, from: u8, events: &mut Vec<Ev>, deadline: Instant) {
        let other = if from == SERVER { CLIENT } else { SERVER };
        let total = sizes().len() * ROUNDS;
        let (mut sent, mut got) = (0, 0);
        while got < total || sent < total || t.has_pending_sends(link) {
            assert!(Instant::now() < deadline, "{from}: sent {sent}, got {got} of {total}");
            if sent < total {
                send(t, link, &frame(from, sent), sent >= sizes().len(), events, deadline);
                sent += 1;
            }
            poll(t, events);
            for ev in std::mem::take(events) {
                if got == total {
                    // The peer's next phase (its EXIT frame): for the caller.
                    events.push(ev);
                    continue;
                }
                match ev {
                    Ev::Frame(l, bytes) => {
                        assert_eq!(l, link);
                        let want = frame(other, got);
                        assert_eq!(bytes.len(), want.len(), "frame {got}: length");
                        if let Some(i) = (0..want.len()).find(|&i| bytes[i] != want[i]) {
                            panic!("frame {got} ({} bytes): byte {i} differs", want.len());
                        }
                        got += 1;
                    }
                    other => panic!("unexpected {other:?} during the exchange"),
                }
            }
        }
        println!("{}: verified {total} frames", if from == SERVER { "server" } else { "client" });
        let stats = t.stats();
        assert_eq!(stats.placed_sent, sizes().len() as u64, "placed frames sent: {stats:?}");
        assert_eq!(stats.placed_frames, sizes().len() as u64, "placed frames received: {stats:?}");
        let placed_bytes: usize = sizes().iter().map(|&len| len - len.min(9)).sum();
        assert_eq!(stats.placed_bytes, placed_bytes as u64, "placed bytes received: {stats:?}");
    }

    pub fn server() {
        let Some((eal, mut t)) = start("server") else { return };
        let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).unwrap());
        let mac = t.mac();
        let text = mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        std::fs::write(dir.join("server.mac.tmp"), &text).unwrap();
        std::fs::rename(dir.join("server.mac.tmp"), dir.join("server.mac")).unwrap();
        let deadline = Instant::now() + PATIENCE;
        let mut events = Vec::new();
        let link = loop {
            assert!(Instant::now() < deadline, "server: nobody connected");
            poll(&mut t, &mut events);
            if let Some(ev) = events.pop() {
                match ev {
                    Ev::Accepted(link) => break link,
                    other => panic!("server: {other:?} before Accepted"),
                }
            }
        };
        assert_eq!(t.link_peer(link).map(|p| p.session), t.session(link).map(|s| s.peer_id()));
        exchange(&mut t, link, SERVER, &mut events, deadline);

        // Tell the client to exit (it stops polling at once, so EXIT may go unacknowledged and
        // start the clock itself); give it time to, then, if EXIT was acknowledged, send one more
        // frame, which nobody will acknowledge.
        assert!(events.is_empty(), "server: unexpected {events:?}");
        send(&mut t, link, EXIT, false, &mut events, deadline);
        let mut start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            poll(&mut t, &mut events);
        }
        assert!(events.is_empty(), "server: unexpected {events:?} right after EXIT");
        let limit = Duration::from_nanos(config().dead_peer_timeout_ns());
        if !t.has_pending_sends(link) {
            start = Instant::now();
            send(&mut t, link, b"are you there?", false, &mut events, deadline);
        }
        let error = loop {
            assert!(
                start.elapsed() < limit + Duration::from_secs(2),
                "server: no LinkFailed {:?} after the last frame (limit {limit:?}); session {:?}, transport {:?}",
                start.elapsed(),
                t.session(link).map(|s| *s.stats()),
                t.stats()
            );
            poll(&mut t, &mut events);
            if let Some(ev) = events.pop() {
                match ev {
                    Ev::Failed(l, error) if l == link => break error,
                    other => panic!("server: {other:?} while waiting for the failure"),
                }
            }
        };
        let took = start.elapsed();
        println!("server: link failed with {error:?} after {took:?} (dead-peer timeout {limit:?})");
        assert_eq!(error, TlError::Timeout);
        assert!(took >= limit / 2, "failed too early: {took:?} < {limit:?} / 2");
        assert_eq!(t.send(link, b"x", Payload::None), Err(TlError::Timeout));
        let stats = t.stats();
        println!("server: stats {stats:?}, demux drops {:?}", t.demux_drops());
        if config().drop_per_million > 0 {
            assert!(stats.injected_drops > 0);
        } else {
            assert_eq!(stats.injected_drops, 0);
        }
        t.close(link, false);
        finish(eal, t);
    }

    pub fn client() {
        let Some((eal, mut t)) = start("client") else { return };
        let text = std::env::var(MAC_ENV).unwrap();
        let bytes: Vec<u8> = text.split(':').map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        let mac: [u8; 6] = bytes.try_into().unwrap();
        let deadline = Instant::now() + PATIENCE;
        let mut events = Vec::new();
        let link = t.connect_peer(DpdkPeer { mac, session: SERVER_SESSION }).unwrap();
        while events.is_empty() {
            assert!(Instant::now() < deadline, "client: never connected");
            poll(&mut t, &mut events);
        }
        match events.remove(0) {
            Ev::Connected(l) => assert_eq!(l, link),
            other => panic!("client: {other:?} before Connected"),
        }
        assert_eq!(t.link_peer(link).unwrap(), DpdkPeer { mac, session: SERVER_SESSION });
        exchange(&mut t, link, CLIENT, &mut events, deadline);
        let session = *t.session(link).unwrap().stats();
        println!("client: session {session:?}, transport {:?}", t.stats());
        if config().drop_per_million > 0 {
            assert!(session.retransmissions > 0, "loss was injected but nothing was retransmitted");
        }
        // Wait for the server's EXIT, then stop polling at once and go without closing.
        loop {
            assert!(Instant::now() < deadline, "client: no exit frame");
            poll(&mut t, &mut events);
            if let Some(ev) = events.pop() {
                match ev {
                    Ev::Frame(_, bytes) if bytes == EXIT => break,
                    other => panic!("client: {other:?} while waiting for exit"),
                }
            }
        }
        println!("client: exiting without closing");
        finish(eal, t);
    }
}
