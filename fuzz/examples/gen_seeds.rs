//! Writes the seed corpora, `corpus/<target>/seed-*`: valid encodings (checksums included) of
//! every message the targets decode, each behind the control byte its target reads first, so the
//! fuzzer starts past the envelopes. Run from `fuzz/` with `cargo run --example gen_seeds`;
//! the output is deterministic.

use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::Path;

use zcx_control::{
    tag, DomainKey, ExportedMemhWire, HandshakeWire, RkeyWire, ShmLocator, TransportAddress,
    WorkerAddressWire, PAGE_SIZE_2M, PAGE_SIZE_4K, PROT_ALL, PROT_REMOTE_READ,
};
use zcx_dataplane::dpdk::frame::write_header;
use zcx_dataplane::dpdk::message::{placed_prefix, BYE_MSG, HELLO_MSG};
use zcx_dataplane::proto::reliable::wire::{Header, Kind};
use zcx_dataplane::proto::wire::{AtomicOp, Op, MAX_HEADER_LEN};
use zcx_dataplane::shm::conn::Hello;
use zcx_dataplane::shm::segment::segment_len;

/// Control byte of the byte-level mode of most targets: no envelope fix-up is needed.
const RAW: u8 = 0x00;

struct Seeds<'a> {
    dir: &'a Path,
}

impl Seeds<'_> {
    fn write(&self, target: &str, seeds: &[Vec<u8>]) {
        let dir = self.dir.join(target);
        fs::create_dir_all(&dir).expect("create the corpus directory");
        for (i, seed) in seeds.iter().enumerate() {
            fs::write(dir.join(format!("seed-{i:02}")), seed).expect("write a seed");
        }
        println!("{target}: {} seeds", seeds.len());
    }
}

fn with(control: u8, bytes: &[u8]) -> Vec<u8> {
    [&[control][..], bytes].concat()
}

/// Deterministic filler bytes (xorshift), for the targets that read structured input.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn locator() -> ShmLocator {
    ShmLocator {
        boot_id: [0x11; 16],
        pid: 4242,
        pid_start_time: 123_456,
        fd: 7,
        inode: 99,
        dev: 0x2b,
        map_offset: 4096,
        map_len: 4 * PAGE_SIZE_2M,
        page_size: PAGE_SIZE_2M,
    }
}

fn rkeys() -> Vec<RkeyWire> {
    let plain = RkeyWire {
        context_id: [1; 16],
        region_id: 5,
        base: 0x7f00_0000_0000,
        length: 8192,
        prot: PROT_REMOTE_READ,
        mem_type: 0,
        access_key: [0xAA; 16],
        symmetric: false,
        shm: None,
        domain_keys: Vec::new(),
    };
    let full = RkeyWire {
        prot: PROT_ALL,
        symmetric: true,
        shm: Some(locator()),
        domain_keys: vec![
            DomainKey { domain: 1, key: vec![3, 0, 0, 0] },
            DomainKey { domain: 4, key: (0..16).collect() },
        ],
        ..plain.clone()
    };
    let empty = RkeyWire { length: 0, base: 0, ..plain.clone() };
    vec![plain, full, empty]
}

fn worker_addresses() -> Vec<WorkerAddressWire> {
    let all = vec![
        TransportAddress::Shm { socket_name: b"zcx-shm-1234".to_vec() },
        TransportAddress::Uring { addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 13337)) },
        TransportAddress::Dpdk { mac: [0x02, 0, 0, 0, 0, 1], udp_port: 0x88B5 },
        TransportAddress::Verbs { gid: [0xfe; 16], qpn: 0x1234, psn: 0x42, lid: 0, mtu: 1024, credit_addr: 0x1000, credit_rkey: 7 },
        TransportAddress::Unknown { kind: 9, bytes: vec![1, 2, 3] },
    ];
    let v6 = TransportAddress::Uring {
        addr: SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1), 4791, 0, 2)),
    };
    vec![
        WorkerAddressWire {
            worker_uid: [2; 16],
            name: "worker-0".into(),
            boot_id: Some([0x11; 16]),
            transports: all,
        },
        WorkerAddressWire { worker_uid: [3; 16], name: String::new(), boot_id: None, transports: vec![v6] },
    ]
}

fn handshakes() -> Vec<HandshakeWire> {
    let address = worker_addresses().remove(1);
    vec![
        HandshakeWire::ConnRequest {
            client_id: 77,
            ep_name: "ep".into(),
            err_mode_peer: true,
            client_address: address.clone(),
            client_ep_id: 1,
            pair_token: 0,
        },
        HandshakeWire::Accept { server_address: address, server_ep_id: 2, client_ep_id: 1, pair_token: 0 },
        HandshakeWire::PairProof { client_ep_id: 1 },
        HandshakeWire::Reject { reason_status: -22, client_ep_id: 1 },
    ]
}

fn ops() -> Vec<Vec<u8>> {
    let key = [0x5A; 16];
    let ops = [
        (Op::Hello, &b"handshake"[..]),
        (Op::TagEager { tag: 0xfeed, sync: true, sender_req: 9 }, b"data"),
        (Op::TagEager { tag: 1, sync: false, sender_req: 0 }, b""),
        (Op::TagRts { tag: 2, sync: false, sender_req: 3, total_len: 1 << 20 }, b""),
        (Op::SyncAck { sender_req: 9 }, b""),
        (Op::Rtr { sender_req: 3, recv_req: 4, accept_len: 1 << 20 }, b""),
        (Op::RndvData { recv_req: 4, offset: 8192 }, b"fragment"),
        (Op::Stream, b"stream bytes"),
        (Op::AmEager { am_id: 3, reply: true, header_len: 2 }, b"hdata"),
        (Op::AmRts { am_id: 3, reply: false, header_len: 3, sender_req: 5, total_len: 100_000 }, b"hdr"),
        (Op::Put { req: 8, region: 1, key, addr: 0x1000, len: 4096, offset: 64, ack: true }, b"put data"),
        (Op::Get { req: 6, region: 1, key, addr: 0x1000, len: 64 }, b""),
        (Op::GetData { req: 6, offset: 0 }, b"got"),
        (
            Op::Atomic {
                req: 7,
                region: 1,
                key,
                addr: 0x1008,
                op: AtomicOp::Cswap,
                size: 8,
                fetch: true,
                value: 1,
                compare: 0,
            },
            b"",
        ),
        (Op::RmaAck { req: 7, status: -3, value: 0 }, b""),
        (Op::FlushReq { id: 1 }, b""),
        (Op::FlushAck { id: 1 }, b""),
        (Op::Keepalive, b""),
        (Op::Disconnect { force: true }, b""),
        (Op::KeyCheck { req: 10 }, b"packed rkey"),
        (
            Op::PutHelp { seq: 1, chunk_shift: 16, len: 1 << 20, src: 0x2000, region: 1, key, addr: 0x3000 },
            b"rkey",
        ),
        (
            Op::GetHelp { seq: 2, chunk_shift: 17, len: 1 << 20, dst: 0x2000, region: 1, key, addr: 0x3000 },
            b"rkey",
        ),
    ];
    let mut seeds: Vec<Vec<u8>> = ops
        .iter()
        .map(|(op, payload)| {
            let mut buf = [0u8; MAX_HEADER_LEN];
            let n = op.encode(&mut buf);
            with(RAW, &[&buf[..n], payload].concat())
        })
        .collect();
    seeds.push(with(0x80, &noise(1, 64)));
    seeds
}

fn datagrams() -> Vec<Vec<u8>> {
    let data = Header { kind: Kind::Data, src_session: 1, dst_session: 2, seq: 3, ack: 4, credit: 32 };
    let ack = Header { kind: Kind::Ack, seq: 0, ..data };
    let mut out = Vec::new();
    for (header, payload) in [(data, &b"\x03message"[..]), (ack, b""), (data, b"")] {
        let mut buf = vec![0u8; 40 + payload.len()];
        let n = header.emit(payload, &mut buf).expect("valid header");
        buf.truncate(n);
        out.push(buf);
    }
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seeds = Seeds { dir: &root };

    let rkey_frames: Vec<Vec<u8>> = rkeys().iter().map(RkeyWire::encode).collect();
    let memh = ExportedMemhWire {
        context_id: [1; 16],
        region_id: 5,
        base: 0x7f00_0000_1000,
        length: 4096,
        prot: PROT_ALL,
        mem_type: 0,
        access_key: [0xAA; 16],
        shm: locator(),
    };
    let memh_frames = vec![
        memh.encode(),
        ExportedMemhWire { shm: ShmLocator { page_size: PAGE_SIZE_4K, ..locator() }, ..memh }.encode(),
    ];
    let address_frames: Vec<Vec<u8>> = worker_addresses().iter().map(WorkerAddressWire::encode).collect();
    let handshake_frames: Vec<Vec<u8>> = handshakes().iter().map(HandshakeWire::encode).collect();

    let mut frames = Vec::new();
    for (kind, group) in [&rkey_frames, &memh_frames, &address_frames, &handshake_frames].iter().enumerate() {
        // Kind index in bits 6-7; take every field (bits 3-5) or none.
        for (i, frame) in group.iter().enumerate() {
            frames.push(with(((kind as u8) << 6) | if i % 2 == 0 { 0x38 } else { 0 }, frame));
        }
    }
    seeds.write("control_frame", &frames);
    let structured = |n: u64| with(0x80, &noise(n, 200));
    let raw = |frames: &[Vec<u8>], n: u64| {
        let mut out: Vec<Vec<u8>> = frames.iter().map(|f| with(RAW, f)).collect();
        out.push(structured(n));
        out
    };
    seeds.write("control_rkey", &raw(&rkey_frames, 2));
    seeds.write("control_exported_memh", &raw(&memh_frames, 3));
    seeds.write("control_worker_address", &raw(&address_frames, 4));
    seeds.write("control_handshake", &raw(&handshake_frames, 5));

    let locators: Vec<Vec<u8>> =
        memh_frames.iter().map(|f| zcx_fuzz::frame::field(f, tag::SHM_LOCATOR).expect("locator")).collect();
    seeds.write("control_shm_locator", &raw(&locators, 6));
    let lists: Vec<Vec<u8>> = address_frames
        .iter()
        .map(|f| zcx_fuzz::frame::field(f, tag::TRANSPORT_ADDRESSES).expect("transport list"))
        .collect();
    seeds.write("control_transport_address", &raw(&lists, 7));

    seeds.write("proto_wire", &ops());
    let mut packets: Vec<Vec<u8>> = datagrams().iter().map(|d| with(RAW, d)).collect();
    packets.push(with(0x80, &noise(8, 80)));
    seeds.write("reliable_packet", &packets);

    let hellos = [
        Hello { capacity: 1 << 16, segment_len: segment_len(1 << 16) as u64, max_frame: 65_536 },
        Hello { capacity: 1 << 12, segment_len: segment_len(1 << 12) as u64 + 4096, max_frame: 0 },
    ];
    let mut hello_seeds: Vec<Vec<u8>> = hellos.iter().map(|h| with(RAW, &h.encode())).collect();
    hello_seeds.push(with(0x80, &noise(9, 24)));
    seeds.write("shm_hello", &hello_seeds);

    let mut placed = vec![5];
    placed.extend_from_slice(&placed_prefix(3, 10).expect("small"));
    placed.extend_from_slice(b"hdr0123");
    let messages =
        [HELLO_MSG.to_vec(), BYE_MSG.to_vec(), b"\x02more".to_vec(), b"\x03end".to_vec(), placed.clone()];
    let mut dpdk: Vec<Vec<u8>> = messages.iter().map(|m| with(RAW, m)).collect();
    dpdk.push(with(0x40, &noise(10, 120)));
    // A stream: the placed frame's first message, then its last fragment, then a plain frame.
    let mut stream = vec![0xC0, placed.len() as u8];
    stream.extend_from_slice(&placed);
    stream.extend_from_slice(&[4, 3, b'4', b'5', b'6', 4, 2, b'a', b'b', 2, 3, b'c']);
    dpdk.push(stream);
    seeds.write("dpdk_message", &dpdk);

    let mut eth = vec![0u8; 14];
    write_header(&mut eth, &[0x02, 0, 0, 0, 0, 2], &[0x02, 0, 0, 0, 0, 1]);
    let frames: Vec<Vec<u8>> = datagrams().iter().map(|d| with(RAW, &[&eth[..], d].concat())).collect();
    seeds.write("dpdk_frame", &frames);

    // The stateful targets read everything through `arbitrary`: any bytes are valid input.
    seeds.write("uring_framing", &[noise(11, 64), noise(12, 300), noise(13, 1200)]);
    seeds.write("reliable_session", &[noise(14, 128), noise(15, 600), noise(16, 2000)]);
    seeds.write("shm_ring", &[noise(17, 64), noise(18, 400), noise(19, 1500)]);
}
