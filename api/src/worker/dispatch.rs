//! What the worker does with each transport event and each frame from a peer.
//!
//! Runs while the transport is being polled, so it cannot send: replies go to `State::out` and
//! endpoints that became ready to `State::to_flush`; `progress` sends both right after the poll.
//! Every frame comes from a peer and is checked before it is acted on: an unknown request id, a
//! fragment outside its operation's buffer or a frame on a link that has no endpoint is dropped
//! (or fails the link), never trusted.

use zcx_control::{HandshakeWire, TransportAddress};
use zcx_dataplane::proto::rma_exec;
use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::proto::Message;
use zcx_dataplane::{LendSlot, LinkId, PlaceTarget, Placement, TlEvent};

use crate::request::OpInfo;
use crate::status::Status;
use crate::worker::am::{AmBytes, AmDelivery};
use crate::worker::am_lent::LentAm;
use crate::worker::lifecycle::fail_ep;
use crate::worker::put_help;
use crate::worker::state::{status_of, BulkJob, Deferred, OutKind, Phase, State, Unexpected};
use crate::worker::stream::deliver_stream;

/// Handles one transport event. `lend`: the poll's offer of frames to keep past the event (see
/// [`crate::worker::am_lent`]), when the worker may take one.
pub(crate) fn on_event(st: &mut State, event: TlEvent<'_>, lend: Option<&LendSlot>) {
    st.events += 1;
    match event {
        TlEvent::Connected { link } => {
            if let Some(ep) = st.link_eps.get(&link).and_then(|id| st.eps.get_mut(id)) {
                ep.last_rx = std::time::Instant::now();
            }
        }
        TlEvent::Accepted { listener, link, peer } => {
            let mut evicted = Vec::new();
            st.incoming.admit(link, listener, peer, std::time::Instant::now(), &mut evicted);
            st.to_close.extend(evicted.into_iter().map(|old| (old, true)));
        }
        TlEvent::Frame { link, bytes } => on_frame(st, link, bytes, lend),
        TlEvent::Placed { link, header, len, dest } => on_placed(st, link, header, len, dest),
        TlEvent::PlaceDone { token, result, .. } => match result {
            Ok(()) => crate::worker::state::return_token(st, token),
            Err(err) => crate::worker::state::fail_token(st, token, status_of(err)),
        },
        TlEvent::SendDone { token, .. } => {
            crate::worker::state::return_token(st, token);
            if let Some(ep) = st.ops.get(&token).map(|op| op.ep) {
                st.bulk_active.insert(ep);
            }
        }
        // The worker issues no `Transport::rma` (its same-host RMA maps the peer's region
        // itself), so no operation of its is pending.
        TlEvent::RmaDone { link, token, .. } => {
            tracing::debug!(?link, token, "completion of a one-sided operation nobody issued; ignored");
        }
        TlEvent::LinkFailed { link, error } => {
            st.incoming.remove(&link);
            if let Some(ep) = st.link_eps.remove(&link) {
                fail_ep(st, ep, status_of(error), false);
            }
        }
    }
}

/// The endpoint a data frame on `link` is for, or `None` when it is to be ignored (the endpoint
/// is dead) or the link is failed (no connection request came first).
fn receiving_ep(st: &mut State, link: LinkId) -> Option<u64> {
    let (hint_link, hint_ep) = st.rx_hint;
    if hint_link == link {
        if let Some(state) = st.eps.get_mut(&hint_ep).filter(|state| state.link == link) {
            state.rx_seen = true;
            return (!matches!(state.phase, Phase::Dead(_))).then_some(hint_ep);
        }
    }
    let Some(&ep) = st.link_eps.get(&link) else {
        tracing::warn!(?link, "frame before the connection request; closing the link");
        protocol_violation(st, link);
        return None;
    };
    st.rx_hint = (link, ep);
    if let Some(state) = st.eps.get_mut(&ep) {
        state.rx_seen = true;
        if matches!(state.phase, Phase::Dead(_)) {
            return None;
        }
    }
    Some(ep)
}

/// The header of a placed fragment: names the spot in the receiving operation's buffer the
/// transport writes the payload to, or leaves `dest` empty to have it dropped.
fn on_placed(st: &mut State, link: LinkId, header: &[u8], len: usize, dest: &mut Placement) {
    let (id, offset) = match Op::decode(header) {
        Ok((Op::RndvData { recv_req, offset }, [])) => (recv_req, offset),
        Ok((Op::GetData { req, offset }, [])) => (req, offset),
        _ => {
            tracing::warn!(?link, "placed frame that carries no data fragment; closing the link");
            protocol_violation(st, link);
            return;
        }
    };
    let Some(ep) = receiving_ep(st, link) else { return };
    let Some(at) = claim_fragment(st, ep, id, offset, len) else { return };
    if len == 0 {
        finish_if_received(st, id);
        return;
    }
    let op = st.ops.get_mut(&id).expect("claimed above");
    op.tokens += 1;
    // SAFETY: `claim_fragment` checked `[at, at + len)` lies inside the operation's buffer, which
    // its request owns until the operation completes, and the operation cannot complete before
    // the token comes back with `PlaceDone`. Fragments of one operation never overlap unless
    // the peer lies, and then it only garbles its own data in that buffer.
    dest.set(unsafe { PlaceTarget::new(at, id) });
    finish_if_received(st, id);
}

/// Checks a data fragment of operation `id` (a rendezvous receive or a get) against the
/// operation's buffer, counts its bytes and returns where they go. A fragment outside the buffer
/// fails the operation.
fn claim_fragment(st: &mut State, ep: u64, id: u64, offset: u64, len: usize) -> Option<*mut u8> {
    let op = st.ops.get_mut(&id).filter(|op| op.ep == ep && op.result.is_none())?;
    let (ptr, cap, received) = match &mut op.kind {
        OutKind::RndvRecv { ptr, accept, received, .. } => (*ptr, *accept, received),
        OutKind::Get { ptr, len, received } => (*ptr, *len, received),
        _ => return None,
    };
    let fits = usize::try_from(offset).ok().filter(|off| off.checked_add(len).is_some_and(|end| end <= cap));
    match fits {
        Some(off) => {
            *received += len;
            // SAFETY: `off + len <= cap`, and `ptr..ptr + cap` is the operation's buffer.
            Some(unsafe { ptr.add(off) })
        }
        None => {
            tracing::warn!(id, offset, len, "data fragment outside the receive buffer");
            st.finish_op(id, Status::IoError, OpInfo::default());
            None
        }
    }
}

/// Completes a rendezvous receive once every accepted byte is announced; placed bytes still on
/// their way hold the completion until their tokens return.
fn finish_if_received(st: &mut State, id: u64) {
    let Some(op) = st.ops.get(&id) else { return };
    if let OutKind::RndvRecv { accept, total, received, sender_tag, .. } = op.kind {
        if received >= accept {
            let status = if accept < total { Status::MessageTruncated } else { Status::Ok };
            st.finish_op(id, status, OpInfo { length: accept, sender_tag, value: 0 });
        }
    }
}

pub(crate) fn on_frame(st: &mut State, link: LinkId, bytes: &[u8], lend: Option<&LendSlot>) {
    // Small messages first: their headers decode without the general decoder's checked reads,
    // and they are handled here, without the general dispatch below.
    if let Some((op, payload)) = Op::decode_eager(bytes) {
        let Some(ep) = receiving_ep(st, link) else { return };
        match op {
            Op::TagEager { tag, sync, sender_req } => {
                on_tag_eager(st, link, ep, tag, sync.then_some(sender_req), payload)
            }
            Op::AmEager { am_id, reply, header_len } => {
                // Read in place when nothing from this poll waits to run before its handler and
                // the transport lends it (see `am_lent`); copied out otherwise.
                if st.deferred.is_empty() && lend.is_some_and(LendSlot::take) {
                    st.lent = Some(LentAm::new(st, link, ep, am_id, reply, header_len, payload));
                } else {
                    on_am_eager(st, ep, am_id, reply, header_len, payload)
                }
            }
            Op::Stream => deliver_stream(st, ep, payload),
            // `decode_eager` returns no other op; should it ever, the general dispatch is right.
            op => on_op(st, link, ep, op, payload),
        }
        return;
    }
    let (op, payload) = match Op::decode(bytes) {
        Ok(decoded) => decoded,
        Err(err) => {
            tracing::warn!(?link, %err, "malformed frame from peer; closing the link");
            protocol_violation(st, link);
            return;
        }
    };
    if let Op::Hello = op {
        on_hello(st, link, payload);
        return;
    }
    let Some(ep) = receiving_ep(st, link) else { return };
    on_op(st, link, ep, op, payload);
}

fn on_am_eager(st: &mut State, ep: u64, am_id: u16, reply: bool, header_len: u16, payload: &[u8]) {
    let data = AmBytes::copy_of(st, payload);
    let delivery = AmDelivery::eager(ep, am_id, reply, header_len as usize, data);
    st.deferred.push(Deferred::Am(delivery));
    st.am_queued = true;
}

/// Acts on a decoded frame from the endpoint `ep`.
#[inline(never)]
fn on_op(st: &mut State, link: LinkId, ep: u64, op: Op, payload: &[u8]) {
    match op {
        Op::Hello => {}
        Op::TagEager { tag, sync, sender_req } => {
            on_tag_eager(st, link, ep, tag, sync.then_some(sender_req), payload)
        }
        Op::TagRts { tag, sync: _, sender_req, total_len } => {
            on_tag_rts(st, link, ep, tag, sender_req, total_len)
        }
        Op::SyncAck { sender_req } => {
            if matches!(st.ops.get(&sender_req), Some(op) if op.ep == ep && matches!(op.kind, OutKind::SyncAck))
            {
                st.finish_op(sender_req, Status::Ok, OpInfo::default());
            }
        }
        Op::Rtr { sender_req, recv_req, accept_len } => on_rtr(st, ep, sender_req, recv_req, accept_len),
        Op::RndvData { recv_req, offset } => on_data_fragment(st, ep, recv_req, offset, payload),
        Op::Stream => deliver_stream(st, ep, payload),
        Op::AmEager { am_id, reply, header_len } => on_am_eager(st, ep, am_id, reply, header_len, payload),
        Op::AmRts { am_id, reply, header_len: _, sender_req, total_len } => {
            let header = AmBytes::copy_of(st, payload);
            let delivery = AmDelivery::rndv(ep, am_id, reply, header, sender_req, total_len);
            st.deferred.push(Deferred::Am(delivery));
            st.am_queued = true;
        }
        Op::Put { req, region, key, addr, len, offset, ack } => {
            let result =
                rma_exec::put_fragment(&st.ctx.remote_access, region, &key, addr, len, offset, payload);
            match result {
                Ok(()) if ack => st.reply(link, &Op::RmaAck { req, status: 0, value: 0 }, None),
                Ok(()) => {}
                Err(err) => {
                    st.reply(link, &Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 }, None)
                }
            }
        }
        Op::Get { req, region, key, addr, len } => {
            let checked = st.ctx.remote_access.with_access(
                region,
                &key,
                addr,
                len,
                zcx_dataplane::RemoteAccess::Read,
                |_| (),
            );
            match checked {
                Ok(()) => {
                    if let Some(state) = st.eps.get_mut(&ep) {
                        state.bulk.push_back(BulkJob::GetReply { req, region, key, addr, len, offset: 0 });
                        st.bulk_active.insert(ep);
                    }
                }
                Err(err) => {
                    st.reply(link, &Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 }, None)
                }
            }
        }
        Op::GetData { req, offset } => on_data_fragment(st, ep, req, offset, payload),
        Op::Atomic { req, region, key, addr, op, size, fetch: _, value, compare } => {
            let reply =
                match rma_exec::atomic(&st.ctx.remote_access, region, &key, addr, op, size, value, compare) {
                    Ok(old) => Op::RmaAck { req, status: 0, value: old },
                    Err(err) => Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 },
                };
            st.reply(link, &reply, None);
        }
        Op::RmaAck { req, status, value } => on_rma_ack(st, ep, req, status, value),
        Op::FlushReq { id } => st.reply(link, &Op::FlushAck { id }, None),
        Op::FlushAck { id } => {
            if let Some(op) = st.ops.get_mut(&id) {
                if op.ep == ep {
                    if let OutKind::Flush { acked, .. } = &mut op.kind {
                        *acked = true;
                    }
                }
            }
            st.recheck_flushes(ep);
        }
        op @ Op::PutHelp { .. } => put_help::on_announce(st, link, ep, op, payload),
        Op::KeyCheck { req } => {
            // Undecodable bytes vouch for nothing: the same answer as a forged key.
            let verdict = zcx_control::RkeyWire::decode(payload)
                .map_err(|_| zcx_dataplane::AccessError::BadKey)
                .and_then(|claim| st.ctx.remote_access.vouch(&claim));
            let status = verdict.map_or_else(rma_exec::status_of, |()| rma_exec::UCS_OK);
            st.reply(link, &Op::RmaAck { req, status, value: 0 }, None);
        }
        Op::Keepalive => {}
        Op::Disconnect { force: _ } => {
            // The peer closed its endpoint: ours can carry nothing more.
            fail_ep(st, ep, Status::ConnectionReset, true);
        }
        Op::TagRtsPull { .. } | Op::AmRtsPull { .. } | Op::StreamRtsPull { .. } | Op::PullDone { .. } => {
            // Receiver-pull rendezvous is the protocol engine's; this worker never asks a peer
            // for it, so a peer that sends it breaks the protocol.
            tracing::warn!(?link, "receiver-pull frame this worker never asked for; closing the link");
            protocol_violation(st, link);
        }
    }
}

/// A peer broke the protocol: fail whatever uses the link and drop the connection.
fn protocol_violation(st: &mut State, link: LinkId) {
    st.incoming.remove(&link);
    match st.link_eps.get(&link).copied() {
        Some(ep) => fail_ep(st, ep, Status::ConnectionReset, true),
        None => st.to_close.push((link, true)),
    }
}

fn on_hello(st: &mut State, link: LinkId, payload: &[u8]) {
    // A lent frame's bytes may still change under us (see `TlEvent::Frame`), and the handshake
    // is decoded field by field, lengths first: decoded from a copy of ours, taken once. One
    // handshake a connection: the allocation does not matter.
    let payload = payload.to_vec();
    let hello = match HandshakeWire::decode(&payload) {
        Ok(hello) => hello,
        Err(err) => {
            tracing::warn!(?link, %err, "malformed handshake; closing the link");
            protocol_violation(st, link);
            return;
        }
    };
    match hello {
        HandshakeWire::ConnRequest { client_id, ep_name, err_mode_peer, client_address, client_ep_id } => {
            let Some(incoming) = st.incoming.remove(&link) else {
                tracing::warn!(?link, "connection request on a link that is not a new connection");
                protocol_violation(st, link);
                return;
            };
            let client_lane = shm_lane(st, link, &client_address)
                .or_else(|| dpdk_lane(st, link, &client_address, client_ep_id));
            let request = crate::listener::ConnRequestData {
                link,
                peer: incoming.peer,
                client_id,
                ep_name,
                err_mode_peer,
                client_ep_id,
                client_worker: client_address.name,
                client_lane,
            };
            crate::listener::on_conn_request(st, incoming.listener, request);
        }
        HandshakeWire::Accept { server_address: _, server_ep_id: _, client_ep_id } => {
            let Some(&ep) = st.connecting.get(&client_ep_id) else {
                tracing::warn!(?link, "handshake answer for no connecting endpoint");
                protocol_violation(st, link);
                return;
            };
            let Some(state) = st.eps.get_mut(&ep) else { return };
            if state.link != link {
                // The server answered on a new link (shared memory): it carries the endpoint from
                // now on, and the request's link is closed.
                if st.incoming.remove(&link).is_none() {
                    tracing::warn!(?link, "handshake answer on a link of another endpoint");
                    protocol_violation(st, link);
                    return;
                }
                let old = std::mem::replace(&mut state.link, link);
                st.link_eps.remove(&old);
                st.link_eps.insert(link, ep);
                st.established.push(link);
                st.lanes_taken.push((ep, old));
                tracing::debug!(ep, ?old, lane = ?link, "connected over a faster lane");
            }
            st.connecting.remove(&client_ep_id);
            let Some(state) = st.eps.get_mut(&ep) else { return };
            if state.phase == Phase::Connecting {
                state.phase = Phase::Ready;
                state.rx_seen = true;
                st.to_flush.push(ep);
            }
        }
        HandshakeWire::Reject { reason_status, client_ep_id } => {
            let Some(&ep) = st.link_eps.get(&link) else { return };
            if st.connecting.get(&client_ep_id) != Some(&ep) {
                protocol_violation(st, link);
                return;
            }
            let status = Status::from_code(i32::from(reason_status)).unwrap_or(Status::Rejected);
            fail_ep(st, ep, status, true);
        }
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

fn on_tag_eager(st: &mut State, link: LinkId, ep: u64, tag: u64, sync_req: Option<u64>, payload: &[u8]) {
    match st.tags.take_expected(tag) {
        Some((_, recv)) => {
            let n = payload.len().min(recv.cap);
            if n > 0 {
                // SAFETY: `recv.ptr..+cap` is the buffer of a posted receive, owned by its request
                // until the sink completes; `n <= cap`.
                unsafe { zcx_dataplane::copy::copy_bytes(payload.as_ptr(), recv.ptr, n) };
            }
            let status = if payload.len() > recv.cap { Status::MessageTruncated } else { Status::Ok };
            st.complete_sink(&recv.sink, status, OpInfo { length: n, sender_tag: tag, value: 0 });
            if let Some(sender_req) = sync_req {
                st.reply(link, &Op::SyncAck { sender_req }, None);
            }
        }
        None => {
            let data = st.pooled_copy(payload);
            let length = data.len();
            st.tags.queue_unexpected(Message {
                sender: ep,
                tag,
                length,
                data: Unexpected::Eager { data, sync_req },
            });
        }
    }
}

fn on_tag_rts(st: &mut State, link: LinkId, ep: u64, tag: u64, sender_req: u64, total_len: u64) {
    match st.tags.take_expected(tag) {
        Some((_, recv)) => {
            let recv_req = st.new_id();
            crate::worker::rndv::start_recv(
                st, link, ep, recv_req, sender_req, total_len, recv.sink, recv.ptr, recv.cap, tag,
            );
        }
        None => {
            let length = usize::try_from(total_len).unwrap_or(usize::MAX);
            st.tags.queue_unexpected(Message {
                sender: ep,
                tag,
                length,
                data: Unexpected::Rts { sender_req, total_len },
            });
        }
    }
}

fn on_rtr(st: &mut State, ep: u64, sender_req: u64, recv_req: u64, accept_len: u64) {
    let Some(op) = st.ops.get_mut(&sender_req) else { return };
    if op.ep != ep {
        return;
    }
    let OutKind::AwaitRtr { ptr, len } = op.kind else { return };
    let accept = usize::try_from(accept_len).unwrap_or(usize::MAX).min(len);
    if accept == 0 {
        st.finish_op(sender_req, Status::Ok, OpInfo { length: 0, ..OpInfo::default() });
        return;
    }
    op.kind = OutKind::Send {
        ptr,
        len: accept,
        sent: 0,
        frag: crate::worker::state::FragKind::Rndv { recv_req },
        acked: true,
    };
    if let Some(state) = st.eps.get_mut(&ep) {
        state.bulk.push_back(BulkJob::Send { op: sender_req, stream: false });
    }
    st.bulk_active.insert(ep);
}

/// A data fragment that came as an ordinary frame (a transport without placement): copied in.
fn on_data_fragment(st: &mut State, ep: u64, id: u64, offset: u64, payload: &[u8]) {
    let Some(at) = claim_fragment(st, ep, id, offset, payload.len()) else { return };
    if !payload.is_empty() {
        // SAFETY: `claim_fragment` checked the range lies inside the operation's buffer, owned by
        // its request until the operation completes.
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), at, payload.len()) };
    }
    finish_if_received(st, id);
}

fn on_rma_ack(st: &mut State, ep: u64, req: u64, status: i8, value: u64) {
    if req == crate::worker::state::UNTRACKED_PUT {
        // The target refused an implicit put sent without acknowledgement: the endpoint's next
        // flush reports it (the refusal arrives before that flush's answer: same link, in order).
        if let Some(state) = st.eps.get(&ep) {
            state.nbi.record(Status::from_code(i32::from(status)).unwrap_or(Status::IoError));
        }
        return;
    }
    let Some(op) = st.ops.get_mut(&req) else { return };
    if op.ep != ep {
        return;
    }
    let status = if status == 0 {
        Status::Ok
    } else {
        Status::from_code(i32::from(status)).unwrap_or(Status::IoError)
    };
    match &mut op.kind {
        OutKind::Get { len, received, .. } => {
            let (len, received) = (*len, *received);
            let status = if status == Status::Ok && received != len { Status::IoError } else { status };
            st.finish_op(req, status, OpInfo { length: received, ..OpInfo::default() });
        }
        OutKind::RmaAck => st.finish_op(req, status, OpInfo { value, ..OpInfo::default() }),
        OutKind::Send { frag: crate::worker::state::FragKind::Put { .. }, acked, sent, len, .. } => {
            if status != Status::Ok {
                let sent = *sent;
                *acked = true;
                // Stop sending: the target refused this put.
                *len = sent;
                st.finish_op(req, status, OpInfo::default());
            } else if *sent >= *len {
                // Only the last fragment asks for an ack, so it covers the whole put.
                st.finish_op(req, Status::Ok, OpInfo::default());
            }
        }
        _ => {}
    }
}
