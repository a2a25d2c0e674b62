//! The soak harness behind the `soak` binary and `scripts/soak.sh`: peer processes exchange
//! checked traffic of every kind while an orchestrator kills and restarts them and throws hostile
//! TCP connections at their listeners, then compares the survivors' memory and descriptors with
//! what they used after the warm-up.
//!
//! - [`orchestrator`]: starts the peers, kills and restarts them, runs the hostile connections,
//!   quiesces the peers for the two measurements, and judges the run.
//! - [`peer`]: one peer process: a worker with a listener, a client endpoint to every other peer
//!   and the endpoints the others opened to it, every received byte checked.
//! - [`hostile`]: the hostile connections, plain TCP from the orchestrator.
//! - [`pattern`]: the byte pattern and message header; [`run_dir`]: how peers find each other.
//!
//! The orchestrator talks to a peer through its stdin (one command a line) and reads its stdout
//! ([`Line`]).

pub mod hostile;
pub mod orchestrator;
pub mod pattern;
pub mod peer;
pub mod run_dir;

use std::collections::BTreeMap;
use std::time::Duration;

/// Largest put or get, and the size of a connection's data area in the target's region.
pub const MAX_RMA: usize = 1 << 20;
/// Largest tag message (header included) and active-message data: well past the rendezvous
/// threshold.
pub const MAX_MSG: usize = (1 << 20) + 64;
/// Largest stream message (header included).
pub const MAX_STREAM_MSG: usize = 256 << 10;
/// Messages of one kind a client sends ahead of the receiver's confirmation (credits).
pub const WINDOW: u64 = 8;

/// How long a peer may take to notice a dead peer's endpoint, to finish a request after its
/// endpoint failed, or to answer a hello: past it the run fails as hung. Generous, because a
/// loaded two-core machine may leave a process off the CPU for a while.
pub fn fail_deadline() -> Duration {
    Duration::from_secs(env_u64("SOAK_FAIL_DEADLINE", 30))
}

/// A `u64` from the environment, or `default` when unset; exits when it is not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("soak: {name}={v:?} is not a number");
            std::process::exit(2)
        }),
        Err(_) => default,
    }
}

/// A small deterministic generator (xorshift64*), so a seed reproduces a run's choices.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Never zero, which xorshift cannot leave.
        Rng(pattern::mix(seed) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A message or access size in `min..=max`, mostly small, sometimes past the rendezvous
    /// threshold (64 KiB by default) and up to `max`.
    pub fn size(&mut self, min: usize, max: usize) -> usize {
        let (lo, hi) = match self.below(100) {
            0..=39 => (1, 256),
            40..=64 => (257, 8 << 10),
            65..=79 => ((8 << 10) + 1, (64 << 10) - 1),
            80..=89 => (64 << 10, 256 << 10),
            _ => ((256 << 10) + 1, max),
        };
        let (lo, hi) = (lo.clamp(min, max), hi.clamp(min, max));
        self.range(lo as u64, hi as u64) as usize
    }
}

/// A `kB` field of /proc/self/status.
fn status_kib(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// What this process holds: resident set (`VmRSS`, and its anonymous, file and shared-memory
/// parts), open descriptors (the listing's own not counted) and memfd mappings.
pub fn process_figures() -> Counters {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut figures = Counters::new();
    for (name, field) in
        [("rss_kib", "VmRSS"), ("anon_kib", "RssAnon"), ("file_kib", "RssFile"), ("shmem_kib", "RssShmem")]
    {
        figures.insert(name.into(), status_kib(&status, field));
    }
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64).saturating_sub(1);
    figures.insert("fds".into(), fds);
    // What the descriptors are (sockets, memfds, io_uring and event fds, ...), to tell which
    // kind grew. The listing's own descriptor has vanished by the time it is read.
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for entry in dir.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let target = target.to_string_lossy();
            let kind = match target.split_once(':') {
                Some(("anon_inode", what)) => what.trim_matches(|c| c == '[' || c == ']').to_owned(),
                Some((kind, _)) => kind.to_owned(),
                None if target.starts_with("/memfd") => "memfd".to_owned(),
                None => "file".to_owned(),
            };
            *figures.entry(format!("fd.{kind}")).or_default() += 1;
        }
    }
    figures.insert("memfd_maps".into(), maps.lines().filter(|l| l.contains("/memfd:")).count() as u64);
    figures
}

/// The resident set in a peer's stats line: a reading, not a count.
pub const GAUGE_RSS: &str = "now.rss_kib";

/// Named counters, reported as `name=value` words.
pub type Counters = BTreeMap<String, u64>;

/// Counters as `name=value` words.
pub fn words(counters: &Counters) -> String {
    counters.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn parse_words(text: &str) -> Counters {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// One line a peer prints for the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// Cumulative counters, every second and at the end (`final`).
    Stats { last: bool, counters: Counters },
    /// Traffic stopped, every request finished and every other peer connected.
    Quiet,
    /// A measurement ([`process_figures`], and the endpoints the worker holds).
    Mem { label: String, figures: Counters },
    /// A data-integrity failure or a hang; the peer exits after printing it.
    Fail(String),
}

impl Line {
    /// The line as printed.
    pub fn text(&self) -> String {
        match self {
            Line::Stats { last, counters } => {
                format!("{} {}", if *last { "final" } else { "stat" }, words(counters))
            }
            Line::Quiet => "quiet".into(),
            Line::Mem { label, figures } => format!("mem {label} {}", words(figures)),
            Line::Fail(why) => format!("fail {}", why.replace('\n', " ")),
        }
    }

    pub fn print(&self) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // The orchestrator being gone is noticed on stdin; nothing to do about it here.
        let _ = writeln!(out, "{}", self.text());
        let _ = out.flush();
    }

    pub fn parse(line: &str) -> Option<Line> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "stat" | "final" => Line::Stats { last: word == "final", counters: parse_words(rest) },
            "quiet" => Line::Quiet,
            "mem" => {
                let (label, rest) = rest.split_once(' ')?;
                Line::Mem { label: label.to_owned(), figures: parse_words(rest) }
            }
            "fail" => Line::Fail(rest.to_owned()),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_back() {
        let counters: Counters = [("tag".to_owned(), 5), ("err.ConnectionReset".to_owned(), 2)].into();
        for line in [
            Line::Stats { last: true, counters },
            Line::Quiet,
            Line::Mem { label: "baseline".into(), figures: [("rss_kib".to_owned(), 1234)].into() },
            Line::Fail("tag seq 4 after 2".into()),
        ] {
            let text = line.text();
            assert_eq!(Line::parse(&text), Some(line));
        }
    }

    #[test]
    fn sizes_stay_in_range_and_reach_both_ends() {
        let mut rng = Rng::new(7);
        let sizes: Vec<usize> = (0..20_000).map(|_| rng.size(32, MAX_MSG)).collect();
        assert!(sizes.iter().all(|&s| (32..=MAX_MSG).contains(&s)));
        assert!(sizes.iter().any(|&s| s < 256));
        assert!(sizes.iter().any(|&s| s > 1 << 19));
    }
}
