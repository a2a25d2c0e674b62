//! Properties of the frame header codec: every valid header round-trips with its payload, and no
//! byte string (random, starting with a real op code, or a valid frame with one byte flipped or cut
//! short) makes the decoder panic or accept something that does not re-encode to the same bytes.
//!
//! About 4 × 4000 cases take well under a second in a debug build.

use proptest::prelude::*;
use zcx_dataplane::proto::{AtomicOp, Op, ProtoError, MAX_HEADER_LEN};

const CASES: u32 = 4000;

fn arb_atomic_op() -> impl Strategy<Value = AtomicOp> {
    (0u8..6).prop_map(|v| AtomicOp::from_u8(v).unwrap())
}

/// A valid op with a payload its frame accepts (empty for ops without payload).
fn arb_frame() -> impl Strategy<Value = (Op, Vec<u8>)> {
    let data = || proptest::collection::vec(any::<u8>(), 0..64);
    let key = any::<[u8; 16]>;
    prop_oneof![
        data().prop_map(|p| (Op::Hello, p)),
        (any::<u64>(), any::<bool>(), any::<u64>(), data()).prop_map(|(tag, sync, req, p)| {
            (Op::TagEager { tag, sync, sender_req: if sync { req } else { 0 } }, p)
        }),
        (any::<u64>(), any::<bool>(), any::<u64>(), any::<u64>()).prop_map(
            |(tag, sync, sender_req, total_len)| (Op::TagRts { tag, sync, sender_req, total_len }, vec![])
        ),
        any::<u64>().prop_map(|sender_req| (Op::SyncAck { sender_req }, vec![])),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(sender_req, recv_req, accept_len)| {
            (Op::Rtr { sender_req, recv_req, accept_len }, vec![])
        }),
        (any::<u64>(), any::<u64>(), data())
            .prop_map(|(recv_req, offset, p)| (Op::RndvData { recv_req, offset }, p)),
        data().prop_map(|p| (Op::Stream, p)),
        (any::<u16>(), any::<bool>(), data(), any::<prop::sample::Index>()).prop_map(
            |(am_id, reply, p, cut)| {
                let header_len = cut.index(p.len() + 1) as u16;
                (Op::AmEager { am_id, reply, header_len }, p)
            }
        ),
        (any::<u16>(), any::<bool>(), any::<u64>(), any::<u64>(), data()).prop_map(
            |(am_id, reply, sender_req, total_len, p)| {
                let header_len = p.len() as u16;
                (Op::AmRts { am_id, reply, header_len, sender_req, total_len }, p)
            }
        ),
        (
            any::<u64>(),
            any::<u64>(),
            key(),
            any::<u64>(),
            (any::<bool>(), any::<u64>(), any::<u64>(), data())
        )
            .prop_map(|(req, region, key, addr, (ack, offset, extra, p))| {
                // The fragment lies inside the put (the decoder refuses anything else).
                let offset = offset % (u64::MAX - p.len() as u64);
                let len = (offset + p.len() as u64).saturating_add(extra % 4096);
                (Op::Put { req, region, key, addr, len, offset, ack }, p)
            }),
        (any::<u64>(), any::<u64>(), key(), any::<u64>(), any::<u64>())
            .prop_map(|(req, region, key, addr, len)| (Op::Get { req, region, key, addr, len }, vec![])),
        (any::<u64>(), any::<u64>(), data()).prop_map(|(req, offset, p)| (Op::GetData { req, offset }, p)),
        (
            (any::<u64>(), any::<u64>(), key(), any::<u64>()),
            (arb_atomic_op(), prop::sample::select(vec![4u8, 8]), any::<bool>(), any::<u64>(), any::<u64>())
        )
            .prop_map(|((req, region, key, addr), (op, size, fetch, value, compare))| {
                (Op::Atomic { req, region, key, addr, op, size, fetch, value, compare }, vec![])
            }),
        (any::<u64>(), -100i8..=0, any::<u64>())
            .prop_map(|(req, status, value)| (Op::RmaAck { req, status, value }, vec![])),
        any::<u64>().prop_map(|id| (Op::FlushReq { id }, vec![])),
        any::<u64>().prop_map(|id| (Op::FlushAck { id }, vec![])),
        Just((Op::Keepalive, vec![])),
        any::<bool>().prop_map(|force| (Op::Disconnect { force }, vec![])),
        ((any::<u32>(), 12u8..=30, any::<u64>(), any::<u64>()), (any::<u64>(), key(), any::<u64>(), data()))
            .prop_map(|((seq, chunk_shift, len, src), (region, key, addr, p))| {
                (Op::PutHelp { seq, chunk_shift, len, src, region, key, addr }, p)
            }),
        ((any::<u32>(), 12u8..=30, any::<u64>(), any::<u64>()), (any::<u64>(), key(), any::<u64>(), data()))
            .prop_map(|((seq, chunk_shift, len, dst), (region, key, addr, p))| {
                (Op::GetHelp { seq, chunk_shift, len, dst, region, key, addr }, p)
            }),
        (any::<u64>(), data()).prop_map(|(req, p)| (Op::KeyCheck { req }, p)),
    ]
}

fn frame_bytes(op: &Op, payload: &[u8]) -> (Vec<u8>, usize) {
    let mut header = [0u8; MAX_HEADER_LEN];
    let len = op.encode(&mut header);
    assert_eq!(len, op.encoded_len());
    let mut frame = header[..len].to_vec();
    frame.extend_from_slice(payload);
    (frame, len)
}

/// Whatever `decode` makes of `frame`, it must not panic, and an accepted header must be the
/// canonical encoding of what it decoded to, with the rest of the frame as payload.
fn assert_decode_consistent(frame: &[u8]) -> Result<(), TestCaseError> {
    assert_fast_path_agrees(frame)?;
    if let Ok((op, payload)) = Op::decode(frame) {
        let mut header = [0u8; MAX_HEADER_LEN];
        let len = op.encode(&mut header);
        prop_assert!(frame.len() >= len);
        prop_assert_eq!(&frame[..len], &header[..len]);
        prop_assert_eq!(payload, &frame[len..]);
        prop_assert!(op.has_payload() || payload.is_empty());
    }
    Ok(())
}

/// `decode_eager` (the receive path's fast decoder) accepts exactly the eager-data and
/// synchronous-acknowledgement frames that `decode` accepts, with the same op and payload, and
/// nothing else.
fn assert_fast_path_agrees(frame: &[u8]) -> Result<(), TestCaseError> {
    let eager =
        |op: &Op| matches!(op, Op::TagEager { .. } | Op::AmEager { .. } | Op::Stream | Op::SyncAck { .. });
    let expected = Op::decode(frame).ok().filter(|(op, _)| eager(op));
    let fast = Op::decode_eager(frame);
    prop_assert_eq!(fast, expected);
    if let Some((_, payload)) = fast {
        prop_assert_eq!(payload.as_ptr_range().end, frame.as_ptr_range().end);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn every_op_round_trips_with_its_payload((op, payload) in arb_frame()) {
        let (frame, len) = frame_bytes(&op, &payload);
        prop_assert!(len <= MAX_HEADER_LEN);
        let (decoded, rest) = Op::decode(&frame).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(decoded, op);
        prop_assert_eq!(rest, &payload[..]);
        prop_assert_eq!(rest.as_ptr(), frame[len..].as_ptr());
        assert_fast_path_agrees(&frame)?;
    }

    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        code in 0u8..=0x14,
        prefixed in any::<bool>(),
    ) {
        let mut frame = bytes;
        if prefixed {
            frame.insert(0, code);
        }
        assert_decode_consistent(&frame)?;
    }

    #[test]
    fn flipped_bytes_never_panic(
        (op, payload) in arb_frame(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let (mut frame, _) = frame_bytes(&op, &payload);
        let i = at.index(frame.len());
        frame[i] ^= xor;
        assert_decode_consistent(&frame)?;
    }

    #[test]
    fn truncation_never_panics_and_a_cut_header_errs((op, payload) in arb_frame()) {
        let (frame, len) = frame_bytes(&op, &payload);
        for cut in 0..frame.len() {
            let result = Op::decode(&frame[..cut]);
            assert_fast_path_agrees(&frame[..cut])?;
            if cut < len {
                prop_assert_eq!(result, Err(ProtoError::Truncated));
            } else {
                assert_decode_consistent(&frame[..cut])?;
            }
        }
    }
}
