//! Connections a listener accepted whose peer has not made its connection request yet.
//!
//! Until the request arrives a connection is anyone's, so what it may hold is bounded: each
//! listener keeps at most `ZCX_MAX_PENDING_CONNECTIONS` of them (a new one closes the oldest,
//! so a flood of idle connections cannot lock honest clients out for longer than it keeps
//! flooding), and each may wait `ZCX_HANDSHAKE_TIMEOUT` at most (a peer that trickles its
//! request, slowloris-style, is closed when the time is up). Their frames are limited to a
//! handshake's size by the transport until the worker calls `link_established`.

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

    /// Holds `link`, accepted by `listener` at `now`. When the listener holds its cap already,
    /// its oldest pending connection is dropped to make room and returned, for the caller to
    /// close.
    pub fn admit(
        &mut self,
        link: LinkId,
        listener: ListenerId,
        peer: SocketAddr,
        now: Instant,
    ) -> Option<LinkId> {
        self.remove(&link);
        let held = self.per_listener.get(&listener).copied().unwrap_or(0);
        let evicted = if held >= self.cap {
            let oldest = self
                .links
                .iter()
                .filter(|(_, inc)| inc.listener == listener)
                .min_by_key(|(_, inc)| inc.seq)
                .map(|(&link, _)| link);
            if let Some(old) = oldest {
                let gone = self.remove(&old).expect("listed above");
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
            oldest
        } else {
            None
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.links.insert(link, Incoming { listener, peer, since: now, seq });
        *self.per_listener.entry(listener).or_insert(0) += 1;
        evicted
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

    /// Drops every connection that has waited `timeout` or longer at `now`, adding its link to
    /// `expired` for the caller to close.
    pub fn expire(&mut self, now: Instant, expired: &mut Vec<LinkId>) {
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

    #[test]
    fn a_listener_at_its_cap_drops_its_oldest_and_other_listeners_are_untouched() {
        let mut p = PendingConnections::new(3, Duration::from_secs(5));
        let now = Instant::now();
        let (a, b) = (ListenerId(1), ListenerId(2));
        for i in 0..3 {
            assert_eq!(p.admit(LinkId(i), a, peer(1), now), None);
        }
        assert_eq!(p.admit(LinkId(10), b, peer(2), now), None);
        assert_eq!(p.admit(LinkId(3), a, peer(1), now), Some(LinkId(0)));
        assert_eq!(p.admit(LinkId(4), a, peer(1), now), Some(LinkId(1)));
        // A request came on the oldest left: the next newcomer needs no room.
        assert!(p.remove(&LinkId(2)).is_some());
        assert_eq!(p.admit(LinkId(5), a, peer(1), now), None);
        assert_eq!(p.admit(LinkId(6), a, peer(1), now), Some(LinkId(3)));
        assert!(p.remove(&LinkId(10)).is_some_and(|inc| inc.listener == b));
        assert!(p.remove(&LinkId(0)).is_none());
    }

    #[test]
    fn connections_older_than_the_timeout_expire_and_newer_stay() {
        let timeout = Duration::from_millis(300);
        let mut p = PendingConnections::new(128, timeout);
        let t0 = Instant::now();
        p.admit(LinkId(1), ListenerId(0), peer(1), t0);
        p.admit(LinkId(2), ListenerId(0), peer(2), t0 + Duration::from_millis(200));
        let mut expired = Vec::new();
        p.expire(t0 + Duration::from_millis(299), &mut expired);
        assert!(expired.is_empty());
        p.expire(t0 + timeout, &mut expired);
        assert_eq!(expired, [LinkId(1)]);
        p.expire(t0 + Duration::from_millis(499), &mut expired);
        assert_eq!(expired, [LinkId(1)]);
        p.expire(t0 + Duration::from_secs(60), &mut expired);
        assert_eq!(expired, [LinkId(1), LinkId(2)]);
        assert!(p.is_empty());
        // Counts went with them: a full cap is available again.
        for i in 0..128 {
            assert_eq!(p.admit(LinkId(100 + i), ListenerId(0), peer(3), t0), None);
        }
    }
}
