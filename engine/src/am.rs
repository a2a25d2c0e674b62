//! Active messages (`ucp_am_send_nbx`, `ucp_am_recv_data_nbx`): a user header and data for the
//! handler registered under an id. The engine never runs a handler: it hands the API an
//! [`AmDelivery`] and, for a rendezvous, waits for the API to take the data into a buffer
//! ([`Engine::am_recv_data`]) or decline it ([`Engine::am_decline`]).

use zcx_dataplane::proto::wire::Op;

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::caps::LinkCaps;
use crate::engine::{Engine, OpKind, Phase, Sent, Start};
use crate::ids::{EndpointId, OpId};
use crate::output::{AmDelivery, Event, Header, Payload, Transmit};
use crate::rndv::{choose, Proto};
use crate::Status;

/// Longest AM header (`UCP_AM_SEND` limits it as UCX's worker attribute does).
pub const MAX_AM_HEADER: usize = 4096;

/// How an active message's data travels (`UCP_AM_SEND_FLAG_EAGER` / `_RNDV`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AmProtocol {
    /// Eager below the link's rendezvous threshold, rendezvous from it on.
    #[default]
    Auto,
    /// Eager whatever its size; INVALID_PARAM when header and data do not fit one frame.
    Eager,
    /// Rendezvous whatever its size.
    Rendezvous,
}

/// How an active message of `header_len` header bytes and `data` goes on a link of `caps`.
#[inline]
fn am_proto(
    caps: &LinkCaps,
    header_len: usize,
    data: &SendBuffer,
    protocol: AmProtocol,
) -> Result<Proto, Status> {
    let whole = header_len + data.len();
    Ok(match protocol {
        AmProtocol::Auto => choose(caps, whole, data),
        AmProtocol::Eager if whole <= caps.max_payload() => Proto::Eager,
        AmProtocol::Eager => return Err(Status::InvalidParam),
        AmProtocol::Rendezvous => match choose(caps, usize::MAX, data) {
            Proto::Eager => Proto::Push,
            other => other,
        },
    })
}

impl Engine {
    /// `ucp_am_send_nbx` for a caller that sends at once, as [`Engine::tag_send_now`] is for
    /// tag sends: an eager message on a ready endpoint, with nothing in the outbox it must not
    /// overtake, comes back as [`Sent::Now`] without a trip through the outbox. Its frame's
    /// payload is `header` followed by the transmit's payload (`data`'s bytes): the caller
    /// sends (or copies) both now. Anything else goes as [`Engine::am_send_with`] sends it
    /// ([`Sent::Queued`]).
    #[inline]
    pub fn am_send_now(
        &mut self,
        ep_id: EndpointId,
        am_id: u16,
        header: &[u8],
        data: SendBuffer,
        reply: bool,
        protocol: AmProtocol,
    ) -> Result<Sent, Status> {
        if self.transmits.is_empty() && header.len() <= MAX_AM_HEADER {
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                if ep.phase == Phase::Ready
                    && ep.answered
                    && matches!(am_proto(&ep.caps, header.len(), &data, protocol), Ok(Proto::Eager))
                {
                    ep.tx_seen = true;
                    let header = Header::am_eager(am_id, reply, header.len() as u16);
                    let payload = Payload::Inline { ptr: data.at(0), len: data.len() };
                    return Ok(Sent::Now(Transmit { link: ep.link, header, payload, placed: false }));
                }
            }
        }
        self.am_send_with(ep_id, am_id, header, data, reply, protocol).map(Sent::Queued)
    }

    /// `ucp_am_send_nbx`: sends `header` and `data` to handler `am_id` of the peer. The header is
    /// copied; an eager send is done at once, a rendezvous once the peer has the data.
    pub fn am_send(
        &mut self,
        ep_id: EndpointId,
        am_id: u16,
        header: &[u8],
        data: SendBuffer,
        reply: bool,
    ) -> Result<Start, Status> {
        self.am_send_with(ep_id, am_id, header, data, reply, AmProtocol::Auto)
    }

    /// [`Engine::am_send`] with the protocol chosen by the caller.
    pub fn am_send_with(
        &mut self,
        ep_id: EndpointId,
        am_id: u16,
        header: &[u8],
        data: SendBuffer,
        reply: bool,
        protocol: AmProtocol,
    ) -> Result<Start, Status> {
        if header.len() > MAX_AM_HEADER {
            return Err(Status::InvalidParam);
        }
        let caps = self.usable(ep_id)?.caps;
        let header_len = header.len() as u16;
        let len = data.len();
        match am_proto(&caps, header.len(), &data, protocol)? {
            Proto::Eager => {
                let frame = Op::AmEager { am_id, reply, header_len };
                let payload = if header.is_empty() {
                    Payload::Inline { ptr: data.at(0), len }
                } else {
                    let mut joined = self.pool.pop().unwrap_or_default();
                    joined.clear();
                    joined.extend_from_slice(header);
                    // SAFETY: `data` is lent for this operation, which is running.
                    joined.extend_from_slice(unsafe { data.bytes() });
                    Payload::Owned(joined)
                };
                self.send(ep_id, &frame, payload, false);
                Ok(self.eager_start(ep_id, len, data.cookie()))
            }
            Proto::Push => {
                let cookie = data.cookie();
                let op = self.new_op(Some(ep_id), OpKind::AwaitRtr { buf: data }, cookie);
                let rts = Op::AmRts { am_id, reply, header_len, sender_req: op.raw(), total_len: len as u64 };
                self.send(ep_id, &rts, Payload::Owned(header.to_vec()), false);
                Ok(Start::Pending(op))
            }
            Proto::Pull => {
                let addr = data.addr();
                let mut payload = header.to_vec();
                payload.extend_from_slice(data.key().expect("pull needs a key"));
                let op = self.new_op(Some(ep_id), OpKind::AwaitPullDone { len }, data.cookie());
                let rts = Op::AmRtsPull {
                    am_id,
                    reply,
                    header_len,
                    sender_req: op.raw(),
                    total_len: len as u64,
                    addr,
                };
                self.send(ep_id, &rts, Payload::Owned(payload), false);
                Ok(Start::Pending(op))
            }
        }
    }

    /// Takes the data of rendezvous AM `op` (from [`AmDelivery::rndv`]) into `buf`: completes
    /// under the same id. Fails for an id that is not a waiting AM rendezvous (taken, declined,
    /// or its endpoint failed).
    pub fn am_recv_data(&mut self, op: OpId, buf: RecvBuffer) -> Result<Start, Status> {
        let (ep, sender_req, total, pull) = self.take_am_rndv(op)?;
        Ok(self.start_rndv_recv(ep, op, sender_req, total, pull, buf, 0))
    }

    /// Declines the data of rendezvous AM `op`: the sender completes, nothing is transferred.
    pub fn am_decline(&mut self, op: OpId) -> Result<(), Status> {
        let (ep, sender_req, _, pull) = self.take_am_rndv(op)?;
        match pull {
            Some(_) => self.send(ep, &Op::PullDone { sender_req, status: 0 }, Payload::None, false),
            None => self.send(ep, &Op::Rtr { sender_req, recv_req: 0, accept_len: 0 }, Payload::None, false),
        }
        self.forget_if_done(ep);
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn take_am_rndv(
        &mut self,
        op: OpId,
    ) -> Result<(EndpointId, u64, u64, Option<(u64, std::sync::Arc<[u8]>)>), Status> {
        let Some(record) = self.ops.get(&op) else {
            // A waiting tag receive is no active message's data either, but a known operation.
            let posted_tag = self.tags.find_expected(|(posted, _)| *posted == op).is_some();
            return Err(if posted_tag { Status::InvalidParam } else { Status::NoElem });
        };
        let OpKind::AmRndv { .. } = record.kind else { return Err(Status::InvalidParam) };
        let ep = record.ep.expect("AM descriptors have an endpoint");
        self.usable(ep)?;
        let record = self.ops.remove(&op).expect("looked up above");
        let OpKind::AmRndv { sender_req, total, pull } = record.kind else { unreachable!("checked above") };
        Ok((ep, sender_req, total, pull))
    }

    /// An `AmEager` frame arrived.
    pub(crate) fn on_am_eager(
        &mut self,
        ep: EndpointId,
        am_id: u16,
        reply: bool,
        header_len: u16,
        payload: &[u8],
    ) {
        let bytes = self.pooled_copy(payload);
        let delivery =
            AmDelivery { ep, am_id, reply, header_len: usize::from(header_len), bytes, rndv: None };
        self.events.push_back(Event::Am(Box::new(delivery)));
    }

    /// An `AmRts` or `AmRtsPull` arrived: the handler decides where the data goes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_am_rts(
        &mut self,
        ep: EndpointId,
        am_id: u16,
        reply: bool,
        header: &[u8],
        sender_req: u64,
        total: u64,
        pull: Option<(u64, &[u8])>,
    ) {
        let pull = pull.map(|(addr, key)| (addr, std::sync::Arc::<[u8]>::from(key)));
        let op = self.new_op(Some(ep), OpKind::AmRndv { sender_req, total, pull }, None);
        let delivery = AmDelivery {
            ep,
            am_id,
            reply,
            header_len: header.len(),
            bytes: header.to_vec(),
            rndv: Some((op, total)),
        };
        self.events.push_back(Event::Am(Box::new(delivery)));
    }
}
