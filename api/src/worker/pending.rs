//! Connections a listener accepted whose peer has not made its connection request yet.
//!
//! Until the request arrives a connection is anyone's, so what it may hold is bounded: each
//! listener keeps at most `ZCX_MAX_PENDING_CONNECTIONS` of them, a newer one closing the oldest
//! (so a flood of idle connections cannot lock honest clients out for longer than it keeps
//! flooding), and each may wait `ZCX_HANDSHAKE_TIMEOUT` at most (a peer that trickles its
//! request, slowloris-style, is closed when the time is up). A connection is given
//! [`EVICT_GRACE`] to make its request before a newer one may push it out: a burst of honest
//! clients larger than the cap, all accepted in one poll, is not closed before their requests
//! could be read. Frames on these links are limited to a handshake's size by the transport
//! until the worker calls `link_established`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use zcx_dataplane::{FastMap, LinkId, ListenerId, LogLimit};

/// A connection accepted by a listener, waiting for the client's request.
pub(crate) struct Incoming {
    pub listener: ListenerId,
    pub peer: SocketAddr,
    /// When it was accepted.
    since: Instant,
    /// Accept order, for eviction (instants of one poll's accepts may be equal).
    seq: u64,
}

/// Every pending connection of a worker, with the bounds above.
pub(crate) struct PendingConnections {
    links: FastMap<LinkId, Incoming>,
    per_listener: FastMap<ListenerId, usize>,
    next_seq: u64,
    cap: usize,
    timeout: Duration,
    evicted_log: LogLimit,
    expired_log: LogLimit,
}

/// Warnings about connections closed before their request: one a second at most, whatever the
/// flood.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// How long a pending connection is safe from being pushed out by newer ones: an honest client
/// sends its request as soon as it is connected, well within this.
const EVICT_GRACE: Duration = Duration::from_millis(100);

impl PendingConnections {
    /// At most `cap` (at least 1) per listener, each for at most `timeout`.
    pub fn new(cap: usize, timeout: Duration) -> PendingConnections {
        PendingConnections {
            links: FastMap::default(),
            per_listener: FastMap::default(),
            next_seq: 0,
            cap: cap.max(1),
            timeout,
            evicted_log: LogLimit::new(LOG_INTERVAL),
            expired_log: LogLimit::new(LOG_INTERVAL),
        }
    }

    /// True when no connection is pending.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// How long a connection may wait for its request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Holds `link`, accepted by `listener` at `now`. When that puts the listener over its
    /// cap, its oldest pending connections past [`EVICT_GRACE`] are dropped to make room, and
    /// their links added to `evicted` for the caller to close.
    pub fn admit(
        &mut self,
        link: LinkId,
        listener: ListenerId,
        peer: SocketAddr,
        now: Instant,
        evicted: &mut Vec<LinkId>,
    ) {
        self.remove(&link);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.links.insert(link, Incoming { listener, peer, since: now, seq });
        let held = self.per_listener.entry(listener).or_insert(0);
        *held += 1;
        if *held > self.cap {
            self.trim(listener, now, evicted);
        }
    }

    /// Drops the oldest pending connections of `listener` while it holds more than its cap and
    /// the oldest has had its grace.
    fn trim(&mut self, listener: ListenerId, now: Instant, evicted: &mut Vec<LinkId>) {
        while self.per_listener.get(&listener).is_some_and(|&held| held > self.cap) {
            let oldest = self
                .links
                .iter()
                .filter(|(_, inc)| inc.listener == listener)
                .min_by_key(|(_, inc)| inc.seq)
                .map(|(&link, inc)| (link, inc.since));
            let Some((old, since)) = oldest else { return };
            if now.saturating_duration_since(since) < EVICT_GRACE {
                return;
            }
            let gone = self.remove(&old).expect("listed above");
            evicted.push(old);
            if let Some(held_back) = self.evicted_log.allow(now) {
                tracing::warn!(
                    ?listener,
                    cap = self.cap,
                    peer = %gone.peer,
                    held_back,
                    "too many connections waiting for their connection request; closing the oldest \
                     (ZCX_MAX_PENDING_CONNECTIONS)"
                );
            }
        }
    }

    /// Stops holding `link` (its request came, or it failed or closed); returns what it was.
    pub fn remove(&mut self, link: &LinkId) -> Option<Incoming> {
        let incoming = self.links.remove(link)?;
        if let Some(held) = self.per_listener.get_mut(&incoming.listener) {
            *held -= 1;
            if *held == 0 {
                self.per_listener.remove(&incoming.listener);
            }
        }
        Some(incoming)
    }

    /// Drops every connection that has waited `timeout` or longer at `now`, and the oldest of
    /// a listener over its cap once they have had their grace, adding their links to `expired`
    /// for the caller to close.
    pub fn sweep(&mut self, now: Instant, expired: &mut Vec<LinkId>) {
        let over: Vec<ListenerId> =
            self.per_listener.iter().filter(|(_, &held)| held > self.cap).map(|(&l, _)| l).collect();
        for listener in over {
            self.trim(listener, now, expired);
        }
        let timeout = self.timeout;
        let first = expired.len();
        expired.extend(
            self.links
                .iter()
                .filter(|(_, inc)| now.saturating_duration_since(inc.since) >= timeout)
                .map(|(&link, _)| link),
        );
        for link in &expired[first..] {
            let gone = self.remove(link).expect("listed above");
            if let Some(held_back) = self.expired_log.allow(now) {
                tracing::warn!(
                    peer = %gone.peer,
                    ?timeout,
                    held_back,
                    "connection sent no connection request in time; closing it (ZCX_HANDSHAKE_TIMEOUT)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Admits `link` and returns what it pushed out.
    fn admit(p: &mut PendingConnections, link: u32, listener: ListenerId, now: Instant) -> Vec<LinkId> {
        let mut evicted = Vec::new();
        p.admit(LinkId(link), listener, peer(link as u16), now, &mut evicted);
        evicted
    }

    #[test]
    fn a_listener_at_its_cap_drops_its_oldest_and_other_listeners_are_untouched() {
        let mut p = PendingConnections::new(3, Duration::from_secs(5));
        let t0 = Instant::now();
        let later = t0 + EVICT_GRACE;
        let (a, b) = (ListenerId(1), ListenerId(2));
        for i in 0..3 {
            assert!(admit(&mut p, i, a, t0).is_empty());
        }
        assert!(admit(&mut p, 10, b, t0).is_empty());
        assert_eq!(admit(&mut p, 3, a, later), [LinkId(0)]);
        assert_eq!(admit(&mut p, 4, a, later), [LinkId(1)]);
        // A request came on the oldest left: the next newcomer needs no room.
        assert!(p.remove(&LinkId(2)).is_some());
        assert!(admit(&mut p, 5, a, later).is_empty());
        // The oldest now came at `later`: safe from newcomers for its grace.
        assert!(admit(&mut p, 6, a, later + EVICT_GRACE / 2).is_empty());
        let mut swept = Vec::new();
        p.sweep(later + EVICT_GRACE, &mut swept);
        assert_eq!(swept, [LinkId(3)]);
        assert!(p.remove(&LinkId(10)).is_some_and(|inc| inc.listener == b));
        assert!(p.remove(&LinkId(0)).is_none());
    }

    #[test]
    fn a_burst_beyond_the_cap_keeps_its_grace() {
        let mut p = PendingConnections::new(2, Duration::from_secs(5));
        let t0 = Instant::now();
        for i in 0..10 {
            assert!(admit(&mut p, i, ListenerId(0), t0).is_empty());
        }
        // Most made their requests in time.
        for i in 0..7 {
            assert!(p.remove(&LinkId(i)).is_some());
        }
        let mut swept = Vec::new();
        p.sweep(t0 + EVICT_GRACE, &mut swept);
        assert_eq!(swept, [LinkId(7)]);
    }

    #[test]
    fn connections_older_than_the_timeout_expire_and_newer_stay() {
        let timeout = Duration::from_millis(300);
        let mut p = PendingConnections::new(128, timeout);
        let t0 = Instant::now();
        admit(&mut p, 1, ListenerId(0), t0);
        admit(&mut p, 2, ListenerId(0), t0 + Duration::from_millis(200));
        let mut expired = Vec::new();
        p.sweep(t0 + Duration::from_millis(299), &mut expired);
        assert!(expired.is_empty());
        p.sweep(t0 + timeout, &mut expired);
        assert_eq!(expired, [LinkId(1)]);
        p.sweep(t0 + Duration::from_millis(499), &mut expired);
        assert_eq!(expired, [LinkId(1)]);
        p.sweep(t0 + Duration::from_secs(60), &mut expired);
        assert_eq!(expired, [LinkId(1), LinkId(2)]);
        assert!(p.is_empty());
        // Counts went with them: a full cap is available again.
        for i in 0..128 {
            assert!(admit(&mut p, 100 + i, ListenerId(0), t0).is_empty());
        }
    }
}
