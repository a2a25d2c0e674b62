//! The same-host shared-memory fast paths: an optional extension of [`Transport`].
//!
//! A transport whose links are rings in memory both processes map (shm) can do more than the core
//! interface asks: lend a received frame in place, hand over the frame behind a rung doorbell
//! without a general poll, show its doorbells to a busy-polling worker, let an endpoint write
//! eager frames through its own lane, and give a target what it needs to help with a peer's large
//! put. None of it makes sense for a socket or a NIC, so it lives here, in a trait the core
//! [`Transport`] trait only points to ([`Transport::same_host_fast_path`]), and the types it hands
//! out are reached through this trait alone.
//!
//! Reaching the extension costs nothing per message: a [`crate::TransportSet`] stores a member
//! that has it as a `Box<dyn SameHostFastPath>` ([`crate::transport_set::SetMember::SameHost`]),
//! whose vtable holds the core methods too, so every call (core or extension) is one virtual call
//! as before. A caller holding only a `dyn Transport` asks [`Transport::same_host_fast_path`] once.

use std::sync::Arc;

use crate::doorbell::Doorbell;
use crate::lend::LendSlot;
use crate::shm::put_help::HelpWords;
use crate::shm::ShmSendLane;
use crate::transport::{LinkId, TlEvent, Transport};

/// The fast paths of a transport whose links are shared-memory rings on this host.
pub trait SameHostFastPath: Transport {
    /// [`Transport::poll`], offering frames through `lend` so that the sink may keep one past
    /// its event (see [`crate::lend`]).
    fn poll_lending(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: &LendSlot) -> usize;

    /// Hands the frame waiting on link `rung` to `take`, without the general poll: for a worker
    /// whose doorbell for that link rang while the transport was quiet (see
    /// [`crate::doorbell`]), so a message on its own costs a read of its ring and its handling.
    /// The frame is offered through `lend` as [`SameHostFastPath::poll_lending`] offers it;
    /// untaken, it is gone from its link (and its space given back) when `take` returns. True
    /// when a frame was handed over. False when none waits, when the link is gone or needs more
    /// than a read (a loan, a placement, a queue, a failure or close to report), or when the
    /// transport has events of its own: the caller then polls as usual. Only the frame at the
    /// head of the link is handed over, so order holds.
    fn take_rung_frame(&mut self, rung: LinkId, take: &mut dyn FnMut(LinkId, &[u8]), lend: &LendSlot)
        -> bool;

    /// Ends the loan of the frame taken on `link` (see [`crate::lend`]): its bytes may be reused
    /// and the link is read again. Harmless for a link with no loan, or one that has since
    /// closed or failed (its mapping is let go now).
    fn end_lend(&mut self, link: LinkId);

    /// The doorbells of this transport's links (see [`crate::doorbell`]): while
    /// [`Transport::is_quiet`] holds, only one of them ringing gives `poll` work.
    fn doorbells(&self, out: &mut Vec<Doorbell>);

    /// Changes whenever the set of doorbells does (links added or removed).
    fn doorbell_generation(&self) -> u64;

    /// The link's sending end for an endpoint to write eager frames through without the worker
    /// (see [`ShmSendLane`]), opened on the endpoint's side. `None` when the link is not live.
    fn open_send_lane(&mut self, link: LinkId) -> Option<Arc<ShmSendLane>>;

    /// The put-help words of the direction the peer sends on over `link`, with the peer's
    /// process id (see [`crate::shm::put_help`]): what a target needs to help with the peer's
    /// large put. `None` for an unknown link or a peer whose process id is not known.
    fn peer_help_words(&self, link: LinkId) -> Option<(HelpWords, u32)>;
}
