//! The many-endpoints mode (`--endpoints N`): one server, N client endpoints, tag ping-pong
//! round-robin over them.
//!
//! The first endpoint is the session's own (the one control messages use); the others are opened
//! when the first test that needs them starts, and kept for the tests after it. The client opens
//! them one at a time: it connects endpoint `i`, sends [`TAG_HELLO`] carrying `i` over it, and
//! waits for the server's answer before the next, so the server's `i`-th accepted endpoint is the
//! client's `i`-th (a tag receive does not say which endpoint a message came from). Message `n`
//! of a test then goes over endpoint `n mod N` with tag [`TAG_MANY`]` | (n mod N)`, and the server
//! answers on the endpoint that tag names, with the same tag.
//!
//! What the endpoints cost is measured around their opening and the first test over them: each
//! side's resident and virtual memory and open descriptors (read from `/proc/self`), before the
//! endpoints were opened and after the test, divided by the endpoints opened. The client asks the
//! server for its figures with a `stats` control message.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use zcx::{Endpoint, EpParams, RequestParams, TagSendParams};

use crate::perf::session::{detailed, Session, TAG_CTRL};

/// Data messages of the many-endpoints mode: the low 32 bits name the endpoint.
pub const TAG_MANY: u64 = 0x7a63_7871_0000_0000;
/// The bits of a [`TAG_MANY`] tag a receive matches (all but the endpoint's index).
pub const TAG_MANY_MASK: u64 = !0xffff_ffff;
/// An endpoint's first message, carrying its index; the server answers with the same tag.
pub const TAG_HELLO: u64 = 0x7a63_7870_0000_0003;

/// Descriptors one endpoint may hold on either side (a socket, a memfd, an eventfd, and slack for
/// a lane being set up), for checking the descriptor limit before opening endpoints.
const FDS_PER_ENDPOINT: u64 = 4;
/// Descriptors the process needs besides its endpoints.
const FDS_BASE: u64 = 64;

/// What a process holds at one moment, from `/proc/self`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Mapped virtual memory, KiB (`VmSize`): shared-memory segments count here in full, touched
    /// or not.
    pub vsz_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
}

impl ProcStats {
    /// This process's figures now.
    pub fn now() -> Result<ProcStats, String> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
        let fds = std::fs::read_dir("/proc/self/fd")
            .map_err(|e| format!("cannot list /proc/self/fd: {e}"))?
            .count() as u64;
        Ok(ProcStats { rss_kib: status_kib(&status, "VmRSS:"), vsz_kib: status_kib(&status, "VmSize:"), fds })
    }

    /// The wire form: `stats <rss_kib> <vsz_kib> <fds>`.
    pub fn encode(&self) -> String {
        format!("stats {} {} {}", self.rss_kib, self.vsz_kib, self.fds)
    }

    /// Parses [`ProcStats::encode`]'s output.
    pub fn decode(text: &str) -> Option<ProcStats> {
        let mut words = text.split_ascii_whitespace();
        if words.next()? != "stats" {
            return None;
        }
        let mut next = || words.next()?.parse::<u64>().ok();
        let stats = ProcStats { rss_kib: next()?, vsz_kib: next()?, fds: next()? };
        words.next().is_none().then_some(stats)
    }
}

/// The value in KiB of `key` in `/proc/self/status` text (0 when absent).
fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_ascii_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What one endpoint costs one side: the growth of its [`ProcStats`] per endpoint opened.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerEndpoint {
    pub rss_kib: f64,
    pub vsz_kib: f64,
    pub fds: f64,
}

impl PerEndpoint {
    /// The growth from `before` to `after` over `opened` endpoints (saturating: memory given back
    /// meanwhile counts as nothing, not as a negative cost).
    pub fn between(before: ProcStats, after: ProcStats, opened: u64) -> PerEndpoint {
        let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / opened.max(1) as f64;
        PerEndpoint {
            rss_kib: per(before.rss_kib, after.rss_kib),
            vsz_kib: per(before.vsz_kib, after.vsz_kib),
            fds: per(before.fds, after.fds),
        }
    }
}

/// The cost of the endpoints of a many-endpoints test, on both sides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndpointCost {
    pub endpoints: u32,
    /// Endpoints the figures are measured over (those opened for the test that measured them).
    pub opened: u64,
    pub client: PerEndpoint,
    pub server: PerEndpoint,
}

impl fmt::Display for EndpointCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, s) = (&self.client, &self.server);
        write!(
            f,
            "# per endpoint: endpoints={} measured_over={} client_rss_kib={:.1} client_vsz_kib={:.1} client_fds={:.2} \
             server_rss_kib={:.1} server_vsz_kib={:.1} server_fds={:.2}",
            self.endpoints, self.opened, c.rss_kib, c.vsz_kib, c.fds, s.rss_kib, s.vsz_kib, s.fds
        )
    }
}

/// Makes room for `endpoints` endpoints' descriptors: raises the soft limit on open files up to
/// the hard limit when it is too low, and fails saying what to do when the hard limit is.
pub fn ensure_descriptors(endpoints: u32) -> Result<(), String> {
    let needed = FDS_BASE + FDS_PER_ENDPOINT * u64::from(endpoints);
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("getrlimit(RLIMIT_NOFILE) failed: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur >= needed {
        return Ok(());
    }
    if limit.rlim_max < needed {
        return Err(format!(
            "--endpoints {endpoints} needs about {needed} open files, and the hard limit is {}: raise it \
             (ulimit -Hn, or LimitNOFILE= for a service) or ask for fewer endpoints",
            limit.rlim_max
        ));
    }
    let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
    // SAFETY: `raised` is a valid rlimit; a soft limit up to the hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(format!(
            "--endpoints {endpoints} needs about {needed} open files; cannot raise the soft limit {} to {}: {}",
            limit.rlim_cur,
            limit.rlim_max,
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The client's side of opening endpoints: connects endpoints `eps.len()..count` to `addr` one at
/// a time, each introduced by a hello the server answers.
pub fn open_client_endpoints(
    s: &Session,
    eps: &mut Vec<Endpoint>,
    count: u32,
    addr: std::net::SocketAddr,
) -> Result<(), String> {
    for index in eps.len() as u32..count {
        let flag = s.peer_failed.clone();
        let params =
            EpParams::sockaddr(addr).with_err_handler(move |_, _| flag.store(true, Ordering::Relaxed));
        let ep = s
            .worker
            .create_endpoint(params)
            .map_err(|st| format!("cannot open endpoint {index} to {addr}: {}", detailed(st)))?;
        let answer = s
            .worker
            .tag_recv(vec![0u8; 4], TAG_HELLO, u64::MAX, RequestParams::default())
            .map_err(|st| format!("cannot post a receive: {}", detailed(st)))?;
        let hello = ep
            .tag_send(index.to_le_bytes().to_vec(), TAG_HELLO, TagSendParams::default())
            .map_err(|st| format!("cannot greet over endpoint {index}: {}", detailed(st)))?;
        s.wait(hello, "a hello to leave")?;
        let answer = s.wait(answer, "the server's answer to a hello")?;
        if answer.info.length != 4 || answer.buf[..] != index.to_le_bytes() {
            return Err(format!(
                "endpoint {index}: the server answered {:?}",
                &answer.buf[..answer.info.length.min(4)]
            ));
        }
        eps.push(ep);
    }
    Ok(())
}

/// Connections the server accepts: one (the session's) until a test asks for more.
#[derive(Default)]
pub struct Accepts {
    /// Endpoints accepted so far.
    taken: usize,
    /// How many it may accept in all.
    limit: usize,
    /// Accepted, not yet introduced by their hello.
    queue: VecDeque<Endpoint>,
}

impl Accepts {
    /// Accepts that take one connection.
    pub fn new() -> Accepts {
        Accepts { taken: 0, limit: 1, queue: VecDeque::new() }
    }

    /// Whether one more connection may be accepted; counts it when so.
    pub fn admit(&mut self) -> bool {
        if self.taken >= self.limit {
            return false;
        }
        self.taken += 1;
        true
    }

    /// An accepted endpoint, in the order they were accepted.
    pub fn push(&mut self, ep: Endpoint) {
        self.queue.push_back(ep);
    }

    /// The oldest accepted endpoint not yet taken.
    pub fn pop(&mut self) -> Option<Endpoint> {
        self.queue.pop_front()
    }

    /// Lets `limit` connections in all be accepted.
    pub fn allow(&mut self, limit: usize) {
        self.limit = self.limit.max(limit);
    }
}

/// The server's side of opening endpoints: takes the hellos of endpoints `eps.len()..count`, each
/// from the endpoint accepted next, and answers each on its endpoint.
pub fn accept_server_endpoints(
    s: &Session,
    eps: &mut Vec<Endpoint>,
    count: u32,
    accepts: &Arc<Mutex<Accepts>>,
) -> Result<(), String> {
    let lock = || accepts.lock().unwrap_or_else(|p| p.into_inner());
    lock().allow(count as usize);
    for index in eps.len() as u32..count {
        let hello = s.recv_ctrl(TAG_HELLO, "a client endpoint's hello")?;
        if hello[..] != index.to_le_bytes() {
            return Err(format!("expected the hello of endpoint {index}, got {hello:?}"));
        }
        let mut accepted = None;
        s.poll_until("the endpoint of a hello to be accepted", || {
            accepted = lock().pop();
            accepted.is_some()
        })?;
        let ep = accepted.expect("accepted");
        let answer = ep
            .tag_send(hello, TAG_HELLO, TagSendParams::default())
            .map_err(|st| format!("cannot answer the hello of endpoint {index}: {}", detailed(st)))?;
        s.wait(answer, "the answer to a hello to leave")?;
        eps.push(ep);
    }
    Ok(())
}

/// The client asks the server for its [`ProcStats`].
pub fn server_stats(s: &Session) -> Result<ProcStats, String> {
    s.send_ctrl(TAG_CTRL, b"stats")?;
    let answer = s.recv_ctrl(TAG_CTRL, "the server's stats")?;
    let text = String::from_utf8_lossy(&answer);
    ProcStats::decode(&text).ok_or_else(|| format!("bad stats from the server: {text:?}"))
}

/// Closes `eps` all at once and waits for them, ignoring failures (the peer may close first).
pub fn close_all(s: &Session, eps: Vec<Endpoint>, mode: zcx::CloseMode) {
    let closing: Vec<_> = eps.into_iter().filter_map(|ep| ep.close(mode).ok()).collect();
    for close in closing {
        let _ = s.wait(close, "an endpoint to close");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_round_trip_and_reject_malformed_text() {
        let stats = ProcStats { rss_kib: 1234, vsz_kib: 99999, fds: 17 };
        assert_eq!(ProcStats::decode(&stats.encode()), Some(stats));
        assert_eq!(ProcStats::decode("stats 1 2"), None);
        assert_eq!(ProcStats::decode("stats 1 2 3 4"), None);
        assert_eq!(ProcStats::decode("stats 1 x 3"), None);
        assert_eq!(ProcStats::decode("bye"), None);
    }

    #[test]
    fn this_process_has_memory_and_descriptors() {
        let stats = ProcStats::now().expect("proc");
        assert!(stats.rss_kib > 0 && stats.vsz_kib >= stats.rss_kib && stats.fds >= 3, "{stats:?}");
    }

    #[test]
    fn per_endpoint_figures_divide_growth_and_ignore_shrinking() {
        let before = ProcStats { rss_kib: 1000, vsz_kib: 5000, fds: 10 };
        let after = ProcStats { rss_kib: 900, vsz_kib: 9000, fds: 26 };
        let per = PerEndpoint::between(before, after, 8);
        assert_eq!(per, PerEndpoint { rss_kib: 0.0, vsz_kib: 500.0, fds: 2.0 });
    }

    #[test]
    fn status_values_are_read_by_key() {
        let text = "Name:\tzcx\nVmSize:\t  123456 kB\nVmRSS:\t    4321 kB\n";
        assert_eq!(status_kib(text, "VmRSS:"), 4321);
        assert_eq!(status_kib(text, "VmSize:"), 123456);
        assert_eq!(status_kib(text, "VmSwap:"), 0);
    }

    #[test]
    fn accepts_take_one_connection_until_allowed_more() {
        let mut accepts = Accepts::new();
        assert!(accepts.admit());
        assert!(!accepts.admit(), "one client per run until a test asks for more");
        accepts.allow(3);
        assert!(accepts.admit() && accepts.admit());
        assert!(!accepts.admit());
        accepts.allow(2);
        assert!(!accepts.admit(), "a lower limit does not reopen");
    }

    #[test]
    fn tags_name_their_endpoint_under_the_mask() {
        for index in [0u64, 1, 1023, u32::MAX as u64] {
            let tag = TAG_MANY | index;
            assert_eq!(tag & TAG_MANY_MASK, TAG_MANY);
            assert_eq!(tag & !TAG_MANY_MASK, index);
        }
        assert_ne!(crate::perf::session::TAG_DATA & TAG_MANY_MASK, TAG_MANY);
        assert_ne!(TAG_HELLO & TAG_MANY_MASK, TAG_MANY);
    }

    #[test]
    fn descriptors_for_a_few_endpoints_fit() {
        ensure_descriptors(4).expect("a handful of endpoints fits any limit");
    }
}
