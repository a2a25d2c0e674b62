//! The options of `zcx perf` and the tests it runs (names as in `ucx_perftest`).

use std::fmt;

use clap::{Args, ValueEnum};

/// Default TCP port of `--server` / `--client` (the one `ucx_perftest` uses).
pub const DEFAULT_PORT: u16 = 13337;

/// Options of `zcx perf`. Without `--server` or `--client` it runs both sides on this host: it
/// starts itself as a server process pinned to `--server-cpu` and runs the client pinned to
/// `--client-cpu`.
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// Run only the server side: wait for one client, serve the tests it asks for, exit.
    #[arg(long, conflicts_with = "client")]
    pub server: bool,
    /// Run only the client side, against the server on HOST.
    #[arg(long, value_name = "HOST")]
    pub client: Option<String>,
    /// TCP port of the server (default 13337 with --server/--client; a free port otherwise).
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Tests to run, comma-separated (default: all of them, in this order).
    #[arg(short = 't', long = "test", value_enum, value_delimiter = ',')]
    pub tests: Vec<TestKind>,
    /// Message size in bytes (suffixes k, m, g: binary); default 8 for latency tests, 1m for
    /// bandwidth tests.
    #[arg(short = 's', long, value_parser = parse_size)]
    pub size: Option<usize>,
    /// Measured iterations (default 100000 for latency tests, 2000 for bandwidth tests).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Warm-up iterations, not measured (default 1000 for latency, 100 for bandwidth tests).
    #[arg(short = 'w', long)]
    pub warmup: Option<u64>,
    /// Outstanding operations in bandwidth tests.
    #[arg(short = 'W', long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub window: u32,
    /// Iterations per timed batch of latency tests (the latency is the median of the batches).
    #[arg(short = 'b', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// CPU of the client (used by the default mode and --client).
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// CPU of the server (used by the default mode and --server).
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// Do not pin either side to a CPU.
    #[arg(long)]
    pub no_pin: bool,
    /// Seconds one operation may take before the run fails (a dead peer, a lost message).
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Set by the default mode when it starts the server: the server dies with this process.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
}

/// A benchmark, named like its `ucx_perftest` counterpart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum TestKind {
    /// Tag ping-pong; one-way latency (RTT/2).
    TagLat,
    /// Tag streaming with a window of sends; bandwidth.
    TagBw,
    /// Put ping-pong through registered memory, polled by each side; one-way latency.
    PutLat,
    /// A window of puts, then a flush; bandwidth.
    PutBw,
    /// Active-message ping-pong; one-way latency.
    AmLat,
    /// Active-message streaming with a window of sends; bandwidth.
    AmBw,
}

impl TestKind {
    /// Every test, in the order of a default run.
    pub const ALL: [TestKind; 6] = [
        TestKind::TagLat,
        TestKind::TagBw,
        TestKind::PutLat,
        TestKind::PutBw,
        TestKind::AmLat,
        TestKind::AmBw,
    ];

    /// The name used on the command line, in the output and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::TagLat => "tag_lat",
            TestKind::TagBw => "tag_bw",
            TestKind::PutLat => "put_lat",
            TestKind::PutBw => "put_bw",
            TestKind::AmLat => "am_lat",
            TestKind::AmBw => "am_bw",
        }
    }

    /// The test called `name`.
    pub fn from_name(name: &str) -> Option<TestKind> {
        TestKind::ALL.into_iter().find(|t| t.name() == name)
    }

    /// True for ping-pong tests, false for bandwidth tests.
    pub fn is_latency(self) -> bool {
        matches!(self, TestKind::TagLat | TestKind::PutLat | TestKind::AmLat)
    }
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One test as both sides run it: the client sends it to the server before the test starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestSpec {
    pub kind: TestKind,
    pub size: usize,
    pub iters: u64,
    pub warmup: u64,
    pub window: u32,
}

impl TestSpec {
    /// The spec of `kind` under `args`, with the per-kind defaults.
    pub fn new(kind: TestKind, args: &PerfArgs) -> TestSpec {
        let (size, iters, warmup) = if kind.is_latency() { (8, 100_000, 1000) } else { (1 << 20, 2000, 100) };
        let mut size = args.size.unwrap_or(size);
        if kind == TestKind::PutLat {
            // The 8-byte counter each side polls for lives in the message.
            size = size.max(8);
        }
        TestSpec {
            kind,
            size,
            iters: args.iters.unwrap_or(iters).max(1),
            warmup: args.warmup.unwrap_or(warmup),
            window: if kind.is_latency() { 1 } else { args.window },
        }
    }

    /// The wire form: `test <name> <size> <iters> <warmup> <window>`.
    pub fn encode(&self) -> String {
        format!("test {} {} {} {} {}", self.kind, self.size, self.iters, self.warmup, self.window)
    }

    /// Parses [`TestSpec::encode`]'s output.
    pub fn decode(text: &str) -> Option<TestSpec> {
        let mut words = text.split_ascii_whitespace();
        if words.next()? != "test" {
            return None;
        }
        let kind = TestKind::from_name(words.next()?)?;
        let size = words.next()?.parse().ok()?;
        let iters = words.next()?.parse().ok()?;
        let warmup = words.next()?.parse().ok()?;
        let window = words.next()?.parse().ok()?;
        if words.next().is_some() || window == 0 || (kind == TestKind::PutLat && size < 8) {
            return None;
        }
        Some(TestSpec { kind, size, iters, warmup, window })
    }
}

/// `4096`, `64k`, `1m`, `1g` (binary multiples).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, shift) = match lower.strip_suffix(['k', 'm', 'g']) {
        Some(d) => (d, [10, 20, 30][lower.chars().last().map_or(0, |c| "kmg".find(c).unwrap_or(0))]),
        None => (lower.as_str(), 0),
    };
    let n: usize = digits.parse().map_err(|_| format!("bad size {text:?}: expected e.g. 8, 64k, 1m"))?;
    n.checked_mul(1usize << shift).ok_or_else(|| format!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn specs_round_trip_through_the_wire_form() {
        let spec = TestSpec { kind: TestKind::PutBw, size: 1 << 20, iters: 10, warmup: 2, window: 16 };
        assert_eq!(TestSpec::decode(&spec.encode()), Some(spec));
        assert_eq!(TestSpec::decode("test put_lat 4 1 1 1"), None);
        assert_eq!(TestSpec::decode("test nope 8 1 1 1"), None);
        assert_eq!(TestSpec::decode("done"), None);
    }
}
