//! The DPDK transport's Ethernet framing (`dpdk::frame`) on received frames: `EthFrame::parse`
//! agrees with the documented layout and `write_header` rebuilds exactly the bytes it split;
//! `peek_dst_session`, which routes a datagram before it is checked, reads the same session id
//! that the reliability header then validates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::dpdk::frame::{
    peek_dst_session, write_header, EthFrame, FrameError, ETHERTYPE, ETH_HEADER_LEN,
};
use zcx_dataplane::proto::reliable::wire::Packet;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    if control & 0x03 != 0 && bytes.len() >= ETH_HEADER_LEN {
        bytes[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    }
    let parsed = EthFrame::parse(&bytes);
    let expected = if bytes.len() < ETH_HEADER_LEN {
        Err(FrameError::Truncated)
    } else {
        match u16::from_be_bytes([bytes[12], bytes[13]]) {
            ETHERTYPE => Ok(()),
            other => Err(FrameError::EtherType(other)),
        }
    };
    assert_eq!(parsed.map(|_| ()), expected);
    let Ok(frame) = parsed else { return };
    let mut head = [0u8; ETH_HEADER_LEN];
    assert!(write_header(&mut head, &frame.dst, &frame.src));
    assert_eq!(head[..], bytes[..ETH_HEADER_LEN]);
    assert_eq!(frame.datagram, &bytes[ETH_HEADER_LEN..]);
    assert!(!write_header(&mut head[..ETH_HEADER_LEN - 1], &frame.dst, &frame.src));

    let peeked = peek_dst_session(frame.datagram);
    assert_eq!(peeked.is_some(), frame.datagram.len() >= 12);
    if let Ok(packet) = Packet::new_checked(frame.datagram) {
        assert_eq!(peeked, Some(packet.dst_session()));
    }
});
