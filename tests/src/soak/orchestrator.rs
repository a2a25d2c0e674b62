//! The orchestrator: starts the peers, runs the traffic phases with kills and hostile
//! connections, quiesces the peers for the baseline and final measurements, and judges the run.
//!
//! Timeline: warm-up (traffic, kills, hostiles) → baseline (hostiles closed, traffic stopped and
//! drained, a few seconds of progress, then each peer's resident set and descriptors) → the rest
//! of the run → final measurement, taken the same way → report. A survivor is a peer never
//! killed (peer 0 never is); its final figures may exceed its baseline by at most the slack.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::hostile::{self, HostileStats, Hostiles, Limits};
use super::peer::PeerArgs;
use super::run_dir;
use super::{env_u64, fail_deadline, Counters, Line, Rng, GAUGE_RSS};

/// The run's settings, from `SOAK_*` variables.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Traffic time, warm-up included (`SOAK_SECONDS`).
    pub seconds: u64,
    pub peers: usize,
    pub seed: u64,
    pub warmup: Duration,
    pub kill_interval: Duration,
    /// Progress time between the end of traffic and a measurement.
    pub settle: Duration,
    pub hostile: Limits,
    /// Odd peers use TCP alone (`ZCX_TLS=tcp`), so both transports carry traffic.
    pub tls_mix: bool,
    pub dir: Option<PathBuf>,
    /// A survivor may end at most this much above its baseline: the larger of a percentage and
    /// an absolute amount.
    pub rss_slack_percent: u64,
    pub rss_slack_kib: u64,
    pub fd_slack: u64,
    /// Unauthenticated connections opened to each survivor before the final measurement, half
    /// announcing the largest frame, half sending part of a handshake; held this long, then
    /// the survivor is measured with them open.
    pub pin_connections: usize,
    pub pin_hold: Duration,
    /// Which pinning connections: `both` (default), `huge` or `partial` alone.
    pub pin_kind: PinKind,
}

/// The pinning connections the probe opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinKind {
    Both,
    HugeFrame,
    PartialHandshake,
}

impl PinKind {
    fn from_env() -> PinKind {
        match std::env::var("SOAK_PIN_KIND").as_deref() {
            Ok("huge") => PinKind::HugeFrame,
            Ok("partial") => PinKind::PartialHandshake,
            Ok("both") | Err(_) => PinKind::Both,
            Ok(other) => {
                eprintln!("soak: SOAK_PIN_KIND={other:?} is not huge, partial or both");
                std::process::exit(2)
            }
        }
    }

    /// Whether the `i`th connection announces a huge frame (else: part of a handshake).
    fn huge(self, i: usize) -> bool {
        match self {
            PinKind::Both => i % 2 == 0,
            PinKind::HugeFrame => true,
            PinKind::PartialHandshake => false,
        }
    }
}

impl Settings {
    pub fn from_env() -> Settings {
        let seconds = env_u64("SOAK_SECONDS", 600).max(4);
        let seed = env_u64(
            "SOAK_SEED",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
        );
        Settings {
            seconds,
            peers: (env_u64("SOAK_PEERS", 4) as usize).clamp(2, 32),
            seed,
            warmup: Duration::from_secs(env_u64("SOAK_WARMUP", (seconds / 6).clamp(3, 60))),
            kill_interval: Duration::from_millis(env_u64("SOAK_KILL_INTERVAL_MS", 3000).max(100)),
            settle: Duration::from_secs(env_u64("SOAK_SETTLE", 3)),
            hostile: Limits {
                max_open: env_u64("SOAK_HOSTILE_MAX", 24) as usize,
                interval: Duration::from_millis(env_u64("SOAK_HOSTILE_INTERVAL_MS", 20).max(1)),
            },
            tls_mix: env_u64("SOAK_TLS_MIX", 1) != 0,
            dir: std::env::var_os("SOAK_DIR").map(PathBuf::from),
            rss_slack_percent: env_u64("SOAK_RSS_SLACK_PERCENT", 5),
            rss_slack_kib: env_u64("SOAK_RSS_SLACK_KIB", 4096),
            fd_slack: env_u64("SOAK_FD_SLACK", 2),
            pin_connections: env_u64("SOAK_PIN_CONNECTIONS", 32) as usize,
            pin_hold: Duration::from_secs(env_u64("SOAK_PIN_HOLD", 3)),
            pin_kind: PinKind::from_env(),
        }
    }
}

/// A line from a peer's stdout (`None`: its stdout closed).
struct Msg {
    peer: usize,
    incarnation: u32,
    line: Option<String>,
}

struct PeerProc {
    incarnation: u32,
    child: Child,
    stdin: ChildStdin,
    last_line: Instant,
    killed_ever: bool,
}

/// A measurement of one peer.
#[derive(Clone, Debug)]
struct Mem {
    incarnation: u32,
    figures: Counters,
}

impl Mem {
    fn get(&self, name: &str) -> u64 {
        self.figures.get(name).copied().unwrap_or(0)
    }
}

struct Run {
    settings: Settings,
    dir: PathBuf,
    exe: PathBuf,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    peers: Vec<PeerProc>,
    /// The last counters of every incarnation.
    stats: BTreeMap<(usize, u32), Counters>,
    finals: BTreeSet<(usize, u32)>,
    quiet: BTreeSet<(usize, u32)>,
    mems: BTreeMap<(String, usize), Mem>,
    failures: Vec<String>,
    rng: Rng,
    kills: u64,
    restarts: u64,
    hostile: HostileStats,
    started: Instant,
    /// Resident set of every incarnation every 10 s (seconds since the start, KiB), as its
    /// stats lines report it: the trend behind the two measurements.
    rss_trace: BTreeMap<(usize, u32), Vec<(u64, u64)>>,
    /// Of the pinning connections (huge frame, partial handshake): opened, closed by the peer.
    pinned: [(u64, u64); 2],
}

/// Runs the whole soak; returns the process exit status (0: passed).
pub fn run() -> i32 {
    let settings = Settings::from_env();
    let dir = settings
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("zcx-soak-{}", std::process::id())));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("soak: cannot create {}: {e}", dir.display());
        return 2;
    }
    for p in 0..settings.peers {
        let _ = std::fs::remove_file(run_dir::peer_path(&dir, p));
    }
    println!(
        "soak: {} s, {} peers, seed {}, kill every {:?}, run dir {}",
        settings.seconds,
        settings.peers,
        settings.seed,
        settings.kill_interval,
        dir.display()
    );
    let (tx, rx) = mpsc::channel();
    let mut run = Run {
        rng: Rng::new(settings.seed ^ 0x0bad_cafe),
        exe: std::env::current_exe().expect("the soak binary's path"),
        dir,
        tx,
        rx,
        peers: Vec::new(),
        stats: BTreeMap::new(),
        finals: BTreeSet::new(),
        quiet: BTreeSet::new(),
        mems: BTreeMap::new(),
        failures: Vec::new(),
        kills: 0,
        restarts: 0,
        hostile: HostileStats::new(),
        started: Instant::now(),
        rss_trace: BTreeMap::new(),
        pinned: [(0, 0); 2],
        settings,
    };
    run.execute();
    let passed = run.failures.is_empty();
    run.print_summary();
    for p in &mut run.peers {
        // Already gone after a clean report; after a failure, stop whatever still runs.
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    // It holds only the peers' files; the summary says all there is to know about the run.
    if run.settings.dir.is_none() {
        let _ = std::fs::remove_dir_all(&run.dir);
    }
    if passed {
        0
    } else {
        1
    }
}

impl Run {
    fn execute(&mut self) {
        for id in 0..self.settings.peers {
            let p = self.spawn(id, 0);
            self.peers.push(p);
        }
        if !self.wait_for("every peer file", |run| {
            (0..run.settings.peers).all(|p| run_dir::PeerFile::read(&run.dir, p).is_some())
        }) {
            return;
        }
        let total = Duration::from_secs(self.settings.seconds);
        let warmup = self.settings.warmup.min(total / 2);
        if !self.traffic(warmup) || !self.measure("baseline", true, false) {
            return;
        }
        if !self.traffic(total - warmup) || !self.measure("final", false, true) {
            return;
        }
        self.report();
        self.judge_memory();
    }

    fn spawn(&self, id: usize, incarnation: u32) -> PeerProc {
        let args = PeerArgs {
            id,
            incarnation,
            peers: self.settings.peers,
            dir: self.dir.clone(),
            seed: self.settings.seed,
        };
        let mut cmd = Command::new(&self.exe);
        cmd.args(args.to_args()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if self.settings.tls_mix && id % 2 == 1 && std::env::var_os("ZCX_TLS").is_none() {
            cmd.env("ZCX_TLS", "tcp");
        }
        let mut child = cmd.spawn().expect("spawn a peer");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Msg { peer: id, incarnation, line: Some(line) }).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg { peer: id, incarnation, line: None });
        });
        PeerProc { incarnation, child, stdin, last_line: Instant::now(), killed_ever: false }
    }

    fn send(&mut self, id: usize, command: &str) {
        // A peer that died meanwhile is reported by `check_health`.
        let _ = writeln!(self.peers[id].stdin, "{command}");
        let _ = self.peers[id].stdin.flush();
    }

    /// Takes the peers' lines for up to `timeout`.
    fn pump(&mut self, timeout: Duration) {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let msg = match self.rx.recv_timeout(left) {
                Ok(msg) => msg,
                Err(_) => return,
            };
            let current = self.peers.get(msg.peer).is_some_and(|p| p.incarnation == msg.incarnation);
            let Some(text) = msg.line else { continue };
            if current {
                self.peers[msg.peer].last_line = Instant::now();
            }
            let key = (msg.peer, msg.incarnation);
            match Line::parse(&text) {
                Some(Line::Stats { last, counters }) => {
                    if let Some(&rss) = counters.get(GAUGE_RSS) {
                        let at = self.started.elapsed().as_secs();
                        let trace = self.rss_trace.entry(key).or_default();
                        if trace.last().is_none_or(|&(t, _)| at >= t + 10) {
                            trace.push((at, rss));
                        }
                    }
                    self.stats.insert(key, counters);
                    if last {
                        self.finals.insert(key);
                    }
                }
                Some(Line::Quiet) => {
                    self.quiet.insert(key);
                }
                Some(Line::Mem { label, figures }) => {
                    let mem = Mem { incarnation: msg.incarnation, figures };
                    self.mems.insert((label, msg.peer), mem);
                }
                Some(Line::Fail(why)) => {
                    self.failures.push(format!("peer {}.{}: {why}", msg.peer, msg.incarnation))
                }
                None => println!("peer {}.{}: {text}", msg.peer, msg.incarnation),
            }
        }
    }

    /// Fails the run for a peer that exited on its own or stopped reporting.
    fn check_health(&mut self) {
        let silent_limit = fail_deadline();
        for (id, p) in self.peers.iter_mut().enumerate() {
            match p.child.try_wait() {
                Ok(Some(status)) => {
                    self.failures.push(format!("peer {id}.{} exited on its own: {status}", p.incarnation));
                    // Counted once: it is replaced by nothing, and reaped.
                    p.last_line = Instant::now() + Duration::from_secs(1 << 30);
                }
                Ok(None) if p.last_line.elapsed() > silent_limit => {
                    self.failures.push(format!(
                        "peer {id}.{} printed nothing for {:?}: hung",
                        p.incarnation,
                        p.last_line.elapsed()
                    ));
                    p.last_line = Instant::now() + Duration::from_secs(1 << 30);
                }
                _ => {}
            }
        }
    }

    /// Pumps until `done` says so; false (with a failure) after the deadline or any failure.
    fn wait_for(&mut self, what: &str, done: impl Fn(&Run) -> bool) -> bool {
        let deadline = Instant::now() + fail_deadline() * 2;
        loop {
            self.pump(Duration::from_millis(50));
            // Lines already read may say a peer failed: that comes before the waiting.
            if !self.failures.is_empty() {
                return false;
            }
            if done(self) {
                return true;
            }
            self.check_health();
            if !self.failures.is_empty() {
                return false;
            }
            if Instant::now() > deadline {
                self.failures.push(format!("timed out waiting for {what}"));
                return false;
            }
        }
    }

    fn kill_and_restart(&mut self, id: usize) {
        let p = &mut self.peers[id];
        let _ = p.child.kill();
        let _ = p.child.wait();
        // Until the new process publishes its own, nobody should find the dead one's port.
        let _ = std::fs::remove_file(run_dir::peer_path(&self.dir, id));
        let incarnation = p.incarnation + 1;
        self.kills += 1;
        let mut fresh = self.spawn(id, incarnation);
        fresh.killed_ever = true;
        self.peers[id] = fresh;
        self.restarts += 1;
    }

    /// Traffic with kills and hostile connections for `duration`; false when the run failed.
    fn traffic(&mut self, duration: Duration) -> bool {
        let hostiles = Hostiles::start(
            self.dir.clone(),
            self.settings.peers,
            self.rng.next_u64(),
            self.settings.hostile,
        );
        let end = Instant::now() + duration;
        let mut next_kill = Instant::now() + self.settings.kill_interval;
        while Instant::now() < end && self.failures.is_empty() {
            self.pump(Duration::from_millis(50));
            self.check_health();
            if Instant::now() >= next_kill {
                next_kill += self.settings.kill_interval;
                // Peer 0 is never killed: it lives through the whole run.
                let id = 1 + self.rng.below(self.settings.peers as u64 - 1) as usize;
                self.kill_and_restart(id);
            }
        }
        match hostiles.stop() {
            Ok(stats) => hostile::merge(&mut self.hostile, &stats),
            Err(why) => self.failures.push(format!("hostile connection: {why}")),
        }
        self.failures.is_empty()
    }

    /// Stops the traffic, waits until every peer drained it and reconnected everything, lets
    /// them progress for the settle time, and takes their measurements.
    fn measure(&mut self, label: &str, resume: bool, pin: bool) -> bool {
        self.quiet.clear();
        for id in 0..self.peers.len() {
            self.send(id, "quiesce");
        }
        if !self.wait_for("the peers to quiesce", |run| {
            run.peers.iter().enumerate().all(|(id, p)| run.quiet.contains(&(id, p.incarnation)))
        }) {
            return false;
        }
        if pin && !self.pin_probe() {
            return false;
        }
        let settle_end = Instant::now() + self.settings.settle;
        while Instant::now() < settle_end {
            self.pump(Duration::from_millis(50));
        }
        let everyone: Vec<usize> = (0..self.peers.len()).collect();
        if !self.take_measurement(label, &everyone) {
            return false;
        }
        if resume {
            for id in 0..self.peers.len() {
                self.send(id, "resume");
            }
        }
        true
    }

    /// Asks `ids` for their figures under `label` and waits for them.
    fn take_measurement(&mut self, label: &str, ids: &[usize]) -> bool {
        for &id in ids {
            self.send(id, &format!("measure {label}"));
        }
        let label = label.to_owned();
        self.wait_for("the measurements", |run| {
            ids.iter().all(|&id| {
                let incarnation = run.peers[id].incarnation;
                run.mems.get(&(label.clone(), id)).is_some_and(|m| m.incarnation == incarnation)
            })
        })
    }

    /// Holds unauthenticated connections open to every peer never killed and measures it with
    /// them: what a client that never completes a handshake can make a listener keep.
    fn pin_probe(&mut self) -> bool {
        let n = self.settings.pin_connections;
        let targets: Vec<usize> = (0..self.peers.len()).filter(|&id| !self.peers[id].killed_ever).collect();
        if n == 0 || targets.is_empty() {
            return true;
        }
        let mut held = Vec::new();
        for &id in &targets {
            let Some(file) = run_dir::PeerFile::read(&self.dir, id) else { continue };
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], file.port));
            for i in 0..n {
                let huge = self.settings.pin_kind.huge(i);
                self.pinned[usize::from(!huge)].0 += 1;
                if let Some(stream) = hostile::open_pinning(addr, huge, self.rng.next_u64()) {
                    held.push((huge, stream));
                }
            }
        }
        let hold_end = Instant::now() + self.settings.pin_hold;
        while Instant::now() < hold_end {
            self.pump(Duration::from_millis(50));
        }
        let measured = self.take_measurement("pinned", &targets);
        for (huge, stream) in held {
            if hostile::closed_by_peer(&stream) {
                self.pinned[usize::from(!huge)].1 += 1;
            }
        }
        measured
    }

    fn report(&mut self) {
        for id in 0..self.peers.len() {
            self.send(id, "report");
        }
        self.wait_for("the final reports", |run| {
            run.peers.iter().enumerate().all(|(id, p)| run.finals.contains(&(id, p.incarnation)))
        });
        for (id, p) in self.peers.iter_mut().enumerate() {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match p.child.try_wait() {
                    Ok(Some(status)) if status.success() => break,
                    Ok(Some(status)) => {
                        self.failures.push(format!("peer {id}.{} ended with {status}", p.incarnation));
                        break;
                    }
                    _ if Instant::now() > deadline => {
                        self.failures
                            .push(format!("peer {id}.{} did not exit after its report", p.incarnation));
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }

    /// The peers never killed, with their baseline and final measurements.
    fn survivors(&self) -> Vec<(usize, Mem, Mem)> {
        (0..self.peers.len())
            .filter(|&id| !self.peers[id].killed_ever)
            .filter_map(|id| {
                let before = self.mems.get(&("baseline".to_owned(), id))?.clone();
                let after = self.mems.get(&("final".to_owned(), id))?.clone();
                Some((id, before, after))
            })
            .collect()
    }

    fn rss_limit(&self, baseline: u64) -> u64 {
        baseline + (baseline * self.settings.rss_slack_percent / 100).max(self.settings.rss_slack_kib)
    }

    fn judge_memory(&mut self) {
        let survivors = self.survivors();
        if survivors.is_empty() {
            self.failures.push("no survivor was measured".into());
        }
        for (id, before, after) in survivors {
            let (rss_before, rss_after) = (before.get("rss_kib"), after.get("rss_kib"));
            if rss_after > self.rss_limit(rss_before) {
                self.failures.push(format!(
                    "peer {id}: resident set grew from {rss_before} KiB to {rss_after} KiB (limit {} KiB)",
                    self.rss_limit(rss_before)
                ));
            }
            let (fds_before, fds_after) = (before.get("fds"), after.get("fds"));
            if fds_after > fds_before + self.settings.fd_slack {
                self.failures
                    .push(format!("peer {id}: open descriptors grew from {fds_before} to {fds_after}"));
            }
            if let Some(pinned) = self.mems.get(&("pinned".to_owned(), id)) {
                let rss = pinned.get("rss_kib");
                if rss > self.rss_limit(rss_before) {
                    self.failures.push(format!(
                        "peer {id}: with {} unauthenticated connections held open for {:?} (huge frame \
                         announcements, partial handshakes) its resident set was {rss} KiB, {} KiB above \
                         the baseline (limit {} KiB)",
                        self.settings.pin_connections,
                        self.settings.pin_hold,
                        rss.saturating_sub(rss_before),
                        self.rss_limit(rss_before)
                    ));
                }
            }
            // Both measurements see the same connections: one each way with every other peer.
            let (eps_before, eps_after) = (before.get("endpoints"), after.get("endpoints"));
            if eps_after > eps_before {
                self.failures.push(format!(
                    "peer {id}: the worker holds {eps_after} endpoints, {eps_before} at the baseline"
                ));
            }
        }
    }

    fn print_summary(&self) {
        let mut totals = Counters::new();
        for counters in self.stats.values() {
            for (k, v) in counters.iter().filter(|(k, _)| *k != GAUGE_RSS) {
                *totals.entry(k.clone()).or_default() += v;
            }
        }
        let get = |k: &str| totals.get(k).copied().unwrap_or(0);
        println!("== soak summary ({:.0} s wall)", self.started.elapsed().as_secs_f64());
        println!(
            "settings: {} s of traffic, {} peers, seed {}, tls mix {}",
            self.settings.seconds, self.settings.peers, self.settings.seed, self.settings.tls_mix
        );
        println!(
            "messages checked: tag {} stream {} am {} (eager {}, rendezvous {}) put+get {} atomic32 {} atomic64 {}; \
             {} MiB of messages, {} MiB put and got back",
            get("checked.tag"),
            get("checked.stream"),
            get("checked.am"),
            get("checked.am_eager"),
            get("checked.am_rndv"),
            get("checked.put_get"),
            get("checked.amo32"),
            get("checked.amo64"),
            get("checked.bytes") >> 20,
            get("checked.rma_bytes") >> 20,
        );
        println!("kills {} restarts {}", self.kills, self.restarts);
        let group = |prefix: &str| {
            totals
                .iter()
                .filter_map(|(k, v)| k.strip_prefix(prefix).map(|s| format!("{s} {v}")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "connections: {} attempts, {} established by clients, {} hellos served, {} busy, {} wrong peer",
            get("conn.attempts"),
            get("conn.client"),
            get("conn.hello"),
            get("conn.busy"),
            get("conn.wrong_peer")
        );
        println!("endpoint failures seen by clients: {}", group("epfail.client."));
        println!("endpoint failures seen by servers: {}", group("epfail.server."));
        println!(
            "operations failed with their endpoint (expected of a killed peer): clients {}; servers {}",
            group("operr.client."),
            group("operr.server.")
        );
        println!(
            "  of which: client endpoints failed while the server still ran {}, handshaken hostile endpoints failed {}",
            get("epfail.client_server_alive"),
            get("conn.anonymous_failed")
        );
        println!("unread tag messages of failed connections drained: {}", get("drained.tag"));
        println!("canary checks: {}", get("canary_checks"));
        println!(
            "hostile connections (launched / connected / closed by the peer / peer killed meanwhile / \
             handshakes / refusals):"
        );
        for (kind, s) in &self.hostile {
            println!(
                "  {:<24} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}",
                kind.name(),
                s.launched,
                s.connected,
                s.closed_by_peer,
                s.peer_died,
                s.handshakes,
                s.refusals
            );
        }
        let [huge, partial] = self.pinned;
        println!(
            "pinning probe, held {:?}: huge frame announcements {} opened, {} closed by the peer; \
             partial handshakes {} opened, {} closed by the peer",
            self.settings.pin_hold, huge.0, huge.1, partial.0, partial.1
        );
        println!("memory (baseline after {:?} of warm-up → final):", self.settings.warmup);
        let survivors: BTreeSet<usize> = self.survivors().iter().map(|s| s.0).collect();
        for id in 0..self.peers.len() {
            let before = self.mems.get(&("baseline".to_owned(), id));
            let after = self.mems.get(&("final".to_owned(), id));
            if let (Some(b), Some(a)) = (before, after) {
                let role = if survivors.contains(&id) {
                    "survivor".to_owned()
                } else if b.incarnation == a.incarnation {
                    format!("incarnation {}, killed before the baseline", a.incarnation)
                } else {
                    format!("incarnations {} and {}: not compared", b.incarnation, a.incarnation)
                };
                let change = |name: &str| format!("{} → {}", b.get(name), a.get(name));
                if let Some(p) = self.mems.get(&("pinned".to_owned(), id)) {
                    println!(
                        "  peer {id} with the pinning connections open: rss {} KiB ({:+} KiB), fds {}",
                        p.get("rss_kib"),
                        p.get("rss_kib") as i64 - b.get("rss_kib") as i64,
                        p.get("fds")
                    );
                }
                println!(
                    "  peer {id} ({role}): rss {} KiB ({:+} KiB, limit {} KiB; anon {}, shmem {}, file {}), \
                     fds {}, endpoints {}, memfd mappings {}",
                    change("rss_kib"),
                    a.get("rss_kib") as i64 - b.get("rss_kib") as i64,
                    self.rss_limit(b.get("rss_kib")),
                    change("anon_kib"),
                    change("shmem_kib"),
                    change("file_kib"),
                    change("fds"),
                    change("endpoints"),
                    change("memfd_maps"),
                );
                let kinds: BTreeSet<&String> =
                    b.figures.keys().chain(a.figures.keys()).filter(|k| k.starts_with("fd.")).collect();
                let kinds: Vec<String> =
                    kinds.into_iter().map(|k| format!("{} {}", &k[3..], change(k))).collect();
                println!("    descriptors by kind: {}", kinds.join(", "));
                let kinds: BTreeSet<&String> =
                    b.figures.keys().chain(a.figures.keys()).filter(|k| k.starts_with("ep.")).collect();
                let kinds: Vec<String> =
                    kinds.into_iter().map(|k| format!("{} {}", &k[3..], change(k))).collect();
                println!("    endpoints by transport: {}", kinds.join(", "));
            }
        }
        for &id in &survivors {
            if let Some(trace) = self.rss_trace.get(&(id, 0)) {
                let points: Vec<String> =
                    trace.iter().map(|(t, kib)| format!("{t}s:{}", kib >> 10)).collect();
                println!("  peer {id} resident set during traffic (MiB): {}", points.join(" "));
            }
        }
        // Every figure on one line, for scripts and the suite's short soak.
        totals.insert("kills".into(), self.kills);
        totals.insert("restarts".into(), self.restarts);
        for (kind, s) in &self.hostile {
            totals.insert(format!("hostile.{}.connected", kind.name()), s.connected);
        }
        let words: Vec<String> = totals.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("totals {}", words.join(" "));
        if self.failures.is_empty() {
            println!("result: PASS");
        } else {
            println!("result: FAIL");
            for f in &self.failures {
                println!("  {f}");
            }
        }
    }
}
