//! Property tests for the wire formats: decoders never panic on hostile input, valid messages
//! round-trip exactly, and any single corruption of a valid frame is rejected.
//!
//! Case counts add up to 192,000 per run, sized so the file stays under 20 seconds in a debug
//! build on two cores even while other builds share the machine.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngAlgorithm;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use zcx_control::{
    decode_frame, frame, tag, DomainKey, ExportedMemhWire, FrameKind, HandshakeWire, RkeyWire, ShmLocator,
    TransportAddress, WorkerAddressWire, MAX_DOMAIN_KEYS, MAX_DOMAIN_KEY_LEN, MAX_SHM_SOCKET_NAME_LEN,
    MAX_TRANSPORT_ADDRESSES, MAX_TRANSPORT_ADDRESS_LEN, MEM_TYPE_MAX, PAGE_SIZE_1G, PAGE_SIZE_2M,
    PAGE_SIZE_4K, PROT_ALL, REJECT_STATUS_MAX, REJECT_STATUS_MIN, TRANSPORT_VERBS, VERBS_MTUS,
    VERBS_QPN_LIMIT,
};

/// `cases` cases, drawn with XorShift: in debug builds the default ChaCha generator takes most
/// of the run time, and statistical quality beyond XorShift's buys nothing here.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, rng_algorithm: RngAlgorithm::XorShift, ..ProptestConfig::default() }
}

// ---------------------------------------------------------------------------------------------
// Strategies for valid messages.

fn arb_locator() -> impl Strategy<Value = ShmLocator> {
    let page_size = prop_oneof![Just(PAGE_SIZE_4K), Just(PAGE_SIZE_2M), Just(PAGE_SIZE_1G)];
    (page_size, 1u64..=1024).prop_flat_map(|(page_size, pages)| {
        let map_len = page_size * pages;
        (any::<[u8; 16]>(), any::<u32>(), any::<u64>(), 0..=i32::MAX, any::<u64>(), any::<u64>(), 0..map_len)
            .prop_map(move |(boot_id, pid, pid_start_time, fd, inode, dev, map_offset)| ShmLocator {
                boot_id,
                pid,
                pid_start_time,
                fd,
                inode,
                dev,
                map_offset,
                map_len,
                page_size,
            })
    })
}

/// A `(base, length)` pair that fits the address space and, with a locator, the mapping.
fn arb_range(shm: Option<ShmLocator>) -> BoxedStrategy<(u64, u64)> {
    let length = match shm {
        Some(shm) => (1..=shm.map_len - shm.map_offset).boxed(),
        None => prop_oneof![Just(0u64), any::<u64>(), 0u64..1 << 40].boxed(),
    };
    length.prop_flat_map(|length| ((0..=u64::MAX - length), Just(length))).boxed()
}

fn arb_domain_keys() -> impl Strategy<Value = Vec<DomainKey>> {
    // Mostly short keys, like real ones (an io_uring buffer index, a verbs rkey), and enough
    // long ones to reach the length cap; long ones also cost the most to generate.
    let key_bytes = prop_oneof![
        7 => prop::collection::vec(any::<u8>(), 0..=16),
        1 => prop::collection::vec(any::<u8>(), 0..=MAX_DOMAIN_KEY_LEN),
    ];
    let key = (any::<u8>(), key_bytes).prop_map(|(domain, key)| DomainKey { domain, key });
    prop::collection::vec(key, 0..=MAX_DOMAIN_KEYS)
}

/// The fields of a region description: context id, region id, prot, mem type, access key.
fn arb_region_identity() -> impl Strategy<Value = ([u8; 16], u64, u32, u8, [u8; 16])> {
    (
        any::<[u8; 16]>(),
        any::<u64>(),
        any::<u32>().prop_map(|p| p & PROT_ALL),
        0..=MEM_TYPE_MAX,
        any::<[u8; 16]>(),
    )
}

fn arb_rkey() -> impl Strategy<Value = RkeyWire> {
    prop::option::of(arb_locator())
        .prop_flat_map(|shm| (Just(shm), arb_range(shm)))
        .prop_flat_map(|(shm, range)| {
            (Just(shm), Just(range), arb_region_identity(), any::<bool>(), arb_domain_keys())
        })
        .prop_map(
            |(shm, (base, length), (context_id, region_id, prot, mem_type, access_key), symmetric, keys)| {
                RkeyWire {
                    context_id,
                    region_id,
                    base,
                    length,
                    prot,
                    mem_type,
                    access_key,
                    symmetric,
                    shm,
                    domain_keys: keys,
                }
            },
        )
}

fn arb_exported_memh() -> impl Strategy<Value = ExportedMemhWire> {
    arb_locator().prop_flat_map(|shm| (Just(shm), arb_range(Some(shm)), arb_region_identity())).prop_map(
        |(shm, (base, length), (context_id, region_id, prot, mem_type, access_key))| ExportedMemhWire {
            context_id,
            region_id,
            base,
            length,
            prot,
            mem_type,
            access_key,
            shm,
        },
    )
}

/// A connectable uring address: IPv4, or IPv6 with arbitrary flow info and scope id.
fn arb_uring() -> impl Strategy<Value = TransportAddress> {
    let v4 = (any::<[u8; 4]>(), 1..=u16::MAX).prop_map(|(ip, port)| {
        let ip = Ipv4Addr::from(ip);
        // The unspecified address is not connectable; one value in 2^32 is not worth a filter.
        let ip = if ip.is_unspecified() { Ipv4Addr::LOCALHOST } else { ip };
        SocketAddr::from((ip, port))
    });
    let v6 = (any::<[u8; 16]>(), 1..=u16::MAX, any::<u32>(), any::<u32>()).prop_map(
        |(ip, port, flowinfo, scope_id)| {
            let ip = Ipv6Addr::from(ip);
            let ip = if ip.is_unspecified() { Ipv6Addr::LOCALHOST } else { ip };
            SocketAddr::V6(SocketAddrV6::new(ip, port, flowinfo, scope_id))
        },
    );
    prop_oneof![v4, v6].prop_map(|addr| TransportAddress::Uring { addr })
}

/// One valid transport address of any kind, unknown kinds included.
fn arb_transport_address() -> impl Strategy<Value = TransportAddress> {
    let shm = prop::collection::vec(any::<u8>(), 1..=MAX_SHM_SOCKET_NAME_LEN)
        .prop_map(|socket_name| TransportAddress::Shm { socket_name });
    let dpdk = (any::<[u8; 6]>(), 1..=u16::MAX).prop_map(|(mut mac, udp_port)| {
        // Clear the group bit and avoid the all-zero address to make any MAC unicast.
        mac[0] &= !1;
        mac[5] |= u8::from(mac == [0; 6]);
        TransportAddress::Dpdk { mac, udp_port }
    });
    let verbs =
        (
            any::<[u8; 16]>(),
            (0..VERBS_QPN_LIMIT, 0..VERBS_QPN_LIMIT),
            any::<u16>(),
            prop::sample::select(&VERBS_MTUS[..]),
            (any::<u64>(), any::<u32>()),
        )
            .prop_map(|(gid, (qpn, psn), lid, mtu, (credit_addr, credit_rkey))| {
                TransportAddress::Verbs { gid, qpn, psn, lid, mtu, credit_addr, credit_rkey }
            });
    let unknown_body = prop_oneof![
        7 => prop::collection::vec(any::<u8>(), 0..=16),
        1 => prop::collection::vec(any::<u8>(), 0..=MAX_TRANSPORT_ADDRESS_LEN),
    ];
    let unknown_kind = prop_oneof![Just(0u8), TRANSPORT_VERBS + 1..=u8::MAX];
    let unknown =
        (unknown_kind, unknown_body).prop_map(|(kind, bytes)| TransportAddress::Unknown { kind, bytes });
    prop_oneof![arb_uring(), shm, dpdk, verbs, unknown]
}

/// A name of up to 16 characters (at most 64 bytes of UTF-8) without NUL.
fn arb_name() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=16)
        .prop_map(|chars| chars.into_iter().map(|c| if c == '\0' { '0' } else { c }).collect())
}

fn arb_worker_address() -> impl Strategy<Value = WorkerAddressWire> {
    let transports = prop::collection::vec(arb_transport_address(), 1..=MAX_TRANSPORT_ADDRESSES);
    (any::<[u8; 16]>(), arb_name(), prop::option::of(any::<[u8; 16]>()), any::<[u8; 16]>(), transports)
        .prop_map(|(worker_uid, name, boot_id, fallback_boot_id, mut transports)| {
            // Keep the first address of each kind, since a kind may appear only once.
            let mut seen = [false; 256];
            transports.retain(|t| !std::mem::replace(&mut seen[usize::from(t.kind())], true));
            // Shm is only usable with a boot id.
            let offers_shm = transports.iter().any(|t| matches!(t, TransportAddress::Shm { .. }));
            let boot_id = if offers_shm { boot_id.or(Some(fallback_boot_id)) } else { boot_id };
            WorkerAddressWire { worker_uid, name, boot_id, transports }
        })
}

fn arb_handshake() -> impl Strategy<Value = HandshakeWire> {
    let request = (any::<u64>(), arb_name(), any::<bool>(), arb_worker_address(), any::<u64>(), any::<u64>())
        .prop_map(|(client_id, ep_name, err_mode_peer, client_address, client_ep_id, pair_token)| {
            HandshakeWire::ConnRequest {
                client_id,
                ep_name,
                err_mode_peer,
                client_address,
                client_ep_id,
                pair_token,
            }
        });
    let accept = (arb_worker_address(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        |(server_address, server_ep_id, client_ep_id, pair_token)| HandshakeWire::Accept {
            server_address,
            server_ep_id,
            client_ep_id,
            pair_token,
        },
    );
    let proof = any::<u64>().prop_map(|client_ep_id| HandshakeWire::PairProof { client_ep_id });
    let reject = (REJECT_STATUS_MIN..=REJECT_STATUS_MAX, any::<u64>())
        .prop_map(|(reason_status, client_ep_id)| HandshakeWire::Reject { reason_status, client_ep_id });
    prop_oneof![2 => request, 2 => accept, 1 => reject, 1 => proof]
}

// ---------------------------------------------------------------------------------------------
// Hostile input helpers.

/// A frame with the given header fields around `body` and a correct checksum.
fn frame_around(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = frame::MAGIC.to_vec();
    bytes.push(frame::VERSION);
    bytes.push(kind);
    bytes.extend_from_slice(&u16::try_from(body.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(body);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Runs every decoder on `bytes`. None may panic; whatever decodes must re-encode to a value that
/// decodes to itself.
fn decode_everything(bytes: &[u8]) {
    for kind in [FrameKind::Rkey, FrameKind::ExportedMemh, FrameKind::WorkerAddress, FrameKind::Handshake] {
        if let Ok(mut fields) = decode_frame(bytes, kind) {
            for tag in 0..=u8::MAX {
                let _ = fields.take(tag);
            }
            assert_eq!(fields.finish(), Ok(()));
        }
    }
    if let Ok(rkey) = RkeyWire::decode(bytes) {
        assert_eq!(RkeyWire::decode(&rkey.encode()), Ok(rkey));
    }
    if let Ok(memh) = ExportedMemhWire::decode(bytes) {
        assert_eq!(ExportedMemhWire::decode(&memh.encode()), Ok(memh));
    }
    if let Ok(address) = WorkerAddressWire::decode(bytes) {
        assert_eq!(WorkerAddressWire::decode(&address.encode()), Ok(address));
    }
    if let Ok(step) = HandshakeWire::decode(bytes) {
        assert_eq!(HandshakeWire::decode(&step.encode()), Ok(step));
    }
}

/// One corruption of a byte string.
///
/// Every single change to the header is caught by an explicit check (magic, version, kind, body
/// length against the input length) and every bit flip or byte overwrite after it by the CRC,
/// which detects all bursts up to 32 bits. An insertion or deletion that happens to leave a
/// consistent body length is caught by the CRC with probability 1 - 2^-32, which is as good as
/// certain at these case counts.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(Index, u8),
    Overwrite(Index, u8),
    Truncate(Index),
    Append(Vec<u8>),
    Insert(Index, u8),
    Delete(Index),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        (any::<Index>(), 1u8..=u8::MAX).prop_map(|(at, delta)| Mutation::Overwrite(at, delta)),
        any::<Index>().prop_map(Mutation::Truncate),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Append),
        (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        any::<Index>().prop_map(Mutation::Delete),
    ]
}

impl Mutation {
    /// `bytes` (non-empty) with this corruption applied; the result always differs from `bytes`.
    fn apply(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        match self {
            Mutation::FlipBit(at, bit) => out[at.index(bytes.len())] ^= 1 << bit,
            // XOR with a non-zero delta so the byte really changes.
            Mutation::Overwrite(at, delta) => out[at.index(bytes.len())] ^= delta,
            Mutation::Truncate(at) => out.truncate(at.index(bytes.len())),
            Mutation::Append(extra) => out.extend_from_slice(extra),
            Mutation::Insert(at, byte) => out.insert(at.index(bytes.len() + 1), *byte),
            Mutation::Delete(at) => {
                out.remove(at.index(bytes.len()));
            }
        }
        out
    }
}

/// The `(tag, value)` fields of a valid frame, in wire order.
fn fields_of(bytes: &[u8], kind: FrameKind) -> Vec<(u8, Vec<u8>)> {
    let mut fields = decode_frame(bytes, kind).unwrap();
    let mut out = Vec::new();
    let mut body = &bytes[frame::HEADER_LEN..bytes.len() - frame::CRC_LEN];
    while let [tag, lo, hi, rest @ ..] = body {
        let len = usize::from(u16::from_le_bytes([*lo, *hi]));
        out.push((*tag, fields.take(*tag).unwrap().to_vec()));
        body = &rest[len..];
    }
    fields.finish().unwrap();
    out
}

/// A field-level corruption that keeps the envelope valid: replace one field's value with random
/// bytes (same length or any length), drop a field, or add a field.
#[derive(Debug, Clone)]
enum FieldEdit {
    Replace(Index, Vec<u8>),
    ReplaceKeepingLength(Index, Vec<u8>),
    Drop(Index),
    Add(u8, Vec<u8>),
}

fn arb_field_edit() -> impl Strategy<Value = FieldEdit> {
    let value = || prop::collection::vec(any::<u8>(), 0..100);
    let known = [
        tag::CONTEXT_ID,
        tag::REGION_ID,
        tag::BASE,
        tag::LENGTH,
        tag::PROT,
        tag::MEM_TYPE,
        tag::ACCESS_KEY,
        tag::SHM_LOCATOR,
        tag::SYMMETRIC,
        tag::DOMAIN_KEYS,
        tag::WORKER_UID,
        tag::WORKER_NAME,
        tag::BOOT_ID,
        tag::TRANSPORT_ADDRESSES,
        tag::HANDSHAKE_STEP,
        tag::CLIENT_ID,
        tag::EP_NAME,
        tag::ERR_MODE_PEER,
        tag::WORKER_ADDRESS,
        tag::CLIENT_EP_ID,
        tag::SERVER_EP_ID,
        tag::REJECT_STATUS,
    ];
    let tag = prop_oneof![prop::sample::select(known.to_vec()), any::<u8>()];
    prop_oneof![
        1 => (any::<Index>(), value()).prop_map(|(at, v)| FieldEdit::Replace(at, v)),
        3 => (any::<Index>(), value()).prop_map(|(at, v)| FieldEdit::ReplaceKeepingLength(at, v)),
        1 => any::<Index>().prop_map(FieldEdit::Drop),
        1 => (tag, value()).prop_map(|(tag, v)| FieldEdit::Add(tag, v)),
    ]
}

impl FieldEdit {
    /// Re-frames `fields` of `kind` with this edit applied. `Add` may repeat a tag; the frame is
    /// then written by hand, since `FrameWriter` refuses duplicates.
    fn apply(&self, kind: FrameKind, mut fields: Vec<(u8, Vec<u8>)>) -> Vec<u8> {
        let count = fields.len();
        match self {
            FieldEdit::Replace(at, value) => fields[at.index(count)].1 = value.clone(),
            FieldEdit::ReplaceKeepingLength(at, value) => {
                let field = &mut fields[at.index(count)].1;
                for (old, new) in field.iter_mut().zip(value.iter().cycle()) {
                    *old = *new;
                }
            }
            FieldEdit::Drop(at) => {
                fields.remove(at.index(fields.len()));
            }
            FieldEdit::Add(tag, value) => fields.push((*tag, value.clone())),
        }
        let mut body = Vec::new();
        for (tag, value) in &fields {
            body.push(*tag);
            body.extend_from_slice(&u16::try_from(value.len()).unwrap().to_le_bytes());
            body.extend_from_slice(value);
        }
        frame_around(kind.as_u8(), &body)
    }
}

// ---------------------------------------------------------------------------------------------
// Properties.
//
// One `proptest!` block per property so each has its own case count; they add up to 192,000.

proptest! {
    #![proptest_config(config(20_000))]
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        decode_everything(&bytes);
    }
}

proptest! {
    #![proptest_config(config(20_000))]
    /// Arbitrary bytes behind a valid magic and version, so decoding gets past the first checks.
    #[test]
    fn arbitrary_bytes_after_a_valid_header_never_panic(
        kind in 0u8..4,
        tail in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = frame::MAGIC.to_vec();
        bytes.push(frame::VERSION);
        bytes.push(kind);
        bytes.extend_from_slice(&tail);
        decode_everything(&bytes);
    }
}

proptest! {
    #![proptest_config(config(25_000))]
    /// A correct envelope around random bytes reaches the TLV parser and the field checks.
    #[test]
    fn crc_valid_garbage_body_never_panics(
        kind in prop_oneof![Just(1u8), Just(2u8)],
        body in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        decode_everything(&frame_around(kind, &body));
    }
}

proptest! {
    #![proptest_config(config(15_000))]
    #[test]
    fn rkey_round_trips(key in arb_rkey()) {
        let bytes = key.encode();
        prop_assert!(bytes.len() <= zcx_control::MAX_FRAME_LEN);
        prop_assert_eq!(RkeyWire::decode(&bytes), Ok(key));
    }
}

proptest! {
    #![proptest_config(config(10_000))]
    #[test]
    fn exported_memh_round_trips(memh in arb_exported_memh()) {
        prop_assert_eq!(ExportedMemhWire::decode(&memh.encode()), Ok(memh));
    }
}

/// One mutation of a valid encoding: the bytes change, and both the typed decoder and the frame
/// decoder refuse them.
fn assert_mutation_rejected(
    original: &[u8],
    mutation: &Mutation,
    kind: FrameKind,
    typed_decode_fails: impl Fn(&[u8]) -> bool,
) -> Result<(), TestCaseError> {
    let mutated = mutation.apply(original);
    prop_assert_ne!(&mutated[..], original);
    prop_assert!(typed_decode_fails(&mutated));
    prop_assert!(decode_frame(&mutated, kind).is_err());
    Ok(())
}

proptest! {
    #![proptest_config(config(25_000))]
    #[test]
    fn mutated_rkey_is_rejected(key in arb_rkey(), mutation in arb_mutation()) {
        assert_mutation_rejected(&key.encode(), &mutation, FrameKind::Rkey, |b| RkeyWire::decode(b).is_err())?;
    }
}

proptest! {
    #![proptest_config(config(15_000))]
    #[test]
    fn mutated_exported_memh_is_rejected(memh in arb_exported_memh(), mutation in arb_mutation()) {
        assert_mutation_rejected(&memh.encode(), &mutation, FrameKind::ExportedMemh, |b| ExportedMemhWire::decode(b).is_err())?;
    }
}

proptest! {
    #![proptest_config(config(20_000))]
    /// Field-level garbage inside a correct envelope reaches the value checks. Nothing panics, and
    /// since the fields stay in canonical order, whatever decodes re-encodes to exactly the same
    /// bytes, unless the edit added a (non-critical, hence skipped) field.
    #[test]
    fn edited_rkey_fields_are_checked(key in arb_rkey(), edit in arb_field_edit()) {
        let bytes = edit.apply(FrameKind::Rkey, fields_of(&key.encode(), FrameKind::Rkey));
        decode_everything(&bytes);
        if let (Ok(decoded), false) = (RkeyWire::decode(&bytes), matches!(edit, FieldEdit::Add(..))) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
    }
}

proptest! {
    #![proptest_config(config(10_000))]
    /// As `edited_rkey_fields_are_checked`, for exported handles.
    #[test]
    fn edited_exported_memh_fields_are_checked(memh in arb_exported_memh(), edit in arb_field_edit()) {
        let bytes = edit.apply(FrameKind::ExportedMemh, fields_of(&memh.encode(), FrameKind::ExportedMemh));
        decode_everything(&bytes);
        if let (Ok(decoded), false) = (ExportedMemhWire::decode(&bytes), matches!(edit, FieldEdit::Add(..))) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Worker addresses and handshakes.

proptest! {
    #![proptest_config(config(4_000))]
    /// A correct envelope of the new kinds around random bytes.
    #[test]
    fn crc_valid_garbage_worker_address_or_handshake_never_panics(
        kind in prop_oneof![Just(FrameKind::WorkerAddress), Just(FrameKind::Handshake)],
        body in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        decode_everything(&frame_around(kind.as_u8(), &body));
    }
}

proptest! {
    #![proptest_config(config(5_000))]
    /// A transport list built from plausible pieces (a small count, kinds around the known ones,
    /// lengths near the fixed body sizes) reaches every per-transport check.
    #[test]
    fn garbage_transport_list_never_panics(
        count in 0u8..=10,
        entries in prop::collection::vec(
            (0u8..=6, 0usize..=40, prop::collection::vec(any::<u8>(), 0..=40)),
            0..=10,
        ),
        tail in prop::collection::vec(any::<u8>(), 0..=2),
    ) {
        let mut list = vec![count];
        for (kind, len, body) in &entries {
            list.push(*kind);
            list.extend_from_slice(&u16::try_from(*len).unwrap().to_le_bytes());
            list.extend(body.iter().copied().cycle().take(*len));
        }
        list.extend_from_slice(&tail);
        let address = [
            (tag::WORKER_UID, &[7u8; 16][..]),
            (tag::WORKER_NAME, b"w"),
            (tag::BOOT_ID, &[1u8; 16]),
            (tag::TRANSPORT_ADDRESSES, &list),
        ];
        let bytes = zcx_control::encode_frame(FrameKind::WorkerAddress, &address).unwrap();
        decode_everything(&bytes);
    }
}

proptest! {
    #![proptest_config(config(5_000))]
    #[test]
    fn worker_address_round_trips(address in arb_worker_address()) {
        let bytes = address.encode();
        prop_assert!(bytes.len() <= zcx_control::MAX_FRAME_LEN);
        prop_assert_eq!(WorkerAddressWire::decode(&bytes), Ok(address));
    }
}

proptest! {
    #![proptest_config(config(5_000))]
    #[test]
    fn handshake_round_trips(step in arb_handshake()) {
        let bytes = step.encode();
        prop_assert!(bytes.len() <= zcx_control::MAX_FRAME_LEN);
        prop_assert_eq!(HandshakeWire::decode(&bytes), Ok(step));
    }
}

proptest! {
    #![proptest_config(config(5_000))]
    #[test]
    fn mutated_worker_address_is_rejected(address in arb_worker_address(), mutation in arb_mutation()) {
        assert_mutation_rejected(&address.encode(), &mutation, FrameKind::WorkerAddress, |b| WorkerAddressWire::decode(b).is_err())?;
    }
}

proptest! {
    #![proptest_config(config(5_000))]
    #[test]
    fn mutated_handshake_is_rejected(step in arb_handshake(), mutation in arb_mutation()) {
        assert_mutation_rejected(&step.encode(), &mutation, FrameKind::Handshake, |b| HandshakeWire::decode(b).is_err())?;
    }
}

proptest! {
    #![proptest_config(config(3_000))]
    /// As `edited_rkey_fields_are_checked`, for worker addresses and handshakes: whatever decodes
    /// re-encodes to the same bytes, so each value has one encoding.
    #[test]
    fn edited_worker_address_and_handshake_fields_are_checked(
        address in arb_worker_address(),
        step in arb_handshake(),
        edit in arb_field_edit(),
    ) {
        let is_add = matches!(edit, FieldEdit::Add(..));
        let kind = FrameKind::WorkerAddress;
        let bytes = edit.apply(kind, fields_of(&address.encode(), kind));
        decode_everything(&bytes);
        if let (Ok(decoded), false) = (WorkerAddressWire::decode(&bytes), is_add) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
        let kind = FrameKind::Handshake;
        let bytes = edit.apply(kind, fields_of(&step.encode(), kind));
        decode_everything(&bytes);
        if let (Ok(decoded), false) = (HandshakeWire::decode(&bytes), is_add) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
    }
}
