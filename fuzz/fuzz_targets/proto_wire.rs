//! `proto::wire`, the frame headers workers exchange, on peer bytes:
//!
//! - the eager fast decoder `Op::decode_eager` is equivalent to `Op::decode`: it accepts exactly
//!   the TagEager / AmEager / Stream / SyncAck frames `decode` accepts, with the same header and payload,
//!   and nothing else;
//! - the codec is canonical: an accepted header re-encodes (`Op::encode`, and the fast
//!   `tag_eager_header` / `am_eager_header`) to the very bytes it was read from, of
//!   `encoded_len` bytes, and ops without payload refuse trailing bytes;
//! - structured headers decode back to themselves exactly when they follow the rules the module
//!   documents (a put fragment lies inside its put, an eager AM carries its header, ...), and are
//!   refused otherwise.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::proto::wire::{AtomicOp, Op, MAX_HEADER_LEN};
use zcx_dataplane::shm::put_help::CHUNK_SHIFTS;

fn is_eager(op: &Op) -> bool {
    matches!(op, Op::TagEager { .. } | Op::AmEager { .. } | Op::Stream | Op::SyncAck { .. })
}

fn check_bytes(frame: &[u8]) {
    let decoded = Op::decode(frame);
    let eager = Op::decode_eager(frame);
    match (&decoded, eager) {
        (Ok((op, payload)), Some((fast_op, fast_payload))) => {
            assert!(is_eager(op), "decode_eager accepted {op:?}");
            assert_eq!(*op, fast_op);
            assert_eq!((payload.as_ptr(), payload.len()), (fast_payload.as_ptr(), fast_payload.len()));
        }
        (Ok((op, _)), None) => assert!(!is_eager(op), "decode_eager refused a valid {op:?}"),
        (Err(err), Some((op, _))) => panic!("decode_eager accepted {op:?}, decode refused it: {err}"),
        (Err(_), None) => {}
    }
    let Ok((op, payload)) = decoded else { return };
    let header_len = frame.len() - payload.len();
    assert_eq!(frame[header_len..].as_ptr(), payload.as_ptr(), "the payload is the frame's tail");
    assert_eq!(header_len, op.encoded_len());
    assert!(header_len <= MAX_HEADER_LEN);
    assert_eq!(frame[0], op.code());
    if !op.has_payload() {
        assert!(payload.is_empty(), "{op:?} kept trailing bytes");
    }
    let mut out = [0u8; MAX_HEADER_LEN];
    let n = op.encode(&mut out);
    assert_eq!(&out[..n], &frame[..header_len], "{op:?} does not re-encode to its bytes");
    match op {
        Op::TagEager { tag, sync, sender_req } => {
            assert_eq!(Op::tag_eager_header(tag, sync, sender_req)[..], frame[..header_len]);
        }
        Op::AmEager { am_id, reply, header_len: am_header_len } => {
            assert_eq!(Op::am_eager_header(am_id, reply, am_header_len)[..], frame[..header_len]);
            assert!(payload.len() >= usize::from(am_header_len));
        }
        Op::AmRts { header_len: am_header_len, .. } => assert_eq!(payload.len(), usize::from(am_header_len)),
        _ => {}
    }
}

/// A header built from fuzzer bytes, with whether the documented rules allow it, and a payload
/// length that fits it when it has one.
fn structured(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<(Op, bool, Vec<u8>)> {
    let flag = |u: &mut arbitrary::Unstructured<'_>| u.arbitrary::<bool>();
    let payload_len = u.int_in_range(0..=64usize)?;
    let mut payload = u.bytes(payload_len)?.to_vec();
    let key: [u8; 16] = u.arbitrary()?;
    let (op, valid) = match u.int_in_range(0u8..=24)? {
        0 => (Op::Hello, true),
        1 => {
            let (sync, sender_req) = (flag(u)?, u.arbitrary()?);
            (Op::TagEager { tag: u.arbitrary()?, sync, sender_req }, sync || sender_req == 0)
        }
        2 => (
            Op::TagRts {
                tag: u.arbitrary()?,
                sync: flag(u)?,
                sender_req: u.arbitrary()?,
                total_len: u.arbitrary()?,
            },
            true,
        ),
        3 => (Op::SyncAck { sender_req: u.arbitrary()? }, true),
        4 => (
            Op::Rtr { sender_req: u.arbitrary()?, recv_req: u.arbitrary()?, accept_len: u.arbitrary()? },
            true,
        ),
        5 => (Op::RndvData { recv_req: u.arbitrary()?, offset: u.arbitrary()? }, true),
        6 => (Op::Stream, true),
        7 => {
            let header_len = u.int_in_range(0..=80u16)?;
            (
                Op::AmEager { am_id: u.arbitrary()?, reply: flag(u)?, header_len },
                usize::from(header_len) <= payload.len(),
            )
        }
        8 => {
            let header_len = u.int_in_range(0..=80u16)?;
            let op = Op::AmRts {
                am_id: u.arbitrary()?,
                reply: flag(u)?,
                header_len,
                sender_req: u.arbitrary()?,
                total_len: u.arbitrary()?,
            };
            (op, usize::from(header_len) == payload.len())
        }
        9 => {
            let op = Op::Get {
                req: u.arbitrary()?,
                region: u.arbitrary()?,
                key,
                addr: u.arbitrary()?,
                len: u.arbitrary()?,
            };
            (op, true)
        }
        10 => (Op::GetData { req: u.arbitrary()?, offset: u.arbitrary()? }, true),
        11 => {
            let op = AtomicOp::from_u8(u.int_in_range(0..=5)?).expect("0..=5 are atomic ops");
            let size = if u.arbitrary()? { *u.choose(&[4u8, 8])? } else { u.arbitrary()? };
            let atomic = Op::Atomic {
                req: u.arbitrary()?,
                region: u.arbitrary()?,
                key,
                addr: u.arbitrary()?,
                op,
                size,
                fetch: flag(u)?,
                value: u.arbitrary()?,
                compare: u.arbitrary()?,
            };
            (atomic, matches!(size, 4 | 8))
        }
        12 => {
            let status = if u.arbitrary()? { u.int_in_range(-100..=0)? } else { u.arbitrary()? };
            (Op::RmaAck { req: u.arbitrary()?, status, value: u.arbitrary()? }, (-100..=0).contains(&status))
        }
        13 => (Op::FlushReq { id: u.arbitrary()? }, true),
        14 => (Op::FlushAck { id: u.arbitrary()? }, true),
        15 => (Op::Keepalive, true),
        16 => (Op::Disconnect { force: flag(u)? }, true),
        17 => {
            let offset: u64 = if u.arbitrary()? { u.int_in_range(0..=1 << 20)? } else { u.arbitrary()? };
            let len = if u.arbitrary()? {
                offset.saturating_add(payload.len() as u64).saturating_add(u.int_in_range(0..=64)?)
            } else {
                u.arbitrary()?
            };
            let put = Op::Put {
                req: u.arbitrary()?,
                region: u.arbitrary()?,
                key,
                addr: u.arbitrary()?,
                len,
                offset,
                ack: flag(u)?,
            };
            (put, offset.checked_add(payload.len() as u64).is_some_and(|end| end <= len))
        }
        18 => (Op::KeyCheck { req: u.arbitrary()? }, true),
        19 => {
            let op = Op::TagRtsPull {
                tag: u.arbitrary()?,
                sync: flag(u)?,
                sender_req: u.arbitrary()?,
                total_len: u.arbitrary()?,
                addr: u.arbitrary()?,
            };
            (op, !payload.is_empty())
        }
        20 => {
            let header_len = u.int_in_range(0..=80u16)?;
            let op = Op::AmRtsPull {
                am_id: u.arbitrary()?,
                reply: flag(u)?,
                header_len,
                sender_req: u.arbitrary()?,
                total_len: u.arbitrary()?,
                addr: u.arbitrary()?,
            };
            (op, payload.len() > usize::from(header_len))
        }
        21 => {
            let op = Op::StreamRtsPull {
                sender_req: u.arbitrary()?,
                total_len: u.arbitrary()?,
                addr: u.arbitrary()?,
            };
            (op, !payload.is_empty())
        }
        22 => {
            let status = if u.arbitrary()? { u.int_in_range(-100..=0)? } else { u.arbitrary()? };
            (Op::PullDone { sender_req: u.arbitrary()?, status }, (-100..=0).contains(&status))
        }
        which => {
            // Put help (23) and get help (the rest): the same fields, the initiator's address
            // its source or its destination.
            let chunk_shift = if u.arbitrary()? { u.int_in_range(CHUNK_SHIFTS)? } else { u.arbitrary()? };
            let (seq, len, local, region, addr) =
                (u.arbitrary()?, u.arbitrary()?, u.arbitrary()?, u.arbitrary()?, u.arbitrary()?);
            let op = if which == 23 {
                Op::PutHelp { seq, chunk_shift, len, src: local, region, key, addr }
            } else {
                Op::GetHelp { seq, chunk_shift, len, dst: local, region, key, addr }
            };
            (op, CHUNK_SHIFTS.contains(&chunk_shift))
        }
    };
    if !op.has_payload() && !u.arbitrary::<bool>()? {
        payload.clear();
    }
    // A payload after an op that takes none is the trailing bytes the decoder must refuse.
    let valid = valid && (op.has_payload() || payload.is_empty());
    Ok((op, valid, payload))
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    if control & 0x80 == 0 {
        check_bytes(rest);
        return;
    }
    zcx_fuzz::with_unstructured(rest, |u| {
        let (op, valid, payload) = structured(u)?;
        let mut frame = [0u8; MAX_HEADER_LEN].to_vec();
        let n = op.encode((&mut frame[..MAX_HEADER_LEN]).try_into().expect("a header buffer"));
        frame.truncate(n);
        frame.extend_from_slice(&payload);
        match Op::decode(&frame) {
            Ok((back, back_payload)) => {
                assert!(valid, "accepted {op:?} that breaks a rule");
                assert_eq!(back, op);
                assert_eq!(back_payload, &payload[..]);
            }
            Err(err) => assert!(!valid, "refused a valid {op:?}: {err}"),
        }
        check_bytes(&frame);
        Ok(())
    });
});
