//! The soak harness (`scripts/soak.sh`) for a short while: three peers, kills every few seconds,
//! hostile connections throughout. The harness fails on any corrupted, lost or hung message, on
//! a forbidden remote access carried out, and when the peer that was never killed ends with more
//! memory or descriptors than it had after the warm-up.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_short_soak_passes() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_soak"))
        .env("SOAK_SECONDS", "20")
        .env("SOAK_PEERS", "3")
        // Long enough for the worker's buffer pools to reach their working size before the
        // baseline, so that the comparison measures what the run left behind.
        .env("SOAK_WARMUP", "8")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the soak");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    // Traffic, two quiesced measurements and the reports take well under a minute; the slack is
    // for a loaded machine (a peer then takes up to SOAK_FAIL_DEADLINE to be declared hung).
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the soak") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the soak did not end within 5 minutes:\n{}", reader.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = reader.join().expect("stdout reader");
    println!("{output}");
    assert!(status.success(), "the soak failed ({status}):\n{output}");
    assert!(output.contains("result: PASS"), "no verdict in:\n{output}");
    // The run did what it is for: every kind of traffic was checked, peers were killed, and every
    // kind of hostile connection reached a listener.
    let totals: Vec<(&str, u64)> = output
        .lines()
        .find_map(|l| l.strip_prefix("totals "))
        .unwrap_or_else(|| panic!("no totals in:\n{output}"))
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    let total = |name: &str| totals.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v);
    for counted in [
        "checked.tag",
        "checked.stream",
        "checked.am_eager",
        "checked.am_rndv",
        "checked.put_get",
        "checked.amo32",
        "checked.amo64",
        "kills",
        "hostile.huge_frame.connected",
        "hostile.slowloris.connected",
        "hostile.random_bytes.connected",
        "hostile.cut_frame.connected",
        "hostile.rma_before_handshake.connected",
        "hostile.bad_rma_after_handshake.connected",
    ] {
        assert!(total(counted) > 0, "{counted} is 0:\n{output}");
    }
}

/// Runs the soak briefly with a fault the peers plant in their own traffic; returns whether it
/// passed, and its output.
fn soak_with_fault(fault: &str) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_soak"))
        .env("SOAK_SECONDS", "20")
        .env("SOAK_PEERS", "2")
        // The pinning probe is not what these runs are about.
        .env("SOAK_PIN_CONNECTIONS", "0")
        .env("SOAK_INJECT", fault)
        .stderr(Stdio::inherit())
        .output()
        .expect("run the soak");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn a_corrupted_message_fails_the_soak() {
    let (passed, output) = soak_with_fault("corrupt-tag");
    assert!(!passed, "a corrupted tag message went unnoticed:\n{output}");
    assert!(output.contains("result: FAIL") && output.contains("differs from the pattern"), "{output}");
}

#[test]
fn a_lost_message_fails_the_soak() {
    let (passed, output) = soak_with_fault("lose-stream");
    assert!(!passed, "a lost stream message went unnoticed:\n{output}");
    assert!(output.contains("result: FAIL") && output.contains("stream message"), "{output}");
}
