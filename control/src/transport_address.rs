//! How to reach a worker over one transport: the per-transport part of a worker address
//! (`ucp_address_t`), the way UCP packs one address per transport interface.
//!
//! The list is one field: a count byte, then for each transport its kind (`u8`), the length of
//! its body (`u16`, little-endian) and the body. Every body length is capped before anything is
//! read, so a hostile address costs the decoder at most a few kilobytes.
//!
//! Kinds this build does not know are kept as [`TransportAddress::Unknown`] rather than rejected:
//! a newer peer may offer a transport this one lacks, and must still be reachable over the
//! transports both have. A known kind whose body is malformed is an error, since that is damage
//! or a bug, not news.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::cursor::{Reader, Writer};
use crate::error::WireError;
use crate::tag;

/// Wire kind of [`TransportAddress::Uring`]; the same numbers name transports in every wire
/// format (memory domains have numbers of their own, see [`DomainKey::domain`](crate::DomainKey)).
pub const TRANSPORT_URING: u8 = 1;
/// Wire kind of [`TransportAddress::Shm`].
pub const TRANSPORT_SHM: u8 = 2;
/// Wire kind of [`TransportAddress::Dpdk`].
pub const TRANSPORT_DPDK: u8 = 3;
/// Wire kind of [`TransportAddress::Verbs`].
pub const TRANSPORT_VERBS: u8 = 4;

/// The most transports one worker address may offer.
pub const MAX_TRANSPORT_ADDRESSES: usize = 8;
/// The longest body of one transport's address, in bytes; it bounds unknown kinds, which this
/// build cannot check otherwise (every known body is far shorter).
pub const MAX_TRANSPORT_ADDRESS_LEN: usize = 256;
/// The longest abstract Unix socket name: `sun_path` holds 108 bytes, the first of which is the
/// NUL that marks the name as abstract.
pub const MAX_SHM_SOCKET_NAME_LEN: usize = 107;
/// The InfiniBand path MTUs (`IBV_MTU_256` to `IBV_MTU_4096`) a verbs address may carry.
pub const VERBS_MTUS: [u16; 5] = [256, 512, 1024, 2048, 4096];
/// Verbs queue pair numbers are 24-bit: every QPN is below this.
pub const VERBS_QPN_LIMIT: u32 = 1 << 24;

/// Address family byte of an IPv4 uring address.
const FAMILY_IPV4: u8 = 4;
/// Address family byte of an IPv6 uring address.
const FAMILY_IPV6: u8 = 6;
/// Uring body: family, IPv4 address, port.
const URING_V4_LEN: usize = 1 + 4 + 2;
/// Uring body: family, IPv6 address, port, flow info, scope id.
const URING_V6_LEN: usize = 1 + 16 + 2 + 4 + 4;
/// Dpdk body: MAC address, UDP port.
const DPDK_LEN: usize = 6 + 2;
/// Verbs body: GID, QPN, PSN, LID, MTU, credit word address and rkey.
const VERBS_LEN: usize = 16 + 4 + 4 + 2 + 2 + 8 + 4;

/// How to reach a worker over one transport, one entry of a worker address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TransportAddress {
    /// The TCP address the worker's io_uring transport listens on. It must be a connectable
    /// address: the port is not 0 and the IP is not the unspecified address.
    Uring {
        /// IPv4 or IPv6 listening address; for IPv6, flow info and scope id travel too, since a
        /// link-local address is useless without its scope.
        addr: SocketAddr,
    },
    /// The abstract Unix socket on which the worker's shm transport passes memfds with
    /// `SCM_RIGHTS`. Only meaningful on the same host, so a worker address offering it must carry
    /// a boot id.
    Shm {
        /// The abstract name without its leading NUL, 1 to [`MAX_SHM_SOCKET_NAME_LEN`] bytes of
        /// any value.
        socket_name: Vec<u8>,
    },
    /// The raw-Ethernet datagram endpoint of the worker's DPDK transport.
    Dpdk {
        /// The port's unicast MAC address (not all zero, group bit clear).
        mac: [u8; 6],
        /// The UDP port the worker receives on; not 0.
        udp_port: u16,
    },
    /// The RoCE / InfiniBand end of a reliable connection of the worker's verbs transport: what
    /// the peer needs to connect its queue pair to this one, carried by the handshake (a worker
    /// address offers it with `qpn` 0, saying only that the worker has verbs on that GID).
    Verbs {
        /// The port GID.
        gid: [u8; 16],
        /// The queue pair number, below [`VERBS_QPN_LIMIT`].
        qpn: u32,
        /// The first packet sequence number the queue pair sends with, below
        /// [`VERBS_QPN_LIMIT`] (PSNs are 24-bit too).
        psn: u32,
        /// The port LID (0 on RoCE).
        lid: u16,
        /// The path MTU in bytes, one of [`VERBS_MTUS`].
        mtu: u16,
        /// The address of the 8-byte word the peer writes its receive credits to.
        credit_addr: u64,
        /// The rkey of the memory region holding only that word.
        credit_rkey: u32,
    },
    /// A transport this build does not know, kept so it can be passed on or ignored knowingly;
    /// `kind` is never one of the known kinds.
    Unknown {
        /// The wire kind.
        kind: u8,
        /// The body, at most [`MAX_TRANSPORT_ADDRESS_LEN`] bytes, uninterpreted.
        bytes: Vec<u8>,
    },
}

impl TransportAddress {
    /// The wire kind of this transport.
    pub fn kind(&self) -> u8 {
        match self {
            TransportAddress::Uring { .. } => TRANSPORT_URING,
            TransportAddress::Shm { .. } => TRANSPORT_SHM,
            TransportAddress::Dpdk { .. } => TRANSPORT_DPDK,
            TransportAddress::Verbs { .. } => TRANSPORT_VERBS,
            TransportAddress::Unknown { kind, .. } => *kind,
        }
    }

    /// Checks the rules of this transport's address (see each variant).
    pub fn validate(&self) -> Result<(), WireError> {
        match self {
            TransportAddress::Uring { addr } => {
                if addr.port() == 0 {
                    return Err(WireError::Invalid("uring address has port 0"));
                }
                if addr.ip().is_unspecified() {
                    return Err(WireError::Invalid("uring address has an unspecified IP"));
                }
            }
            TransportAddress::Shm { socket_name } => {
                if socket_name.is_empty() {
                    return Err(WireError::Invalid("shm socket name is empty"));
                }
                if socket_name.len() > MAX_SHM_SOCKET_NAME_LEN {
                    return Err(WireError::TooLong { len: socket_name.len(), max: MAX_SHM_SOCKET_NAME_LEN });
                }
            }
            TransportAddress::Dpdk { mac, udp_port } => {
                // The low bit of the first octet marks a group (multicast or broadcast) address.
                let [first, ..] = *mac;
                if *mac == [0; 6] || first & 1 != 0 {
                    return Err(WireError::Invalid("dpdk MAC address is not a unicast address"));
                }
                if *udp_port == 0 {
                    return Err(WireError::Invalid("dpdk address has UDP port 0"));
                }
            }
            TransportAddress::Verbs { qpn, psn, mtu, .. } => {
                if *qpn >= VERBS_QPN_LIMIT {
                    return Err(WireError::Invalid("verbs queue pair number exceeds 24 bits"));
                }
                if *psn >= VERBS_QPN_LIMIT {
                    return Err(WireError::Invalid("verbs packet sequence number exceeds 24 bits"));
                }
                if !VERBS_MTUS.contains(mtu) {
                    return Err(WireError::Invalid("verbs MTU is not an InfiniBand path MTU"));
                }
            }
            TransportAddress::Unknown { kind, bytes } => {
                if is_known_kind(*kind) {
                    return Err(WireError::Invalid("unknown transport address uses a known kind"));
                }
                if bytes.len() > MAX_TRANSPORT_ADDRESS_LEN {
                    return Err(WireError::TooLong { len: bytes.len(), max: MAX_TRANSPORT_ADDRESS_LEN });
                }
            }
        }
        Ok(())
    }

    /// The body of this address; only called on validated addresses.
    fn body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            TransportAddress::Uring { addr: SocketAddr::V4(addr) } => {
                w.u8(FAMILY_IPV4);
                w.bytes(&addr.ip().octets());
                w.u16(addr.port());
            }
            TransportAddress::Uring { addr: SocketAddr::V6(addr) } => {
                w.u8(FAMILY_IPV6);
                w.bytes(&addr.ip().octets());
                w.u16(addr.port());
                w.u32(addr.flowinfo());
                w.u32(addr.scope_id());
            }
            TransportAddress::Shm { socket_name } => w.bytes(socket_name),
            TransportAddress::Dpdk { mac, udp_port } => {
                w.bytes(mac);
                w.u16(*udp_port);
            }
            TransportAddress::Verbs { gid, qpn, psn, lid, mtu, credit_addr, credit_rkey } => {
                w.bytes(gid);
                w.u32(*qpn);
                w.u32(*psn);
                w.u16(*lid);
                w.u16(*mtu);
                w.u64(*credit_addr);
                w.u32(*credit_rkey);
            }
            TransportAddress::Unknown { bytes, .. } => w.bytes(bytes),
        }
        w.into_inner()
    }

    /// Decodes and validates the body of one transport's address.
    fn from_body(kind: u8, body: &[u8]) -> Result<TransportAddress, WireError> {
        const URING_WRONG_LENGTH: WireError = WireError::Invalid("uring address body has the wrong length");
        let mut r = Reader::new(body);
        let address = match kind {
            TRANSPORT_URING => {
                let family = r.u8().map_err(|_| URING_WRONG_LENGTH)?;
                let expected_len = match family {
                    FAMILY_IPV4 => URING_V4_LEN,
                    FAMILY_IPV6 => URING_V6_LEN,
                    _ => return Err(WireError::Invalid("uring address family is neither 4 nor 6")),
                };
                if body.len() != expected_len {
                    return Err(URING_WRONG_LENGTH);
                }
                let addr = if family == FAMILY_IPV4 {
                    let ip = Ipv4Addr::from(r.array::<4>()?);
                    SocketAddr::V4(SocketAddrV4::new(ip, r.u16()?))
                } else {
                    let ip = Ipv6Addr::from(r.array::<16>()?);
                    SocketAddr::V6(SocketAddrV6::new(ip, r.u16()?, r.u32()?, r.u32()?))
                };
                TransportAddress::Uring { addr }
            }
            TRANSPORT_SHM => TransportAddress::Shm { socket_name: body.to_vec() },
            TRANSPORT_DPDK => {
                if body.len() != DPDK_LEN {
                    return Err(WireError::Invalid("dpdk address body has the wrong length"));
                }
                TransportAddress::Dpdk { mac: r.array()?, udp_port: r.u16()? }
            }
            TRANSPORT_VERBS => {
                if body.len() != VERBS_LEN {
                    return Err(WireError::Invalid("verbs address body has the wrong length"));
                }
                TransportAddress::Verbs {
                    gid: r.array()?,
                    qpn: r.u32()?,
                    psn: r.u32()?,
                    lid: r.u16()?,
                    mtu: r.u16()?,
                    credit_addr: r.u64()?,
                    credit_rkey: r.u32()?,
                }
            }
            _ => TransportAddress::Unknown { kind, bytes: body.to_vec() },
        };
        address.validate()?;
        Ok(address)
    }
}

/// Whether this build knows transport `kind`.
fn is_known_kind(kind: u8) -> bool {
    matches!(kind, TRANSPORT_URING | TRANSPORT_SHM | TRANSPORT_DPDK | TRANSPORT_VERBS)
}

/// Checks the list: 1 to [`MAX_TRANSPORT_ADDRESSES`] valid addresses of distinct kinds.
pub(crate) fn validate_addresses(addresses: &[TransportAddress]) -> Result<(), WireError> {
    if addresses.is_empty() {
        return Err(WireError::Invalid("worker address offers no transport"));
    }
    if addresses.len() > MAX_TRANSPORT_ADDRESSES {
        return Err(WireError::TooLong { len: addresses.len(), max: MAX_TRANSPORT_ADDRESSES });
    }
    let mut seen = [false; 256];
    for address in addresses {
        address.validate()?;
        // Two entries for one transport would leave the peer guessing which one to use.
        if let Some(seen) = seen.get_mut(usize::from(address.kind())) {
            if std::mem::replace(seen, true) {
                return Err(WireError::Invalid("a transport appears twice in the worker address"));
            }
        }
    }
    Ok(())
}

/// The value of a [`tag::TRANSPORT_ADDRESSES`] field; only called on lists that passed
/// [`validate_addresses`], so the count and body lengths fit their wire widths.
pub(crate) fn encode_addresses(addresses: &[TransportAddress]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(u8::try_from(addresses.len()).unwrap_or(u8::MAX));
    for address in addresses {
        let body = address.body();
        w.u8(address.kind());
        w.u16(u16::try_from(body.len()).unwrap_or(u16::MAX));
        w.bytes(&body);
    }
    w.into_inner()
}

/// Decodes and validates a [`tag::TRANSPORT_ADDRESSES`] value.
pub(crate) fn decode_addresses(value: &[u8]) -> Result<Vec<TransportAddress>, WireError> {
    // Running out of bytes inside the list means the field's length disagrees with its contents.
    let bad_length = || WireError::BadFieldLength { field: tag::TRANSPORT_ADDRESSES, len: value.len() };
    let mut r = Reader::new(value);
    let count = usize::from(r.u8().map_err(|_| bad_length())?);
    if count > MAX_TRANSPORT_ADDRESSES {
        return Err(WireError::TooLong { len: count, max: MAX_TRANSPORT_ADDRESSES });
    }
    let mut addresses = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = r.u8().map_err(|_| bad_length())?;
        let len = usize::from(r.u16().map_err(|_| bad_length())?);
        if len > MAX_TRANSPORT_ADDRESS_LEN {
            return Err(WireError::TooLong { len, max: MAX_TRANSPORT_ADDRESS_LEN });
        }
        let body = r.bytes(len).map_err(|_| bad_length())?;
        addresses.push(TransportAddress::from_body(kind, body)?);
    }
    if !r.is_empty() {
        return Err(bad_length());
    }
    validate_addresses(&addresses)?;
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uring_v4() -> TransportAddress {
        TransportAddress::Uring { addr: "192.0.2.7:13337".parse().unwrap() }
    }

    fn uring_v6_scoped() -> TransportAddress {
        let ip: Ipv6Addr = "fe80::1:2".parse().unwrap();
        TransportAddress::Uring { addr: SocketAddr::V6(SocketAddrV6::new(ip, 4791, 0xABCDE, 3)) }
    }

    fn shm() -> TransportAddress {
        TransportAddress::Shm { socket_name: b"zcx-4242-0\0tail".to_vec() }
    }

    fn dpdk() -> TransportAddress {
        TransportAddress::Dpdk { mac: [0x02, 0, 0, 0xAB, 0xCD, 0xEF], udp_port: 4791 }
    }

    fn verbs() -> TransportAddress {
        TransportAddress::Verbs {
            gid: [0xFE; 16],
            qpn: VERBS_QPN_LIMIT - 1,
            psn: VERBS_QPN_LIMIT - 1,
            lid: 0,
            mtu: 4096,
            credit_addr: u64::MAX,
            credit_rkey: 0x1234_5678,
        }
    }

    fn verbs_end(qpn: u32, psn: u32, mtu: u16) -> TransportAddress {
        TransportAddress::Verbs { gid: [0; 16], qpn, psn, lid: u16::MAX, mtu, credit_addr: 0, credit_rkey: 0 }
    }

    fn round_trip(address: TransportAddress) {
        let list = vec![address];
        assert_eq!(decode_addresses(&encode_addresses(&list)), Ok(list));
    }

    fn rejected(address: TransportAddress) -> WireError {
        let error = address.validate().unwrap_err();
        let list = vec![address];
        assert_eq!(validate_addresses(&list), Err(error.clone()));
        assert_eq!(decode_addresses(&encode_addresses(&list)), Err(error.clone()));
        error
    }

    #[test]
    fn each_kind_round_trips() {
        for address in [uring_v4(), uring_v6_scoped(), shm(), dpdk(), verbs()] {
            round_trip(address);
        }
        round_trip(TransportAddress::Uring { addr: "[::ffff:10.0.0.1]:1".parse().unwrap() });
        round_trip(TransportAddress::Shm { socket_name: vec![0xFF; MAX_SHM_SOCKET_NAME_LEN] });
        for mtu in VERBS_MTUS {
            round_trip(verbs_end(0, 0, mtu));
        }
    }

    #[test]
    fn body_layouts_are_as_documented() {
        let value = encode_addresses(&[uring_v4(), dpdk()]);
        let expected = [
            &[2u8][..],
            &[TRANSPORT_URING, 7, 0, 4, 192, 0, 2, 7],
            &13337u16.to_le_bytes(),
            &[TRANSPORT_DPDK, 8, 0, 0x02, 0, 0, 0xAB, 0xCD, 0xEF],
            &4791u16.to_le_bytes(),
        ]
        .concat();
        assert_eq!(value, expected);
        let v6 = encode_addresses(&[uring_v6_scoped()]);
        assert_eq!(v6.len(), 1 + 3 + URING_V6_LEN);
        assert_eq!(v6.get(v6.len() - 8..), Some(&[0xDE, 0xBC, 0x0A, 0, 3, 0, 0, 0][..]));
    }

    #[test]
    fn unknown_kinds_are_kept() {
        let list = vec![
            TransportAddress::Unknown { kind: 0, bytes: Vec::new() },
            uring_v4(),
            TransportAddress::Unknown { kind: 200, bytes: vec![9; MAX_TRANSPORT_ADDRESS_LEN] },
        ];
        assert_eq!(decode_addresses(&encode_addresses(&list)), Ok(list));
    }

    #[test]
    fn unknown_with_a_known_kind_is_invalid() {
        for kind in [TRANSPORT_URING, TRANSPORT_SHM, TRANSPORT_DPDK, TRANSPORT_VERBS] {
            let address = TransportAddress::Unknown { kind, bytes: vec![1] };
            assert!(matches!(address.validate(), Err(WireError::Invalid(_))));
        }
    }

    #[test]
    fn rejects_oversized_unknown_body() {
        let error = rejected(TransportAddress::Unknown { kind: 9, bytes: vec![0; 257] });
        assert_eq!(error, WireError::TooLong { len: 257, max: MAX_TRANSPORT_ADDRESS_LEN });
        // The cap is checked on the declared length, before the body is read.
        assert_eq!(decode_addresses(&[1, 9, 0xFF, 0xFF]), Err(WireError::TooLong { len: 65535, max: 256 }));
    }

    #[test]
    fn rejects_unconnectable_uring_addresses() {
        for addr in ["192.0.2.7:0", "0.0.0.0:1", "[::]:1", "[fe80::1]:0"] {
            let error = rejected(TransportAddress::Uring { addr: addr.parse().unwrap() });
            assert!(matches!(error, WireError::Invalid(_)), "{addr}");
        }
    }

    #[test]
    fn rejects_bad_shm_socket_names() {
        assert!(matches!(rejected(TransportAddress::Shm { socket_name: Vec::new() }), WireError::Invalid(_)));
        let long = TransportAddress::Shm { socket_name: vec![b'a'; MAX_SHM_SOCKET_NAME_LEN + 1] };
        assert_eq!(rejected(long), WireError::TooLong { len: 108, max: MAX_SHM_SOCKET_NAME_LEN });
    }

    #[test]
    fn rejects_bad_dpdk_addresses() {
        for mac in [[0; 6], [0xFF; 6], [0x01, 0x00, 0x5E, 0, 0, 1]] {
            let error = rejected(TransportAddress::Dpdk { mac, udp_port: 1 });
            assert!(matches!(error, WireError::Invalid(_)), "{mac:?}");
        }
        assert!(matches!(
            rejected(TransportAddress::Dpdk { mac: [2, 0, 0, 0, 0, 1], udp_port: 0 }),
            WireError::Invalid(_)
        ));
    }

    #[test]
    fn rejects_bad_verbs_addresses() {
        for qpn in [VERBS_QPN_LIMIT, u32::MAX] {
            let error = rejected(verbs_end(qpn, 1, 1024));
            assert!(matches!(error, WireError::Invalid(_)), "{qpn}");
            let error = rejected(verbs_end(1, qpn, 1024));
            assert!(matches!(error, WireError::Invalid(_)), "psn {qpn}");
        }
        for mtu in [0, 1, 255, 1500, 4095, 8192, u16::MAX] {
            let error = rejected(verbs_end(1, 1, mtu));
            assert!(matches!(error, WireError::Invalid(_)), "{mtu}");
        }
    }

    #[test]
    fn rejects_malformed_known_bodies() {
        for (kind, body) in [
            (TRANSPORT_URING, &[][..]),
            (TRANSPORT_URING, &[4, 1, 2, 3, 4, 1]),
            (TRANSPORT_URING, &[4, 1, 2, 3, 4, 1, 0, 0]),
            (TRANSPORT_URING, &[6, 1, 2, 3, 4, 1, 0]),
            (TRANSPORT_URING, &[5, 1, 2, 3, 4, 1, 0]),
            (TRANSPORT_DPDK, &[2, 0, 0, 0, 0, 1, 1]),
            (TRANSPORT_VERBS, &[0; VERBS_LEN - 1]),
            (TRANSPORT_VERBS, &[0; VERBS_LEN + 1]),
        ] {
            assert!(
                matches!(TransportAddress::from_body(kind, body), Err(WireError::Invalid(_))),
                "{kind} {body:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_counts_and_duplicates() {
        assert!(matches!(validate_addresses(&[]), Err(WireError::Invalid(_))));
        assert!(matches!(decode_addresses(&[0]), Err(WireError::Invalid(_))));
        assert_eq!(decode_addresses(&[9]), Err(WireError::TooLong { len: 9, max: MAX_TRANSPORT_ADDRESSES }));
        let nine: Vec<_> =
            (10..19).map(|kind| TransportAddress::Unknown { kind, bytes: Vec::new() }).collect();
        assert_eq!(
            validate_addresses(&nine),
            Err(WireError::TooLong { len: 9, max: MAX_TRANSPORT_ADDRESSES })
        );
        let eight = nine.get(..8).unwrap();
        assert_eq!(decode_addresses(&encode_addresses(eight)).as_deref(), Ok(eight));
        for twice in [
            vec![uring_v4(), dpdk(), uring_v6_scoped()],
            vec![shm(), shm()],
            vec![
                TransportAddress::Unknown { kind: 77, bytes: vec![1] },
                TransportAddress::Unknown { kind: 77, bytes: vec![2] },
            ],
        ] {
            assert!(matches!(validate_addresses(&twice), Err(WireError::Invalid(_))));
            assert!(matches!(decode_addresses(&encode_addresses(&twice)), Err(WireError::Invalid(_))));
        }
    }

    #[test]
    fn rejects_list_disagreeing_with_field_length() {
        let bad = |len| Err(WireError::BadFieldLength { field: tag::TRANSPORT_ADDRESSES, len });
        assert_eq!(decode_addresses(&[]), bad(0));
        assert_eq!(decode_addresses(&[1, 50, 2]), bad(3));
        assert_eq!(decode_addresses(&[1, 50, 2, 0, 1]), bad(5));
        assert_eq!(decode_addresses(&[1, 50, 0, 0, 0]), bad(5));
    }
}
