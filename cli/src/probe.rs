//! `zcx probe`: the host's cross-core round trip, the floor under every shared-memory latency.
//!
//! Two threads, pinned to two CPUs, pass a counter back and forth through two cache lines (each
//! thread writes one and spins on the other). A round trip is two cache-line transfers between
//! the cores and almost nothing else, so it tells which state the host is in at that moment:
//! this VM's figure moves between about 120 ns (two cores), 500 ns (cores far apart) and 45 ns,
//! as the host places its vCPUs. The 45 ns state is the host running both vCPUs on two
//! hyperthreads of one core, which the second measure shows: a compute burst on one CPU slows by
//! 1.4 to 1.9 times while the other computes too ([`sibling_slowdown`]), against none on two
//! cores. A benchmark meant to run client and server on two cores does not, in that state.
//! `scripts/compare-ucx.sh` runs the probe after each side of each round, so a ratio can be read
//! against the placement both sides ran in.

mod ring;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use zcx_hugepages::{pin_current_thread, CpuSet};

/// Options of `zcx probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// The two CPUs, as `A,B`: this thread on A, its peer on B.
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: (usize, usize),
    /// Round trips per batch.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    round_trips: u64,
    /// Batches; the median batch is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    batches: u64,
    /// Also the round trip of 8-byte messages through two of zcx's shared-memory rings, the
    /// floor under a shared-memory ping-pong (`ring_round_trip_ns`, and its ratio to the bare
    /// one, `ring_over_bare`).
    #[arg(long)]
    ring: bool,
}

fn parse_cpus(text: &str) -> Result<(usize, usize), String> {
    let (a, b) = text.split_once(',').ok_or("expected two CPUs as A,B")?;
    let cpu = |s: &str| s.trim().parse::<usize>().map_err(|e| format!("{s:?} is not a CPU number: {e}"));
    let (a, b) = (cpu(a)?, cpu(b)?);
    if a == b {
        return Err("the two CPUs must differ".into());
    }
    Ok((a, b))
}

/// The longest the peer may leave a round trip unanswered before the probe gives up (its CPU is
/// offline, or taken away by the host for that long).
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// A counter alone on its cache line.
#[repr(align(64))]
struct Line(AtomicU64);

/// The two counters, on the two lines of one 128-byte pair: what the adjacent-line prefetcher
/// fetches along with either line is the other one, never a line something else writes.
#[repr(C, align(128))]
struct Lines {
    ping: Line,
    pong: Line,
}

/// A few cycles between two looks at the peer's line. With nothing between them the core keeps
/// several loads of the line in flight, and the peer's write then costs a pipeline flush; `pause`
/// lasts 25 to 40 ns on current cores, longer than the transfer being measured. Ten dependent
/// additions (about 10 cycles) gave the shortest round trips here: 100 ns against 128 ns with no
/// gap and 108 ns with `pause`, and 42 ns against 51 ns when the two CPUs share a core.
#[inline(always)]
fn settle() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut x = 0u64;
        for _ in 0..10 {
            // SAFETY: an addition on a register; no memory, no flags anyone reads.
            unsafe { std::arch::asm!("add {0}, 1", inout(reg) x, options(nomem, nostack)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::spin_loop();
}

/// Waits until `line` holds `value` or more; false when the peer took longer than
/// [`PEER_TIMEOUT`].
#[inline(always)]
fn wait_for(line: &Line, value: u64, start: Instant) -> bool {
    let mut looks = 0u32;
    while line.0.load(Ordering::Acquire) < value {
        settle();
        looks = looks.wrapping_add(1);
        // A look at the clock every 64 Ki looks: rare enough to stay off the figure.
        if looks % 65_536 == 0 && start.elapsed() > PEER_TIMEOUT {
            return false;
        }
    }
    true
}

/// Checks that this process may run on both CPUs (the calling thread ends pinned to `a`), so a
/// CPU it may not use is an error at once rather than a peer that never starts.
fn pin_both(a: usize, b: usize) -> Result<(), String> {
    pin(b)?;
    pin(a)
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), String> {
    CpuSet::single(cpu)
        .and_then(|set| pin_current_thread(&set))
        .map_err(|e| format!("cannot run on CPU {cpu}: {e}"))
}

/// The median over `batches` batches of `round_trips` round trips between CPUs `a` and `b`: the
/// time of one round trip.
pub fn round_trip(a: usize, b: usize, round_trips: u64, batches: u64) -> Result<Duration, String> {
    pin_both(a, b)?;
    let lines = Lines { ping: Line(AtomicU64::new(0)), pong: Line(AtomicU64::new(0)) };
    let (ping, pong) = (&lines.ping, &lines.pong);
    let total = round_trips * batches;
    std::thread::scope(|scope| {
        let peer = scope.spawn(|| -> Result<(), String> {
            pin(b)?;
            let start = Instant::now();
            for n in 1..=total {
                if !wait_for(ping, n, start) {
                    return Err(format!("CPU {a} stopped answering"));
                }
                pong.0.store(n, Ordering::Release);
            }
            Ok(())
        });
        let time = median_batch(round_trips, batches, |n, start| {
            ping.0.store(n, Ordering::Release);
            match wait_for(pong, n, start) {
                true => Ok(()),
                false => Err(format!("CPU {b} did not answer within {PEER_TIMEOUT:?}")),
            }
        });
        if time.is_err() {
            // Releases the peer: every wait of its ends at a value this large.
            ping.0.store(u64::MAX, Ordering::Release);
        }
        let peer = peer.join().map_err(|_| "the probe's peer thread panicked".to_string())?;
        let time = time?;
        peer?;
        Ok(time)
    })
}

/// The median over `batches` batches of `round_trips` calls of `round_trip(n, batch_start)`, `n`
/// counting from 1 across the batches: the time of one round trip.
fn median_batch(
    round_trips: u64,
    batches: u64,
    mut round_trip: impl FnMut(u64, Instant) -> Result<(), String>,
) -> Result<Duration, String> {
    let mut times = Vec::with_capacity(batches as usize);
    for batch in 0..batches {
        let start = Instant::now();
        for n in batch * round_trips + 1..=(batch + 1) * round_trips {
            round_trip(n, start)?;
        }
        times.push(start.elapsed() / round_trips as u32);
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// Independent additions a compute burst runs (four chains, so a core that is not shared runs
/// about four a cycle): about 1.5 ms here.
const BURST_ADDS: u64 = 12_000_000;

/// A compute burst: [`BURST_ADDS`] additions in four independent chains, all in registers.
#[inline(never)]
fn burst(adds: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let (mut w, mut x, mut y, mut z) = (0u64, 0u64, 0u64, 0u64);
        for _ in 0..adds / 4 {
            // SAFETY: additions on registers; no memory, no flags anyone reads.
            unsafe {
                std::arch::asm!(
                    "add {0}, 1", "add {1}, 1", "add {2}, 1", "add {3}, 1",
                    inout(reg) w, inout(reg) x, inout(reg) y, inout(reg) z,
                    options(nomem, nostack),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut sum = 0u64;
        for i in 0..adds {
            sum = std::hint::black_box(sum.wrapping_add(i));
        }
    }
}

/// How much longer a compute burst on CPU `a` takes while CPU `b` computes too than while `b`
/// only spins on `pause`: about 1.0 when the two are separate cores, 1.4 to 1.9 when they are
/// hyperthreads of one core (which then share its execution units). This VM's host sometimes
/// runs both vCPUs on one core that way: then a cache line passes between them through the
/// core's own caches (the fast round trips), and each gets part of the core's speed.
pub fn sibling_slowdown(a: usize, b: usize) -> Result<f64, String> {
    pin_both(a, b)?;
    // 0: wait with `pause` (which leaves a shared core's units to its sibling), 1: compute, 2: end.
    let mode = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let peer = scope.spawn(|| -> Result<(), String> {
            pin(b)?;
            loop {
                match mode.load(Ordering::Relaxed) {
                    // `pause`, not a sleep: a vCPU that goes idle may come back elsewhere, and
                    // the probe must measure the placement the benchmark had.
                    0 => std::hint::spin_loop(),
                    1 => burst(BURST_ADDS / 64),
                    _ => return Ok(()),
                }
            }
        });
        let best = |peer_mode: u64| {
            mode.store(peer_mode, Ordering::Relaxed);
            // Long enough for the peer to change what it does (it looks between bursts of 1/64).
            burst(BURST_ADDS / 16);
            (0..2)
                .map(|_| {
                    let start = Instant::now();
                    burst(BURST_ADDS);
                    start.elapsed()
                })
                .min()
                .unwrap_or(Duration::MAX)
        };
        let alone = best(0);
        let shared = best(1);
        mode.store(2, Ordering::Relaxed);
        peer.join().map_err(|_| "the probe's peer thread panicked".to_string())??;
        Ok(shared.as_secs_f64() / alone.as_secs_f64().max(1e-9))
    })
}

/// A slowdown above this says the two CPUs are hyperthreads of one core.
const SHARED_CORE_SLOWDOWN: f64 = 1.3;

/// Runs `zcx probe`: prints `round_trip_ns=<ns> sibling_slowdown=<x> shared_core=<yes|no>
/// cpus=<a>,<b>`, and with `--ring` also `ring_round_trip_ns=<ns> ring_over_bare=<x>`.
pub fn run(args: &ProbeArgs) -> Result<(), String> {
    let (a, b) = args.cpus;
    let time = round_trip(a, b, args.round_trips, args.batches)?;
    let slowdown = sibling_slowdown(a, b)?;
    let ns = |d: Duration| d.as_secs_f64() * 1e9;
    let ring = match args.ring {
        true => {
            let ring = ring::ring_round_trip(a, b, args.round_trips, args.batches)?;
            format!(" ring_round_trip_ns={:.1} ring_over_bare={:.2}", ns(ring), ns(ring) / ns(time).max(1e-9))
        }
        false => String::new(),
    };
    println!(
        "round_trip_ns={:.1} sibling_slowdown={slowdown:.2} shared_core={} cpus={a},{b}{ring}",
        ns(time),
        if slowdown > SHARED_CORE_SLOWDOWN { "yes" } else { "no" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pairs_parse_and_must_differ() {
        assert_eq!(parse_cpus("0,1"), Ok((0, 1)));
        assert_eq!(parse_cpus(" 3 , 2"), Ok((3, 2)));
        assert!(parse_cpus("1,1").unwrap_err().contains("differ"));
        assert!(parse_cpus("1").is_err());
        assert!(parse_cpus("a,1").unwrap_err().contains("not a CPU"));
    }

    /// Held by every test that spins on both CPUs: two such tests at once would each measure
    /// threads that wait for the other's time slices.
    pub(super) static BOTH_CPUS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// True when this process may run on two CPUs; otherwise says why its caller skips.
    pub(super) fn two_cpus(what: &str) -> bool {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            eprintln!("skipped: one CPU only, no {what} to measure");
        }
        cpus >= 2
    }

    /// On two CPUs the figure is a cross-core round trip: longer than nothing, far shorter than a
    /// scheduler's time slice (a probe whose threads shared one CPU would take that long).
    #[test]
    fn a_round_trip_between_two_cpus_is_a_plausible_cross_core_time() {
        if !two_cpus("cross-core round trip") {
            return;
        }
        let _both = BOTH_CPUS.lock().unwrap_or_else(|p| p.into_inner());
        let time = round_trip(0, 1, 2_000, 3).expect("probe");
        assert!(time > Duration::from_nanos(5) && time < Duration::from_micros(50), "round trip {time:?}");
    }

    /// The slowdown is a ratio of two timings of the same work: positive and finite, and not far
    /// below one (a burst never runs faster for a busy neighbour).
    #[test]
    fn the_sibling_slowdown_is_a_plausible_ratio() {
        if !two_cpus("neighbour's slowdown") {
            return;
        }
        let _both = BOTH_CPUS.lock().unwrap_or_else(|p| p.into_inner());
        let slowdown = sibling_slowdown(0, 1).expect("probe");
        assert!(slowdown.is_finite() && (0.5..4.0).contains(&slowdown), "slowdown {slowdown}");
    }

    /// A CPU that does not exist is a clear error, and the peer thread is not left waiting.
    #[test]
    fn a_missing_cpu_is_an_error_not_a_hang() {
        let err = round_trip(0, 100_000, 10, 1).unwrap_err();
        assert!(err.contains("100000"), "{err}");
        let err = round_trip(100_000, 0, 10, 1).unwrap_err();
        assert!(err.contains("100000"), "{err}");
        let err = sibling_slowdown(0, 100_000).unwrap_err();
        assert!(err.contains("100000"), "{err}");
    }
}
