//! Valid example values shared by the unit tests of several modules.

use std::net::SocketAddr;

use crate::exported_memh::ExportedMemhWire;
use crate::name::MAX_NAME_LEN;
use crate::region::PROT_ALL;
use crate::rkey::RkeyWire;
use crate::shm_locator::{ShmLocator, PAGE_SIZE_2M};
use crate::transport_address::{TransportAddress, MAX_TRANSPORT_ADDRESSES, MAX_TRANSPORT_ADDRESS_LEN};
use crate::worker_address::WorkerAddressWire;

/// A valid locator for a four-huge-page memfd whose region starts at byte 100.
pub(crate) fn sample_locator() -> ShmLocator {
    ShmLocator {
        boot_id: *b"0123456789abcdef",
        pid: 4242,
        pid_start_time: 987_654,
        fd: 17,
        inode: 0x1122_3344_5566_7788,
        dev: 0x2A,
        map_offset: 100,
        map_len: 4 * PAGE_SIZE_2M,
        page_size: PAGE_SIZE_2M,
    }
}

/// A valid rkey with a shm locator and no transport keys.
pub(crate) fn sample_rkey() -> RkeyWire {
    RkeyWire {
        context_id: [0x5A; 16],
        region_id: 7,
        base: 0x7F00_0000_1000,
        length: 65_536,
        prot: PROT_ALL,
        mem_type: 0,
        access_key: *b"capability-bytes",
        symmetric: false,
        shm: Some(sample_locator()),
        domain_keys: Vec::new(),
    }
}

/// A valid exported memory handle describing the same region as [`sample_rkey`].
pub(crate) fn sample_exported_memh() -> ExportedMemhWire {
    let rkey = sample_rkey();
    ExportedMemhWire {
        context_id: rkey.context_id,
        region_id: rkey.region_id,
        base: rkey.base,
        length: rkey.length,
        prot: rkey.prot,
        mem_type: rkey.mem_type,
        access_key: rkey.access_key,
        shm: sample_locator(),
    }
}

/// A valid worker address offering each known transport once, shm included.
pub(crate) fn sample_worker_address() -> WorkerAddressWire {
    WorkerAddressWire {
        worker_uid: *b"worker-uid-bytes",
        name: "rank-3".to_owned(),
        boot_id: Some(sample_locator().boot_id),
        transports: vec![
            TransportAddress::Shm { socket_name: b"zcx-4242".to_vec() },
            TransportAddress::Verbs {
                gid: [0xFE; 16],
                qpn: 0x11,
                psn: 0x22,
                lid: 0,
                mtu: 1024,
                credit_addr: 0x7f00_0000_1000,
                credit_rkey: 0x33,
            },
            TransportAddress::Dpdk { mac: [0x02, 0, 0, 0, 0, 0x07], udp_port: 4791 },
            TransportAddress::Uring { addr: SocketAddr::from(([192, 0, 2, 7], 13337)) },
        ],
    }
}

/// The largest valid worker address: the longest name and as many unknown transports of the
/// longest body as the list allows.
pub(crate) fn largest_worker_address() -> WorkerAddressWire {
    let transports = (100..)
        .take(MAX_TRANSPORT_ADDRESSES)
        .map(|kind| TransportAddress::Unknown { kind, bytes: vec![7; MAX_TRANSPORT_ADDRESS_LEN] })
        .collect();
    WorkerAddressWire { name: "w".repeat(MAX_NAME_LEN), transports, ..sample_worker_address() }
}
