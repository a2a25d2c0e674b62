//! Control messages built from fuzzer bytes.
//!
//! The library types do not implement `Arbitrary` (and should not depend on it), so they are
//! built here field by field. Values are biased towards the valid ones, so that most generated
//! messages encode and the round trip is exercised, while the rest still cover the validation.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use arbitrary::{Result, Unstructured};
use zcx_control::{
    DomainKey, ExportedMemhWire, HandshakeWire, RkeyWire, ShmLocator, TransportAddress, WorkerAddressWire,
    PAGE_SIZE_1G, PAGE_SIZE_2M, PAGE_SIZE_4K, PROT_ALL, TRANSPORT_DPDK, TRANSPORT_SHM, TRANSPORT_URING,
    TRANSPORT_VERBS, VERBS_MTUS,
};

/// True three times out of four: "make this part valid".
fn mostly(u: &mut Unstructured<'_>) -> Result<bool> {
    Ok(u.int_in_range(0u8..=3)? != 0)
}

/// Up to `max` bytes.
pub fn bytes_up_to(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let len = u.int_in_range(0..=max)?;
    Ok(u.bytes(len)?.to_vec())
}

/// A shm locator, valid most of the time.
pub fn shm_locator(u: &mut Unstructured<'_>) -> Result<ShmLocator> {
    let valid = mostly(u)?;
    let page_size = if valid {
        *u.choose(&[PAGE_SIZE_4K, PAGE_SIZE_2M, PAGE_SIZE_1G])?
    } else {
        u64::from(u.arbitrary::<u32>()?)
    };
    let (map_len, map_offset, fd) = if valid {
        let pages = u.int_in_range(1u64..=1 << 20)?;
        let map_len = pages.saturating_mul(page_size.max(1));
        (map_len, u.int_in_range(0..=map_len - 1)?, u.int_in_range(0..=i32::MAX)?)
    } else {
        (u.arbitrary()?, u.arbitrary()?, u.arbitrary()?)
    };
    Ok(ShmLocator {
        boot_id: u.arbitrary()?,
        pid: u.arbitrary()?,
        pid_start_time: u.arbitrary()?,
        fd,
        inode: u.arbitrary()?,
        dev: u.arbitrary()?,
        map_offset,
        map_len,
        page_size,
    })
}

/// The region fields shared by rkeys and exported handles:
/// `(context_id, region_id, base, length, prot, mem_type, access_key)`.
type RegionFields = ([u8; 16], u64, u64, u64, u32, u8, [u8; 16]);

/// Region fields, most of the time valid and fitting inside `shm` when it is given.
fn region(u: &mut Unstructured<'_>, shm: Option<&ShmLocator>) -> Result<RegionFields> {
    let valid = mostly(u)?;
    let prot = if valid { u.arbitrary::<u32>()? & PROT_ALL } else { u.arbitrary()? };
    let mem_type = if valid { u.int_in_range(0..=zcx_control::MEM_TYPE_MAX)? } else { u.arbitrary()? };
    let length = match shm {
        Some(shm) if valid && shm.map_len > shm.map_offset => {
            u.int_in_range(1..=shm.map_len - shm.map_offset)?
        }
        _ => u.arbitrary()?,
    };
    let base = if valid { u.int_in_range(0..=u64::MAX - length)? } else { u.arbitrary()? };
    Ok((u.arbitrary()?, u.arbitrary()?, base, length, prot, mem_type, u.arbitrary()?))
}

/// A packed remote key.
pub fn rkey(u: &mut Unstructured<'_>) -> Result<RkeyWire> {
    let shm = if u.arbitrary()? { Some(shm_locator(u)?) } else { None };
    let (context_id, region_id, base, length, prot, mem_type, access_key) = region(u, shm.as_ref())?;
    let count = if mostly(u)? { u.int_in_range(0..=8)? } else { u.int_in_range(0..=10)? };
    let mut domain_keys = Vec::with_capacity(count);
    for _ in 0..count {
        let max = if mostly(u)? { 64 } else { 300 };
        domain_keys.push(DomainKey { domain: u.arbitrary()?, key: bytes_up_to(u, max)? });
    }
    Ok(RkeyWire {
        context_id,
        region_id,
        base,
        length,
        prot,
        mem_type,
        access_key,
        symmetric: u.arbitrary()?,
        shm,
        domain_keys,
    })
}

/// An exported memory handle.
pub fn exported_memh(u: &mut Unstructured<'_>) -> Result<ExportedMemhWire> {
    let shm = shm_locator(u)?;
    let (context_id, region_id, base, length, prot, mem_type, access_key) = region(u, Some(&shm))?;
    Ok(ExportedMemhWire { context_id, region_id, base, length, prot, mem_type, access_key, shm })
}

/// One transport's address, valid most of the time.
pub fn transport_address(u: &mut Unstructured<'_>) -> Result<TransportAddress> {
    let valid = mostly(u)?;
    Ok(match u.int_in_range(0u8..=4)? {
        0 => {
            let port = if valid { u.int_in_range(1..=u16::MAX)? } else { u.arbitrary()? };
            let addr = if u.arbitrary()? {
                let ip = Ipv4Addr::from(if valid { u.int_in_range(1..=u32::MAX)? } else { u.arbitrary()? });
                SocketAddr::V4(SocketAddrV4::new(ip, port))
            } else {
                let ip = Ipv6Addr::from(if valid { u.int_in_range(1..=u128::MAX)? } else { u.arbitrary()? });
                SocketAddr::V6(SocketAddrV6::new(ip, port, u.arbitrary()?, u.arbitrary()?))
            };
            TransportAddress::Uring { addr }
        }
        1 => {
            let name = bytes_up_to(u, if valid { 107 } else { 120 })?;
            TransportAddress::Shm { socket_name: if valid && name.is_empty() { vec![b'z'] } else { name } }
        }
        2 => {
            let mut mac: [u8; 6] = u.arbitrary()?;
            if valid {
                mac[0] &= !1;
                mac[5] |= 2;
            }
            let udp_port = if valid { u.int_in_range(1..=u16::MAX)? } else { u.arbitrary()? };
            TransportAddress::Dpdk { mac, udp_port }
        }
        3 => TransportAddress::Verbs {
            gid: u.arbitrary()?,
            qpn: if valid { u.int_in_range(0..=(1 << 24) - 1)? } else { u.arbitrary()? },
            psn: if valid { u.int_in_range(0..=(1 << 24) - 1)? } else { u.arbitrary()? },
            lid: u.arbitrary()?,
            mtu: if valid { *u.choose(&VERBS_MTUS)? } else { u.arbitrary()? },
            credit_addr: u.arbitrary()?,
            credit_rkey: u.arbitrary()?,
        },
        _ => {
            let mut kind: u8 = u.arbitrary()?;
            if valid && matches!(kind, TRANSPORT_URING | TRANSPORT_SHM | TRANSPORT_DPDK | TRANSPORT_VERBS) {
                kind |= 0x40;
            }
            TransportAddress::Unknown { kind, bytes: bytes_up_to(u, if valid { 256 } else { 300 })? }
        }
    })
}

/// A name: short UTF-8 without NUL most of the time.
fn name(u: &mut Unstructured<'_>) -> Result<String> {
    let s: String = u.arbitrary()?;
    if mostly(u)? {
        let mut clean: String = s.chars().filter(|&c| c != '\0').collect();
        while clean.len() > zcx_control::MAX_NAME_LEN {
            clean.pop();
        }
        Ok(clean)
    } else {
        Ok(s)
    }
}

/// A worker address.
pub fn worker_address(u: &mut Unstructured<'_>) -> Result<WorkerAddressWire> {
    let count = if mostly(u)? { u.int_in_range(1..=4)? } else { u.int_in_range(0..=9)? };
    let mut transports = Vec::with_capacity(count);
    for _ in 0..count {
        transports.push(transport_address(u)?);
    }
    if mostly(u)? {
        let mut seen = [false; 256];
        transports.retain(|t| !std::mem::replace(&mut seen[usize::from(t.kind())], true));
    }
    let boot_id = if mostly(u)? { Some(u.arbitrary()?) } else { None };
    Ok(WorkerAddressWire { worker_uid: u.arbitrary()?, name: name(u)?, boot_id, transports })
}

/// A handshake step.
pub fn handshake(u: &mut Unstructured<'_>) -> Result<HandshakeWire> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => HandshakeWire::ConnRequest {
            client_id: u.arbitrary()?,
            ep_name: name(u)?,
            err_mode_peer: u.arbitrary()?,
            client_address: worker_address(u)?,
            client_ep_id: u.arbitrary()?,
            pair_token: u.arbitrary()?,
        },
        1 => HandshakeWire::Accept {
            server_address: worker_address(u)?,
            server_ep_id: u.arbitrary()?,
            client_ep_id: u.arbitrary()?,
            pair_token: u.arbitrary()?,
        },
        2 => HandshakeWire::PairProof { client_ep_id: u.arbitrary()? },
        _ => HandshakeWire::Reject {
            reason_status: if mostly(u)? { u.int_in_range(-100..=-1)? } else { u.arbitrary()? },
            client_ep_id: u.arbitrary()?,
        },
    })
}
