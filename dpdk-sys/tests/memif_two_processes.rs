//! Two processes over `net_memif`: the test runs its own binary twice, as a memif server and a
//! memif client (each with its own EAL, `--file-prefix` and `--lcores`; the memif socket in a
//! temporary directory). The client sends frames of 60..1500 bytes, the server checks each byte for
//! byte and in order and sends it back, the client checks the echoes byte for byte, then says bye;
//! both check their port stats.

mod common;

/// This test's name, which the children are started with (`--exact`).
const TEST: &str = "memif_server_and_client_processes";
/// Set in a child: `server` or `client`.
const ROLE_ENV: &str = "ZCX_MEMIF_ROLE";
/// Set in a child: the memif socket path.
const SOCKET_ENV: &str = "ZCX_MEMIF_SOCKET";
/// Frames the client sends (and gets back).
const FRAMES: u32 = 512;
/// Sequence number of the client's last frame, which tells the server to stop.
const BYE: u32 = u32::MAX;

#[test]
fn memif_server_and_client_processes() {
    if cfg!(zcx_dpdk_missing) {
        common::skip(&format!(
            "zcx-dpdk-sys was built without DPDK: {}",
            zcx_dpdk_sys::DPDK_MISSING.unwrap_or("")
        ));
        return;
    }
    #[cfg(not(zcx_dpdk_missing))]
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server") => child::server(),
        Ok("client") => child::client(),
        Ok(other) => panic!("unknown {ROLE_ENV}={other}"),
        Err(_) => parent(),
    }
}

/// Starts the server, waits for its socket, starts the client, and waits for both (bounded);
/// fails with their output if either fails, skips if one could not start EAL here.
#[cfg(not(zcx_dpdk_missing))]
fn parent() {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    let dir = std::env::temp_dir().join(format!(
        "zcx-memif-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("memif.sock");
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str| -> Child {
        let out = std::fs::File::create(dir.join(format!("{role}.log"))).unwrap();
        Command::new(&exe)
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(SOCKET_ENV, &socket)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap()
    };
    let log = |role: &str| std::fs::read_to_string(dir.join(format!("{role}.log"))).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut server = spawn("server");
    // The server's port creates the listening socket while EAL probes the vdev.
    while !socket.exists() && Instant::now() < deadline {
        if server.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = (socket.exists()).then(|| spawn("client"));

    let mut wait = |child: &mut Child| loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            // Our own child, ended by its handle (its pid).
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let server_status = wait(&mut server);
    let client_status = client.as_mut().map(&mut wait);
    let (server_log, client_log) = (log("server"), log("client"));
    // Prefixed, so the children's own harness lines ("test result: ...") are not counted as this
    // binary's by whoever reads the output; a child's skip reason is repeated by this process below.
    for (role, text) in [("server", &server_log), ("client", &client_log)] {
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("skipped: ")) {
            eprintln!("[memif {role}] {line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    for text in [&server_log, &client_log] {
        if let Some(line) = text.lines().find(|l| l.starts_with("skipped: ")) {
            common::skip(&format!("a memif process could not run: {}", &line["skipped: ".len()..]));
            return;
        }
    }
    assert!(
        server_status.is_some_and(|s| s.success()),
        "memif server failed or timed out: {server_status:?}"
    );
    assert!(client.is_some(), "the memif server never created its socket {}", socket.display());
    assert!(client_status.flatten().is_some_and(|s| s.success()), "memif client failed: {client_status:?}");
    assert!(server_log.contains(&format!("server: verified and echoed {FRAMES} frames")));
    assert!(client_log.contains(&format!("client: verified {FRAMES} echoed frames")));
}

#[cfg(not(zcx_dpdk_missing))]
mod child {
    use std::time::{Duration, Instant};

    use super::common::*;
    use super::{BYE, FRAMES, SOCKET_ENV};
    use zcx_dpdk_sys as sys;

    /// How long either side waits for the link and for the exchange.
    const PATIENCE: Duration = Duration::from_secs(60);

    /// Starts EAL with a memif port in `role` on the parent's socket, and the port.
    fn start(role: &str) -> Option<(sys::Eal, Pool, u16)> {
        let socket = std::env::var(SOCKET_ENV).expect("the parent sets the socket path");
        let vdev = format!("--vdev=net_memif0,role={role},id=0,socket={socket},socket-abstract=no");
        let eal = init_eal(&format!("memif-{role}"), &[vdev])?;
        let pool = Pool::new(&format!("zcx_memif_{role}"), POOL_MBUFS);
        let port = port_by_name("net_memif0");
        assert_eq!(dev_info(port).1, "net_memif");
        start_port(port, &pool, 1024);
        let deadline = Instant::now() + PATIENCE;
        while !link_up(port) {
            assert!(Instant::now() < deadline, "{role}: the memif link never came up");
            std::thread::sleep(Duration::from_millis(5));
        }
        Some((eal, pool, port))
    }

    /// Receives a burst into `got` (cleared first); sleeps briefly when nothing came, so two
    /// polling processes leave the shared cores some room.
    fn receive(port: u16, got: &mut Vec<*mut sys::rte_mbuf>) {
        let mut rx = [std::ptr::null_mut(); 32];
        // SAFETY: rx has room for 32 mbufs; the returned ones belong to the caller.
        let k = unsafe { sys::zcx_rte_eth_rx_burst(port, 0, rx.as_mut_ptr(), 32) } as usize;
        got.clear();
        got.extend_from_slice(&rx[..k]);
        if k == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Transmits all of `pkts` (owned by the caller), retrying while the ring is full.
    fn send_all(port: u16, pkts: &mut [*mut sys::rte_mbuf], deadline: Instant) {
        let mut sent = 0;
        while sent < pkts.len() {
            // SAFETY: pkts[sent..] are owned mbufs; the driver takes those it accepts.
            let n = unsafe {
                sys::zcx_rte_eth_tx_burst(port, 0, pkts.as_mut_ptr().add(sent), (pkts.len() - sent) as u16)
            };
            sent += n as usize;
            if n == 0 {
                if Instant::now() > deadline {
                    // SAFETY: the mbufs not taken are still owned here.
                    pkts[sent..].iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
                    panic!("tx took only {sent} of {} frames", pkts.len());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Checks that `m` is frame `seq`, byte for byte, in one segment.
    fn check_frame(m: *mut sys::rte_mbuf, seq: u32) -> Result<(), String> {
        // SAFETY: m was received and is owned by the caller.
        let (segs, pkt_len, payload) = unsafe { ((*m).nb_segs, (*m).pkt_len, data(m)) };
        if segs != 1 || pkt_len as usize != frame_len(seq) || payload.len() != frame_len(seq) {
            return Err(format!(
                "frame {seq}: {segs} segments, {pkt_len} bytes, expected {}",
                frame_len(seq)
            ));
        }
        check(payload, seq)
    }

    /// Receives every frame in order, checks it byte for byte, and sends it back, until the bye frame.
    pub fn server() {
        let Some((eal, pool, port)) = start("server") else { return };
        let deadline = Instant::now() + PATIENCE;
        let mut next = 0u32;
        let mut got = Vec::new();
        'outer: loop {
            assert!(Instant::now() < deadline, "server: only {next} of {FRAMES} frames arrived");
            receive(port, &mut got);
            assert!(!got.is_empty() || link_up(port), "server: the client hung up after {next} frames");
            for (i, &m) in got.iter().enumerate() {
                // SAFETY: m was received and is owned here.
                let seq = seq_of(unsafe { data(m) });
                let expected = if next == FRAMES { BYE } else { next };
                if let Err(e) = check_frame(m, expected) {
                    // SAFETY: the received mbufs are owned here and not used again.
                    got.iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
                    panic!("server: {e} (header says {seq:?})");
                }
                if expected == BYE {
                    // SAFETY: as above; the bye frame is last.
                    got[i..].iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
                    got.truncate(i);
                    send_all(port, &mut got, deadline);
                    break 'outer;
                }
                next += 1;
            }
            send_all(port, &mut got, deadline);
        }
        let st = stats(port);
        println!(
            "server: verified and echoed {FRAMES} frames; stats {} in, {} out",
            st.ipackets, st.opackets
        );
        assert_eq!((st.ipackets, st.opackets), (FRAMES as u64 + 1, FRAMES as u64));
        assert_eq!((st.ierrors, st.oerrors), (0, 0));
        stop_and_close(port);
        drop(pool);
        drop(eal);
    }

    /// Sends the frames with at most a window in flight, checks every echo byte for byte and in
    /// order, sends the bye frame and waits for the server to hang up.
    pub fn client() {
        let Some((eal, pool, port)) = start("client") else { return };
        const WINDOW: u32 = 128;
        let deadline = Instant::now() + PATIENCE;
        let (mut sent, mut echoed) = (0u32, 0u32);
        let mut got = Vec::new();
        while echoed < FRAMES {
            assert!(Instant::now() < deadline, "client: {sent} frames sent, only {echoed} came back");
            let burst = (FRAMES - sent).min(WINDOW - (sent - echoed)).min(32);
            let mut tx: Vec<_> = (sent..sent + burst).map(|seq| frame_mbuf(&pool, seq)).collect();
            send_all(port, &mut tx, deadline);
            sent += burst;
            receive(port, &mut got);
            let result = got.iter().enumerate().try_for_each(|(i, &m)| check_frame(m, echoed + i as u32));
            // SAFETY: the received mbufs are owned here and not used again.
            got.iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
            result.unwrap_or_else(|e| panic!("client: echo {e}"));
            echoed += got.len() as u32;
        }
        assert_eq!(sent, FRAMES);
        println!("client: verified {FRAMES} echoed frames");
        // Read before the bye: a client's memif queues, and their counters, are reset when the
        // server hangs up.
        let st = stats(port);
        println!("client: stats {} in, {} out", st.ipackets, st.opackets);
        assert_eq!((st.ipackets, st.opackets), (FRAMES as u64, FRAMES as u64));
        assert_eq!((st.ierrors, st.oerrors), (0, 0));
        let mut bye = [frame_mbuf(&pool, BYE)];
        send_all(port, &mut bye, deadline);
        // The bye frame sits in the shared memory this client created until the server reads it;
        // closing now could take it away, so wait for the server to hang up first.
        while link_up(port) {
            assert!(Instant::now() < deadline, "client: the server never hung up");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop_and_close(port);
        drop(pool);
        drop(eal);
    }
}
