//! The zcx protocol engine: tag, active-message and stream messaging, RMA, flush, fence, close
//! and keepalive as a sans-IO state machine.
//!
//! # What it owns
//!
//! An [`Engine`] is one worker's protocol state: its endpoints (phase, link, link caps, keepalive
//! clocks, stream receive state), its operations in flight, the tag matcher with its expected and
//! unexpected queues, the active messages whose rendezvous data waits for the API, and an outbox
//! of transmits, RMA requests and events. Everything is named by newtype ids ([`EndpointId`],
//! [`OpId`]) and the transports' [`LinkId`]s.
//!
//! # Inputs
//!
//! - API commands: [`Engine::tag_send`] (also synchronous) or [`Engine::tag_send_now`] (an
//!   eager message's frame handed straight back, [`Sent::Now`]), [`Engine::tag_recv`],
//!   [`Engine::tag_probe`], [`Engine::tag_probe_remove`] with [`Engine::tag_msg_recv`] /
//!   [`Engine::tag_msg_drop`], [`Engine::stream_send`] (or [`Engine::stream_send_now`]),
//!   [`Engine::stream_recv`], [`Engine::am_send`] with [`Engine::am_recv_data`] /
//!   [`Engine::am_decline`], [`Engine::put`], [`Engine::put_nbi`], [`Engine::get`],
//!   [`Engine::atomic`], [`Engine::flush`], [`Engine::flush_worker`], [`Engine::fence`],
//!   [`Engine::close`], [`Engine::cancel`];
//!   endpoints come and go with [`Engine::add_endpoint`], [`Engine::endpoint_ready`] and
//!   [`Engine::release_endpoint`].
//! - Transport events: [`Engine::handle_frame`], [`Engine::handle_placed`] then
//!   [`Engine::place_done`], [`Engine::send_done`], [`Engine::rma_done`],
//!   [`Engine::link_failed`].
//! - Time: [`Engine::handle_timeout`] with the caller's clock reading, and
//!   [`Engine::poll_timeout`] to know when.
//!
//! User memory comes in as [`SendBuffer`] and [`RecvBuffer`], raw `(ptr, len)` pairs whose
//! `unsafe` constructors carry the contract: valid and untouched by others until the operation
//! completes. A buffer may carry the API's [`Cookie`] for its operation (the address of the
//! request's record), which the operation's completion hands back, so the API finds the request
//! without a lookup by [`OpId`].
//!
//! # Outputs
//!
//! Drained by the caller after each input:
//!
//! - [`Engine::poll_transmit`]: frames, each a link, a header and a payload: an owned copy
//!   ([`Payload::Owned`], handed back with [`Engine::reuse`]), an eager message still in the
//!   caller's buffer ([`Payload::Inline`], sent or copied before the command returns to its
//!   user, which is what lets an eager send be done at once), or a zero-copy reference into an
//!   operation's buffer ([`Payload::Borrowed`], answered exactly once with
//!   [`Engine::send_done`]; the operation completes only after that).
//! - [`Engine::poll_rma`]: native RMA requests `(link, token, local, remote address, packed
//!   key)` for links whose caps say native, answered exactly once with [`Engine::rma_done`].
//! - [`Engine::poll_event`]: completions `(OpId, Status, OpInfo, cookie)`, endpoint errors, active
//!   message deliveries, handshake frames, links to close.
//!
//! A command that finishes at once says so ([`Start::Done`]: an eager send, a receive that
//! found its message waiting) and gets no completion event; anything else completes later
//! under the [`OpId`] it returned.

//! # Protocols
//!
//! Per link, from its [`LinkCaps`]: messages below the rendezvous threshold that fit a frame go
//! eagerly; larger ones by sender-push rendezvous (`TagRts`/`AmRts` → `Rtr` → `RndvData`; large
//! streams as paced `Stream` fragments), or, on a link whose caps say receiver pull and native
//! get and with a send buffer that has a packed key, by receiver-pull rendezvous (`TagRtsPull`/
//! `AmRtsPull`/`StreamRtsPull` carrying address and key → the receiver's RMA get → `PullDone`).
//! The frames are those of [`zcx_dataplane::proto::wire`], so an engine talks to the workers of
//! older builds over every push protocol.
//!
//! # Invariants
//!
//! - **Exactly once.** Every operation the API started completes exactly once, also when its
//!   endpoint fails or closes; an operation completes only after every payload, placement and
//!   RMA request it lent out came back, so the API may reuse a buffer as soon as it sees the
//!   completion. After an endpoint failed, released and drained, nothing of it is left
//!   ([`Engine::table_counts`]).
//! - **No IO.** The engine calls no transport, opens nothing, spawns nothing, and reads no
//!   clock: time comes in through [`Engine::handle_timeout`].
//! - **No user code.** It never runs a callback, wakes a waker or touches a request object: the
//!   API maps ids to those and runs them after releasing its lock.
//! - **Hostile peers.** A frame that does not decode, data for no operation or outside its
//!   message, a pull on a link that cannot pull, a frame on a link without an endpoint: the link
//!   is closed and its endpoint fails; nothing panics.
//!
//! # How the API drives it
//!
//! The worker holds the engine behind its lock next to the transport set. A command runs on the
//! engine, then the worker drains the outbox into the transport (`send` or `send_placed` per
//! transmit, `rma` per request; a borrowed payload is answered with `send_done` at once when the
//! transport copied it and on `SendDone` when it went zero-copy; a transmit the transport pushes
//! back is kept, copied if inline, and sent first next time), and collects events. `progress` polls the transport and feeds
//! each event to the engine the same way. With the lock released it completes request cells,
//! wakes wakers and runs AM and error handlers for the collected events; a handler that closes
//! its endpoint calls [`Engine::close`] under the lock again. The shared-memory fast paths
//! (the direct lane of eager sends and the rung path of receives) stay beside the engine behind
//! the transport's shared-memory extension: they carry the same eager frames, and their
//! receives are fed to [`Engine::handle_frame`] like any other.
//!
//! # Switching the API over
//!
//! What moves out of `api/src/worker/{dispatch,rndv,stream,am,lifecycle,state}.rs` into calls
//! of this engine, and what stays:
//!
//! - `State`'s protocol fields (`eps`' phases, queues, bulk jobs and stream state, `ops`,
//!   `tags`, `out`, `bulk_active`, `to_flush`, `to_close`) become one `Engine`; `State` keeps
//!   the API's own maps: endpoint id → endpoint handle, error handler, user data, names and
//!   addresses; op id → request cell; listeners; AM handlers; the handshake and lane logic
//!   (which calls [`Engine::add_endpoint`] and [`Engine::endpoint_ready`]).
//! - `Endpoint::tag_send` and friends translate their buffers into [`SendBuffer`] /
//!   [`RecvBuffer`] (the request cell owns the buffer), call the engine, drain its outbox into
//!   the transport set, and for [`Start::Done`] return `Request::ready` without a request cell,
//!   as today's eager path does.
//! - `progress` feeds every `TlEvent` to the engine ([`Engine::handle_frame`],
//!   [`Engine::handle_placed`], [`Engine::place_done`], [`Engine::send_done`],
//!   [`Engine::link_failed`]), drains the outbox, calls [`Engine::handle_timeout`] on its tick,
//!   and, with the lock released, completes request cells and runs AM and error handlers from
//!   the collected events.
//! - Stay beside the engine, behind the shared-memory transport extension: the direct lane of
//!   eager sends (it writes the same `TagEager`/`AmEager`/`Stream` frames, and must only be
//!   offered while the engine holds nothing queued for the endpoint), the rung path of receives
//!   (which hands its frames to [`Engine::handle_frame`]), reading eager AMs in place
//!   ([`Engine::handle_frame_lending`] hands them back as [`LentAm`]s borrowing the frame, for
//!   the worker's loan of the ring record), `PutHelp` (an [`Event::Extension`]), and the
//!   same-host direct RMA with its `KeyCheck` (the engine answers `KeyCheck`s; asking them is
//!   the API's).

mod am;
mod buffer;
mod bulk;
mod caps;
mod engine;
mod ids;
mod lifecycle;
mod output;
pub(crate) mod receive;
mod rma;
mod rndv;
pub mod status;
mod stream;
mod tag;

#[cfg(test)]
mod tests;

pub use am::{AmProtocol, MAX_AM_HEADER};
pub use buffer::{RecvBuffer, SendBuffer};
pub use caps::{BulkMode, LinkCaps};
pub use engine::{CloseMode, Engine, EngineConfig, Phase, Sent, Start, TableCounts};
pub use ids::{Cookie, EndpointId, OpId};
pub use output::{
    AmDelivery, Completion, Event, Extension, Header, LentAm, OpInfo, Payload, Placement, RmaKind,
    RmaRequest, Transmit,
};
pub use receive::Received;
pub use rma::RemoteKey;
pub use status::Status;
pub use zcx_dataplane::LinkId;
