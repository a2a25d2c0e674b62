//! Several transports driven as one: the worker's view of shm, uring, dpdk and verbs together.
//!
//! A worker owns one instance of each enabled transport (`ZCX_TLS`). The protocol layer above
//! speaks to links and listeners by id and does not care which transport carries them, so the set
//! implements [`Transport`] itself: the top bits of every [`LinkId`] and [`ListenerId`] it hands
//! out say which member owns it, and every event a member reports is renamed on its way up.
//! Which member a new connection uses is the caller's choice ([`TransportSet::connect_with`]);
//! plain [`Transport::connect`] goes to the first member that accepts the target.
//!
//! A member with the same-host fast paths ([`SameHostFastPath`]) is kept as such
//! ([`SetMember::SameHost`]), and the set offers the extension itself, forwarding each call to
//! the member that has it: one virtual call, core method or extension alike.

use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

use zcx_control::TransportAddress;

use crate::doorbell::Doorbell;
use crate::same_host::SameHostFastPath;
use crate::shm::put_help::HelpWords;
use crate::shm::ShmSendLane;
use crate::LendSlot;

use crate::transport::{
    Caps, ConnectTarget, LargePayload, LinkId, ListenerId, LocalMem, Payload, RemoteMem, RmaOp, RmaOutcome,
    SendOutcome, TlError, TlEvent, Transport,
};

/// One transport of a set, kept with the extension it offers.
pub enum SetMember {
    /// A transport with the core interface only.
    Plain(Box<dyn Transport>),
    /// A transport with the same-host fast paths too (shm).
    SameHost(Box<dyn SameHostFastPath>),
}

/// `$body` with `$t` bound to the member's transport, whichever kind it is: both arms make the
/// same virtual call (a `dyn SameHostFastPath` vtable starts with the core methods).
macro_rules! with_member {
    ($member:expr, $t:ident => $body:expr) => {
        match $member {
            SetMember::Plain($t) => $body,
            SetMember::SameHost($t) => $body,
        }
    };
}

/// Bits of an id below the member's index: the member's own id (see [`crate::link_table`] for
/// the whole layout).
const MEMBER_SHIFT: u32 = crate::link_table::LOCAL_ID_BITS;
/// The member's own part of an id.
const LOCAL_MASK: u32 = (1 << MEMBER_SHIFT) - 1;
/// The most members a set holds (ids keep 4 bits for the member).
pub const MAX_MEMBERS: usize = 1 << (32 - MEMBER_SHIFT);

/// The transports of one worker, polled together and addressed through one id space.
pub struct TransportSet {
    members: Vec<SetMember>,
    /// What the protocol layer may assume of any link: the most restrictive of every member.
    caps: Caps,
    /// Bit `i`: member `i` gave at least one doorbell at the last
    /// [`SameHostFastPath::doorbells`] call
    /// (see [`TransportSet::poll_rung`]).
    belled: Cell<u32>,
    /// Bit `i`: member `i` was dormant ([`Transport::is_dormant`]) after the last full poll that
    /// polled every member; other full polls skip it (see [`TransportSet::poll_full`]).
    dormant: u32,
    /// Full polls left before one polls every member again and sees which are dormant.
    dormant_countdown: u32,
}

/// Full polls that skip the dormant members between two that poll every member. A dormant member
/// can be reached only by a listener's new connection, which waits that many polls at most (a
/// few microseconds while busy-polling; a worker about to sleep polls every member first).
const DORMANT_SKIPS: u32 = 32;

/// The id a member's local id has in the set.
fn global(member: usize, local: u32) -> u32 {
    debug_assert!(local <= LOCAL_MASK, "a transport handed out an id above 2^28");
    ((member as u32) << MEMBER_SHIFT) | (local & LOCAL_MASK)
}

/// The member and its local id of a set id.
fn split(id: u32) -> (usize, u32) {
    ((id >> MEMBER_SHIFT) as usize, id & LOCAL_MASK)
}

/// The member of a set that carries `link`.
pub fn member_of(link: LinkId) -> usize {
    split(link.0).0
}

impl TransportSet {
    /// A poll because a doorbell rang while every member was quiet (see
    /// [`Transport::is_quiet`]): only the members that gave doorbells at the last
    /// [`SameHostFastPath::doorbells`] call are polled. A quiet member without doorbells has no link,
    /// so nothing can reach it but a listener's connection, and those wait for the next full poll
    /// as they do while no doorbell rings. It saves an idle io_uring transport's look at its
    /// rings on every shared-memory message.
    /// Frames are offered through `lend` when given (see [`crate::lend`]).
    pub fn poll_rung(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: Option<&LendSlot>) -> usize {
        self.poll_members(self.belled.get(), sink, lend)
    }

    /// Every member but the dormant ones, and every member without exception once per
    /// [`DORMANT_SKIPS`] calls, after which the dormant ones are those found dormant then. It
    /// saves an idle transport's look at its rings and sockets on every poll of a worker whose
    /// traffic is on another: a listener-only io_uring transport beside shared memory, or shared
    /// memory without a link beside TCP.
    fn poll_full(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: Option<&LendSlot>) -> usize {
        if self.dormant_countdown > 0 {
            self.dormant_countdown -= 1;
            return self.poll_members(!self.dormant, sink, lend);
        }
        let count = self.poll_members(u32::MAX, sink, lend);
        self.dormant_countdown = DORMANT_SKIPS;
        self.dormant = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| with_member!(m, t => t.is_dormant()))
            .fold(0, |bits, (index, _)| bits | 1 << index);
        count
    }

    /// The next full poll looks at every member, dormant or not, and sees which are dormant
    /// afresh: for a worker's periodic poll, which is then the one that finds a dormant
    /// listener's connections while the worker is quiet (see [`Transport::is_quiet`] of the
    /// set).
    pub fn poll_every_member_next(&mut self) {
        self.dormant_countdown = 0;
    }

    /// Member `member` is polled by every full poll again: a call may have given it work (a
    /// connection, a listener, a closing link) that no doorbell announces.
    fn wake(&mut self, member: usize) {
        self.dormant &= !(1u32.checked_shl(member as u32).unwrap_or(0));
    }

    /// Polls the members whose bit is set in `mask`, offering frames through `lend` when given.
    fn poll_members(
        &mut self,
        mask: u32,
        sink: &mut dyn FnMut(TlEvent<'_>),
        lend: Option<&LendSlot>,
    ) -> usize {
        let mut count = 0;
        for (index, member) in self.members.iter_mut().enumerate() {
            if mask & (1 << index) == 0 {
                continue;
            }
            count += match (index, member, lend) {
                // Member 0's ids are the set's ids (its member bits are zero): no renaming, and
                // no closure between the first member's events and the sink.
                (0, SetMember::SameHost(tl), Some(lend)) => tl.poll_lending(sink, lend),
                (0, member, _) => with_member!(member, tl => tl.poll(sink)),
                (_, SetMember::SameHost(tl), Some(lend)) => {
                    tl.poll_lending(&mut |event| sink(renamed(index, event)), lend)
                }
                (_, member, _) => {
                    with_member!(member, tl => tl.poll(&mut |event| sink(renamed(index, event))))
                }
            };
        }
        count
    }

    /// A set of `members`, in order of preference for [`Transport::connect`]. At least one, at
    /// most [`MAX_MEMBERS`].
    pub fn new(members: Vec<SetMember>) -> Result<TransportSet, TlError> {
        if members.is_empty() || members.len() > MAX_MEMBERS {
            return Err(TlError::InvalidParam);
        }
        let caps = merged_caps(
            with_member!(&members[0], t => t.caps()),
            members[1..].iter().map(|m| with_member!(m, t => t.caps())),
        );
        Ok(TransportSet { members, caps, belled: Cell::new(0), dormant: 0, dormant_countdown: 0 })
    }

    /// The members' short names, in order (`"uring"`, `"shm"`, ...).
    pub fn names(&self) -> Vec<&'static str> {
        self.members.iter().map(|m| with_member!(m, t => t.caps()).name).collect()
    }

    /// Every member's address, for the worker address.
    pub fn addresses(&self) -> Vec<TransportAddress> {
        self.members.iter().filter_map(|m| with_member!(m, t => t.address())).collect()
    }

    /// The index of the member named `name`.
    pub fn member_named(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| with_member!(m, t => t.caps()).name == name)
    }

    /// Connects through member `member`.
    pub fn connect_with(&mut self, member: usize, target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        self.wake(member);
        let tl = self.members.get_mut(member).ok_or(TlError::InvalidParam)?;
        let link = with_member!(tl, tl => tl.connect(target))?;
        Ok(LinkId(global(member, link.0)))
    }

    /// The caps of every member but the one named `name`, merged as [`Transport::caps`] merges
    /// them all: for links that never use that member (its links have caps of their own).
    pub fn caps_without(&self, name: &str) -> Caps {
        let mut others =
            self.members.iter().map(|m| with_member!(m, t => t.caps())).filter(|c| c.name != name);
        match others.next() {
            Some(first) => merged_caps(first, others),
            None => self.caps.clone(),
        }
    }

    /// The caps of member `member` (the set's own for an unknown member).
    pub fn member_caps(&self, member: usize) -> &Caps {
        match self.members.get(member) {
            Some(m) => with_member!(m, t => t.caps()),
            None => &self.caps,
        }
    }

    /// Opens a link through member `member` ([`Transport::open_link`]).
    pub fn open_link_with(&mut self, member: usize) -> Result<(LinkId, TransportAddress), TlError> {
        self.wake(member);
        let tl = self.members.get_mut(member).ok_or(TlError::InvalidParam)?;
        let (link, address) = with_member!(tl, tl => tl.open_link())?;
        Ok((LinkId(global(member, link.0)), address))
    }

    /// The notifiers of every member, for the worker's epoll set.
    pub fn event_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.members.iter().filter_map(|m| with_member!(m, t => t.event_fd())).collect()
    }

    fn member(&self, id: u32) -> Option<(&SetMember, u32)> {
        let (index, local) = split(id);
        self.members.get(index).map(|m| (m, local))
    }

    fn member_mut(&mut self, id: u32) -> Option<(&mut SetMember, u32)> {
        let (index, local) = split(id);
        self.members.get_mut(index).map(|m| (m, local))
    }
}

/// What holds for every member: the smallest frame and placement sizes, reliability, order and
/// each native one-sided operation only when all have them (the protocol layer works per link,
/// from [`Transport::link_caps`], but sizes fragments once).
fn merged_caps<'a>(first: &Caps, others: impl Iterator<Item = &'a Caps>) -> Caps {
    others.fold(first.clone(), |acc, caps| Caps {
        name: acc.name,
        reliable: acc.reliable && caps.reliable,
        ordered: acc.ordered && caps.ordered,
        rma: acc.rma.intersection(&caps.rma),
        // Pulled only when every member pulls; per link, `link_caps` says what its member does.
        large_payload: if acc.large_payload == caps.large_payload {
            acc.large_payload
        } else {
            LargePayload::SenderPush
        },
        max_frame: acc.max_frame.min(caps.max_frame),
        zcopy_threshold: acc.zcopy_threshold.max(caps.zcopy_threshold),
        // A member that cannot place sends placed frames whole, so they must fit its frames.
        max_placed: placed_limit(&acc).min(placed_limit(caps)),
        latency_ns: acc.latency_ns.min(caps.latency_ns),
        bandwidth: acc.bandwidth.max(caps.bandwidth),
    })
}

/// The largest payload a placed frame of this transport may carry, placed or sent whole.
fn placed_limit(caps: &Caps) -> usize {
    if caps.max_placed > 0 {
        caps.max_placed
    } else {
        caps.max_frame.saturating_sub(crate::proto::wire::MAX_HEADER_LEN)
    }
}

/// The set's id of member `member`'s listener. Listener 0 is every member's worker-address
/// listener, and the worker has one such listener whatever carries it, so it stays 0.
fn listener_id(member: usize, listener: ListenerId) -> ListenerId {
    if listener.0 == 0 {
        listener
    } else {
        ListenerId(global(member, listener.0))
    }
}

/// `event` with its link and listener ids renamed into the set's id space.
fn renamed(member: usize, event: TlEvent<'_>) -> TlEvent<'_> {
    let link = |l: LinkId| LinkId(global(member, l.0));
    match event {
        TlEvent::Connected { link: l } => TlEvent::Connected { link: link(l) },
        TlEvent::Accepted { listener, link: l, peer } => {
            TlEvent::Accepted { listener: listener_id(member, listener), link: link(l), peer }
        }
        TlEvent::Frame { link: l, bytes } => TlEvent::Frame { link: link(l), bytes },
        TlEvent::SendDone { link: l, token, result } => TlEvent::SendDone { link: link(l), token, result },
        TlEvent::Placed { link: l, header, len, dest } => {
            TlEvent::Placed { link: link(l), header, len, dest }
        }
        TlEvent::PlaceDone { link: l, token, result } => TlEvent::PlaceDone { link: link(l), token, result },
        TlEvent::RmaDone { link: l, token, result } => TlEvent::RmaDone { link: link(l), token, result },
        TlEvent::LinkFailed { link: l, error } => TlEvent::LinkFailed { link: link(l), error },
    }
}

impl Transport for TransportSet {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn link_caps(&self, link: LinkId) -> &Caps {
        match self.member(link.0) {
            Some((tl, local)) => with_member!(tl, tl => tl.link_caps(LinkId(local))),
            None => &self.caps,
        }
    }

    /// The first member's address; the worker address lists all of them ([`Self::addresses`]).
    fn address(&self) -> Option<TransportAddress> {
        self.members.iter().find_map(|m| with_member!(m, t => t.address()))
    }

    /// Listens on the first member that listens by sockaddr.
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
        self.dormant = 0;
        for (index, tl) in self.members.iter_mut().enumerate() {
            match with_member!(tl, tl => tl.listen(addr)) {
                Err(TlError::Unsupported) => continue,
                other => return other.map(|(id, bound)| (listener_id(index, id), bound)),
            }
        }
        Err(TlError::Unsupported)
    }

    fn close_listener(&mut self, listener: ListenerId) {
        let (index, local) = split(listener.0);
        self.wake(index);
        if let Some(tl) = self.members.get_mut(index) {
            with_member!(tl, tl => tl.close_listener(ListenerId(local)));
        }
    }

    /// Connects through the member the target is for: a transport address goes to the member of
    /// its kind, a sockaddr to the first member that dials sockaddrs.
    fn connect(&mut self, target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        if let ConnectTarget::Address(address) | ConnectTarget::Session { address, .. } = &target {
            let member = self
                .members
                .iter()
                .position(|m| {
                    with_member!(m, t => t.address()).is_some_and(|own| own.kind() == address.kind())
                })
                .ok_or(TlError::Unsupported)?;
            return self.connect_with(member, target);
        }
        for index in 0..self.members.len() {
            match self.connect_with(index, target.clone()) {
                Err(TlError::Unsupported) => continue,
                other => return other,
            }
        }
        Err(TlError::Unsupported)
    }

    fn open_link(&mut self) -> Result<(LinkId, TransportAddress), TlError> {
        for index in 0..self.members.len() {
            match self.open_link_with(index) {
                Err(TlError::Unsupported) => continue,
                other => return other,
            }
        }
        Err(TlError::Unsupported)
    }

    fn join_link(&mut self, link: LinkId, peer: &TransportAddress) -> Result<(), TlError> {
        self.wake(member_of(link));
        let (tl, local) = self.member_mut(link.0).ok_or(TlError::InvalidParam)?;
        with_member!(tl, tl => tl.join_link(LinkId(local), peer))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.members.iter().flat_map(|m| with_member!(m, t => t.counters())).collect()
    }

    fn link_addrs(&self, link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        match self.member(link.0) {
            Some((tl, local)) => with_member!(tl, tl => tl.link_addrs(LinkId(local))),
            None => (None, None),
        }
    }

    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError> {
        let (tl, local) = self.member_mut(link.0).ok_or(TlError::InvalidParam)?;
        with_member!(tl, tl => tl.send(LinkId(local), header, payload))
    }

    fn send_placed(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<SendOutcome, TlError> {
        let (tl, local) = self.member_mut(link.0).ok_or(TlError::InvalidParam)?;
        with_member!(tl, tl => tl.send_placed(LinkId(local), header, payload))
    }

    fn close(&mut self, link: LinkId, force: bool) {
        self.wake(member_of(link));
        if let Some((tl, local)) = self.member_mut(link.0) {
            with_member!(tl, tl => tl.close(LinkId(local), force));
        }
    }

    fn link_established(&mut self, link: LinkId) {
        self.wake(member_of(link));
        if let Some((tl, local)) = self.member_mut(link.0) {
            with_member!(tl, tl => tl.link_established(LinkId(local)));
        }
    }

    fn rma(
        &mut self,
        link: LinkId,
        op: RmaOp,
        local: LocalMem,
        remote: RemoteMem<'_>,
        token: u64,
    ) -> Result<RmaOutcome, TlError> {
        let (tl, local_link) = self.member_mut(link.0).ok_or(TlError::InvalidParam)?;
        with_member!(tl, tl => tl.rma(LinkId(local_link), op, local, remote, token))
    }

    fn has_pending_sends(&self, link: LinkId) -> bool {
        self.member(link.0)
            .is_some_and(|(tl, local)| with_member!(tl, tl => tl.has_pending_sends(LinkId(local))))
    }

    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        self.poll_full(sink, None)
    }

    /// The first member's notifier; the worker waits on all of them ([`Self::event_fds`]).
    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.members.iter().find_map(|m| with_member!(m, t => t.event_fd()))
    }

    /// A dormant member counts as quiet without being asked: it was quiet when last polled, no
    /// call gave it work since, and what only a poll could show it (a listener's connection)
    /// waits for the periodic poll, which looks at every member
    /// ([`TransportSet::poll_every_member_next`]).
    #[inline]
    fn is_quiet(&self) -> bool {
        self.members
            .iter()
            .enumerate()
            .all(|(index, m)| self.dormant & (1 << index) != 0 || with_member!(m, t => t.is_quiet()))
    }

    fn link_delivered(&self, link: LinkId) -> bool {
        match self.member(link.0) {
            Some((tl, local)) => with_member!(tl, tl => tl.link_delivered(LinkId(local))),
            None => false,
        }
    }

    /// Every member is polled by the next full poll: a dormant one's listener wakes the worker
    /// through its notifier, and the poll after the wake must look at it.
    fn prepare_sleep(&mut self) {
        self.dormant = 0;
        for member in &mut self.members {
            with_member!(member, t => t.prepare_sleep());
        }
    }

    fn has_events(&self) -> bool {
        // Every member is asked: has_events may drain a notifier, which must happen for each.
        self.members.iter().fold(false, |any, m| with_member!(m, t => t.has_events()) | any)
    }

    /// The set itself, when a member has the fast paths: it forwards to that member.
    fn same_host_fast_path(&mut self) -> Option<&mut dyn SameHostFastPath> {
        if self.members.iter().any(|m| matches!(m, SetMember::SameHost(_))) {
            Some(self)
        } else {
            None
        }
    }
}

/// Forwards to the members that have the fast paths; the others have nothing to lend, take,
/// ring or open.
impl SameHostFastPath for TransportSet {
    fn poll_lending(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: &LendSlot) -> usize {
        self.poll_full(sink, Some(lend))
    }

    /// [`SameHostFastPath::take_rung_frame`] of the member that carries `rung` (a link whose
    /// doorbell rang, named as the set names it), if that member gave doorbells.
    fn take_rung_frame(
        &mut self,
        rung: LinkId,
        take: &mut dyn FnMut(LinkId, &[u8]),
        lend: &LendSlot,
    ) -> bool {
        let (index, local) = split(rung.0);
        if self.belled.get() & (1 << index) == 0 {
            return false;
        }
        // Only a member with the fast paths gives doorbells, so only such a member is belled.
        let Some(SetMember::SameHost(tl)) = self.members.get_mut(index) else { return false };
        match index {
            // Member 0's ids are the set's (see `poll_members`).
            0 => tl.take_rung_frame(rung, take, lend),
            _ => tl.take_rung_frame(
                LinkId(local),
                &mut |link, bytes| take(LinkId(global(index, link.0)), bytes),
                lend,
            ),
        }
    }

    fn end_lend(&mut self, link: LinkId) {
        if let Some((SetMember::SameHost(tl), local)) = self.member_mut(link.0) {
            tl.end_lend(LinkId(local));
        }
    }

    fn doorbells(&self, out: &mut Vec<Doorbell>) {
        let mut belled = 0;
        for (index, member) in self.members.iter().enumerate() {
            let SetMember::SameHost(member) = member else { continue };
            let before = out.len();
            member.doorbells(out);
            if out.len() > before {
                belled |= 1 << index;
            }
            for bell in &mut out[before..] {
                bell.rename_links(|link| LinkId(global(index, link.0)));
            }
        }
        self.belled.set(belled);
    }

    fn doorbell_generation(&self) -> u64 {
        // Each member's generation only grows, so the sum changes whenever one does.
        self.members.iter().fold(0u64, |sum, m| match m {
            SetMember::SameHost(m) => sum.wrapping_add(m.doorbell_generation()),
            SetMember::Plain(_) => sum,
        })
    }

    fn open_send_lane(&mut self, link: LinkId) -> Option<std::sync::Arc<ShmSendLane>> {
        match self.member_mut(link.0)? {
            (SetMember::SameHost(tl), local) => tl.open_send_lane(LinkId(local)),
            (SetMember::Plain(_), _) => None,
        }
    }

    fn peer_help_words(&self, link: LinkId) -> Option<(HelpWords, u32)> {
        match self.member(link.0)? {
            (SetMember::SameHost(tl), local) => tl.peer_help_words(LinkId(local)),
            (SetMember::Plain(_), _) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RmaCaps;

    #[test]
    fn ids_round_trip_through_the_member_bits() {
        for member in 0..MAX_MEMBERS {
            for local in [0, 1, 77, LOCAL_MASK] {
                assert_eq!(split(global(member, local)), (member, local));
            }
        }
    }

    #[test]
    fn every_members_worker_address_listener_is_listener_0() {
        for member in 0..MAX_MEMBERS {
            assert_eq!(listener_id(member, ListenerId(0)), ListenerId(0));
        }
        assert_eq!(listener_id(1, ListenerId(3)), ListenerId(global(1, 3)));
        assert_ne!(listener_id(1, ListenerId(3)), ListenerId(0));
    }

    fn caps(name: &'static str, max_frame: usize, max_placed: usize) -> Caps {
        Caps {
            name,
            reliable: true,
            ordered: true,
            rma: RmaCaps::NONE,
            large_payload: LargePayload::SenderPush,
            max_frame,
            zcopy_threshold: 1 << 18,
            max_placed,
            latency_ns: 1000,
            bandwidth: 1 << 30,
        }
    }

    /// DPDK places up to its `max_frame` less 262 bytes: a set with it places at the smallest
    /// member's limit, as before DPDK placed (shm 64 MiB, uring 1 MiB).
    #[test]
    fn placement_limits_merge_to_the_smallest_member() {
        let (shm, uring) = (caps("shm", 1 << 20, 64 << 20), caps("uring", 64 << 20, 1 << 20));
        let dpdk = caps("dpdk", 4 << 20, (4 << 20) - 262);
        let merged = |set: &[&Caps]| merged_caps(set[0], set[1..].iter().copied()).max_placed;
        assert_eq!(merged(&[&shm, &uring, &dpdk]), 1 << 20);
        assert_eq!(merged(&[&dpdk, &uring]), 1 << 20);
        assert_eq!(merged(&[&dpdk]), (4 << 20) - 262);
        assert_eq!(merged(&[&shm, &dpdk]), (4 << 20) - 262);
        // A member that cannot place sends placed frames whole: they must fit its frames.
        let whole = caps("dpdk", 64 << 10, 0);
        assert_eq!(merged(&[&shm, &whole]), (64 << 10) - crate::proto::wire::MAX_HEADER_LEN);
    }

    /// A set claims a native operation only when every member has it, and pulls large payloads
    /// only when every member does.
    #[test]
    fn one_sided_caps_merge_to_what_every_member_does() {
        let mut shm = caps("shm", 1 << 20, 64 << 20);
        shm.rma = RmaCaps {
            put: true,
            get: true,
            atomic32: crate::AtomicOps::ALL,
            atomic64: crate::AtomicOps::ALL,
            max_rma: 1 << 40,
        };
        let mut pulling = caps("verbs", 1 << 20, 0);
        pulling.rma = RmaCaps { put: true, get: true, max_rma: 1 << 30, ..RmaCaps::NONE };
        pulling.large_payload = LargePayload::ReceiverPull;
        let merged = |set: &[&Caps]| merged_caps(set[0], set[1..].iter().copied());
        assert_eq!(merged(&[&shm]).rma, shm.rma);
        assert_eq!(merged(&[&shm, &caps("uring", 1 << 20, 0)]).rma, RmaCaps::NONE);
        let both = merged(&[&shm, &pulling]);
        assert_eq!(both.rma, RmaCaps { put: true, get: true, max_rma: 1 << 30, ..RmaCaps::NONE });
        assert_eq!(both.large_payload, LargePayload::SenderPush);
        assert_eq!(merged(&[&pulling, &pulling]).large_payload, LargePayload::ReceiverPull);
    }

    #[test]
    fn an_empty_set_is_refused() {
        assert_eq!(TransportSet::new(Vec::new()).err(), Some(TlError::InvalidParam));
    }

    /// A member that only counts its polls and says it is dormant while `dormant` holds: what the
    /// set's skipping decides on, without a transport's own state in the way.
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
    use std::sync::Arc;

    struct Counted {
        caps: Caps,
        polls: Arc<AtomicU32>,
        dormant: Arc<AtomicBool>,
    }

    impl Transport for Counted {
        fn caps(&self) -> &Caps {
            &self.caps
        }
        fn address(&self) -> Option<TransportAddress> {
            None
        }
        fn listen(&mut self, _: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
            Err(TlError::Unsupported)
        }
        fn close_listener(&mut self, _: ListenerId) {}
        fn connect(&mut self, _: ConnectTarget<'_>) -> Result<LinkId, TlError> {
            Err(TlError::Unsupported)
        }
        fn link_addrs(&self, _: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
            (None, None)
        }
        fn send(&mut self, _: LinkId, _: &[u8], _: Payload<'_>) -> Result<SendOutcome, TlError> {
            Err(TlError::InvalidParam)
        }
        fn close(&mut self, _: LinkId, _: bool) {}
        fn has_pending_sends(&self, _: LinkId) -> bool {
            false
        }
        fn poll(&mut self, _: &mut dyn FnMut(TlEvent<'_>)) -> usize {
            self.polls.fetch_add(1, Relaxed);
            0
        }
        fn event_fd(&self) -> Option<BorrowedFd<'_>> {
            None
        }
        fn has_events(&self) -> bool {
            false
        }
        fn is_dormant(&self) -> bool {
            self.dormant.load(Relaxed)
        }
    }

    /// A dormant member is polled once per `DORMANT_SKIPS + 1` full polls, a busy one by every
    /// poll; a call that may give the dormant one work (here a connect, then a worker about to
    /// sleep) has the next full poll look at it again.
    #[test]
    fn full_polls_skip_a_dormant_member_until_a_call_wakes_it() {
        let member = || {
            let (polls, dormant) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicBool::new(false)));
            let counted =
                Counted { caps: caps("counted", 1 << 16, 0), polls: polls.clone(), dormant: dormant.clone() };
            (SetMember::Plain(Box::new(counted)), polls, dormant)
        };
        let (busy, busy_polls, _) = member();
        let (idle, idle_polls, idle_dormant) = member();
        idle_dormant.store(true, Relaxed);
        let mut set = TransportSet::new(vec![busy, idle]).expect("set");
        let rounds = 4 * (DORMANT_SKIPS + 1);
        for _ in 0..rounds {
            set.poll(&mut |_| {});
        }
        assert_eq!(busy_polls.load(Relaxed), rounds);
        assert_eq!(idle_polls.load(Relaxed), 4, "once per {} full polls", DORMANT_SKIPS + 1);
        // A rung poll never looks at a member without doorbells, dormant or not.
        set.poll_rung(&mut |_| {}, None);
        assert_eq!(idle_polls.load(Relaxed), 4);

        let polls_after = |set: &mut TransportSet, wake: &dyn Fn(&mut TransportSet)| {
            set.poll(&mut |_| {});
            let before = idle_polls.load(Relaxed);
            wake(set);
            set.poll(&mut |_| {});
            idle_polls.load(Relaxed) - before
        };
        assert_eq!(polls_after(&mut set, &|_| {}), 0, "still dormant, nothing called");
        let connect = |set: &mut TransportSet| {
            let addr: SocketAddr = "127.0.0.1:9".parse().expect("addr");
            let _ = set.connect_with(1, ConnectTarget::Sockaddr { remote: addr, local: None });
        };
        assert_eq!(polls_after(&mut set, &connect), 1, "a connect through it wakes it");
        // It was dormant at that poll's end, but only the poll of every member says so.
        assert_eq!(polls_after(&mut set, &|_| {}), 1);
        for _ in 0..=DORMANT_SKIPS {
            set.poll(&mut |_| {});
        }
        assert_eq!(polls_after(&mut set, &|_| {}), 0, "dormant again after a poll of all");
        assert_eq!(polls_after(&mut set, &|set| set.prepare_sleep()), 1, "a worker about to sleep");

        // The worker's periodic poll looks at every member.
        assert_eq!(polls_after(&mut set, &|set| set.poll_every_member_next()), 1, "a periodic poll");
        assert_eq!(polls_after(&mut set, &|_| {}), 0, "dormant again after the periodic poll");

        // A member that stops being dormant is polled by every full poll from the next look on.
        idle_dormant.store(false, Relaxed);
        for _ in 0..=DORMANT_SKIPS {
            set.poll(&mut |_| {});
        }
        let before = idle_polls.load(Relaxed);
        for _ in 0..10 {
            set.poll(&mut |_| {});
        }
        assert_eq!(idle_polls.load(Relaxed) - before, 10);
    }

    /// A dormant member counts as quiet without being asked (the double never says it is quiet
    /// itself), from the poll that found it dormant until a call wakes it.
    #[test]
    fn a_dormant_member_is_quiet_until_woken() {
        let polls = Arc::new(AtomicU32::new(0));
        let dormant = Arc::new(AtomicBool::new(true));
        let counted = Counted { caps: caps("counted", 1 << 16, 0), polls, dormant: dormant.clone() };
        let mut set = TransportSet::new(vec![SetMember::Plain(Box::new(counted))]).expect("set");
        assert!(!set.is_quiet(), "not known dormant before a poll of every member");
        set.poll(&mut |_| {});
        assert!(set.is_quiet());
        let _ = set.connect_with(
            0,
            ConnectTarget::Sockaddr { remote: "127.0.0.1:9".parse().expect("addr"), local: None },
        );
        assert!(!set.is_quiet(), "a connect gave it work");
        set.poll_every_member_next();
        set.poll(&mut |_| {});
        assert!(set.is_quiet());
        dormant.store(false, Relaxed);
        set.poll_every_member_next();
        set.poll(&mut |_| {});
        assert!(!set.is_quiet(), "asked again once no longer dormant");
    }

    /// The real transports: an io_uring transport with only a listener and a shared-memory one
    /// without a link are dormant; a connection through the dormant listener is still accepted
    /// by the set's full polls, and the transport with the accepted link is dormant no more.
    #[test]
    fn a_dormant_listeners_connection_is_accepted_within_a_round_of_skips() {
        use crate::{ShmConfig, ShmTransport, UringConfig, UringTransport};
        let shm = ShmTransport::new(&ShmConfig { ring_capacity: 1 << 20, ..ShmConfig::default() })
            .expect("shm transport");
        let mut uring = UringTransport::new(&UringConfig::default()).expect("io_uring transport");
        let (_, bound) = uring.listen("127.0.0.1:0".parse().expect("addr")).expect("listen");
        assert!(shm.is_dormant());
        // The listener's accept is submitted by the first poll: dormant from then on.
        assert!(!uring.is_dormant());
        let mut set =
            TransportSet::new(vec![SetMember::SameHost(Box::new(shm)), SetMember::Plain(Box::new(uring))])
                .expect("set");
        // A first round of polls, so that the set has seen the io_uring member dormant.
        for _ in 0..=DORMANT_SKIPS {
            set.poll(&mut |_| {});
        }
        assert_eq!(set.dormant, 0b11);
        let mut peer = UringTransport::new(&UringConfig::default()).expect("io_uring transport");
        peer.connect(ConnectTarget::Sockaddr { remote: bound, local: None }).expect("connect");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut accepted = None;
        while accepted.is_none() {
            assert!(std::time::Instant::now() < deadline, "the dormant listener never accepted");
            peer.poll(&mut |_| {});
            set.poll(&mut |ev| {
                if let TlEvent::Accepted { link, .. } = ev {
                    accepted = Some(link);
                }
            });
        }
        assert_eq!(member_of(accepted.expect("accepted")), 1);
        let SetMember::Plain(uring) = &set.members[1] else { panic!("member 1 is plain") };
        assert!(!uring.is_dormant(), "a transport with a link is not dormant");
        for _ in 0..=DORMANT_SKIPS {
            set.poll(&mut |_| {});
        }
        assert_eq!(set.dormant, 0b01, "only the link-less shared-memory member stays skipped");
    }

    /// A doorbell of a member past the first names its link as the set does, and a rung take
    /// with that id reaches the member and hands the frame over under the set's id.
    #[test]
    fn a_members_doorbells_and_rung_takes_use_the_sets_link_ids() {
        use crate::{ShmConfig, ShmTransport};
        let cfg = ShmConfig { ring_capacity: 1 << 20, ..ShmConfig::default() };
        let shm = || SetMember::SameHost(Box::new(ShmTransport::new(&cfg).expect("shm transport")));
        let mut peer = ShmTransport::new(&cfg).expect("shm transport");
        let mut set = TransportSet::new(vec![shm(), shm()]).expect("set");
        let address = peer.address().expect("address");
        let link = set.connect_with(1, ConnectTarget::Address(&address)).expect("connect");
        assert_eq!(member_of(link), 1);
        let (mut accepted, mut connected) = (None, false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while accepted.is_none() || !connected {
            assert!(std::time::Instant::now() < deadline, "no connection");
            peer.poll(&mut |ev| {
                if let TlEvent::Accepted { link, .. } = ev {
                    accepted = Some(link);
                }
            });
            set.poll(&mut |ev| connected |= matches!(ev, TlEvent::Connected { link: l } if l == link));
        }
        peer.send(accepted.unwrap(), b"rung", Payload::None).expect("send");
        let mut bells = Vec::new();
        set.doorbells(&mut bells);
        assert_eq!(bells.iter().flat_map(|bell| bell.links()).collect::<Vec<_>>(), vec![link]);
        assert!(bells[0].rang());
        let mut taken = Vec::new();
        let lend = LendSlot::new();
        assert!(set.take_rung_frame(link, &mut |l, bytes| taken.push((l, bytes.to_vec())), &lend));
        assert_eq!(taken, vec![(link, b"rung".to_vec())]);
        // The same local id on member 0 is another link: nothing there.
        assert!(!set.take_rung_frame(LinkId(split(link.0).1), &mut |_, _| panic!("member 0"), &lend));
    }
}
