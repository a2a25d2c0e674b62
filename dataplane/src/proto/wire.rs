//! The protocol frame headers two workers exchange over any transport, as a sans-IO codec.
//!
//! A transport carries whole frames: one header encoded here, then the payload the header
//! describes (message data, an active-message header, an RMA fragment), if any. The first byte is
//! the op code; a flags byte, when the op has one, follows it; then the op's fixed fields, every
//! integer little-endian. Every header has a fixed length given by its op, so
//! [`Op::decode`] returns the rest of the frame as the payload, and ops without a payload refuse
//! trailing bytes.
//!
//! Decoding reads untrusted bytes: it never panics and never allocates, and it accepts only the
//! canonical encoding (unknown flag bits, an unknown atomic op or size, an out-of-range status are
//! errors), so a decoded header re-encodes to the very same bytes. Encoding writes into a caller's
//! fixed array of [`MAX_HEADER_LEN`] bytes and does not allocate either.

use std::fmt;

use zcx_control::Reader;

use super::peer_bytes;

/// Length of the longest encoded header ([`Op::Atomic`]); a header buffer of this size fits every
/// op.
pub const MAX_HEADER_LEN: usize = 60;

const _: () = assert!(MAX_HEADER_LEN <= 64);

/// Length of an [`Op::TagEager`] header ([`Op::tag_eager_header`]).
pub const TAG_EAGER_HEADER_LEN: usize = 18;
/// Length of an [`Op::AmEager`] header ([`Op::am_eager_header`]).
pub const AM_EAGER_HEADER_LEN: usize = 6;
/// Bytes of a whole [`Op::SyncAck`] frame: its code and the sender's request.
const SYNC_ACK_LEN: usize = 9;
/// The whole header of [`Op::Stream`]: its op code.
pub const STREAM_HEADER: [u8; 1] = [code::STREAM];

/// The only flag bit defined in a flags byte: the op's one boolean (`SYNC`, reply, ack, fetch,
/// force). Any other bit set is [`ProtoError::BadFlags`].
const FLAG: u8 = 0x01;

/// Lowest `ucs_status_t` an [`Op::RmaAck`] may carry (`UCS_ERR_LAST`).
const STATUS_MIN: i8 = -100;

/// The operation of a remote atomic, numbered as `ucp_atomic_op_t` (`UCP_ATOMIC_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AtomicOp {
    /// `UCP_ATOMIC_OP_ADD`: add the operand, wrapping.
    Add = 0,
    /// `UCP_ATOMIC_OP_SWAP`: store the operand.
    Swap = 1,
    /// `UCP_ATOMIC_OP_CSWAP`: store the operand iff the current value equals the compare value.
    Cswap = 2,
    /// `UCP_ATOMIC_OP_AND`: bitwise and with the operand.
    And = 3,
    /// `UCP_ATOMIC_OP_OR`: bitwise or with the operand.
    Or = 4,
    /// `UCP_ATOMIC_OP_XOR`: bitwise xor with the operand.
    Xor = 5,
}

impl AtomicOp {
    /// The op with wire (and `ucp_atomic_op_t`) number `value`, or `None` if there is none.
    pub fn from_u8(value: u8) -> Option<AtomicOp> {
        Some(match value {
            0 => AtomicOp::Add,
            1 => AtomicOp::Swap,
            2 => AtomicOp::Cswap,
            3 => AtomicOp::And,
            4 => AtomicOp::Or,
            5 => AtomicOp::Xor,
            _ => return None,
        })
    }
}

/// One protocol frame header. The comment of each variant says what follows it in the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Connection handshake between two workers; payload: a zcx-control handshake frame, opaque
    /// here.
    Hello,
    /// A whole tag message (`ucp_tag_send_nbx` up to the eager threshold); payload: the message.
    TagEager {
        /// The message tag.
        tag: u64,
        /// `ucp_tag_send_sync_nbx`: the receiver answers with [`Op::SyncAck`] once matched.
        sync: bool,
        /// The sender's request, echoed in the `SyncAck`; must be 0 when `!sync`.
        sender_req: u64,
    },
    /// Rendezvous request of a tag message (`ucp_tag_send_nbx` above the eager threshold); no
    /// payload. The receiver answers with [`Op::Rtr`] once the message is matched.
    TagRts {
        /// The message tag.
        tag: u64,
        /// Synchronous send: it completes only once matched (the `Rtr` says so for rendezvous).
        sync: bool,
        /// The sender's request, echoed in the `Rtr`.
        sender_req: u64,
        /// Length of the whole message.
        total_len: u64,
    },
    /// A synchronous eager send was matched: complete the sender's request. No payload.
    SyncAck {
        /// The request from [`Op::TagEager`].
        sender_req: u64,
    },
    /// Ready to receive: the receiver matched a rendezvous request ([`Op::TagRts`],
    /// [`Op::AmRts`]) and takes `accept_len` bytes as [`Op::RndvData`]. No payload.
    Rtr {
        /// The request from the rendezvous request.
        sender_req: u64,
        /// The receiver's request, named by every data fragment.
        recv_req: u64,
        /// Bytes to send (less than the total when the receive buffer is shorter); 0 means send
        /// nothing and complete.
        accept_len: u64,
    },
    /// A fragment of rendezvous data; payload: the fragment.
    RndvData {
        /// The request from [`Op::Rtr`].
        recv_req: u64,
        /// Where the fragment starts in the message.
        offset: u64,
    },
    /// Stream data (`ucp_stream_send_nbx`); payload: the bytes, in order.
    Stream,
    /// A whole active message (`ucp_am_send_nbx` up to the eager threshold); payload: the AM
    /// header (`header_len` bytes), then the data.
    AmEager {
        /// The handler id.
        am_id: u16,
        /// `UCP_AM_SEND_FLAG_REPLY`: the handler gets a reply endpoint.
        reply: bool,
        /// Length of the AM header at the start of the payload.
        header_len: u16,
    },
    /// Rendezvous request of an active message; payload: exactly the AM header. The receiver
    /// answers with [`Op::Rtr`] once the handler accepted the data.
    AmRts {
        /// The handler id.
        am_id: u16,
        /// `UCP_AM_SEND_FLAG_REPLY`: the handler gets a reply endpoint.
        reply: bool,
        /// Length of the AM header, which is the whole payload.
        header_len: u16,
        /// The sender's request, echoed in the `Rtr`.
        sender_req: u64,
        /// Length of the data (not counting the header).
        total_len: u64,
    },
    /// Emulated `ucp_put_nbx`, or one fragment of it: write the payload at `addr + offset` of the
    /// target's region. Every fragment names the whole put (`addr`, `len`), so the target checks
    /// the whole range before it writes any fragment: a put that ends outside the region writes
    /// nothing. The payload must lie inside the put (`offset + payload length <= len`), or the
    /// frame does not decode.
    Put {
        /// The initiator's request, echoed in the [`Op::RmaAck`].
        req: u64,
        /// The target's region id, from the rkey.
        region: u64,
        /// The region's access key, from the rkey.
        key: [u8; 16],
        /// Target address of the put's first byte.
        addr: u64,
        /// Length of the whole put.
        len: u64,
        /// Where this fragment's payload starts in the put.
        offset: u64,
        /// The initiator wants an [`Op::RmaAck`] (it always gets one on error).
        ack: bool,
    },
    /// Emulated `ucp_get_nbx`: read `len` bytes at `addr`; the target answers with
    /// [`Op::GetData`] fragments and an [`Op::RmaAck`]. No payload.
    Get {
        /// The initiator's request, named by the answers.
        req: u64,
        /// The target's region id, from the rkey.
        region: u64,
        /// The region's access key, from the rkey.
        key: [u8; 16],
        /// Target address of the first byte.
        addr: u64,
        /// Bytes to read.
        len: u64,
    },
    /// A fragment of the result of an [`Op::Get`]; payload: the fragment.
    GetData {
        /// The request from the `Get`.
        req: u64,
        /// Where the fragment starts in the result.
        offset: u64,
    },
    /// Emulated `ucp_atomic_op_nbx`; the target answers with an [`Op::RmaAck`] carrying the old
    /// value. No payload.
    Atomic {
        /// The initiator's request, echoed in the `RmaAck`.
        req: u64,
        /// The target's region id, from the rkey.
        region: u64,
        /// The region's access key, from the rkey.
        key: [u8; 16],
        /// Target address of the operand, naturally aligned.
        addr: u64,
        /// What to do.
        op: AtomicOp,
        /// Operand size in bytes: 4 or 8.
        size: u8,
        /// The initiator wants the old value (a fetching atomic).
        fetch: bool,
        /// The operand (for 4-byte atomics, its low 32 bits).
        value: u64,
        /// The compare value of [`AtomicOp::Cswap`]; ignored otherwise.
        compare: u64,
    },
    /// Completion of a [`Op::Put`], [`Op::Get`] or [`Op::Atomic`] at the target. No payload.
    RmaAck {
        /// The request from the RMA op.
        req: u64,
        /// 0 (`UCS_OK`) or a negative `ucs_status_t`, down to -100.
        status: i8,
        /// The old value of an atomic; 0 otherwise.
        value: u64,
    },
    /// Flush request (`ucp_ep_flush_nbx`, `ucp_worker_flush_nbx`): answer once every earlier RMA
    /// op from this peer completed. No payload.
    FlushReq {
        /// The initiator's flush id, echoed in the `FlushAck`.
        id: u64,
    },
    /// Every RMA op before the [`Op::FlushReq`] completed. No payload.
    FlushAck {
        /// The id from the `FlushReq`.
        id: u64,
    },
    /// Liveness probe on an idle link (`UCP_ERR_HANDLING_MODE_PEER`). No payload.
    Keepalive,
    /// Shared memory only: the initiator is copying `len` bytes from `src` (its own address) to
    /// `addr` of the target's region in chunks of `1 << chunk_shift` bytes, which the target may
    /// take from the link's help words as job `seq` (see `shm::put_help`). Payload: the packed
    /// remote key of the source's region, for the target to map it. Nothing is answered.
    PutHelp {
        /// The job's number in the help words.
        seq: u32,
        /// Chunk size as a power of two.
        chunk_shift: u8,
        /// Bytes of the whole put.
        len: u64,
        /// The source's first byte, in the initiator's address space (inside the key's region).
        src: u64,
        /// The target's region id, from the rkey.
        region: u64,
        /// The region's access key, from the rkey.
        key: [u8; 16],
        /// Target address of the first byte.
        addr: u64,
    },
    /// Shared memory only: the initiator is copying `len` bytes from `addr` of the target's
    /// region to `dst` (its own address) in chunks of `1 << chunk_shift` bytes, which the target
    /// may take from the link's help words as job `seq` and copy into the initiator's memory (see
    /// `shm::put_help`). Payload: the packed remote key of the destination's region, for the
    /// target to map it. Nothing is answered.
    GetHelp {
        /// The job's number in the help words.
        seq: u32,
        /// Chunk size as a power of two.
        chunk_shift: u8,
        /// Bytes of the whole get.
        len: u64,
        /// The destination's first byte, in the initiator's address space (inside the key's
        /// region).
        dst: u64,
        /// The target's region id, from the rkey.
        region: u64,
        /// The region's access key, from the rkey.
        key: [u8; 16],
        /// Target address of the first byte.
        addr: u64,
    },
    /// The endpoint is closing (`ucp_ep_close_nbx`). No payload.
    Disconnect {
        /// `UCP_EP_CLOSE_MODE_FORCE`: the peer fails its endpoint instead of flushing it.
        force: bool,
    },
    /// Does the owner vouch for this remote key as it stands? Payload: the packed key, as the
    /// initiator unpacked it. The owner answers with an [`Op::RmaAck`]: `UCS_OK` only when every
    /// claim of the key (region, access key, base, length, protection, shared-memory locator)
    /// equals its own record of the region. An initiator that would access the region directly
    /// (shared memory) asks before it does, and then enforces the owner's bounds and protection.
    KeyCheck {
        /// The initiator's request, echoed in the `RmaAck`.
        req: u64,
    },
    /// Receiver-pull rendezvous request of a tag message: the receiver reads the message itself
    /// with a native RMA get from `addr` of the sender's memory, then answers with
    /// [`Op::PullDone`]. Payload: the packed remote key of the sender's buffer (not empty).
    TagRtsPull {
        /// The message tag.
        tag: u64,
        /// Synchronous send: completes only once matched (the `PullDone` says so).
        sync: bool,
        /// The sender's request, echoed in the `PullDone`.
        sender_req: u64,
        /// Length of the whole message.
        total_len: u64,
        /// Address of the message's first byte in the sender's memory.
        addr: u64,
    },
    /// Receiver-pull rendezvous request of an active message. Payload: the AM header
    /// (`header_len` bytes), then the packed remote key of the sender's data (not empty).
    AmRtsPull {
        /// The handler id.
        am_id: u16,
        /// `UCP_AM_SEND_FLAG_REPLY`: the handler gets a reply endpoint.
        reply: bool,
        /// Length of the AM header at the start of the payload.
        header_len: u16,
        /// The sender's request, echoed in the `PullDone`.
        sender_req: u64,
        /// Length of the data (not counting the header).
        total_len: u64,
        /// Address of the data's first byte in the sender's memory.
        addr: u64,
    },
    /// Receiver-pull of a large stream send: the receiver reads the bytes with a native RMA get
    /// and appends them to the stream in this frame's place. Payload: the packed remote key of
    /// the sender's buffer (not empty).
    StreamRtsPull {
        /// The sender's request, echoed in the `PullDone`.
        sender_req: u64,
        /// Bytes of the send.
        total_len: u64,
        /// Address of the first byte in the sender's memory.
        addr: u64,
    },
    /// The receiver is done with the sender's buffer of a receiver-pull rendezvous (it read it, or
    /// declined it): complete the sender's request. No payload.
    PullDone {
        /// The request from the pull request.
        sender_req: u64,
        /// 0 (`UCS_OK`) or a negative `ucs_status_t`, down to -100.
        status: i8,
    },
}

/// Why a frame header was rejected. Every variant means the same to the caller: the frame is not
/// a usable message (and the link that carried it is suspect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// The frame ended inside the header (or inside the AM header its payload must start with).
    Truncated,
    /// The first byte is not a known op code.
    UnknownOp(u8),
    /// A flags byte has an undefined bit set.
    BadFlags,
    /// A field has a value its op does not allow; the string names the field.
    BadValue(&'static str),
    /// An op without payload (or with an exactly sized one) is followed by extra bytes.
    TrailingBytes,
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Truncated => f.write_str("truncated frame header"),
            ProtoError::UnknownOp(code) => write!(f, "unknown op code {code:#04x}"),
            ProtoError::BadFlags => f.write_str("undefined flag bit set"),
            ProtoError::BadValue(field) => write!(f, "bad value of `{field}`"),
            ProtoError::TrailingBytes => f.write_str("trailing bytes after the frame"),
        }
    }
}

impl std::error::Error for ProtoError {}

mod code {
    pub const HELLO: u8 = 0x01;
    pub const TAG_EAGER: u8 = 0x02;
    pub const TAG_RTS: u8 = 0x03;
    pub const SYNC_ACK: u8 = 0x04;
    pub const RTR: u8 = 0x05;
    pub const RNDV_DATA: u8 = 0x06;
    pub const STREAM: u8 = 0x07;
    pub const AM_EAGER: u8 = 0x08;
    pub const AM_RTS: u8 = 0x09;
    pub const PUT: u8 = 0x0A;
    pub const GET: u8 = 0x0B;
    pub const GET_DATA: u8 = 0x0C;
    pub const ATOMIC: u8 = 0x0D;
    pub const RMA_ACK: u8 = 0x0E;
    pub const FLUSH_REQ: u8 = 0x0F;
    pub const FLUSH_ACK: u8 = 0x10;
    pub const KEEPALIVE: u8 = 0x11;
    pub const DISCONNECT: u8 = 0x12;
    pub const PUT_HELP: u8 = 0x13;
    pub const KEY_CHECK: u8 = 0x14;
    pub const TAG_RTS_PULL: u8 = 0x15;
    pub const AM_RTS_PULL: u8 = 0x16;
    pub const STREAM_RTS_PULL: u8 = 0x17;
    pub const PULL_DONE: u8 = 0x18;
    pub const GET_HELP: u8 = 0x19;
}

impl Op {
    /// The op code, the first byte of the frame.
    pub fn code(&self) -> u8 {
        match self {
            Op::Hello => code::HELLO,
            Op::TagEager { .. } => code::TAG_EAGER,
            Op::TagRts { .. } => code::TAG_RTS,
            Op::SyncAck { .. } => code::SYNC_ACK,
            Op::Rtr { .. } => code::RTR,
            Op::RndvData { .. } => code::RNDV_DATA,
            Op::Stream => code::STREAM,
            Op::AmEager { .. } => code::AM_EAGER,
            Op::AmRts { .. } => code::AM_RTS,
            Op::Put { .. } => code::PUT,
            Op::Get { .. } => code::GET,
            Op::GetData { .. } => code::GET_DATA,
            Op::Atomic { .. } => code::ATOMIC,
            Op::RmaAck { .. } => code::RMA_ACK,
            Op::FlushReq { .. } => code::FLUSH_REQ,
            Op::FlushAck { .. } => code::FLUSH_ACK,
            Op::Keepalive => code::KEEPALIVE,
            Op::Disconnect { .. } => code::DISCONNECT,
            Op::PutHelp { .. } => code::PUT_HELP,
            Op::KeyCheck { .. } => code::KEY_CHECK,
            Op::TagRtsPull { .. } => code::TAG_RTS_PULL,
            Op::AmRtsPull { .. } => code::AM_RTS_PULL,
            Op::StreamRtsPull { .. } => code::STREAM_RTS_PULL,
            Op::PullDone { .. } => code::PULL_DONE,
            Op::GetHelp { .. } => code::GET_HELP,
        }
    }

    /// Whether a payload may follow the header ([`Op::AmRts`]: exactly `header_len` bytes).
    pub fn has_payload(&self) -> bool {
        matches!(
            self,
            Op::Hello
                | Op::TagEager { .. }
                | Op::RndvData { .. }
                | Op::Stream
                | Op::AmEager { .. }
                | Op::AmRts { .. }
                | Op::Put { .. }
                | Op::GetData { .. }
                | Op::PutHelp { .. }
                | Op::GetHelp { .. }
                | Op::KeyCheck { .. }
                | Op::TagRtsPull { .. }
                | Op::AmRtsPull { .. }
                | Op::StreamRtsPull { .. }
        )
    }

    /// Length of the encoded header in bytes, at most [`MAX_HEADER_LEN`].
    pub fn encoded_len(&self) -> usize {
        const U64: usize = 8;
        const KEY: usize = 16;
        // Op code, then flags byte (where the op has one), then fields.
        1 + match self {
            Op::Hello | Op::Stream | Op::Keepalive => 0,
            Op::TagEager { .. } => 1 + 2 * U64,
            Op::TagRts { .. } => 1 + 3 * U64,
            Op::SyncAck { .. } | Op::FlushReq { .. } | Op::FlushAck { .. } | Op::KeyCheck { .. } => U64,
            Op::Rtr { .. } => 3 * U64,
            Op::RndvData { .. } | Op::GetData { .. } => 2 * U64,
            Op::AmEager { .. } => 1 + 2 + 2,
            Op::AmRts { .. } => 1 + 2 + 2 + 2 * U64,
            Op::Put { .. } => 1 + 5 * U64 + KEY,
            Op::Get { .. } => 4 * U64 + KEY,
            // Atomic op, size, flags; req, region, key, addr, value, compare.
            Op::Atomic { .. } => 3 + 5 * U64 + KEY,
            // Status, req, value.
            Op::RmaAck { .. } => 1 + 2 * U64,
            Op::Disconnect { .. } => 1,
            // Seq, chunk shift; len, src, region, key, addr.
            // Seq, chunk shift; len, src or dst, region, key, addr.
            Op::PutHelp { .. } | Op::GetHelp { .. } => 4 + 1 + 4 * U64 + KEY,
            Op::TagRtsPull { .. } => 1 + 4 * U64,
            Op::AmRtsPull { .. } => 1 + 2 + 2 + 3 * U64,
            Op::StreamRtsPull { .. } => 3 * U64,
            // Status, sender_req.
            Op::PullDone { .. } => 1 + U64,
        }
    }

    /// Writes the header into `out` and returns its length ([`Op::encoded_len`]); the payload, if
    /// any, goes right after it in the frame.
    ///
    /// Fields are written as given: an op that breaks a rule of its frame ([`Op::TagEager`] with
    /// `!sync` and a non-zero `sender_req`, an atomic size other than 4 or 8, a status outside
    /// `-100..=0`) encodes, but the peer's [`Op::decode`] rejects it.
    pub fn encode(&self, out: &mut [u8; MAX_HEADER_LEN]) -> usize {
        let mut w = HeaderWriter { out, len: 0 };
        w.u8(self.code());
        match *self {
            Op::Hello | Op::Stream | Op::Keepalive => {}
            Op::TagEager { tag, sync, sender_req } => {
                w.flag(sync);
                w.u64(tag);
                w.u64(sender_req);
            }
            Op::TagRts { tag, sync, sender_req, total_len } => {
                w.flag(sync);
                w.u64(tag);
                w.u64(sender_req);
                w.u64(total_len);
            }
            Op::SyncAck { sender_req } => w.u64(sender_req),
            Op::Rtr { sender_req, recv_req, accept_len } => {
                w.u64(sender_req);
                w.u64(recv_req);
                w.u64(accept_len);
            }
            Op::RndvData { recv_req: req, offset } | Op::GetData { req, offset } => {
                w.u64(req);
                w.u64(offset);
            }
            Op::AmEager { am_id, reply, header_len } => {
                w.flag(reply);
                w.u16(am_id);
                w.u16(header_len);
            }
            Op::AmRts { am_id, reply, header_len, sender_req, total_len } => {
                w.flag(reply);
                w.u16(am_id);
                w.u16(header_len);
                w.u64(sender_req);
                w.u64(total_len);
            }
            Op::Put { req, region, key, addr, len, offset, ack } => {
                w.flag(ack);
                w.u64(req);
                w.u64(region);
                w.bytes(&key);
                w.u64(addr);
                w.u64(len);
                w.u64(offset);
            }
            Op::Get { req, region, key, addr, len } => {
                w.u64(req);
                w.u64(region);
                w.bytes(&key);
                w.u64(addr);
                w.u64(len);
            }
            Op::Atomic { req, region, key, addr, op, size, fetch, value, compare } => {
                w.u8(op as u8);
                w.u8(size);
                w.flag(fetch);
                w.u64(req);
                w.u64(region);
                w.bytes(&key);
                w.u64(addr);
                w.u64(value);
                w.u64(compare);
            }
            Op::RmaAck { req, status, value } => {
                w.bytes(&status.to_le_bytes());
                w.u64(req);
                w.u64(value);
            }
            Op::FlushReq { id } | Op::FlushAck { id } | Op::KeyCheck { req: id } => w.u64(id),
            Op::Disconnect { force } => w.flag(force),
            Op::PutHelp { seq, chunk_shift, len, src: local, region, key, addr }
            | Op::GetHelp { seq, chunk_shift, len, dst: local, region, key, addr } => {
                w.bytes(&seq.to_le_bytes());
                w.u8(chunk_shift);
                w.u64(len);
                w.u64(local);
                w.u64(region);
                w.bytes(&key);
                w.u64(addr);
            }
            Op::TagRtsPull { tag, sync, sender_req, total_len, addr } => {
                w.flag(sync);
                w.u64(tag);
                w.u64(sender_req);
                w.u64(total_len);
                w.u64(addr);
            }
            Op::AmRtsPull { am_id, reply, header_len, sender_req, total_len, addr } => {
                w.flag(reply);
                w.u16(am_id);
                w.u16(header_len);
                w.u64(sender_req);
                w.u64(total_len);
                w.u64(addr);
            }
            Op::StreamRtsPull { sender_req, total_len, addr } => {
                w.u64(sender_req);
                w.u64(total_len);
                w.u64(addr);
            }
            Op::PullDone { sender_req, status } => {
                w.bytes(&status.to_le_bytes());
                w.u64(sender_req);
            }
        }
        debug_assert_eq!(w.len, self.encoded_len());
        w.len
    }

    /// Parses the header of a frame that carries eager data ([`Op::TagEager`], [`Op::AmEager`],
    /// [`Op::Stream`]) or acknowledges a synchronous one ([`Op::SyncAck`]): the frames of every
    /// small message, where the general [`Op::decode`]'s field-by-field checked reads are a good
    /// part of the receive path's cost. This reads each fixed-size header in one bounds check.
    ///
    /// Returns what [`Op::decode`] returns for such a frame when it is valid, and `None` for any
    /// other frame, valid or not (the caller then decodes it with [`Op::decode`], which reports
    /// the error): it accepts exactly the frames of these four kinds that [`Op::decode`] accepts.
    ///
    /// Each header field is read once (see [`peer_bytes`]); the payload is returned as a part of
    /// `frame`.
    #[inline]
    pub fn decode_eager(frame: &[u8]) -> Option<(Op, &[u8])> {
        use peer_bytes::{u16_at, u64_at, u8_at};
        match u8_at(frame, 0)? {
            code::TAG_EAGER => {
                let payload = frame.get(TAG_EAGER_HEADER_LEN..)?;
                let sync = flag_of(u8_at(frame, 1)?)?;
                let tag = u64_at(frame, 2)?;
                let sender_req = u64_at(frame, 10)?;
                if !sync && sender_req != 0 {
                    return None;
                }
                Some((Op::TagEager { tag, sync, sender_req }, payload))
            }
            code::AM_EAGER => {
                let payload = frame.get(AM_EAGER_HEADER_LEN..)?;
                let reply = flag_of(u8_at(frame, 1)?)?;
                let am_id = u16_at(frame, 2)?;
                let header_len = u16_at(frame, 4)?;
                if payload.len() < usize::from(header_len) {
                    return None;
                }
                Some((Op::AmEager { am_id, reply, header_len }, payload))
            }
            code::STREAM => Some((Op::Stream, &frame[1..])),
            // No payload: the frame is the header, as `decode` requires of an op without one.
            code::SYNC_ACK if frame.len() == SYNC_ACK_LEN => {
                Some((Op::SyncAck { sender_req: u64_at(frame, 1)? }, &frame[SYNC_ACK_LEN..]))
            }
            _ => None,
        }
    }

    /// The header of [`Op::TagEager`], encoded without going through [`Op::encode`]: the eager
    /// send path builds it on every small message, and a fixed array of the op's own length
    /// spares it the zeroed [`MAX_HEADER_LEN`] buffer and the writer's bounds checks.
    #[inline]
    pub fn tag_eager_header(tag: u64, sync: bool, sender_req: u64) -> [u8; TAG_EAGER_HEADER_LEN] {
        let mut out = [0u8; TAG_EAGER_HEADER_LEN];
        out[0] = code::TAG_EAGER;
        out[1] = if sync { FLAG } else { 0 };
        out[2..10].copy_from_slice(&tag.to_le_bytes());
        out[10..18].copy_from_slice(&sender_req.to_le_bytes());
        out
    }

    /// The header of [`Op::AmEager`], as [`Op::tag_eager_header`] for tag messages.
    #[inline]
    pub fn am_eager_header(am_id: u16, reply: bool, header_len: u16) -> [u8; AM_EAGER_HEADER_LEN] {
        let mut out = [0u8; AM_EAGER_HEADER_LEN];
        out[0] = code::AM_EAGER;
        out[1] = if reply { FLAG } else { 0 };
        out[2..4].copy_from_slice(&am_id.to_le_bytes());
        out[4..6].copy_from_slice(&header_len.to_le_bytes());
        out
    }

    /// Parses the header at the start of `frame` and returns it with the payload (the rest of
    /// the frame; empty for ops without payload, which refuse trailing bytes).
    ///
    /// The header is decoded from a copy of the frame's first [`MAX_HEADER_LEN`] bytes, taken
    /// once (see [`peer_bytes`]); the payload is returned as a part of `frame`.
    pub fn decode(frame: &[u8]) -> Result<(Op, &[u8]), ProtoError> {
        let copy = peer_bytes::HeaderCopy::of(frame);
        let mut r =
            HeaderReader { r: Reader::new(copy.bytes()), copied: copy.bytes().len(), frame_len: frame.len() };
        let op_code = r.u8()?;
        let op = match op_code {
            code::HELLO => Op::Hello,
            code::TAG_EAGER => {
                let sync = r.flag()?;
                let tag = r.u64()?;
                let sender_req = r.u64()?;
                if !sync && sender_req != 0 {
                    return Err(ProtoError::BadValue("sender_req"));
                }
                Op::TagEager { tag, sync, sender_req }
            }
            code::TAG_RTS => {
                let sync = r.flag()?;
                Op::TagRts { sync, tag: r.u64()?, sender_req: r.u64()?, total_len: r.u64()? }
            }
            code::SYNC_ACK => Op::SyncAck { sender_req: r.u64()? },
            code::RTR => Op::Rtr { sender_req: r.u64()?, recv_req: r.u64()?, accept_len: r.u64()? },
            code::RNDV_DATA => Op::RndvData { recv_req: r.u64()?, offset: r.u64()? },
            code::STREAM => Op::Stream,
            code::AM_EAGER => {
                let reply = r.flag()?;
                let am_id = r.u16()?;
                let header_len = r.u16()?;
                if r.remaining() < usize::from(header_len) {
                    return Err(ProtoError::Truncated);
                }
                Op::AmEager { am_id, reply, header_len }
            }
            code::AM_RTS => {
                let reply = r.flag()?;
                let am_id = r.u16()?;
                let header_len = r.u16()?;
                let sender_req = r.u64()?;
                let total_len = r.u64()?;
                match r.remaining().cmp(&usize::from(header_len)) {
                    std::cmp::Ordering::Less => return Err(ProtoError::Truncated),
                    std::cmp::Ordering::Greater => return Err(ProtoError::TrailingBytes),
                    std::cmp::Ordering::Equal => {}
                }
                Op::AmRts { am_id, reply, header_len, sender_req, total_len }
            }
            code::PUT => {
                let ack = r.flag()?;
                let (req, region, key, addr) = (r.u64()?, r.u64()?, r.key()?, r.u64()?);
                let (len, offset) = (r.u64()?, r.u64()?);
                // The fragment must lie inside the put it names.
                if offset.checked_add(r.remaining() as u64).is_none_or(|end| end > len) {
                    return Err(ProtoError::BadValue("put fragment outside the put"));
                }
                Op::Put { req, region, key, addr, len, offset, ack }
            }
            code::GET => {
                Op::Get { req: r.u64()?, region: r.u64()?, key: r.key()?, addr: r.u64()?, len: r.u64()? }
            }
            code::GET_DATA => Op::GetData { req: r.u64()?, offset: r.u64()? },
            code::ATOMIC => {
                let op = AtomicOp::from_u8(r.u8()?).ok_or(ProtoError::BadValue("atomic op"))?;
                let size = r.u8()?;
                if !matches!(size, 4 | 8) {
                    return Err(ProtoError::BadValue("atomic size"));
                }
                let fetch = r.flag()?;
                Op::Atomic {
                    op,
                    size,
                    fetch,
                    req: r.u64()?,
                    region: r.u64()?,
                    key: r.key()?,
                    addr: r.u64()?,
                    value: r.u64()?,
                    compare: r.u64()?,
                }
            }
            code::RMA_ACK => {
                let status = i8::from_le_bytes([r.u8()?]);
                if !(STATUS_MIN..=0).contains(&status) {
                    return Err(ProtoError::BadValue("status"));
                }
                Op::RmaAck { status, req: r.u64()?, value: r.u64()? }
            }
            code::FLUSH_REQ => Op::FlushReq { id: r.u64()? },
            code::FLUSH_ACK => Op::FlushAck { id: r.u64()? },
            code::KEEPALIVE => Op::Keepalive,
            code::DISCONNECT => Op::Disconnect { force: r.flag()? },
            code::KEY_CHECK => Op::KeyCheck { req: r.u64()? },
            code::PUT_HELP | code::GET_HELP => {
                let seq = r.r.u32().map_err(|_| ProtoError::Truncated)?;
                let chunk_shift = r.u8()?;
                if !crate::shm::put_help::CHUNK_SHIFTS.contains(&chunk_shift) {
                    return Err(ProtoError::BadValue("chunk_shift"));
                }
                let (len, local, region, key, addr) = (r.u64()?, r.u64()?, r.u64()?, r.key()?, r.u64()?);
                if op_code == code::PUT_HELP {
                    Op::PutHelp { seq, chunk_shift, len, src: local, region, key, addr }
                } else {
                    Op::GetHelp { seq, chunk_shift, len, dst: local, region, key, addr }
                }
            }
            code::TAG_RTS_PULL => {
                let sync = r.flag()?;
                let (tag, sender_req, total_len, addr) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                if r.remaining() == 0 {
                    return Err(ProtoError::BadValue("packed key"));
                }
                Op::TagRtsPull { tag, sync, sender_req, total_len, addr }
            }
            code::AM_RTS_PULL => {
                let reply = r.flag()?;
                let (am_id, header_len) = (r.u16()?, r.u16()?);
                let (sender_req, total_len, addr) = (r.u64()?, r.u64()?, r.u64()?);
                if r.remaining() < usize::from(header_len) {
                    return Err(ProtoError::Truncated);
                }
                if r.remaining() == usize::from(header_len) {
                    return Err(ProtoError::BadValue("packed key"));
                }
                Op::AmRtsPull { am_id, reply, header_len, sender_req, total_len, addr }
            }
            code::STREAM_RTS_PULL => {
                let (sender_req, total_len, addr) = (r.u64()?, r.u64()?, r.u64()?);
                if r.remaining() == 0 {
                    return Err(ProtoError::BadValue("packed key"));
                }
                Op::StreamRtsPull { sender_req, total_len, addr }
            }
            code::PULL_DONE => {
                let status = i8::from_le_bytes([r.u8()?]);
                if !(STATUS_MIN..=0).contains(&status) {
                    return Err(ProtoError::BadValue("status"));
                }
                Op::PullDone { status, sender_req: r.u64()? }
            }
            unknown => return Err(ProtoError::UnknownOp(unknown)),
        };
        let payload = &frame[r.consumed()..];
        // AmRts checked its exact payload length above.
        if !op.has_payload() && !payload.is_empty() {
            return Err(ProtoError::TrailingBytes);
        }
        Ok((op, payload))
    }
}

/// The boolean of a flags byte, or `None` when an undefined bit is set.
#[inline]
fn flag_of(byte: u8) -> Option<bool> {
    match byte {
        0 => Some(false),
        FLAG => Some(true),
        _ => None,
    }
}

/// Appends to a header buffer. Every header fits [`MAX_HEADER_LEN`] (a unit test checks each op's
/// length), so the writes stay in bounds.
struct HeaderWriter<'a> {
    out: &'a mut [u8; MAX_HEADER_LEN],
    len: usize,
}

impl HeaderWriter<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.out[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    fn u8(&mut self, value: u8) {
        self.bytes(&[value]);
    }

    fn flag(&mut self, value: bool) {
        self.u8(if value { FLAG } else { 0 });
    }

    fn u16(&mut self, value: u16) {
        self.bytes(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.bytes(&value.to_le_bytes());
    }
}

/// zcx-control's checked [`Reader`] over a header's copy, with this module's error type, and the
/// length of the frame the copy was taken from.
struct HeaderReader<'a> {
    r: Reader<'a>,
    /// Bytes in the copy.
    copied: usize,
    /// Bytes in the whole frame.
    frame_len: usize,
}

impl HeaderReader<'_> {
    fn u8(&mut self) -> Result<u8, ProtoError> {
        self.r.u8().map_err(|_| ProtoError::Truncated)
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.r.u16().map_err(|_| ProtoError::Truncated)
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.r.u64().map_err(|_| ProtoError::Truncated)
    }

    fn key(&mut self) -> Result<[u8; 16], ProtoError> {
        self.r.array().map_err(|_| ProtoError::Truncated)
    }

    fn flag(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            FLAG => Ok(true),
            _ => Err(ProtoError::BadFlags),
        }
    }

    /// Bytes of the header read so far.
    fn consumed(&self) -> usize {
        self.copied - self.r.remaining()
    }

    /// Bytes of the frame after those read so far.
    fn remaining(&self) -> usize {
        self.frame_len - self.consumed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = [0xA5; 16];

    /// Headers are decoded from a copy; the payload returned is the frame's own bytes, right
    /// after the header, as long as the frame says (a lent frame stays lent).
    #[test]
    fn payloads_are_parts_of_the_frame_not_of_the_header_copy() {
        let payload: Vec<u8> = (0..100u8).collect();
        let tag = Op::TagEager { tag: 9, sync: false, sender_req: 0 };
        let am = Op::AmEager { am_id: 3, reply: false, header_len: 4 };
        let put = Op::Put { req: 1, region: 2, key: KEY, addr: 3, len: 1000, offset: 0, ack: false };
        for op in [tag, am, Op::Stream, put] {
            let mut header = [0u8; MAX_HEADER_LEN];
            let len = op.encode(&mut header);
            let frame = [&header[..len], &payload[..]].concat();
            let (decoded, rest) = Op::decode(&frame).expect("valid");
            assert_eq!(decoded, op);
            assert_eq!((rest.as_ptr(), rest.len()), (frame[len..].as_ptr(), payload.len()), "{op:?}");
            if let Some((eager, rest)) = Op::decode_eager(&frame) {
                assert_eq!(eager, op);
                assert_eq!((rest.as_ptr(), rest.len()), (frame[len..].as_ptr(), payload.len()), "{op:?}");
            }
        }
    }

    /// One op of every kind, with distinct non-zero fields and every boolean set.
    fn every_op() -> [Op; 24] {
        [
            Op::Hello,
            Op::TagEager { tag: 1, sync: true, sender_req: 2 },
            Op::TagRts { tag: 1, sync: true, sender_req: 2, total_len: 3 },
            Op::SyncAck { sender_req: 4 },
            Op::Rtr { sender_req: 1, recv_req: 2, accept_len: 3 },
            Op::RndvData { recv_req: 1, offset: 2 },
            Op::Stream,
            Op::AmEager { am_id: 1, reply: true, header_len: 0 },
            Op::AmRts { am_id: 1, reply: true, header_len: 0, sender_req: 2, total_len: 3 },
            Op::Put { req: 1, region: 2, key: KEY, addr: 3, len: 4, offset: 1, ack: true },
            Op::Get { req: 1, region: 2, key: KEY, addr: 3, len: 4 },
            Op::GetData { req: 1, offset: 2 },
            Op::Atomic {
                req: 1,
                region: 2,
                key: KEY,
                addr: 3,
                op: AtomicOp::Xor,
                size: 8,
                fetch: true,
                value: 4,
                compare: 5,
            },
            Op::RmaAck { req: 1, status: -100, value: 2 },
            Op::FlushReq { id: 1 },
            Op::FlushAck { id: 2 },
            Op::Keepalive,
            Op::Disconnect { force: true },
            Op::PutHelp { seq: 1, chunk_shift: 17, len: 2, src: 3, region: 4, key: KEY, addr: 5 },
            Op::KeyCheck { req: 6 },
            Op::TagRtsPull { tag: 1, sync: true, sender_req: 2, total_len: 3, addr: 4 },
            Op::AmRtsPull { am_id: 1, reply: true, header_len: 0, sender_req: 2, total_len: 3, addr: 4 },
            Op::StreamRtsPull { sender_req: 1, total_len: 2, addr: 3 },
            Op::PullDone { sender_req: 1, status: -100 },
        ]
    }

    /// The pull requests carry a packed key and refuse an empty one.
    fn needs_key(op: &Op) -> bool {
        matches!(op, Op::TagRtsPull { .. } | Op::AmRtsPull { .. } | Op::StreamRtsPull { .. })
    }

    #[test]
    fn every_op_has_its_code_and_round_trips() {
        let mut buf = [0; MAX_HEADER_LEN];
        for (i, op) in every_op().into_iter().enumerate() {
            assert_eq!(usize::from(op.code()), i + 1);
            let len = op.encode(&mut buf);
            assert_eq!(len, op.encoded_len());
            assert!(len <= MAX_HEADER_LEN);
            let payload: &[u8] = if needs_key(&op) { &[0x4B] } else { &[] };
            let mut frame = buf[..len].to_vec();
            frame.extend_from_slice(payload);
            assert_eq!(Op::decode(&frame), Ok((op, payload)));
        }
        let atomic = every_op()[12];
        assert_eq!(atomic.encoded_len(), MAX_HEADER_LEN);
    }

    #[test]
    fn direct_encoders_match_encode() {
        let mut buf = [0; MAX_HEADER_LEN];
        for (tag, sync, sender_req) in [(0, false, 0), (u64::MAX, true, 7), (0x0102_0304_0506_0708, false, 0)]
        {
            let len = Op::TagEager { tag, sync, sender_req }.encode(&mut buf);
            assert_eq!(&Op::tag_eager_header(tag, sync, sender_req)[..], &buf[..len]);
        }
        for (am_id, reply, header_len) in [(0, false, 0), (u16::MAX, true, 4096), (0x1234, false, 2)] {
            let len = Op::AmEager { am_id, reply, header_len }.encode(&mut buf);
            assert_eq!(&Op::am_eager_header(am_id, reply, header_len)[..], &buf[..len]);
        }
        let len = Op::Stream.encode(&mut buf);
        assert_eq!(&STREAM_HEADER[..], &buf[..len]);
    }

    #[test]
    fn layout_is_little_endian_with_flags_after_the_code() {
        let mut buf = [0; MAX_HEADER_LEN];
        let op = Op::TagEager { tag: 0x0102_0304_0506_0708, sync: true, sender_req: 0x11 };
        let len = op.encode(&mut buf);
        assert_eq!(&buf[..len], &[0x02, 0x01, 8, 7, 6, 5, 4, 3, 2, 1, 0x11, 0, 0, 0, 0, 0, 0, 0][..]);
        let op = Op::AmEager { am_id: 0x1234, reply: false, header_len: 2 };
        let len = op.encode(&mut buf);
        assert_eq!(&buf[..len], &[0x08, 0x00, 0x34, 0x12, 0x02, 0x00][..]);
        let op = Op::RmaAck { req: 1, status: -7, value: 0 };
        let len = op.encode(&mut buf);
        assert_eq!(buf[1], 0xF9);
        assert_eq!(len, 18);
    }

    #[test]
    fn payload_is_the_rest_of_the_frame() {
        let frame = [0x08, 0x01, 0x07, 0x00, 0x02, 0x00, b'h', b'h', b'd', b'a', b't', b'a'];
        let (op, payload) = Op::decode(&frame).unwrap();
        assert_eq!(op, Op::AmEager { am_id: 7, reply: true, header_len: 2 });
        assert_eq!(payload, b"hhdata");
        assert_eq!(Op::decode(&[0x07, 1, 2, 3]), Ok((Op::Stream, &[1, 2, 3][..])));
    }

    #[test]
    fn rejects_what_its_op_does_not_allow() {
        assert_eq!(Op::decode(&[]), Err(ProtoError::Truncated));
        assert_eq!(Op::decode(&[0x00]), Err(ProtoError::UnknownOp(0)));
        assert_eq!(Op::decode(&[0x1A]), Err(ProtoError::UnknownOp(0x1A)));
        assert_eq!(Op::decode(&[0x12, 0x02]), Err(ProtoError::BadFlags));
        assert_eq!(Op::decode(&[0x12, 0x01, 0x00]), Err(ProtoError::TrailingBytes));
        assert_eq!(Op::decode(&[0x11, 0x00]), Err(ProtoError::TrailingBytes));

        let mut buf = [0; MAX_HEADER_LEN];
        let len = Op::TagEager { tag: 1, sync: false, sender_req: 9 }.encode(&mut buf);
        assert_eq!(Op::decode(&buf[..len]), Err(ProtoError::BadValue("sender_req")));

        // A put fragment must lie inside the put its header names, also where the sum wraps.
        for (len, offset, payload, ok) in [
            (8, 0, 8, true),
            (8, 8, 0, true),
            (8, 4, 5, false),
            (8, 9, 0, false),
            (u64::MAX, u64::MAX, 1, false),
        ] {
            let put = Op::Put { req: 1, region: 2, key: KEY, addr: 3, len, offset, ack: false };
            let header_len = put.encode(&mut buf);
            let mut frame = buf[..header_len].to_vec();
            frame.resize(header_len + payload, 0xEE);
            let decoded = Op::decode(&frame).map(|(op, _)| op);
            let expected =
                if ok { Ok(put) } else { Err(ProtoError::BadValue("put fragment outside the put")) };
            assert_eq!(decoded, expected, "len {len}, offset {offset}, payload {payload}");
        }

        let help = every_op()[18];
        let len = help.encode(&mut buf);
        for shift in [0u8, 11, 31, 255] {
            let mut bad = buf;
            bad[5] = shift;
            assert_eq!(Op::decode(&bad[..len]), Err(ProtoError::BadValue("chunk_shift")), "shift {shift}");
        }

        let atomic = every_op()[12];
        let len = atomic.encode(&mut buf);
        let mut bad = buf;
        bad[1] = 6;
        assert_eq!(Op::decode(&bad[..len]), Err(ProtoError::BadValue("atomic op")));
        let mut bad = buf;
        bad[2] = 2;
        assert_eq!(Op::decode(&bad[..len]), Err(ProtoError::BadValue("atomic size")));

        let len = Op::RmaAck { req: 1, status: 0, value: 2 }.encode(&mut buf);
        for status in [1i8, -101, i8::MIN, i8::MAX] {
            buf[1] = status.to_le_bytes()[0];
            assert_eq!(Op::decode(&buf[..len]), Err(ProtoError::BadValue("status")));
        }

        // AmEager: the AM header must fit the payload; AmRts: it must be the whole payload.
        let len = Op::AmEager { am_id: 1, reply: false, header_len: 3 }.encode(&mut buf);
        assert_eq!(Op::decode(&buf[..len + 2]), Err(ProtoError::Truncated));
        let rts = Op::AmRts { am_id: 1, reply: false, header_len: 3, sender_req: 1, total_len: 9 };
        let len = rts.encode(&mut buf);
        assert_eq!(Op::decode(&buf[..len + 2]), Err(ProtoError::Truncated));
        assert_eq!(Op::decode(&buf[..len + 3]), Ok((rts, &buf[len..len + 3])));
        assert_eq!(Op::decode(&buf[..len + 4]), Err(ProtoError::TrailingBytes));
    }

    #[test]
    fn pull_requests_carry_their_key_after_the_am_header() {
        let mut buf = [0; MAX_HEADER_LEN];
        let rts = Op::AmRtsPull {
            am_id: 9,
            reply: false,
            header_len: 2,
            sender_req: 5,
            total_len: 1 << 20,
            addr: 0x7000,
        };
        let len = rts.encode(&mut buf);
        let mut frame = buf[..len].to_vec();
        frame.extend_from_slice(b"hhKEY");
        assert_eq!(Op::decode(&frame), Ok((rts, &b"hhKEY"[..])));
        let done = Op::PullDone { sender_req: 5, status: -3 };
        let len = done.encode(&mut buf);
        assert_eq!(&buf[..len], &[0x18, 0xFD, 5, 0, 0, 0, 0, 0, 0, 0][..]);
    }

    #[test]
    fn pull_requests_refuse_a_missing_key_and_pull_done_a_bad_status() {
        let mut buf = [0; MAX_HEADER_LEN];
        for op in [
            Op::TagRtsPull { tag: 1, sync: false, sender_req: 2, total_len: 3, addr: 4 },
            Op::StreamRtsPull { sender_req: 1, total_len: 2, addr: 3 },
        ] {
            let len = op.encode(&mut buf);
            assert_eq!(Op::decode(&buf[..len]), Err(ProtoError::BadValue("packed key")), "{op:?}");
            assert_eq!(Op::decode(&buf[..len - 1]), Err(ProtoError::Truncated), "{op:?}");
        }
        let rts =
            Op::AmRtsPull { am_id: 1, reply: false, header_len: 3, sender_req: 1, total_len: 9, addr: 2 };
        let len = rts.encode(&mut buf);
        assert_eq!(Op::decode(&buf[..len + 2]), Err(ProtoError::Truncated));
        assert_eq!(Op::decode(&buf[..len + 3]), Err(ProtoError::BadValue("packed key")));
        assert!(Op::decode(&buf[..len + 4]).is_ok());
        let len =
            Op::TagRtsPull { tag: 1, sync: false, sender_req: 2, total_len: 3, addr: 4 }.encode(&mut buf);
        buf[1] = 0x02;
        assert_eq!(Op::decode(&buf[..len + 1]), Err(ProtoError::BadFlags));
        let len = Op::PullDone { sender_req: 1, status: 0 }.encode(&mut buf);
        for status in [1i8, -101, i8::MIN] {
            buf[1] = status.to_le_bytes()[0];
            assert_eq!(Op::decode(&buf[..len]), Err(ProtoError::BadValue("status")));
        }
        buf[1] = 0;
        assert_eq!(Op::decode(&buf[..len + 1]), Err(ProtoError::TrailingBytes));
    }

    #[test]
    fn errors_display() {
        assert_eq!(ProtoError::UnknownOp(0x20).to_string(), "unknown op code 0x20");
        assert_eq!(ProtoError::BadValue("status").to_string(), "bad value of `status`");
    }
}
