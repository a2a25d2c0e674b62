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
//!   [`Engine::stream_recv`], [`Engine::am_send`] (or [`Engine::am_send_with`] and an
//!   [`AmProtocol`], or [`Engine::am_send_now`]) with [`Engine::am_recv_data`] / [`Engine::am_decline`], [`Engine::put`],
//!   [`Engine::put_nbi`], [`Engine::get`], [`Engine::atomic`], [`Engine::key_check`],
//!   [`Engine::flush`], [`Engine::flush_worker`], [`Engine::fence`], [`Engine::close`],
//!   [`Engine::cancel`]; endpoints come and go with [`Engine::add_endpoint`],
//!   [`Engine::endpoint_ready`], [`Engine::fail_endpoint`] and [`Engine::release_endpoint`].
//! - Transport events: [`Engine::handle_frame`], or, for a caller that takes a frame's
//!   completion straight ([`Engine::handle_frame_direct`]) or can lend an eager active message's
//!   frame to its handler ([`Engine::handle_frame_lending`]), both at once
//!   ([`Engine::handle_frame_lending_direct`], which answers with a [`Received`]);
//!   [`Engine::handle_placed`] then [`Engine::place_done`], [`Engine::send_done`],
//!   [`Engine::rma_done`], [`Engine::link_failed`], and [`Engine::note_sent`] for frames the
//!   caller sent to an endpoint's peer by another way.
//! - Time: [`Engine::handle_timeout`] with the caller's clock reading, and
//!   [`Engine::poll_timeout`] to know when.
//!
//! User memory comes in as [`SendBuffer`] and [`RecvBuffer`], raw `(ptr, len)` pairs whose
//! `unsafe` constructors carry the contract: valid and untouched by others until the operation
//! completes. A buffer may carry the API's [`Cookie`] for its operation (what leads to the
//! request's record: the zcx worker uses a slot index), which the operation's completion hands
//! back, so the API finds the request without a lookup by [`OpId`].
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
//!   [`Engine::send_done`]; the operation completes only after that). A caller whose transport
//!   pushed back takes what is already queued with [`Engine::poll_queued_transmit`], which makes
//!   no new fragments, to send it later in order.
//! - [`Engine::poll_rma`]: native RMA requests `(link, token, local, remote address, packed
//!   key)` for links whose caps say native, answered exactly once with [`Engine::rma_done`].
//! - [`Engine::poll_event`]: completions `(OpId, Status, OpInfo, cookie)`, endpoints down
//!   ([`Event::EndpointDown`], for every endpoint that stops carrying traffic) and endpoint
//!   errors for error handlers ([`Event::EndpointError`]), active message deliveries, handshake
//!   frames, links to close, and frames of a transport extension ([`Event::Extension`]).
//!
//! [`Engine::is_idle`] and [`Engine::has_events`] say whether a drain would find anything, so
//! a caller skips it cheaply.
//!
//! A command that finishes at once says so ([`Start::Done`]: an eager send on an endpoint that
//! can send, a receive that found its message waiting) and gets no completion event; anything
//! else completes later under the [`OpId`] it returned (an eager send of a still-connecting
//! endpoint once [`Engine::endpoint_ready`] releases its held frame).
//!
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
//! The api's worker (`api/src/worker/`) holds the engine behind its lock next to the transport
//! set, with only the API's own records beside it: endpoint names, handlers and handles, the
//! request cell of each operation (by the [`Cookie`] its buffer carries, or by [`OpId`] for
//! commands without a buffer), listeners, AM handlers, loans and put help. Every engine call
//! happens under that lock.
//!
//! - Commands: an endpoint or worker call translates its buffer into a [`SendBuffer`] /
//!   [`RecvBuffer`] (the request cell owns the buffer) and calls the engine. A tag send (not a
//!   synchronous one), an active message or a stream send asks for its frame back
//!   ([`Engine::tag_send_now`], [`Engine::am_send_now`], [`Engine::stream_send_now`]) and, when
//!   it gets it, sends it itself; [`Start::Done`] returns
//!   a finished request without a request cell.
//! - Draining: after each input the worker sends the outbox into the transport set (`send` or
//!   `send_placed` per transmit; a borrowed payload goes zero-copy from the link's zero-copy
//!   threshold and is answered with `send_done` on the transport's `SendDone`, a shorter one is
//!   copied and answered at once; a transmit the transport pushes back is kept, with what is
//!   queued behind it, inline payloads copied, and sent first next time), then acts on the
//!   events: completions complete request cells, [`Event::EndpointDown`] and
//!   [`Event::EndpointError`] update the API's records and queue error handlers, [`Event::Am`]
//!   queues the handler, [`Event::CloseLink`] closes the link after the poll, and
//!   [`Event::Extension`] is shared memory's put help.
//! - Transport events: every frame goes to [`Engine::handle_frame_lending_direct`] when the poll may lend it and nothing waits to
//!   run before it, else to [`Engine::handle_frame_direct`]; the completion that comes back
//!   completes its request cell at once; a handshake comes back as [`Event::Handshake`], which
//!   the worker's handshake code decodes. Placements, `PlaceDone`, `SendDone` and link failures
//!   go to their entry points.
//! - Time and connections: the worker's timer calls [`Engine::handle_timeout`], first telling
//!   the engine of frames its endpoints' send lanes carried ([`Engine::note_sent`]). Its
//!   handshake code calls [`Engine::add_endpoint`], [`Engine::endpoint_ready`] (on the request's
//!   link or a faster lane) and, for a rejected or unanswered connection,
//!   [`Engine::fail_endpoint`].
//!
//! With the lock released the worker runs what it queued: callbacks, wakers, error, AM and
//! connection handlers.
//!
//! The API gives every link the same [`LinkCaps`], from the transport set's caps: sender-push
//! rendezvous, placed data fragments, and no native RMA. Beside the engine, in the API, stay the
//! handshake and lanes, and the shared-memory fast paths behind the transport's same-host
//! extension: the direct lane of eager sends (it writes the same `TagEager`/`AmEager`/`Stream`
//! frames, and is opened only while the engine has nothing queued), the rung path of receives
//! (which hands its frame to the same [`Engine::handle_frame_lending_direct`]), eager AMs read
//! in place ([`LentAm`], borrowing the frame, for the worker's loan of the ring record), put
//! help, and the same-host direct RMA, whose `KeyCheck` the API asks with [`Engine::key_check`]
//! (a peer's `KeyCheck` the engine answers).

mod am;
mod buffer;
mod bulk;
mod caps;
mod endpoints;
mod engine;
mod ids;
mod lifecycle;
mod op_table;
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
