//! `decode_frame`, the envelope and TLV layer under every control message, against this crate's
//! own reading of the documented layout: the library accepts exactly the well-formed frames of the
//! expected kind, hands out exactly their fields, re-encodes them to the same bytes, and
//! `Fields::finish` refuses exactly the frames with a critical field left untaken.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_control::{decode_frame, encode_frame, FrameKind};
use zcx_fuzz::frame::{self, FixUp};

const KINDS: [FrameKind; 4] =
    [FrameKind::Rkey, FrameKind::ExportedMemh, FrameKind::WorkerAddress, FrameKind::Handshake];

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    frame::fix_up(&mut bytes, FixUp::from_bits(control));
    let expected = KINDS[usize::from(control >> 6)];
    // How many of the fields (in wire order) the "decoder" takes before finishing.
    let take = usize::from((control >> 3) & 0x07);

    let model = frame::parse(&bytes).filter(|f| f.kind == expected.as_u8());
    match (decode_frame(&bytes, expected), model) {
        (Err(_), None) => {}
        (Ok(_), None) => panic!("accepted a malformed frame"),
        (Err(err), Some(_)) => panic!("refused a well-formed frame: {err}"),
        (Ok(mut fields), Some(model)) => {
            let reencoded = encode_frame(expected, &model.fields).expect("a decoded frame fits");
            assert_eq!(reencoded, bytes, "the frame codec is not canonical");
            for &(tag, value) in model.fields.iter().take(take) {
                assert_eq!(fields.take(tag), Some(value), "field {tag:#x}");
                assert_eq!(fields.take(tag), None, "field {tag:#x} taken twice");
            }
            let absent = (0..=u8::MAX).find(|t| model.fields.iter().all(|&(f, _)| f != *t));
            if let Some(tag) = absent {
                assert_eq!(fields.take(tag), None, "absent field {tag:#x}");
            }
            let untaken_critical = model
                .fields
                .iter()
                .skip(take)
                .map(|&(tag, _)| tag)
                .filter(|tag| tag & frame::CRITICAL != 0)
                .min();
            match (fields.finish(), untaken_critical) {
                (Ok(()), None) => {}
                (Err(zcx_control::WireError::UnknownCriticalField(t)), Some(expected)) => {
                    assert_eq!(t, expected)
                }
                (got, want) => panic!("finish: {got:?}, expected untaken critical {want:?}"),
            }
        }
    }
});
