//! The transport address list of a worker address (`TransportAddress`, one per transport) on
//! peer bytes: the bytes become the list field of an otherwise valid worker-address frame (with a
//! boot id, so shm may be offered); an accepted list has 1 to 8 valid addresses of distinct
//! kinds and re-encodes to the same bytes. Structured lists round-trip through encode and decode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_control::{encode_frame, tag, FrameKind, WorkerAddressWire, MAX_TRANSPORT_ADDRESSES};
use zcx_fuzz::frame;

fuzz_target!(|data: &[u8]| {
    if data.first().is_some_and(|b| b & 0x80 != 0) {
        zcx_fuzz::with_unstructured(&data[1..], |u| {
            let count = u.int_in_range(0..=9)?;
            let mut transports = Vec::new();
            for _ in 0..count {
                transports.push(zcx_fuzz::gen::transport_address(u)?);
            }
            let address = WorkerAddressWire {
                worker_uid: [7; 16],
                name: "w".into(),
                boot_id: Some([9; 16]),
                transports,
            };
            match address.try_encode() {
                Ok(bytes) => {
                    for t in &address.transports {
                        assert_eq!(t.validate(), Ok(()));
                    }
                    assert_eq!(WorkerAddressWire::decode(&bytes).as_ref(), Ok(&address));
                }
                Err(err) => assert_eq!(address.validate(), Err(err)),
            }
            Ok(())
        });
        return;
    }
    let list = data.get(1..).unwrap_or_default();
    let fields: [(u8, &[u8]); 4] = [
        (tag::WORKER_UID, &[7; 16]),
        (tag::WORKER_NAME, b"w"),
        (tag::BOOT_ID, &[9; 16]),
        (tag::TRANSPORT_ADDRESSES, list),
    ];
    let Ok(bytes) = encode_frame(FrameKind::WorkerAddress, &fields) else { return };
    let Some(address) = zcx_fuzz::control::check_decode::<WorkerAddressWire>(&bytes) else { return };
    let transports = &address.transports;
    assert!((1..=MAX_TRANSPORT_ADDRESSES).contains(&transports.len()));
    for (i, t) in transports.iter().enumerate() {
        assert_eq!(t.validate(), Ok(()));
        assert!(transports[..i].iter().all(|o| o.kind() != t.kind()), "a transport kind twice");
    }
    let field = frame::field(&address.encode(), tag::TRANSPORT_ADDRESSES).expect("the list field");
    assert_eq!(field, list, "the list does not re-encode to the same bytes");
});
