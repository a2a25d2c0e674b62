//! The checks every control message target makes, for any of the four message types.

use arbitrary::Unstructured;
use zcx_control::{ExportedMemhWire, FrameKind, HandshakeWire, RkeyWire, WireError, WorkerAddressWire};

use crate::frame::{self, FixUp};

/// A control message with a checked decoder and a validating encoder.
pub trait Message: Sized + PartialEq + std::fmt::Debug {
    /// The frame kind it travels in.
    const KIND: FrameKind;
    /// The library's decoder of peer bytes.
    fn decode(bytes: &[u8]) -> Result<Self, WireError>;
    /// The library's encoder.
    fn try_encode(&self) -> Result<Vec<u8>, WireError>;
    /// The library's validation.
    fn validate(&self) -> Result<(), WireError>;
    /// A value built from fuzzer bytes.
    fn generate(u: &mut Unstructured<'_>) -> arbitrary::Result<Self>;
}

macro_rules! message {
    ($ty:ty, $kind:expr, $gen:path) => {
        impl Message for $ty {
            const KIND: FrameKind = $kind;
            fn decode(bytes: &[u8]) -> Result<Self, WireError> {
                <$ty>::decode(bytes)
            }
            fn try_encode(&self) -> Result<Vec<u8>, WireError> {
                <$ty>::try_encode(self)
            }
            fn validate(&self) -> Result<(), WireError> {
                <$ty>::validate(self)
            }
            fn generate(u: &mut Unstructured<'_>) -> arbitrary::Result<Self> {
                $gen(u)
            }
        }
    };
}

message!(RkeyWire, FrameKind::Rkey, crate::gen::rkey);
message!(ExportedMemhWire, FrameKind::ExportedMemh, crate::gen::exported_memh);
message!(WorkerAddressWire, FrameKind::WorkerAddress, crate::gen::worker_address);
message!(HandshakeWire, FrameKind::Handshake, crate::gen::handshake);

/// Decodes peer bytes and checks what came out:
///
/// - an accepted frame is well formed by the documented layout, and of the right kind;
/// - the value is valid, and encodes to exactly the frame's canonical form (the decoder lost or
///   invented nothing, and the encoder is canonical), which decodes back to the same value.
///
/// Returns the decoded value.
pub fn check_decode<M: Message>(bytes: &[u8]) -> Option<M> {
    let decoded = M::decode(bytes);
    let Ok(value) = decoded else { return None };
    let canonical = frame::canonical(bytes, M::KIND).unwrap_or_else(|| {
        panic!("accepted a frame that is not a well-formed {:?} frame: {value:?}", M::KIND)
    });
    assert_eq!(value.validate(), Ok(()), "decoded an invalid value");
    let encoded = value.try_encode().expect("a decoded value encodes");
    assert_eq!(encoded, canonical, "re-encoding is not the canonical form of the input: {value:?}");
    assert_eq!(M::decode(&encoded).as_ref(), Ok(&value), "the re-encoded frame decodes differently");
    Some(value)
}

/// Builds a value from fuzzer bytes and checks the other direction: whatever encodes decodes
/// back to the same value, in canonical form; whatever is refused is invalid (or too big).
pub fn check_encode<M: Message>(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let value = M::generate(u)?;
    match value.try_encode() {
        Ok(bytes) => {
            assert_eq!(value.validate(), Ok(()), "encoded an invalid value: {value:?}");
            assert!(bytes.len() <= frame::MAX_FRAME_LEN);
            assert_eq!(M::decode(&bytes).as_ref(), Ok(&value), "encode then decode is not the identity");
            assert_eq!(frame::canonical(&bytes, M::KIND).as_ref(), Some(&bytes), "encoding is not canonical");
        }
        Err(err) => match value.validate() {
            Err(invalid) => assert_eq!(invalid, err, "encoding failed for another reason than validation"),
            // A valid value can still be too big for one frame.
            Ok(()) => {
                assert!(matches!(err, WireError::TooLong { .. }), "refused a valid value: {value:?}: {err}")
            }
        },
    }
    Ok(())
}

/// The whole target for one message type: the first byte picks structured generation or peer
/// bytes, and which envelope fix-ups to apply to the latter.
pub fn fuzz<M: Message>(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else { return };
    if control & 0x80 != 0 {
        crate::with_unstructured(rest, |u| check_encode::<M>(u));
        return;
    }
    let mut bytes = rest.to_vec();
    frame::fix_up(&mut bytes, FixUp::from_bits(control));
    check_decode::<M>(&bytes);
}
