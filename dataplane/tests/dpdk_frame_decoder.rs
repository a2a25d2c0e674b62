//! The DPDK transport's receive-side decoders (Ethernet frame, reliability datagram, message)
//! over random and mutated bytes: they refuse what is wrong and never panic.
#![cfg(feature = "dpdk")]

use proptest::prelude::*;
use zcx_dataplane::dpdk::frame::{write_header, EthFrame, FrameError, ETH_HEADER_LEN};
use zcx_dataplane::dpdk::message::{write_fragment, Message};
use zcx_dataplane::proto::reliable::wire::{Header, Kind, Packet, HEADER_LEN};

const DST: [u8; 6] = [2, 0, 0, 0, 0, 1];
const SRC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// The whole receive-side decode of one frame, as the transport does it.
fn decode(bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let frame = EthFrame::parse(bytes).map_err(|e| e.to_string())?;
    let packet = Packet::new_checked(frame.datagram).map_err(|e| e.to_string())?;
    if packet.kind() == Kind::Ack {
        return Ok(None);
    }
    match Message::parse(packet.payload()).map_err(|e| e.to_string())? {
        Message::Fragment { data, .. } => Ok(Some(data.to_vec())),
        Message::Placed { header, data, .. } => Ok(Some([header, data].concat())),
        Message::Hello | Message::Bye => Ok(None),
    }
}

/// A valid frame carrying `data` as one last fragment.
fn valid_frame(data: &[u8], seq: u64) -> Vec<u8> {
    let mut message = vec![0u8; data.len() + 1];
    let (len, _) = write_fragment(&mut message, data, &[], 0, data.len());
    let mut buf = vec![0u8; ETH_HEADER_LEN + HEADER_LEN + len];
    assert!(write_header(&mut buf, &DST, &SRC));
    let header = Header { kind: Kind::Data, src_session: 5, dst_session: 6, seq, ack: 0, credit: 8 };
    header.emit(&message[..len], &mut buf[ETH_HEADER_LEN..]).unwrap();
    buf
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn random_bytes_behind_our_ethertype_never_panic(body in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut bytes = vec![0u8; ETH_HEADER_LEN];
        write_header(&mut bytes, &DST, &SRC);
        bytes.extend_from_slice(&body);
        let frame = EthFrame::parse(&bytes).unwrap();
        prop_assert_eq!(frame.datagram, &body[..]);
        let _ = decode(&bytes);
    }

    #[test]
    fn valid_frames_decode_and_any_changed_datagram_byte_is_refused(
        data in proptest::collection::vec(any::<u8>(), 0..1400),
        seq in any::<u64>(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let frame = valid_frame(&data, seq);
        prop_assert_eq!(decode(&frame), Ok(Some(data.clone())));
        let at = at.index(frame.len());
        let mut bad = frame.clone();
        bad[at] ^= flip;
        let result = decode(&bad);
        if at < 12 {
            // A MAC: still a well-formed frame, routed (and filtered) by the transport.
            prop_assert_eq!(result, Ok(Some(data)));
        } else if at < ETH_HEADER_LEN {
            let ethertype = u16::from_be_bytes([bad[12], bad[13]]);
            prop_assert_eq!(EthFrame::parse(&bad), Err(FrameError::EtherType(ethertype)));
        } else {
            prop_assert!(result.is_err(), "changed byte {} was accepted", at);
        }
    }

    #[test]
    fn truncated_and_extended_frames_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let frame = valid_frame(&data, 1);
        let cut = cut.index(frame.len());
        prop_assert!(decode(&frame[..cut]).is_err());
        // Link padding after the datagram is ignored.
        let mut padded = frame.clone();
        padded.extend_from_slice(&extra);
        prop_assert_eq!(decode(&padded), Ok(Some(data)));
    }

    #[test]
    fn messages_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Message::parse(&bytes);
    }
}
