//! What the worker does with each transport event: handshakes and connection bookkeeping are
//! the API's; every other frame, placement and completion goes to the protocol engine.
//!
//! A frame goes to [`zcx_engine::Engine::handle_frame_lending_direct`] when the poll offers to
//! lend it and nothing of this poll waits to run before it (an eager active message then comes
//! back lent, for its handler to read in place, see [`crate::worker::am_lent`]), otherwise to
//! [`zcx_engine::Engine::handle_frame_direct`]. Either way the one completion a frame usually
//! makes comes straight back and completes its request cell here; anything else the engine
//! reported is absorbed from its event queue right after (`State::absorb_events`).
//!
//! Runs while the transport is being polled, so it cannot send: the engine's transmits and the
//! handshake answers wait for `send_out` and [`crate::worker::state::Core::drain`], right after
//! the poll. Every frame comes from a peer and is checked before it is acted on.

use zcx_control::{HandshakeWire, TransportAddress};
use zcx_dataplane::{LendSlot, LinkId, PlaceTarget, TlEvent};
use zcx_engine::{OpId, Received};

use crate::status::Status;
use crate::worker::am::{AmBytes, AmDelivery};
use crate::worker::am_lent::LentAm;
use crate::worker::pairing;
use crate::worker::state::{status_of, Deferred, State};

/// Handles one transport event. `lend`: the poll's offer of frames to keep past the event (see
/// [`crate::worker::am_lent`]), when the worker may take one.
pub(crate) fn on_event(st: &mut State, event: TlEvent<'_>, lend: Option<&LendSlot>) {
    st.events += 1;
    match event {
        TlEvent::Connected { .. } => {}
        TlEvent::Accepted { listener, link, peer } => {
            let mut evicted = Vec::new();
            st.incoming.admit(link, listener, peer, std::time::Instant::now(), &mut evicted);
            st.to_close.extend(evicted.into_iter().map(|old| (old, true)));
        }
        TlEvent::Frame { link, bytes } => on_frame(st, link, bytes, lend),
        TlEvent::Placed { link, header, len, dest } => {
            if let Some(placement) = st.engine.handle_placed(link, header, len) {
                // SAFETY: the engine checked that `[dest, dest + len)` lies inside the receiving
                // operation's buffer, which it keeps valid until `place_done` returns the token.
                dest.set(unsafe { PlaceTarget::new(placement.dest, placement.token.raw()) });
            }
            st.absorb_events();
        }
        TlEvent::PlaceDone { token, result, .. } => {
            st.engine.place_done(OpId::from_raw(token), result.map_err(status_of));
            st.absorb_events();
        }
        TlEvent::SendDone { token, result, .. } => {
            st.engine.send_done(OpId::from_raw(token), result.map_err(status_of));
            st.absorb_events();
        }
        TlEvent::RmaDone { token, result, .. } => {
            let (status, value) = match result {
                Ok(value) => (Status::Ok, value),
                Err(e) => (status_of(e), 0),
            };
            st.engine.rma_done(OpId::from_raw(token), status, value);
            st.absorb_events();
        }
        TlEvent::LinkFailed { link, error } => {
            st.incoming.remove(&link);
            pairing::link_gone(st, link);
            st.engine.link_failed(link, status_of(error));
            st.absorb_events();
        }
    }
}

/// A whole frame arrived on `link`: the engine's to judge (a handshake comes back as its
/// `Event::Handshake`, for [`on_hello`]). An eager active message is read in place when the poll lends its frame and nothing of this poll
/// waits to run before its handler.
#[inline]
pub(crate) fn on_frame(st: &mut State, link: LinkId, bytes: &[u8], lend: Option<&LendSlot>) {
    match lend {
        Some(slot) if st.deferred.is_empty() && !st.engine.has_events() => {
            match st.engine.handle_frame_lending_direct(link, bytes) {
                Received::Nothing => {}
                Received::Completed(done) => st.on_completion(done),
                Received::Lent(am) => {
                    if slot.take() {
                        st.lent = Some(LentAm::new(st, link, am.ep, am.am_id, am.reply, am.header, am.data));
                    } else {
                        let (ep, am_id, reply, header_len) = (am.ep, am.am_id, am.reply, am.header.len());
                        let data = AmBytes::copy_parts(&st.pool, am.header, am.data);
                        st.deferred.push(Deferred::Am(AmDelivery::eager(ep, am_id, reply, header_len, data)));
                        st.am_queued = true;
                    }
                }
            }
        }
        _ => {
            if let Some(done) = st.engine.handle_frame_direct(link, bytes) {
                st.on_completion(done);
            }
        }
    }
    st.absorb_events();
}

/// A peer broke the handshake: fail whatever uses the link and drop the connection.
fn protocol_violation(st: &mut State, link: LinkId) {
    st.incoming.remove(&link);
    st.engine.link_failed(link, Status::ConnectionReset);
    st.to_close.push((link, true));
}

/// A handshake frame arrived on `link` (the engine hands it over as `Event::Handshake`).
/// `payload` is the engine's copy: a lent frame's bytes may still change under us (see
/// `TlEvent::Frame`), and the handshake is decoded field by field, lengths first.
pub(crate) fn on_hello(st: &mut State, link: LinkId, payload: &[u8]) {
    let hello = match HandshakeWire::decode(payload) {
        Ok(hello) => hello,
        Err(err) => {
            tracing::warn!(?link, %err, "malformed handshake; closing the link");
            protocol_violation(st, link);
            return;
        }
    };
    match hello {
        HandshakeWire::ConnRequest {
            client_id,
            ep_name,
            err_mode_peer,
            client_address,
            client_ep_id,
            pair_token,
        } => {
            let Some(incoming) = st.incoming.remove(&link) else {
                tracing::warn!(?link, "connection request on a link that is not a new connection");
                protocol_violation(st, link);
                return;
            };
            let client_lane = shm_lane(st, link, &client_address)
                .or_else(|| verbs_lane(st, &client_address))
                .or_else(|| dpdk_lane(st, link, &client_address, client_ep_id));
            let request = crate::worker::accept::ConnRequestData {
                link,
                peer: incoming.peer,
                client_id,
                ep_name,
                err_mode_peer,
                client_ep_id,
                pair_token,
                client_worker: client_address.name.clone(),
                client_address,
                client_lane,
            };
            crate::worker::accept::on_conn_request(st, incoming.listener, request);
        }
        HandshakeWire::Accept { server_address, server_ep_id: _, client_ep_id, pair_token } => {
            let Some(&ep) = st.connecting.get(&client_ep_id) else {
                tracing::warn!(?link, "handshake answer for no connecting endpoint");
                protocol_violation(st, link);
                return;
            };
            let Some(old) = st.engine.link_of(ep) else { return };
            if pair_token != 0 && old == link && pairing::on_answer(st, ep, link, pair_token) {
                pairing::release_held(st);
                return;
            }
            if old != link {
                // The server answered on a new link (shared memory): it carries the endpoint from
                // now on, and the request's link is closed.
                if st.incoming.remove(&link).is_none() {
                    tracing::warn!(?link, "handshake answer on a link of another endpoint");
                    protocol_violation(st, link);
                    return;
                }
                st.established.push(link);
                st.lanes_taken.push((ep, old));
                tracing::debug!(%ep, ?old, lane = ?link, "connected over a faster lane");
            }
            st.connecting.remove(&client_ep_id);
            let verbs_link = st.eps.get(&ep).and_then(|state| state.verbs_link);
            match verbs_link {
                // Ready once its verbs link is joined, or given up (`lifecycle::join_verbs_lanes`).
                Some(verbs_link) if old == link => st.verbs_joins.push(crate::worker::state::VerbsJoin {
                    ep,
                    link,
                    verbs_link,
                    server: server_address.transports.into_iter().find(is_verbs_end),
                }),
                _ => {
                    if let Some(verbs_link) = verbs_link {
                        // The server moved the endpoint to shared memory instead.
                        st.to_close.push((verbs_link, true));
                        if let Some(state) = st.eps.get_mut(&ep) {
                            state.verbs_link = None;
                        }
                    }
                    st.engine.endpoint_ready(ep, link, st.caps_for(link))
                }
            }
            if !st.held_requests.is_empty() {
                pairing::release_held(st);
            }
        }
        HandshakeWire::Reject { reason_status, client_ep_id } => {
            let Some(&ep) = st.connecting.get(&client_ep_id) else {
                protocol_violation(st, link);
                return;
            };
            if st.engine.link_of(ep) != Some(link) {
                protocol_violation(st, link);
                return;
            }
            let status = Status::from_code(i32::from(reason_status)).unwrap_or(Status::Rejected);
            st.engine.fail_endpoint(ep, status);
        }
        HandshakeWire::PairProof { client_ep_id } => pairing::on_proof(st, link, client_ep_id),
    }
}

/// The client's shared-memory lane, when the client is on this host, both workers have shared
/// memory, and the request came by another transport.
fn shm_lane(
    st: &State,
    link: LinkId,
    client: &zcx_control::WorkerAddressWire,
) -> Option<crate::worker::state::Lane> {
    let shm = st.shm_member?;
    if zcx_dataplane::transport_set::member_of(link) == shm {
        return None;
    }
    if client.boot_id.is_none() || client.boot_id != st.address.boot_id {
        return None;
    }
    let target = client.transports.iter().find(|t| zcx_dataplane::ShmTransport::reaches(t)).cloned()?;
    Some(crate::worker::state::Lane { member: shm, target, session: None })
}

/// True for the verbs end of a link in a handshake (a worker address may offer verbs with no
/// queue pair, which is no end to join).
fn is_verbs_end(address: &TransportAddress) -> bool {
    matches!(address, TransportAddress::Verbs { qpn, .. } if *qpn != 0)
}

/// The client's verbs lane, when both workers have verbs and the client offered its end of a
/// link in the request.
fn verbs_lane(st: &State, client: &zcx_control::WorkerAddressWire) -> Option<crate::worker::state::Lane> {
    let (member, _) = st.verbs?;
    let target = client.transports.iter().find(|t| is_verbs_end(t)).cloned()?;
    Some(crate::worker::state::Lane { member, target, session: None })
}

/// The client's DPDK lane, when both workers have DPDK (so `ZCX_TLS` allows it on both sides)
/// and the request came by another transport. The client's end gets the session id both sides
/// derive from the request's token.
fn dpdk_lane(
    st: &State,
    link: LinkId,
    client: &zcx_control::WorkerAddressWire,
    token: u64,
) -> Option<crate::worker::state::Lane> {
    let dpdk = st.dpdk_member?;
    if zcx_dataplane::transport_set::member_of(link) == dpdk {
        return None;
    }
    let target = client.transports.iter().find(|t| matches!(t, TransportAddress::Dpdk { .. })).cloned()?;
    let session = Some(crate::worker::state::lane_session(token));
    Some(crate::worker::state::Lane { member: dpdk, target, session })
}
