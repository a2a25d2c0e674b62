//! The options of `zcx perf` and the tests it runs (names as in `ucx_perftest`).

use std::fmt;

use clap::{Args, ValueEnum};

/// Default TCP port of `--server` / `--client` (the one `ucx_perftest` uses).
pub const DEFAULT_PORT: u16 = 13337;

/// Largest message of a latency test: past this a ping-pong measures bandwidth, and a typo like
/// `-s 1g` would allocate gigabytes per side before failing.
pub const LATENCY_SIZE_CAP: usize = 64 << 20;

/// Most endpoints `--endpoints` opens: each costs both sides descriptors and mapped rings (see
/// `docs/scale.md`), and message tags carry the endpoint's index in 32 bits.
pub const ENDPOINTS_CAP: u32 = 4096;

/// Largest message of any test.
pub const SIZE_CAP: usize = 1 << 30;

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
    /// Message sizes in bytes, comma-separated (suffixes k, m, g: binary), each test runs once per
    /// size; default 8 for latency tests, 1m for bandwidth tests. Atomic tests run at the sizes
    /// of the list that are 4 or 8 (at 8 if there are none, unless they were named with -t).
    #[arg(short = 's', long = "size", value_parser = parse_size, value_delimiter = ',', conflicts_with = "sweep")]
    pub sizes: Vec<usize>,
    /// Size sweep MIN:MAX, doubling from MIN up to MAX (e.g. 8:4m).
    #[arg(long, value_name = "MIN:MAX", value_parser = parse_sweep)]
    pub sweep: Option<(usize, usize)>,
    /// Measured iterations. Default: 100000 for latency tests and 2000 for bandwidth tests, fewer
    /// for large messages, so that one size moves at most 256 MiB of messages (latency) or 2 GiB
    /// (bandwidth), and never fewer than 100 iterations: e.g. tag_lat runs 4096 iterations at
    /// 64k and 100 at 4m, tag_bw 2000 at 1m and 512 at 4m. A value given here is used as is.
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Warm-up iterations, not measured. Default: 1000 for latency tests and 100 for bandwidth
    /// tests, scaled down with the iterations of large messages (one per 100 measured iterations
    /// for latency, one per 20 for bandwidth; at least 10).
    #[arg(short = 'w', long)]
    pub warmup: Option<u64>,
    /// Outstanding operations in bandwidth tests.
    #[arg(short = 'W', long, default_value_t = 16, value_parser = parse_window)]
    pub window: u32,
    /// Iterations per timed batch of latency tests (`latency_us` is the median of the batches).
    /// Default: 1000, or a tenth of the iterations when a test has fewer than 10000, so that
    /// the median is taken over at least 10 batches (of 10 iterations or more, one each).
    #[arg(short = 'b', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// The receiver checks every byte of every message against a pattern derived from the
    /// message's number; the first wrong byte fails the run.
    #[arg(long)]
    pub validate: bool,
    /// Send from and receive into memory registered up front (`mem_map`'d slices) or, with `no`,
    /// from plain heap buffers. Default: heap buffers for latency, registered for bandwidth tests.
    #[arg(long, value_name = "yes|no", num_args = 0..=1, default_missing_value = "yes", value_parser = parse_yes_no)]
    pub mem_prereg: Option<bool>,
    /// Transports for both sides (sets ZCX_TLS, like UCX_TLS for ucx_perftest).
    #[arg(long, value_name = "TLS")]
    pub tls: Option<String>,
    /// Print one CSV record per test (with a header line) instead of key=value lines.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print one JSON object per test, one per line, instead of key=value lines.
    #[arg(long)]
    pub json: bool,
    /// Show a progress line on stderr while a test runs (default: only when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
    /// Also draw latency and bandwidth against message size into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// CPU of the client (used by the default mode and --client).
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// CPU of the server (used by the default mode and --server).
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// Do not pin either side to a CPU.
    #[arg(long)]
    pub no_pin: bool,
    /// Many-endpoints mode of tag_lat and tag_sync_lat: the client opens N endpoints to the one
    /// server and sends message i over endpoint i mod N (the server answers on the endpoint the
    /// message came from). Reports the latency per message, N and the memory each endpoint costs
    /// both sides. Default 1: one endpoint, the plain test. With N above 1 the tests default to
    /// tag_lat, and other tests are refused.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_endpoints)]
    pub endpoints: u32,
    /// Seconds one operation may take before the run fails (a dead peer, a lost message).
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// For tests of the harness: the client flips a byte of its message N (counting warm-up from
    /// 0), which `--validate` must catch.
    #[arg(long, hide = true, value_name = "N")]
    pub corrupt_iter: Option<u64>,
    /// Set by the default mode when it starts the server: the server dies with this process.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
}

impl PerfArgs {
    /// `-b` for the header line: the number given, or `auto` ([`batch_for`]'s default).
    pub fn batch_label(&self) -> String {
        self.batch.map_or_else(|| "auto".to_owned(), |b| b.to_string())
    }
}

/// A benchmark, named like its `ucx_perftest` counterpart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum TestKind {
    /// Tag ping-pong; one-way latency (RTT/2).
    TagLat,
    /// Tag ping-pong with synchronous sends (complete once the peer matched); one-way latency.
    TagSyncLat,
    /// Tag streaming with a window of sends; bandwidth.
    TagBw,
    /// Put ping-pong through registered memory, polled by each side; one-way latency.
    PutLat,
    /// A window of puts, then a flush; bandwidth.
    PutBw,
    /// One get at a time; latency of the whole operation (a round trip).
    GetLat,
    /// A window of gets; bandwidth.
    GetBw,
    /// Atomic adds streamed back to back, nothing waiting for any one of them (as
    /// `ucx_perftest`'s ucp_add); time per add, including the flush that ends the run.
    AtomicAddLat,
    /// Fetch-and-add, one at a time; latency of the operation.
    FaddLat,
    /// Compare-and-swap (always succeeding), one at a time; latency of the operation.
    CswapLat,
    /// Active-message ping-pong; one-way latency.
    AmLat,
    /// Active-message streaming with a window of sends; bandwidth.
    AmBw,
    /// Stream ping-pong (receives wait for the whole message); one-way latency.
    StreamLat,
    /// Stream sends with a window, received message by message; bandwidth.
    StreamBw,
}

impl TestKind {
    /// Every test, in the order of a default run.
    pub const ALL: [TestKind; 14] = [
        TestKind::TagLat,
        TestKind::TagSyncLat,
        TestKind::TagBw,
        TestKind::PutLat,
        TestKind::PutBw,
        TestKind::GetLat,
        TestKind::GetBw,
        TestKind::AtomicAddLat,
        TestKind::FaddLat,
        TestKind::CswapLat,
        TestKind::AmLat,
        TestKind::AmBw,
        TestKind::StreamLat,
        TestKind::StreamBw,
    ];

    /// The name used on the command line, in the output and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::TagLat => "tag_lat",
            TestKind::TagSyncLat => "tag_sync_lat",
            TestKind::TagBw => "tag_bw",
            TestKind::PutLat => "put_lat",
            TestKind::PutBw => "put_bw",
            TestKind::GetLat => "get_lat",
            TestKind::GetBw => "get_bw",
            TestKind::AtomicAddLat => "atomic_add_lat",
            TestKind::FaddLat => "fadd_lat",
            TestKind::CswapLat => "cswap_lat",
            TestKind::AmLat => "am_lat",
            TestKind::AmBw => "am_bw",
            TestKind::StreamLat => "stream_lat",
            TestKind::StreamBw => "stream_bw",
        }
    }

    /// The test called `name`.
    pub fn from_name(name: &str) -> Option<TestKind> {
        TestKind::ALL.into_iter().find(|t| t.name() == name)
    }

    /// True for latency tests, false for bandwidth tests.
    pub fn is_latency(self) -> bool {
        !matches!(
            self,
            TestKind::TagBw | TestKind::PutBw | TestKind::GetBw | TestKind::AmBw | TestKind::StreamBw
        )
    }

    /// True for the atomic tests, whose "size" is the operand size.
    pub fn is_atomic(self) -> bool {
        matches!(self, TestKind::AtomicAddLat | TestKind::FaddLat | TestKind::CswapLat)
    }

    /// True for ping-pong tests: one iteration is two messages, and the latency reported is
    /// half of it. One-sided operations (get, atomics) report the whole operation, as
    /// `ucx_perftest` does for them.
    pub fn is_ping_pong(self) -> bool {
        matches!(
            self,
            TestKind::TagLat
                | TestKind::TagSyncLat
                | TestKind::PutLat
                | TestKind::AmLat
                | TestKind::StreamLat
        )
    }

    /// Whether the test runs over many endpoints (`--endpoints`).
    pub fn takes_endpoints(self) -> bool {
        matches!(self, TestKind::TagLat | TestKind::TagSyncLat)
    }

    /// The smallest message the test can move.
    fn min_size(self) -> usize {
        match self {
            TestKind::TagLat | TestKind::TagSyncLat | TestKind::AmLat => 0,
            TestKind::PutLat => 8,
            TestKind::AtomicAddLat | TestKind::FaddLat | TestKind::CswapLat => 4,
            _ => 1,
        }
    }
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which buffers a test sends from and receives into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemMode {
    /// `mem_map`'d memory, registered before the test starts.
    Prereg,
    /// Heap `Vec`s, registered (or copied) by the transport per operation.
    Heap,
}

impl MemMode {
    /// The name in the output and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            MemMode::Prereg => "prereg",
            MemMode::Heap => "heap",
        }
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
    pub validate: bool,
    pub mem: MemMode,
    /// Endpoints the messages go over, round-robin (1: the plain test).
    pub endpoints: u32,
}

/// Default iterations of a latency test (small messages).
pub const LAT_ITERS: u64 = 100_000;
/// Default warm-up of a latency test (small messages): one per 100 measured iterations.
pub const LAT_WARMUP: u64 = 1000;
/// Bytes of messages one size of a latency test moves at most by default (one way: a ping-pong
/// moves twice this). Above 2.6 KiB this lowers the iterations: 4096 at 64 KiB.
pub const LAT_BYTES: u64 = 256 << 20;
/// Default iterations of a bandwidth test (messages up to 1 MiB).
pub const BW_ITERS: u64 = 2000;
/// Default warm-up of a bandwidth test: one per 20 measured iterations.
pub const BW_WARMUP: u64 = 100;
/// Bytes one size of a bandwidth test moves at most by default: 2000 iterations up to 1 MiB,
/// 512 at 4 MiB.
pub const BW_BYTES: u64 = 2 << 30;
/// The fewest iterations the defaults give a large message: enough for the median of 10
/// batches and for percentiles of single iterations.
pub const MIN_ITERS: u64 = 100;
/// The least warm-up the defaults give a large message.
pub const MIN_WARMUP: u64 = 10;

/// Default (iterations, warm-up) of a `kind` test of `size`-byte messages.
///
/// The rule `ucx_perftest` users apply by hand when they sweep sizes: small messages keep the
/// full counts (their runs are short, and their figures are the noisiest), large ones run fewer
/// iterations, so that the bytes one size moves (iterations × size) stay within a budget
/// ([`LAT_BYTES`], [`BW_BYTES`]); a size never drops below [`MIN_ITERS`]. The warm-up keeps its
/// share of the iterations ([`LAT_WARMUP`] per [`LAT_ITERS`], [`BW_WARMUP`] per [`BW_ITERS`]),
/// at least [`MIN_WARMUP`]. Without this a `--sweep 8:4m` of a latency test moved 100000 round
/// trips of 4 MiB at its last size alone.
pub fn default_counts(kind: TestKind, size: usize) -> (u64, u64) {
    let (full, warmup, budget) =
        if kind.is_latency() { (LAT_ITERS, LAT_WARMUP, LAT_BYTES) } else { (BW_ITERS, BW_WARMUP, BW_BYTES) };
    let iters = (budget / (size as u64).max(1)).clamp(MIN_ITERS, full);
    let warmup = (iters * warmup / full).max(MIN_WARMUP).min(warmup);
    (iters, warmup)
}

/// Iterations per timed batch of a latency test of `iters` iterations: `asked` (`-b`) if given,
/// else [`DEFAULT_BATCH`] lowered to a tenth of the iterations, so that the median of batches is
/// taken over at least 10 of them (of 10 iterations or more; fewer run one per batch).
pub fn batch_for(asked: Option<u64>, iters: u64) -> u64 {
    asked.unwrap_or_else(|| DEFAULT_BATCH.min(iters / 10).max(1))
}

/// Iterations per timed batch of a latency test when neither `-b` nor a short run lowers it.
pub const DEFAULT_BATCH: u64 = 1000;

impl TestSpec {
    /// The spec of `kind` with message `size` under `args`, with the per-kind defaults scaled by
    /// size ([`default_counts`]) where `-n` / `-w` are not given.
    pub fn new(kind: TestKind, size: usize, args: &PerfArgs) -> TestSpec {
        let (iters, warmup) = default_counts(kind, size);
        let mem = match args.mem_prereg {
            Some(true) => MemMode::Prereg,
            Some(false) => MemMode::Heap,
            None if kind.is_latency() => MemMode::Heap,
            None => MemMode::Prereg,
        };
        TestSpec {
            kind,
            size,
            iters: args.iters.unwrap_or(iters).max(1),
            warmup: args.warmup.unwrap_or(warmup),
            window: if kind.is_latency() { 1 } else { args.window },
            validate: args.validate,
            mem,
            endpoints: args.endpoints,
        }
    }

    /// Messages the sender issues in all (warm-up included).
    pub fn total(&self) -> u64 {
        self.warmup + self.iters
    }

    /// The wire form: `test <name> <size> <iters> <warmup> <window> <validate> <mem>`, followed
    /// by `<endpoints>` when there are more than one.
    pub fn encode(&self) -> String {
        let mut text = format!(
            "test {} {} {} {} {} {} {}",
            self.kind,
            self.size,
            self.iters,
            self.warmup,
            self.window,
            u8::from(self.validate),
            self.mem.name()
        );
        if self.endpoints > 1 {
            text.push_str(&format!(" {}", self.endpoints));
        }
        text
    }

    /// Parses [`TestSpec::encode`]'s output; `None` for anything malformed or out of range.
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
        let validate = match words.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let mem = match words.next()? {
            "prereg" => MemMode::Prereg,
            "heap" => MemMode::Heap,
            _ => return None,
        };
        let endpoints = match words.next() {
            None => 1,
            Some(n) => n.parse().ok().filter(|&n| n > 1)?,
        };
        let spec = TestSpec { kind, size, iters, warmup, window, validate, mem, endpoints };
        if words.next().is_some() || spec.problem().is_some() {
            return None;
        }
        Some(spec)
    }

    /// What is wrong with this spec, if anything (checked by the client before it starts and by
    /// the server on every request).
    pub fn problem(&self) -> Option<String> {
        let kind = self.kind;
        if kind.is_atomic() && self.size != 4 && self.size != 8 {
            return Some(format!("{kind}: the size is the operand size, 4 or 8 bytes (got {})", self.size));
        }
        if self.size < kind.min_size() {
            let what = if kind.is_latency() { "" } else { " (a bandwidth test moves bytes)" };
            return Some(format!(
                "{kind}: message size {} is too small, the least is {}{what}",
                self.size,
                kind.min_size()
            ));
        }
        if kind.is_latency() && self.size > LATENCY_SIZE_CAP {
            return Some(format!(
                "{kind}: message size {} is above the latency tests' cap of {} MiB; use a bandwidth test",
                self.size,
                LATENCY_SIZE_CAP >> 20
            ));
        }
        if self.size > SIZE_CAP {
            return Some(format!(
                "{kind}: message size {} is above the cap of {} GiB",
                self.size,
                SIZE_CAP >> 30
            ));
        }
        if self.window == 0 || self.iters == 0 {
            return Some(format!("{kind}: the window and the iteration count must be at least 1"));
        }
        if self.endpoints > 1 && !kind.takes_endpoints() {
            return Some(format!("{kind}: --endpoints runs tag_lat and tag_sync_lat only"));
        }
        if !(1..=ENDPOINTS_CAP).contains(&self.endpoints) {
            return Some(format!("--endpoints: 1 to {ENDPOINTS_CAP} endpoints (got {})", self.endpoints));
        }
        None
    }
}

/// The tests and sizes `args` asks for, in run order (test by test, each over the sizes), or
/// what is wrong with the request.
pub fn plan(args: &PerfArgs) -> Result<Vec<TestSpec>, String> {
    let explicit = !args.tests.is_empty();
    let kinds = match (explicit, args.endpoints > 1) {
        (true, _) => args.tests.clone(),
        (false, true) => vec![TestKind::TagLat],
        (false, false) => TestKind::ALL.to_vec(),
    };
    let sizes: Option<Vec<usize>> = match args.sweep {
        Some((min, max)) => Some(sweep_sizes(min, max)),
        None if !args.sizes.is_empty() => Some(args.sizes.clone()),
        None => None,
    };
    let mut specs = Vec::new();
    for kind in kinds {
        let default = if kind.is_latency() { 8 } else { 1 << 20 };
        let mut own: Vec<usize> = match &sizes {
            None => vec![default],
            // Atomics move one operand: a list or sweep of message sizes runs them at the sizes
            // they take (4, 8); with neither, at 8 bytes, unless they were named (then the sizes
            // asked for are an error).
            Some(list) if kind.is_atomic() => {
                let fitting: Vec<usize> = list.iter().copied().filter(|&s| s == 4 || s == 8).collect();
                match (fitting.is_empty(), explicit) {
                    (false, _) => fitting,
                    (true, false) => vec![8],
                    (true, true) => list.clone(),
                }
            }
            Some(list) => list.clone(),
        };
        if kind == TestKind::PutLat {
            // The 8-byte counter each side polls for lives in the message.
            own.iter_mut().for_each(|s| *s = (*s).max(8));
        }
        own.dedup();
        for size in own {
            let spec = TestSpec::new(kind, size, args);
            if let Some(problem) = spec.problem() {
                return Err(problem);
            }
            specs.push(spec);
        }
    }
    Ok(specs)
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

/// `MIN:MAX` with sizes as [`parse_size`] reads them; MIN at least 1 and at most MAX.
pub fn parse_sweep(text: &str) -> Result<(usize, usize), String> {
    let (min, max) =
        text.split_once(':').ok_or_else(|| format!("bad sweep {text:?}: expected MIN:MAX, e.g. 8:4m"))?;
    let (min, max) = (parse_size(min)?, parse_size(max)?);
    if min == 0 {
        return Err("a sweep starts at 1 byte or more (it doubles from MIN)".into());
    }
    if min > max {
        return Err(format!("bad sweep {text:?}: MIN is larger than MAX"));
    }
    Ok((min, max))
}

/// MIN, 2·MIN, 4·MIN, … up to MAX (MAX itself included even when it is not on the ladder).
pub fn sweep_sizes(min: usize, max: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut size = min;
    while size < max {
        sizes.push(size);
        size = size.saturating_mul(2);
    }
    sizes.push(max);
    sizes
}

fn parse_window(text: &str) -> Result<u32, String> {
    let window: u32 =
        text.parse().map_err(|_| format!("bad window {text:?}: expected a number of operations"))?;
    if !(1..=1024).contains(&window) {
        return Err(format!("the window must be 1 to 1024 outstanding operations (got {window})"));
    }
    Ok(window)
}

fn parse_endpoints(text: &str) -> Result<u32, String> {
    let n: u32 = text.parse().map_err(|_| format!("bad endpoint count {text:?}: expected a number"))?;
    if !(1..=ENDPOINTS_CAP).contains(&n) {
        return Err(format!("--endpoints takes 1 to {ENDPOINTS_CAP} endpoints (got {n})"));
    }
    Ok(n)
}

fn parse_yes_no(text: &str) -> Result<bool, String> {
    match text {
        "yes" | "y" | "1" | "true" => Ok(true),
        "no" | "n" | "0" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: TestKind, size: usize) -> TestSpec {
        TestSpec {
            kind,
            size,
            iters: 10,
            warmup: 2,
            window: 16,
            validate: false,
            mem: MemMode::Prereg,
            endpoints: 1,
        }
    }

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
    fn sweeps_double_and_end_at_max() {
        assert_eq!(sweep_sizes(8, 64), vec![8, 16, 32, 64]);
        assert_eq!(sweep_sizes(8, 100), vec![8, 16, 32, 64, 100]);
        assert_eq!(sweep_sizes(4, 4), vec![4]);
        assert_eq!(parse_sweep("8:4m"), Ok((8, 4 << 20)));
        assert!(parse_sweep("0:8").is_err());
        assert!(parse_sweep("64:8").is_err());
        assert!(parse_sweep("8").is_err());
    }

    #[test]
    fn specs_round_trip_through_the_wire_form() {
        for kind in TestKind::ALL {
            let size = if kind.is_atomic() { 8 } else { 1 << 20 };
            let mut s = spec(kind, size);
            s.validate = kind.is_latency();
            assert_eq!(TestSpec::decode(&s.encode()), Some(s), "{kind}");
            assert_eq!(TestKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(TestSpec::decode("test put_lat 4 1 1 1 0 heap"), None);
        assert_eq!(TestSpec::decode("test fadd_lat 16 1 1 1 0 heap"), None);
        assert_eq!(TestSpec::decode("test tag_bw 0 1 1 1 0 heap"), None);
        assert_eq!(TestSpec::decode("test tag_lat 8 1 1 0 0 heap"), None);
        assert_eq!(TestSpec::decode("test nope 8 1 1 1 0 heap"), None);
        assert_eq!(TestSpec::decode("done"), None);
    }

    /// `zcx perf ARGS...` parsed as the command line would be.
    fn perf_args(words: &[&str]) -> PerfArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            perf: PerfArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("perf").chain(words.iter().copied()))
            .expect("valid arguments")
            .perf
    }

    /// The spec of `kind` at `size` in the plan of `words`.
    fn planned(words: &[&str], kind: TestKind, size: usize) -> TestSpec {
        plan(&perf_args(words))
            .expect("a valid plan")
            .into_iter()
            .find(|s| s.kind == kind && s.size == size)
            .unwrap_or_else(|| panic!("no {kind} at {size} in the plan of {words:?}"))
    }

    #[test]
    fn default_iterations_shrink_with_large_messages_only() {
        let sweep = ["--sweep", "8:4m", "-t", "tag_lat,tag_bw"];
        let counts = |kind, size| {
            let spec = planned(&sweep, kind, size);
            (spec.iters, spec.warmup)
        };
        // Latency: the full 100000 (and 1000 warm-up) for small messages, at most 256 MiB of
        // messages per size above that, never fewer than 100 iterations.
        assert_eq!(counts(TestKind::TagLat, 8), (100_000, 1000));
        assert_eq!(counts(TestKind::TagLat, 64 << 10), (4096, 40));
        assert_eq!(counts(TestKind::TagLat, 4 << 20), (100, 10));
        // Bandwidth: 2000 (and 100) up to 1 MiB, at most 2 GiB per size above it.
        assert_eq!(counts(TestKind::TagBw, 8), (2000, 100));
        assert_eq!(counts(TestKind::TagBw, 64 << 10), (2000, 100));
        assert_eq!(counts(TestKind::TagBw, 1 << 20), (2000, 100));
        assert_eq!(counts(TestKind::TagBw, 4 << 20), (512, 25));
        for size in sweep_sizes(8, 1 << 30) {
            for kind in [TestKind::TagLat, TestKind::TagBw] {
                let (iters, warmup) = default_counts(kind, size);
                let budget = if kind.is_latency() { LAT_BYTES } else { BW_BYTES };
                assert!(iters >= MIN_ITERS && warmup >= MIN_WARMUP && warmup < iters, "{kind} {size}");
                assert!(iters == MIN_ITERS || iters * size as u64 <= budget, "{kind} {size}: {iters}");
            }
        }
        // The atomics' operands are small: always the full counts.
        assert_eq!(default_counts(TestKind::FaddLat, 8), (LAT_ITERS, LAT_WARMUP));
    }

    #[test]
    fn explicit_iterations_and_warm_up_are_used_as_given() {
        let words = ["--sweep", "8:4m", "-t", "tag_lat,tag_bw", "-n", "100000", "-w", "7"];
        for (kind, size) in [(TestKind::TagLat, 4 << 20), (TestKind::TagBw, 4 << 20), (TestKind::TagLat, 8)] {
            let spec = planned(&words, kind, size);
            assert_eq!((spec.iters, spec.warmup), (100_000, 7), "{kind} {size}");
        }
        // -n alone: the warm-up still follows the size.
        let spec = planned(&["-t", "tag_lat", "-s", "4m", "-n", "5"], TestKind::TagLat, 4 << 20);
        assert_eq!((spec.iters, spec.warmup), (5, 10));
    }

    #[test]
    fn batches_default_to_a_tenth_of_short_runs() {
        assert_eq!(batch_for(None, 100_000), DEFAULT_BATCH);
        assert_eq!(batch_for(None, 4096), 409);
        assert_eq!(batch_for(None, 100), 10);
        assert_eq!(batch_for(None, 5), 1);
        assert_eq!(batch_for(Some(50), 100), 50);
        assert_eq!(perf_args(&["-b", "7"]).batch_label(), "7");
        assert_eq!(perf_args(&[]).batch_label(), "auto");
    }

    #[test]
    fn endpoint_counts_travel_with_the_spec() {
        let mut s = spec(TestKind::TagLat, 8);
        assert_eq!(s.encode(), "test tag_lat 8 10 2 16 0 prereg", "one endpoint: the plain form");
        s.endpoints = 256;
        assert_eq!(s.encode(), "test tag_lat 8 10 2 16 0 prereg 256");
        assert_eq!(TestSpec::decode(&s.encode()), Some(s));
        assert_eq!(TestSpec::decode("test tag_lat 8 10 2 16 0 prereg 1"), None, "1 is the plain form");
        assert_eq!(TestSpec::decode("test tag_lat 8 10 2 16 0 prereg 99999"), None, "above the cap");
        assert_eq!(TestSpec::decode("test tag_bw 8 10 2 16 0 prereg 4"), None, "not a ping-pong");
        assert!(spec(TestKind::TagSyncLat, 8).problem().is_none());
        assert_eq!(parse_endpoints("1024"), Ok(1024));
        assert!(parse_endpoints("0").is_err());
        assert!(parse_endpoints("5000").is_err());
    }

    #[test]
    fn problems_say_what_is_wrong() {
        assert!(spec(TestKind::TagBw, 0).problem().unwrap().contains("too small"));
        assert!(spec(TestKind::CswapLat, 16).problem().unwrap().contains("4 or 8"));
        assert!(spec(TestKind::TagLat, LATENCY_SIZE_CAP + 1).problem().unwrap().contains("cap"));
        assert!(spec(TestKind::TagLat, 0).problem().is_none());
        assert!(spec(TestKind::TagBw, LATENCY_SIZE_CAP + 1).problem().is_none());
    }
}
