//! `ucp_config_read` / `ucp_config_modify` / `ucp_config_print`: configuration from `ZCX_*` variables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::status::{Result, Status};

/// How allocated memory uses hugepages (`ZCX_HUGEPAGES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugepageMode {
    /// `try`: use hugepages when the pool has them, fall back to base pages with THP advice.
    Try,
    /// `yes`: allocation fails with `NO_MEMORY` when hugepages cannot back it.
    Yes,
    /// `no`: base pages only.
    No,
}

/// A known configuration variable: its name without the prefix, its default and what it means.
struct Known {
    name: &'static str,
    default: &'static str,
    doc: &'static str,
}

const PREFIX: &str = "ZCX_";

/// `ZCX_` variables that are not configuration: `ZCX_REQUIRE_DPDK` and `ZCX_REQUIRE_VERBS` make a
/// build or test without DPDK or libibverbs fail instead of skipping (read by the `-sys` crates'
/// build scripts and tests); `ZCX_VM_NICS` and `ZCX_VM_DRIVER` tell a program it runs in the test
/// VM (`scripts/vm/run.sh`); `ZCX_VERBS_EXPECT` names the devices the VM's verbs test made, and
/// `ZCX_VERBS_STEPS` the steps of it to run; `ZCX_REQUIRE_CAPI` makes the C library's tests fail
/// without the UCX programs they run, and `ZCX_CAPI_LIBDIR` and `ZCX_EXAMPLE_STOP_AT_START` steer
/// them (`capi/tests/`).
const NOT_CONFIG: &[&str] = &[
    "REQUIRE_DPDK",
    "REQUIRE_VERBS",
    "VM_NICS",
    "VM_DRIVER",
    "VERBS_EXPECT",
    "VERBS_STEPS",
    "REQUIRE_CAPI",
    "CAPI_LIBDIR",
    "EXAMPLE_STOP_AT_START",
];

const KNOWN: &[Known] = &[
    Known {
        name: "TLS",
        default: "all",
        doc: "Comma-separated transports to use (shm, uring, dpdk, verbs, all); a leading ^ excludes them",
    },
    Known {
        name: "HUGEPAGES",
        default: "try",
        doc: "Back allocated memory with hugepages: try, yes (fail without them) or no",
    },
    Known { name: "HUGEPAGE_SIZE", default: "2M", doc: "Hugepage size for allocations: 2M or 1G" },
    Known {
        name: "RCACHE_ENABLE",
        default: "y",
        doc: "Reuse registrations of the same or a containing region (registration cache): y or n",
    },
    Known {
        name: "RNDV_THRESH",
        default: "64K",
        doc: "Messages at least this long use the rendezvous protocol (no bounce copy); a size like 64K or 1M",
    },
    Known {
        name: "SHM_HELP",
        default: "256K",
        doc: "Shared-memory puts and gets at least this long are copied by both sides, the target's worker taking part (a put from a registered source with REMOTE_READ, a get into a registered destination with REMOTE_WRITE); a size, or off",
    },
    Known {
        name: "KEEPALIVE_INTERVAL",
        default: "1s",
        doc: "Endpoints exchange keepalives this often; a peer silent for 3 intervals fails with ENDPOINT_TIMEOUT",
    },
    Known {
        name: "HANDSHAKE_TIMEOUT",
        default: "5s",
        doc: "A connection accepted by a listener that has not made its connection request within this time is closed",
    },
    Known {
        name: "MAX_PENDING_CONNECTIONS",
        default: "128",
        doc: "Connections each listener holds while they wait for their connection request; beyond, the oldest is closed once it has had 100 ms",
    },
    Known {
        name: "URING_SQPOLL",
        default: "n",
        doc: "Let a kernel thread poll the io_uring submission queue (costs a core): y or n",
    },
    Known {
        name: "URING_SPIN",
        default: "y",
        doc: "A busy-polled TCP link reads its socket with recv(2) on every poll instead of through the ring: y or n",
    },
    Known {
        name: "SPIN_WAIT",
        default: "auto",
        doc: "What a busy-polling caller's empty progress call waits with: pause, lfence, or auto (lfence while a message is expected, else pause where it is short)",
    },
    Known {
        name: "DPDK_EAL_ARGS",
        default: "",
        doc: "Whitespace-separated DPDK EAL arguments (e.g. --no-huge -m 512 --no-pci --vdev net_memif0,...); \
              EAL is initialised once per process with the first worker's and never cleaned up",
    },
    Known {
        name: "DPDK_PORT",
        default: "",
        doc: "The ethdev the DPDK transport uses, by name (net_memif0); the dpdk transport runs when this is set",
    },
    Known {
        name: "VERBS_DEVICE",
        default: "",
        doc: "The verbs device and port, name:port (rxe0:1), as UCX_NET_DEVICES; empty: the first device with an active port",
    },
    Known {
        name: "VERBS_GID_INDEX",
        default: "auto",
        doc: "The GID index queue pairs use, as UCX_IB_GID_INDEX; auto: the first GID in transport order (RoCE v2 first)",
    },
    Known {
        name: "ATOMIC_MODE",
        default: "guess",
        doc: "Who executes atomics over verbs, as UCX_ATOMIC_MODE: device (64-bit add and compare-and-swap on the NIC, other atomics UNSUPPORTED), cpu (the target's CPU), guess (device only when the NIC does every atomic, which no verbs device zcx drives does: cpu)",
    },
    Known { name: "DPDK_MTU", default: "1500", doc: "Ethernet payload size of the DPDK transport's frames (at most 9202: a jumbo frame, which the port must take)" },
    Known {
        name: "DPDK_MBUFS",
        default: "8191",
        doc: "Mbufs in the DPDK transport's pool (size it to the EAL memory: -m 512 holds a few thousand)",
    },
    Known {
        name: "DPDK_WINDOW",
        default: "64",
        doc: "Unacknowledged DPDK datagrams in flight per endpoint (the reliability protocol's window)",
    },
    Known {
        name: "DPDK_ZCOPY_THRESH",
        default: "256K",
        doc: "DPDK sends at least this long from registered memory leave zero-copy (external-buffer mbufs); \
              a size like 256K, or inf to always copy",
    },
    Known {
        name: "DPDK_DROP_PPM",
        default: "0",
        doc: "Test only: the DPDK transport drops this many received frames per million (loss injection)",
    },
    Known {
        name: "LOG_LEVEL",
        default: "warn",
        doc: "Log filter of the zcx binaries and the C library: a level (off, error, warn, info, debug, trace) or directives such as warn,zcx_dataplane=debug",
    },
];

/// zcx configuration, read from the environment the way UCX reads `UCX_*` (`ucp_config_t`).
#[derive(Clone, Debug)]
pub struct Config {
    values: BTreeMap<&'static str, String>,
    unknown: Vec<String>,
}

impl Config {
    /// `ucp_config_read(NULL, NULL, ..)`: defaults overridden by `ZCX_*` environment variables.
    ///
    /// A `ZCX_*` variable zcx does not know is reported with a warning and kept in
    /// [`Config::unknown_variables`], as UCX warns about unused `UCX_*` variables.
    pub fn from_env() -> Result<Config> {
        Self::from_vars(std::env::vars())
    }

    /// Builds a configuration from `(name, value)` pairs as if they were the environment.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut config = Config::default();
        for (key, value) in vars {
            let Some(name) = key.as_ref().strip_prefix(PREFIX) else {
                continue;
            };
            if KNOWN.iter().any(|k| k.name == name) {
                config.modify(name, value.as_ref())?;
            } else if NOT_CONFIG.contains(&name) {
                // The build's and tests' own switches, not the library's configuration.
            } else {
                tracing::warn!(variable = key.as_ref(), "unknown zcx configuration variable ignored");
                config.unknown.push(key.as_ref().to_owned());
            }
        }
        Ok(config)
    }

    /// `ucp_config_modify`: sets one variable (name with or without the `ZCX_` prefix).
    /// An unknown name → `NO_ELEM`; a value the variable cannot take → `INVALID_PARAM`.
    pub fn modify(&mut self, name: &str, value: &str) -> Result<()> {
        let name = name.strip_prefix(PREFIX).unwrap_or(name);
        let known = KNOWN.iter().find(|k| k.name == name).ok_or(Status::NoElem)?;
        validate(known.name, value)?;
        self.values.insert(known.name, value.trim().to_owned());
        Ok(())
    }

    /// The current value of a variable (name with or without the prefix).
    pub fn get(&self, name: &str) -> Option<&str> {
        let name = name.strip_prefix(PREFIX).unwrap_or(name);
        self.values.get(name).map(String::as_str)
    }

    /// `ZCX_*` variables found in the environment that zcx does not know.
    pub fn unknown_variables(&self) -> &[String] {
        &self.unknown
    }

    /// `ZCX_TLS` as a list of transport names; `all` when unset.
    pub fn transports(&self) -> Vec<String> {
        self.get("TLS")
            .unwrap_or("all")
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Whether `ZCX_TLS` lets the worker use the transport `name` (`"shm"`, `"uring"`, ...), as
    /// `UCX_TLS` reads: `all`, a list of names, or a list of `^name` exclusions. `tcp` is another
    /// name of `uring`, and `posix` and `sm` of `shm`, so a UCX user's value keeps its meaning.
    pub fn transport_enabled(&self, name: &str) -> bool {
        let entries = self.transports();
        let canonical = |t: &str| {
            match t {
                "tcp" => "uring",
                "posix" | "sm" => "shm",
                other => other,
            }
            .to_owned()
        };
        let named = |t: &str| {
            let t = canonical(t);
            t == "all" || t == name
        };
        let excluded = entries.iter().any(|e| e.strip_prefix('^').is_some_and(&named));
        let inclusions: Vec<&String> = entries.iter().filter(|e| !e.starts_with('^')).collect();
        let included = inclusions.is_empty() || inclusions.iter().any(|e| named(e));
        included && !excluded
    }

    /// `ZCX_HUGEPAGES`.
    pub fn hugepages(&self) -> HugepageMode {
        match self.get("HUGEPAGES").unwrap_or("try") {
            "yes" | "y" | "on" | "1" => HugepageMode::Yes,
            "no" | "n" | "off" | "0" => HugepageMode::No,
            _ => HugepageMode::Try,
        }
    }

    /// `ZCX_HUGEPAGE_SIZE` in bytes.
    pub fn hugepage_size(&self) -> usize {
        match self.get("HUGEPAGE_SIZE").unwrap_or("2M") {
            "1G" | "1g" | "1GB" => 1 << 30,
            _ => 2 << 20,
        }
    }

    /// `ZCX_RCACHE_ENABLE`.
    pub fn rcache_enabled(&self) -> bool {
        parse_bool(self.get("RCACHE_ENABLE").unwrap_or("y")).unwrap_or(true)
    }

    /// `ZCX_RNDV_THRESH` in bytes.
    pub fn rndv_thresh(&self) -> usize {
        self.get("RNDV_THRESH").and_then(parse_size).unwrap_or(64 << 10)
    }

    /// `ZCX_SHM_HELP`: the smallest shared-memory put or get the target's worker helps copy, or
    /// `None` when switched off (see `zcx_dataplane::shm::put_help`).
    pub fn shm_help(&self) -> Option<usize> {
        match self.get("SHM_HELP").map(str::trim) {
            Some(off) if parse_bool(off) == Some(false) => None,
            Some(size) => parse_size(size).filter(|&size| size > 0),
            None => Some(256 << 10),
        }
    }

    /// `ZCX_KEEPALIVE_INTERVAL`.
    pub fn keepalive_interval(&self) -> std::time::Duration {
        self.get("KEEPALIVE_INTERVAL").and_then(parse_duration).unwrap_or(std::time::Duration::from_secs(1))
    }

    /// `ZCX_HANDSHAKE_TIMEOUT`: how long a connection a listener accepted may take to make its
    /// connection request before it is closed.
    pub fn handshake_timeout(&self) -> std::time::Duration {
        self.get("HANDSHAKE_TIMEOUT").and_then(parse_duration).unwrap_or(std::time::Duration::from_secs(5))
    }

    /// `ZCX_MAX_PENDING_CONNECTIONS`: connections each listener holds while they wait for their
    /// connection request.
    pub fn max_pending_connections(&self) -> usize {
        self.get("MAX_PENDING_CONNECTIONS").and_then(|v| v.parse().ok()).unwrap_or(128)
    }

    /// `ZCX_URING_SQPOLL`.
    pub fn uring_sqpoll(&self) -> bool {
        parse_bool(self.get("URING_SQPOLL").unwrap_or("n")).unwrap_or(false)
    }

    /// `ZCX_URING_SPIN`: busy-polled TCP links read their socket directly (spin mode).
    pub fn uring_spin(&self) -> bool {
        parse_bool(self.get("URING_SPIN").unwrap_or("y")).unwrap_or(true)
    }

    /// `ZCX_SPIN_WAIT`: `auto`, `pause` or `lfence`, as given.
    pub fn spin_wait(&self) -> &str {
        self.get("SPIN_WAIT").unwrap_or("auto")
    }

    /// Whether `ZCX_TLS` names `name` itself (not through `all`): the transport is required, so
    /// failing to start it fails `create_worker` instead of leaving it out with a warning.
    pub fn transport_required(&self, name: &str) -> bool {
        self.transport_enabled(name)
            && self.transports().iter().any(|t| !t.starts_with('^') && t != "all" && t == name)
    }

    /// `ZCX_DPDK_EAL_ARGS`, split at whitespace.
    pub fn dpdk_eal_args(&self) -> Vec<String> {
        self.get("DPDK_EAL_ARGS").unwrap_or("").split_whitespace().map(str::to_owned).collect()
    }

    /// `ZCX_DPDK_PORT`, or `None` when unset (the DPDK transport is then not configured).
    pub fn dpdk_port(&self) -> Option<&str> {
        self.get("DPDK_PORT").filter(|p| !p.is_empty())
    }

    /// `ZCX_VERBS_DEVICE`, or `None` when unset (the first device with an active port is used).
    pub fn verbs_device(&self) -> Option<&str> {
        self.get("VERBS_DEVICE").filter(|d| !d.is_empty())
    }

    /// `ZCX_VERBS_GID_INDEX`, or `None` for automatic.
    pub fn verbs_gid_index(&self) -> Option<u32> {
        self.get("VERBS_GID_INDEX").and_then(|v| v.parse().ok())
    }

    /// `ZCX_ATOMIC_MODE=device`: the NIC executes the atomics it can, and refuses the others.
    /// `cpu` and `guess` (the default) leave every atomic to the target's CPU, since no verbs
    /// device does all of UCP's atomics and a word must never be updated by both.
    pub fn device_atomics(&self) -> bool {
        self.get("ATOMIC_MODE").is_some_and(|v| v.eq_ignore_ascii_case("device"))
    }

    /// `ZCX_DPDK_MTU`.
    pub fn dpdk_mtu(&self) -> usize {
        self.get("DPDK_MTU").and_then(parse_size).unwrap_or(1500)
    }

    /// `ZCX_DPDK_MBUFS`.
    pub fn dpdk_mbufs(&self) -> u32 {
        self.get("DPDK_MBUFS").and_then(|v| v.parse().ok()).unwrap_or(8191)
    }

    /// `ZCX_DPDK_ZCOPY_THRESH`: `usize::MAX` for `inf`.
    pub fn dpdk_zcopy_thresh(&self) -> usize {
        match self.get("DPDK_ZCOPY_THRESH") {
            Some("inf") => usize::MAX,
            other => other.and_then(parse_size).unwrap_or(256 << 10),
        }
    }

    /// `ZCX_DPDK_DROP_PPM` (loss injection for tests).
    pub fn dpdk_drop_ppm(&self) -> u32 {
        self.get("DPDK_DROP_PPM").and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// `ZCX_DPDK_WINDOW`: datagrams in flight per DPDK endpoint. The default, 64 (about 94 KB
    /// at a 1500-byte MTU), gives a receiver that was descheduled for a while work to catch up
    /// on once it runs again. A larger window rides out longer stalls of the peer, but each
    /// endpoint preallocates twice the window in send slots of one datagram each.
    pub fn dpdk_window(&self) -> u32 {
        self.get("DPDK_WINDOW").and_then(|v| v.parse().ok()).unwrap_or(64)
    }

    /// `ucp_config_print`: every variable with its value and meaning, one per line, as `KEY=value`.
    pub fn print(&self) -> String {
        let mut out = String::from("#\n# zcx configuration\n#\n");
        for known in KNOWN {
            let value = self.values.get(known.name).map(String::as_str).unwrap_or(known.default);
            let _ = writeln!(out, "# {}\n{PREFIX}{}={value}\n", known.doc, known.name);
        }
        for unknown in &self.unknown {
            let _ = writeln!(out, "# unknown (ignored): {unknown}");
        }
        out
    }
}

impl Default for Config {
    fn default() -> Self {
        let values = KNOWN.iter().map(|k| (k.name, k.default.to_owned())).collect();
        Config { values, unknown: Vec::new() }
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "on" | "1" | "true" => Some(true),
        "n" | "no" | "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

/// `4096`, `64K`, `1M`, `1G` (binary units) → bytes.
fn parse_size(value: &str) -> Option<usize> {
    let value = value.trim();
    let (digits, shift) = match value.as_bytes().last()? {
        b'k' | b'K' => (&value[..value.len() - 1], 10),
        b'm' | b'M' => (&value[..value.len() - 1], 20),
        b'g' | b'G' => (&value[..value.len() - 1], 30),
        _ => (value, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// `250ms`, `2s`, `1m`, or plain seconds → a duration of at least 1 ms.
fn parse_duration(value: &str) -> Option<std::time::Duration> {
    let value = value.trim();
    let (digits, millis) = if let Some(d) = value.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = value.strip_suffix('s') {
        (d, 1000)
    } else if let Some(d) = value.strip_suffix('m') {
        (d, 60_000)
    } else {
        (value, 1000)
    };
    let ms = digits.trim().parse::<u64>().ok()?.checked_mul(millis)?;
    (ms > 0).then(|| std::time::Duration::from_millis(ms))
}

/// A log filter as the zcx binaries and the C library read it (`tracing`'s `EnvFilter`): comma-
/// separated directives, each a level or `target=level`, such as `warn,zcx_dataplane=debug`.
fn is_log_filter(value: &str) -> bool {
    let level = |l: &str| matches!(l, "off" | "error" | "warn" | "info" | "debug" | "trace");
    let target =
        |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    value.split(',').all(|directive| match directive.trim().split_once('=') {
        Some((t, l)) => target(t.trim()) && level(l.trim()),
        // An empty directive (a trailing comma) is skipped, as `EnvFilter` skips it.
        None => directive.trim().is_empty() || level(directive.trim()),
    })
}

fn validate(name: &str, value: &str) -> Result<()> {
    let value = value.trim();
    let ok = match name {
        "HUGEPAGES" => matches!(value, "try" | "yes" | "y" | "on" | "1" | "no" | "n" | "off" | "0"),
        "HUGEPAGE_SIZE" => matches!(value, "2M" | "2m" | "2MB" | "1G" | "1g" | "1GB"),
        "RCACHE_ENABLE" | "URING_SQPOLL" | "URING_SPIN" => parse_bool(value).is_some(),
        "RNDV_THRESH" => parse_size(value).is_some(),
        "SHM_HELP" => parse_size(value).is_some() || parse_bool(value) == Some(false),
        "KEEPALIVE_INTERVAL" | "HANDSHAKE_TIMEOUT" => parse_duration(value).is_some(),
        "MAX_PENDING_CONNECTIONS" => value.parse::<u32>().is_ok_and(|n| (1..=1 << 20).contains(&n)),
        "TLS" => value.split(',').map(str::trim).filter(|s| !s.is_empty()).all(|t| {
            matches!(
                t.trim_start_matches('^'),
                "all" | "shm" | "posix" | "sm" | "uring" | "tcp" | "dpdk" | "verbs"
            )
        }),
        "LOG_LEVEL" => is_log_filter(value),
        "DPDK_MTU" => parse_size(value).is_some_and(|mtu| (64..=9202).contains(&mtu)),
        "DPDK_MBUFS" => value.parse::<u32>().is_ok_and(|n| (64..=1 << 20).contains(&n)),
        "DPDK_WINDOW" => value.parse::<u32>().is_ok_and(|n| (1..=4096).contains(&n)),
        "DPDK_ZCOPY_THRESH" => value == "inf" || parse_size(value).is_some_and(|n| n > 0),
        "DPDK_DROP_PPM" => value.parse::<u32>().is_ok_and(|n| n <= 1_000_000),
        "DPDK_PORT" => !value.contains('\0'),
        "DPDK_EAL_ARGS" => !value.contains('\0'),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        tracing::warn!(variable = name, value, "invalid value for zcx configuration variable");
        Err(Status::InvalidParam)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = Config::default();
        assert_eq!(c.hugepages(), HugepageMode::Try);
        assert!(c.rcache_enabled());
        assert_eq!(c.transports(), vec!["all".to_owned()]);
        assert_eq!(c.hugepage_size(), 2 << 20);
    }

    #[test]
    fn reads_known_and_reports_unknown_variables() {
        let c = Config::from_vars([
            ("ZCX_HUGEPAGES", "no"),
            ("ZCX_RCACHE_ENABLE", "n"),
            ("ZCX_TLS", "shm,uring"),
            ("ZCX_TYPO_VARIABLE", "1"),
            ("PATH", "/bin"),
        ])
        .unwrap();
        assert_eq!(c.hugepages(), HugepageMode::No);
        assert!(!c.rcache_enabled());
        assert_eq!(c.transports(), vec!["shm".to_owned(), "uring".to_owned()]);
        assert_eq!(c.unknown_variables(), ["ZCX_TYPO_VARIABLE".to_owned()]);
        assert!(c.print().contains("ZCX_TYPO_VARIABLE"));
    }

    #[test]
    fn tls_selects_transports_like_ucx_tls() {
        let enabled = |value: &str, name: &str| {
            Config::from_vars([("ZCX_TLS", value)]).unwrap().transport_enabled(name)
        };
        assert!(Config::default().transport_enabled("shm"));
        assert!(enabled("all", "uring"));
        assert!(enabled("shm,uring", "shm"));
        assert!(!enabled("uring", "shm"));
        assert!(enabled("tcp", "uring"));
        assert!(enabled("posix", "shm"));
        assert!(!enabled("^shm", "shm"));
        assert!(enabled("^shm", "uring"));
        assert!(!enabled("^posix", "shm"));
        assert!(!enabled("all,^uring", "uring"));
    }

    #[test]
    fn dpdk_settings() {
        let c = Config::from_vars([
            ("ZCX_TLS", "dpdk,tcp"),
            ("ZCX_DPDK_EAL_ARGS", "  --no-huge -m 512\t--no-pci  "),
            ("ZCX_DPDK_PORT", "net_memif0"),
            ("ZCX_DPDK_MTU", "1000"),
        ])
        .unwrap();
        assert!(c.transport_enabled("dpdk") && c.transport_required("dpdk"));
        assert!(!c.transport_enabled("shm"));
        assert_eq!(c.dpdk_eal_args(), ["--no-huge", "-m", "512", "--no-pci"]);
        assert_eq!(c.dpdk_port(), Some("net_memif0"));
        assert_eq!(c.dpdk_mtu(), 1000);
        assert_eq!(c.dpdk_window(), 64);
        for filter in
            ["debug", "off", "warn,", "zcx_dataplane=debug", "warn, zcx::worker=trace,zcx_engine=info"]
        {
            assert!(Config::from_vars([("ZCX_LOG_LEVEL", filter)]).is_ok(), "{filter} refused");
        }
        for filter in ["loud", "zcx=loud", "=debug", "zcx-cli=debug", "warn,,loud"] {
            assert_eq!(
                Config::from_vars([("ZCX_LOG_LEVEL", filter)]).unwrap_err(),
                Status::InvalidParam,
                "{filter} taken"
            );
        }
        let d = Config::default();
        assert!(d.transport_enabled("dpdk") && !d.transport_required("dpdk"));
        assert_eq!(d.dpdk_port(), None);
        assert!(d.dpdk_eal_args().is_empty());
        let excluded = Config::from_vars([("ZCX_TLS", "^dpdk")]).unwrap();
        assert!(!excluded.transport_enabled("dpdk") && !excluded.transport_required("dpdk"));
        assert_eq!(Config::from_vars([("ZCX_DPDK_MTU", "9203")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::from_vars([("ZCX_DPDK_WINDOW", "0")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::from_vars([("ZCX_DPDK_DROP_PPM", "1000001")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::from_vars([("ZCX_DPDK_ZCOPY_THRESH", "0")]).unwrap_err(), Status::InvalidParam);
        let zc =
            Config::from_vars([("ZCX_DPDK_ZCOPY_THRESH", "inf"), ("ZCX_DPDK_DROP_PPM", "10000")]).unwrap();
        assert_eq!((zc.dpdk_zcopy_thresh(), zc.dpdk_drop_ppm()), (usize::MAX, 10_000));
        assert_eq!(
            Config::from_vars([("ZCX_DPDK_ZCOPY_THRESH", "1M")]).unwrap().dpdk_zcopy_thresh(),
            1 << 20
        );
    }

    #[test]
    fn bad_values_are_invalid_param() {
        assert_eq!(Config::from_vars([("ZCX_HUGEPAGES", "maybe")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::from_vars([("ZCX_TLS", "carrier-pigeon")]).unwrap_err(), Status::InvalidParam);
        let mut c = Config::default();
        assert_eq!(c.modify("ZCX_NOPE", "1"), Err(Status::NoElem));
        assert_eq!(c.modify("RCACHE_ENABLE", "perhaps"), Err(Status::InvalidParam));
        c.modify("ZCX_HUGEPAGES", "yes").unwrap();
        assert_eq!(c.hugepages(), HugepageMode::Yes);
    }

    #[test]
    fn sizes_and_durations() {
        let c = Config::from_vars([("ZCX_RNDV_THRESH", "1M"), ("ZCX_KEEPALIVE_INTERVAL", "250ms")]).unwrap();
        assert_eq!(c.rndv_thresh(), 1 << 20);
        assert_eq!(c.keepalive_interval(), std::time::Duration::from_millis(250));
        assert_eq!(Config::default().rndv_thresh(), 64 << 10);
        assert_eq!(Config::from_vars([("ZCX_RNDV_THRESH", "lots")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::default().shm_help(), Some(256 << 10));
        assert_eq!(Config::from_vars([("ZCX_SHM_HELP", "1M")]).unwrap().shm_help(), Some(1 << 20));
        assert_eq!(Config::from_vars([("ZCX_SHM_HELP", "off")]).unwrap().shm_help(), None);
        assert_eq!(Config::from_vars([("ZCX_SHM_HELP", "0")]).unwrap().shm_help(), None);
        assert_eq!(Config::from_vars([("ZCX_SHM_HELP", "some")]).unwrap_err(), Status::InvalidParam);
        assert_eq!(Config::from_vars([("ZCX_KEEPALIVE_INTERVAL", "0s")]).unwrap_err(), Status::InvalidParam);
    }

    #[test]
    fn pending_connection_bounds() {
        let d = Config::default();
        assert_eq!(d.handshake_timeout(), std::time::Duration::from_secs(5));
        assert_eq!(d.max_pending_connections(), 128);
        let c =
            Config::from_vars([("ZCX_HANDSHAKE_TIMEOUT", "300ms"), ("ZCX_MAX_PENDING_CONNECTIONS", "16")])
                .unwrap();
        assert_eq!(c.handshake_timeout(), std::time::Duration::from_millis(300));
        assert_eq!(c.max_pending_connections(), 16);
        for (name, bad) in [
            ("ZCX_HANDSHAKE_TIMEOUT", "0s"),
            ("ZCX_HANDSHAKE_TIMEOUT", "soon"),
            ("ZCX_MAX_PENDING_CONNECTIONS", "0"),
            ("ZCX_MAX_PENDING_CONNECTIONS", "-1"),
            ("ZCX_MAX_PENDING_CONNECTIONS", "many"),
        ] {
            assert_eq!(Config::from_vars([(name, bad)]).unwrap_err(), Status::InvalidParam, "{name}={bad}");
        }
    }

    #[test]
    fn print_lists_every_variable_with_its_value() {
        let mut c = Config::default();
        c.modify("TLS", "^dpdk").unwrap();
        let text = c.print();
        for k in KNOWN {
            assert!(text.contains(&format!("ZCX_{}=", k.name)), "{} missing", k.name);
        }
        assert!(text.contains("ZCX_TLS=^dpdk"));
    }
}
