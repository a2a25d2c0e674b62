//! Pairing: two workers that make endpoints to each other's address share one connection, as UCP
//! pairs them, so a stream or a reply sent on one endpoint arrives on the other.
//!
//! A connection request names its worker, but a name is public: anyone who has a worker's address
//! could claim it. What only the real worker can show is the token of a request it sent, which
//! reached only the worker it dialled. So a connection is paired with another only on proof:
//!
//! - **One after the other.** Worker P connected to us first; we hold its connection as an
//!   *implicit* endpoint (accepted, no application handle). When our application then makes an
//!   endpoint to P's address, we dial P as usual, and our request proposes P's request token
//!   (`pair_token`). P agrees only if the token is one of its own endpoints' (so our request
//!   really comes from the worker P dialled): it answers with that token and drops our
//!   connection, and our new endpoint takes over the implicit one ([`on_answer`]). A claim by an
//!   impostor proposes a token P never issued: P answers as to any new client, and the impostor's
//!   connection stays an implicit endpoint nobody uses.
//! - **Crossing.** Both workers dial each other at once. Each holds the other's request while its
//!   own is unanswered ([`hold_crossing`]). The worker with the smaller name proves, on its own
//!   connection, that it got the other's request (`PairProof` with that request's token); the
//!   larger one then answers our request with its own endpoint and drops its connection
//!   ([`on_proof`]). A held request no proof came for is answered as usual once its crossing is
//!   over ([`release_held`]).
//!
//! Both rules keep one ordering guarantee: the connection that survives is the only one either
//! side ever sent application traffic on, so nothing sent before the pairing can arrive after
//! something sent later.

use zcx_control::HandshakeWire;
use zcx_dataplane::LinkId;
use zcx_engine::{EndpointId, Phase};

use crate::status::Status;
use crate::worker::accept::ConnRequestData;
use crate::worker::lifecycle::{answer_on, create_server_ep, ServerEpParams};
use crate::worker::state::State;

/// Requests held for a crossing at once, at most; beyond, requests are answered at once (as if
/// they crossed nothing), so a flood of claims cannot grow the worker's memory.
const MAX_HELD: usize = 64;

/// A peer's connection request held while this worker's own request to that peer is unanswered.
pub(crate) struct HeldRequest {
    pub request: ConnRequestData,
    /// This worker's endpoint whose request crossed it.
    pub ep: EndpointId,
}

/// The request token of the implicit endpoint that claims to be worker `peer`, the oldest if
/// several do (0 if none): what a new endpoint to `peer` proposes to pair with.
pub(crate) fn implicit_token(st: &State, peer: &str) -> u64 {
    st.eps
        .iter()
        .filter(|(id, ep)| {
            ep.implicit
                && !ep.down
                && ep.peer_token != 0
                && ep.peer_worker.as_deref() == Some(peer)
                && st.engine.phase(**id) == Some(Phase::Ready)
        })
        .min_by_key(|(_, ep)| ep.created)
        .map_or(0, |(_, ep)| ep.peer_token)
}

/// A request that proposes pairing with one of our own requests: when the token is ours, and
/// ours went to the worker the request names, the request proves its sender is that worker. We
/// answer with the token and drop the request's connection; the client's new endpoint takes over
/// the one our request made. Returns false (nothing done) otherwise.
pub(crate) fn answer_proposal(st: &mut State, request: &ConnRequestData) -> bool {
    let token = request.pair_token;
    if token == 0 {
        return false;
    }
    let ours = st.eps.iter().find(|(_, ep)| {
        ep.conn_token == token
            && !ep.implicit
            && !ep.down
            && ep.peer_worker.as_deref() == Some(request.client_worker.as_str())
    });
    let Some((&id, _)) = ours else {
        tracing::debug!(link = ?request.link, "pairing proposed with a token that is not ours");
        return false;
    };
    answer_on(st, request.link, id, request.client_ep_id, token);
    st.to_close.push((request.link, false));
    tracing::debug!(ep = %id, link = ?request.link, "paired the peer's new endpoint with our request");
    true
}

/// A request from a worker this worker is itself connecting to (the requests crossed): held
/// until ours is answered. The worker with the smaller name proves on its own connection that it
/// got the peer's request. Returns the request back when it crosses nothing (or too many are
/// held).
pub(crate) fn hold_crossing(st: &mut State, request: ConnRequestData) -> Option<ConnRequestData> {
    let client = request.client_worker.as_str();
    let mine = st.address.name.as_str();
    if client == mine || st.held_requests.len() >= MAX_HELD {
        return Some(request);
    }
    let crossed = st.connecting.iter().find_map(|(_, &id)| {
        let ep = st.eps.get(&id)?;
        (!ep.down && ep.peer_worker.as_deref() == Some(client)).then_some(id)
    });
    let Some(ep) = crossed else { return Some(request) };
    if mine < client {
        if let Some(link) = st.engine.link_of(ep) {
            let proof = HandshakeWire::PairProof { client_ep_id: request.client_ep_id };
            st.send_hello(link, proof.encode());
        }
    }
    tracing::debug!(%ep, link = ?request.link, "crossing connection request held");
    st.held_requests.push(HeldRequest { request, ep });
    None
}

/// A `PairProof` arrived on `link`: the peer whose request we hold there shows it got our own
/// request (`token`). We answer its request with our endpoint, which moves to that link; our own
/// request's link is dropped (the peer drops it too).
pub(crate) fn on_proof(st: &mut State, link: LinkId, token: u64) {
    let Some(index) = st.held_requests.iter().position(|held| held.request.link == link) else {
        tracing::debug!(?link, "pairing proof for no held request; ignored");
        return;
    };
    let held = &st.held_requests[index];
    let ours = st.connecting.get(&token).copied().filter(|&id| {
        id == held.ep
            && st.address.name.as_str() > held.request.client_worker.as_str()
            && st.eps.get(&id).is_some_and(|ep| !ep.down)
    });
    let Some(id) = ours else {
        tracing::debug!(?link, "pairing proof with a token that is not ours; ignored");
        return;
    };
    let Some(old) = st.engine.link_of(id) else { return };
    let held = st.held_requests.swap_remove(index);
    let request = held.request;
    answer_on(st, link, id, request.client_ep_id, token);
    st.connecting.remove(&token);
    if let Some(state) = st.eps.get_mut(&id) {
        state.remote_addr = Some(request.peer);
        if let Some(verbs_link) = state.verbs_link.take() {
            st.to_close.push((verbs_link, true));
        }
    }
    st.lanes_taken.push((id, old));
    let caps = st.caps_for(link);
    st.engine.endpoint_ready(id, link, caps);
    tracing::debug!(ep = %id, ?link, "crossed connection requests: answered the peer's on proof");
}

/// The answer to our connecting endpoint `ep` names a pairing (`token`, which the answer came on
/// a connection we dialled, so it is the peer's word): either the peer agreed to our proposal,
/// and `ep` takes over the implicit endpoint the peer's request `token` made (returns true:
/// nothing else is to be done with the answer), or the peer answered our request after our
/// proof, and the request it held crossing ours (`token`) is dropped (returns false: `ep` is
/// ready on its own link as with any answer).
pub(crate) fn on_answer(st: &mut State, ep: EndpointId, link: LinkId, token: u64) -> bool {
    let Some(state) = st.eps.get(&ep) else { return false };
    let peer = state.peer_worker.clone();
    if state.proposed_pair == token {
        let implicit = st.eps.iter().find(|(_, other)| {
            other.implicit && other.peer_token == token && other.peer_worker == peer && !other.down
        });
        let from = implicit.map(|(&id, _)| id);
        let absorbed = from.is_some_and(|from| st.engine.absorb_endpoint(ep, from));
        st.connecting.remove(&st.eps.get(&ep).map_or(0, |s| s.conn_token));
        st.to_close.push((link, false));
        let Some(from) = from.filter(|_| absorbed) else {
            // The peer dropped this connection for one we no longer have.
            tracing::debug!(%ep, "paired with an endpoint that is gone");
            st.engine.fail_endpoint(ep, Status::ConnectionReset);
            return true;
        };
        take_over(st, ep, from);
        tracing::debug!(%ep, %from, "paired: took over the peer's connection");
        return true;
    }
    let crossed = st.held_requests.iter().position(|held| {
        held.request.client_ep_id == token && Some(held.request.client_worker.as_str()) == peer.as_deref()
    });
    if let Some(index) = crossed {
        let held = st.held_requests.swap_remove(index);
        st.to_close.push((held.request.link, false));
        tracing::debug!(%ep, "crossed connection requests: the peer answered ours");
    }
    false
}

/// The API side of [`zcx_engine::Engine::absorb_endpoint`]: `ep` keeps its handle and settings,
/// and takes what the implicit endpoint `from` had of its connection.
fn take_over(st: &mut State, ep: EndpointId, from: EndpointId) {
    let Some(mut old) = st.eps.remove(&from) else { return };
    if let Some(sources) = st.help_mappings.remove(&from) {
        st.help_mappings.entry(ep).or_insert(sources);
    }
    let verbs_link = st.eps.get_mut(&ep).and_then(|state| {
        state.remote_addr = old.remote_addr.or(state.remote_addr);
        state.local_addr = old.local_addr.or(state.local_addr);
        state.lane = old.lane.take().or(state.lane.take());
        state.stream_jobs += old.stream_jobs;
        state.verbs_link.take()
    });
    if let Some(verbs_link) = verbs_link {
        st.to_close.push((verbs_link, true));
    }
    st.bury(old);
}

/// Held requests whose crossing is over (our endpoint was answered, failed or went) are answered
/// as any request from a worker address: an implicit endpoint.
pub(crate) fn release_held(st: &mut State) {
    let mut index = 0;
    while index < st.held_requests.len() {
        let held = &st.held_requests[index];
        let waiting = st.connecting.values().any(|&id| id == held.ep);
        if waiting {
            index += 1;
            continue;
        }
        let held = st.held_requests.swap_remove(index);
        tracing::debug!(link = ?held.request.link, "crossing over; held request answered");
        accept_implicit(st, &held.request);
    }
}

/// A held request's connection failed or closed: it is forgotten.
pub(crate) fn link_gone(st: &mut State, link: LinkId) {
    st.held_requests.retain(|held| held.request.link != link);
}

/// Answers a request from a worker address with an endpoint of its own: implicit, until the
/// application pairs an endpoint of its own with it.
pub(crate) fn accept_implicit(st: &mut State, request: &ConnRequestData) {
    let ep = create_server_ep(
        st,
        request,
        ServerEpParams { err_mode_peer: request.err_mode_peer, ..Default::default() },
    );
    if let Some(state) = st.eps.get_mut(&ep) {
        state.peer_worker = Some(request.client_worker.clone());
        state.peer_token = request.client_ep_id;
        state.implicit = true;
    }
}
