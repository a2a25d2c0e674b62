//! The Ethernet framing of the DPDK transport: destination and source MAC, the EtherType
//! [`ETHERTYPE`], then one reliability datagram ([`crate::proto::reliable::wire`]: its 40-byte
//! header and the message).
//!
//! ```text
//!  0  dst MAC     6 bytes
//!  6  src MAC     6 bytes
//! 12  EtherType   u16 big-endian, 0x88B5 (IEEE "local experimental")
//! 14  datagram    reliability header + message; a link may pad the frame after it
//! ```
//!
//! Parsing reads untrusted bytes: it never panics or allocates, and only splits the frame; the
//! datagram is checked by the reliability layer (length, checksum, fields).

use std::fmt;

/// The EtherType of zcx datagrams: IEEE 802's first "local experimental" EtherType.
pub const ETHERTYPE: u16 = 0x88B5;

/// Length of the Ethernet header (no VLAN tag).
pub const ETH_HEADER_LEN: usize = 14;

/// A MAC address.
pub type Mac = [u8; 6];

/// Whether `mac` is a unicast address a port can have: not all zero, group bit clear.
pub fn is_unicast(mac: &Mac) -> bool {
    mac[0] & 1 == 0 && *mac != [0; 6]
}

/// A received Ethernet frame, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthFrame<'a> {
    /// The destination MAC.
    pub dst: Mac,
    /// The source MAC.
    pub src: Mac,
    /// Everything after the Ethernet header: the reliability datagram and any link padding.
    pub datagram: &'a [u8],
}

/// Why a received frame is not a zcx frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameError {
    /// Shorter than the Ethernet header.
    Truncated,
    /// Another protocol's EtherType (ARP, IPv6 neighbour discovery, LLDP...).
    EtherType(u16),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("frame shorter than an Ethernet header"),
            FrameError::EtherType(t) => write!(f, "EtherType {t:#06x} is not zcx's"),
        }
    }
}

impl std::error::Error for FrameError {}

impl<'a> EthFrame<'a> {
    /// Splits `bytes` into the Ethernet header's fields and the datagram after it.
    pub fn parse(bytes: &'a [u8]) -> Result<EthFrame<'a>, FrameError> {
        let Some((head, datagram)) = bytes.split_first_chunk::<ETH_HEADER_LEN>() else {
            return Err(FrameError::Truncated);
        };
        let ethertype = u16::from_be_bytes([head[12], head[13]]);
        if ethertype != ETHERTYPE {
            return Err(FrameError::EtherType(ethertype));
        }
        let mut dst = [0; 6];
        let mut src = [0; 6];
        dst.copy_from_slice(&head[..6]);
        src.copy_from_slice(&head[6..12]);
        Ok(EthFrame { dst, src, datagram })
    }
}

/// Writes the Ethernet header of a zcx frame from `src` to `dst` into the front of `buf`, which
/// must hold [`ETH_HEADER_LEN`] bytes; returns false (writing nothing) when it does not.
pub fn write_header(buf: &mut [u8], dst: &Mac, src: &Mac) -> bool {
    let Some(head) = buf.first_chunk_mut::<ETH_HEADER_LEN>() else { return false };
    head[..6].copy_from_slice(dst);
    head[6..12].copy_from_slice(src);
    head[12..].copy_from_slice(&ETHERTYPE.to_be_bytes());
    true
}

/// The destination session id of a datagram, read without checking it (the reliability layer
/// checks it afterwards): used to route before the session takes the datagram in. Follows the
/// layout of [`crate::proto::reliable::wire`] (a `u32` little-endian at offset 8).
pub fn peek_dst_session(datagram: &[u8]) -> Option<u32> {
    let bytes = datagram.get(8..12)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::reliable::wire::{Header, Kind};

    #[test]
    fn round_trips_and_refuses_others() {
        let mut buf = [0u8; 64];
        assert!(write_header(&mut buf, &[2, 0, 0, 0, 0, 1], &[2, 0, 0, 0, 0, 2]));
        buf[14..18].copy_from_slice(b"data");
        let frame = EthFrame::parse(&buf[..18]).unwrap();
        assert_eq!(frame.dst, [2, 0, 0, 0, 0, 1]);
        assert_eq!(frame.src, [2, 0, 0, 0, 0, 2]);
        assert_eq!(frame.datagram, b"data");
        assert_eq!(&buf[12..14], &[0x88, 0xB5]);
        assert_eq!(EthFrame::parse(&buf[..13]), Err(FrameError::Truncated));
        assert_eq!(EthFrame::parse(&buf[..14]).unwrap().datagram, b"");
        buf[12] = 0x08;
        buf[13] = 0x06;
        assert_eq!(EthFrame::parse(&buf), Err(FrameError::EtherType(0x0806)));
        assert!(!write_header(&mut [0u8; 13], &[0; 6], &[0; 6]));
    }

    #[test]
    fn peeks_the_destination_session_where_the_wire_puts_it() {
        let header =
            Header { kind: Kind::Ack, src_session: 1, dst_session: 0xDEAD_BEEF, seq: 0, ack: 0, credit: 1 };
        let mut buf = [0u8; 64];
        let len = header.emit(&[], &mut buf).unwrap();
        assert_eq!(peek_dst_session(&buf[..len]), Some(0xDEAD_BEEF));
        assert_eq!(peek_dst_session(&buf[..11]), None);
    }

    #[test]
    fn unicast() {
        assert!(is_unicast(&[2, 0, 0, 0, 0, 1]));
        assert!(!is_unicast(&[0; 6]));
        assert!(!is_unicast(&[0xff; 6]));
        assert!(!is_unicast(&[1, 0, 0, 0, 0, 0]));
    }
}
