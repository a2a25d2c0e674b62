//! The shm locator (`ShmLocator`, inside rkeys and exported handles) on peer bytes: the bytes
//! become the locator field of an otherwise valid exported-handle frame (a one-byte region, so
//! the region always fits a valid locator's mapping), which the library must accept exactly when
//! the locator follows the documented rules, and re-encode to the same locator bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_control::{encode_frame, tag, ExportedMemhWire, FrameKind, ShmLocator};
use zcx_fuzz::frame;

/// The documented rules: 68 bytes, a non-negative descriptor, a 4 KiB / 2 MiB / 1 GiB page, an
/// offset inside the mapping, a mapping a whole number of pages long.
fn model_valid(b: &[u8]) -> bool {
    if b.len() != ShmLocator::WIRE_LEN {
        return false;
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let fd = i32::from_le_bytes(b[28..32].try_into().unwrap());
    let (map_offset, map_len) = (u64_at(48), u64_at(56));
    let page = u64::from(u32::from_le_bytes(b[64..68].try_into().unwrap()));
    fd >= 0 && [4096, 2 << 20, 1 << 30].contains(&page) && map_offset < map_len && map_len % page == 0
}

fuzz_target!(|data: &[u8]| {
    if data.first().is_some_and(|b| b & 0x80 != 0) {
        zcx_fuzz::with_unstructured(&data[1..], |u| {
            let shm = zcx_fuzz::gen::shm_locator(u)?;
            let handle = ExportedMemhWire {
                context_id: [1; 16],
                region_id: 2,
                base: 0x1000,
                length: 1,
                prot: 0,
                mem_type: 0,
                access_key: [3; 16],
                shm,
            };
            match handle.try_encode() {
                Ok(bytes) => {
                    assert_eq!(shm.validate(), Ok(()));
                    assert_eq!(ExportedMemhWire::decode(&bytes).map(|h| h.shm), Ok(shm));
                }
                Err(err) => assert_eq!(shm.validate(), Err(err)),
            }
            Ok(())
        });
        return;
    }
    let locator = data.get(1..).unwrap_or_default();
    let fields: [(u8, &[u8]); 8] = [
        (tag::CONTEXT_ID, &[1; 16]),
        (tag::REGION_ID, &2u64.to_le_bytes()),
        (tag::BASE, &0x1000u64.to_le_bytes()),
        (tag::LENGTH, &1u64.to_le_bytes()),
        (tag::PROT, &0u32.to_le_bytes()),
        (tag::MEM_TYPE, &[0]),
        (tag::ACCESS_KEY, &[3; 16]),
        (tag::SHM_LOCATOR, locator),
    ];
    let Ok(bytes) = encode_frame(FrameKind::ExportedMemh, &fields) else { return };
    let decoded = zcx_fuzz::control::check_decode::<ExportedMemhWire>(&bytes);
    assert_eq!(decoded.is_some(), model_valid(locator), "acceptance differs from the documented rules");
    if let Some(handle) = decoded {
        assert_eq!(handle.shm.validate(), Ok(()));
        let field = frame::field(&handle.encode(), tag::SHM_LOCATOR).expect("the locator field");
        assert_eq!(field, locator, "the locator does not re-encode to the same bytes");
    }
});
