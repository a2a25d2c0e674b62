//! The worker address: what `ucp_worker_query` returns for `UCP_WORKER_ATTR_FIELD_ADDRESS` (a
//! `ucp_address_t`), and what `ucp_ep_create` with `UCP_EP_PARAM_FIELD_REMOTE_ADDRESS` reads.

use crate::error::WireError;
use crate::frame::{decode_frame, FrameKind, FrameWriter};
use crate::name::{decode_name, validate_name};
use crate::tag;
use crate::transport_address::{decode_addresses, encode_addresses, validate_addresses, TransportAddress};

/// A worker address: who the worker is and how to reach it over each transport it offers.
///
/// Encoded as a [`FrameKind::WorkerAddress`] frame whose fields are all critical; the transports
/// are one counted list, in the worker's order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddressWire {
    /// Identifies the worker (random per worker), so a peer can tell two workers apart even when
    /// they share a host and a name.
    pub worker_uid: [u8; 16],
    /// The worker's name (`UCP_WORKER_PARAM_FIELD_NAME`): UTF-8, at most
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, no NUL.
    pub name: String,
    /// The host's boot id (see [`local_boot_id`](crate::local_boot_id)), so a peer can tell
    /// whether it runs on the same host. Required when a [`TransportAddress::Shm`] is offered,
    /// which only a same-host peer can use; allowed without one, since a transport this build
    /// does not know may be same-host too.
    pub boot_id: Option<[u8; 16]>,
    /// 1 to [`MAX_TRANSPORT_ADDRESSES`](crate::MAX_TRANSPORT_ADDRESSES) transports, no kind twice.
    pub transports: Vec<TransportAddress>,
}

impl WorkerAddressWire {
    /// The frame for this address.
    ///
    /// # Panics
    ///
    /// If the address breaks a rule of [`WorkerAddressWire::validate`]; use
    /// [`WorkerAddressWire::try_encode`] to get the error instead.
    pub fn encode(&self) -> Vec<u8> {
        match self.try_encode() {
            Ok(bytes) => bytes,
            Err(error) => panic!("WorkerAddressWire::encode: invalid worker address: {error}"),
        }
    }

    /// The frame for this address, or why it cannot be sent.
    pub fn try_encode(&self) -> Result<Vec<u8>, WireError> {
        self.validate()?;
        self.encode_unchecked()
    }

    /// The frame for this address without validating it, for a handshake that carries it (and
    /// has validated it, except in tests of invalid addresses); fails only on size.
    pub(crate) fn encode_unchecked(&self) -> Result<Vec<u8>, WireError> {
        let mut frame = FrameWriter::new(FrameKind::WorkerAddress);
        self.write_fields(&mut frame);
        frame.finish()
    }

    /// Appends every field, in tag order, without validating anything.
    fn write_fields(&self, frame: &mut FrameWriter) {
        frame.field(tag::WORKER_UID, &self.worker_uid);
        frame.field(tag::WORKER_NAME, self.name.as_bytes());
        if let Some(boot_id) = &self.boot_id {
            frame.field(tag::BOOT_ID, boot_id);
        }
        frame.field(tag::TRANSPORT_ADDRESSES, &encode_addresses(&self.transports));
    }

    /// Checks and decodes a worker address received from a peer.
    pub fn decode(bytes: &[u8]) -> Result<WorkerAddressWire, WireError> {
        let mut fields = decode_frame(bytes, FrameKind::WorkerAddress)?;
        let worker_uid = fields.require_array(tag::WORKER_UID, "worker_uid")?;
        let name = decode_name(fields.require(tag::WORKER_NAME, "name")?)?;
        let boot_id = fields.take_array(tag::BOOT_ID)?;
        let transports = decode_addresses(fields.require(tag::TRANSPORT_ADDRESSES, "transports")?)?;
        fields.finish()?;
        let wire = WorkerAddressWire { worker_uid, name, boot_id, transports };
        wire.validate()?;
        Ok(wire)
    }

    /// Checks every rule a decoded address must satisfy: the name, the transport list (count,
    /// distinct kinds, each address valid), and a boot id whenever shm is offered.
    pub fn validate(&self) -> Result<(), WireError> {
        validate_name(&self.name)?;
        validate_addresses(&self.transports)?;
        let offers_shm = self.transports.iter().any(|t| matches!(t, TransportAddress::Shm { .. }));
        if offers_shm && self.boot_id.is_none() {
            return Err(WireError::Invalid("shm transport offered without a boot id"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::MAX_FRAME_LEN;
    use crate::name::MAX_NAME_LEN;
    use crate::samples::{largest_worker_address, sample_rkey, sample_worker_address};
    use crate::transport_address::MAX_TRANSPORT_ADDRESSES;

    /// The frame of `address`, unvalidated, with `extra` fields appended.
    fn frame_with(address: &WorkerAddressWire, extra: &[(u8, &[u8])]) -> Vec<u8> {
        let mut frame = FrameWriter::new(FrameKind::WorkerAddress);
        address.write_fields(&mut frame);
        for &(tag, value) in extra {
            frame.field(tag, value);
        }
        frame.finish().unwrap()
    }

    /// The frame of the sample address with field `field` replaced by `replacement`, or removed
    /// if that is `None`; bypasses validation.
    fn sample_frame_replacing(field: u8, replacement: Option<&[u8]>) -> Vec<u8> {
        let original = sample_worker_address().encode();
        let mut fields = decode_frame(&original, FrameKind::WorkerAddress).unwrap();
        let mut frame = FrameWriter::new(FrameKind::WorkerAddress);
        for tag in 0..=u8::MAX {
            let value = if tag == field { fields.take(tag).and(replacement) } else { fields.take(tag) };
            if let Some(value) = value {
                frame.field(tag, value);
            }
        }
        frame.finish().unwrap()
    }

    /// Checks that `address` is refused by `validate`, `try_encode` and `decode` alike.
    fn rejected(address: &WorkerAddressWire) -> WireError {
        let error = address.validate().unwrap_err();
        assert_eq!(address.try_encode(), Err(error.clone()));
        assert_eq!(WorkerAddressWire::decode(&frame_with(address, &[])), Err(error.clone()));
        error
    }

    #[test]
    fn sample_round_trips() {
        let address = sample_worker_address();
        assert_eq!(address.transports.len(), 4);
        assert_eq!(WorkerAddressWire::decode(&address.encode()), Ok(address));
    }

    #[test]
    fn round_trips_without_boot_id_or_name() {
        let address = WorkerAddressWire {
            name: String::new(),
            boot_id: None,
            transports: vec![TransportAddress::Uring { addr: "[2001:db8::5]:80".parse().unwrap() }],
            ..sample_worker_address()
        };
        assert_eq!(WorkerAddressWire::decode(&address.encode()), Ok(address));
    }

    #[test]
    fn keeps_unknown_transports() {
        let mut address = sample_worker_address();
        address.transports.insert(0, TransportAddress::Unknown { kind: 0x42, bytes: b"future".to_vec() });
        assert_eq!(WorkerAddressWire::decode(&address.encode()), Ok(address));
    }

    #[test]
    fn largest_address_fits_a_frame() {
        let address = largest_worker_address();
        let bytes = address.encode();
        assert!(bytes.len() <= MAX_FRAME_LEN);
        assert_eq!(WorkerAddressWire::decode(&bytes), Ok(address));
    }

    #[test]
    fn rejects_long_name() {
        let address = WorkerAddressWire { name: "x".repeat(MAX_NAME_LEN + 1), ..sample_worker_address() };
        assert_eq!(rejected(&address), WireError::TooLong { len: MAX_NAME_LEN + 1, max: MAX_NAME_LEN });
    }

    #[test]
    fn rejects_name_with_nul() {
        let address = WorkerAddressWire { name: "a\0b".into(), ..sample_worker_address() };
        assert!(matches!(rejected(&address), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_bad_utf8_name() {
        let bytes = sample_frame_replacing(tag::WORKER_NAME, Some(b"caf\xC3"));
        assert!(matches!(WorkerAddressWire::decode(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_zero_transports() {
        let address = WorkerAddressWire { transports: Vec::new(), ..sample_worker_address() };
        assert!(matches!(rejected(&address), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_too_many_transports() {
        let transports =
            (10..19).map(|kind| TransportAddress::Unknown { kind, bytes: Vec::new() }).collect::<Vec<_>>();
        let address = WorkerAddressWire { transports, ..sample_worker_address() };
        assert_eq!(rejected(&address), WireError::TooLong { len: 9, max: MAX_TRANSPORT_ADDRESSES });
    }

    #[test]
    fn rejects_duplicate_transport_kinds() {
        let mut address = sample_worker_address();
        address.transports.push(TransportAddress::Dpdk { mac: [2, 1, 1, 1, 1, 1], udp_port: 9 });
        assert!(matches!(rejected(&address), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_invalid_transport() {
        let mut address = sample_worker_address();
        for transport in &mut address.transports {
            if let TransportAddress::Verbs { mtu, .. } = transport {
                *mtu = 1500;
            }
        }
        assert!(matches!(rejected(&address), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_shm_without_boot_id() {
        let address = WorkerAddressWire { boot_id: None, ..sample_worker_address() };
        assert!(matches!(rejected(&address), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_wrong_fixed_field_lengths() {
        for (field, len) in [(tag::WORKER_UID, 16), (tag::BOOT_ID, 16)] {
            for wrong in [0, len - 1, len + 1] {
                let bytes = sample_frame_replacing(field, Some(&vec![0; wrong]));
                assert_eq!(
                    WorkerAddressWire::decode(&bytes),
                    Err(WireError::BadFieldLength { field, len: wrong })
                );
            }
        }
    }

    #[test]
    fn rejects_missing_required_fields() {
        let required = [
            (tag::WORKER_UID, "worker_uid"),
            (tag::WORKER_NAME, "name"),
            (tag::TRANSPORT_ADDRESSES, "transports"),
        ];
        for (field, name) in required {
            let bytes = sample_frame_replacing(field, None);
            assert_eq!(WorkerAddressWire::decode(&bytes), Err(WireError::MissingField(name)));
        }
    }

    #[test]
    fn rejects_unknown_critical_field_and_skips_non_critical() {
        let address = sample_worker_address();
        let critical = frame_with(&address, &[(0xF0, b"future")]);
        assert_eq!(WorkerAddressWire::decode(&critical), Err(WireError::UnknownCriticalField(0xF0)));
        let hint = frame_with(&address, &[(0x10, b"hint")]);
        assert_eq!(WorkerAddressWire::decode(&hint), Ok(address));
    }

    #[test]
    fn rejects_other_kinds_and_is_rejected_by_them() {
        let rkey = sample_rkey().encode();
        assert_eq!(WorkerAddressWire::decode(&rkey), Err(WireError::WrongKind { expected: 3, found: 1 }));
        let memh = crate::samples::sample_exported_memh().encode();
        assert_eq!(WorkerAddressWire::decode(&memh), Err(WireError::WrongKind { expected: 3, found: 2 }));
        let address = sample_worker_address().encode();
        assert_eq!(crate::RkeyWire::decode(&address), Err(WireError::WrongKind { expected: 1, found: 3 }));
        assert_eq!(
            crate::ExportedMemhWire::decode(&address),
            Err(WireError::WrongKind { expected: 2, found: 3 })
        );
    }

    #[test]
    fn rejects_corruption_and_trailing_bytes() {
        let mut bytes = sample_worker_address().encode();
        bytes.push(0);
        assert_eq!(WorkerAddressWire::decode(&bytes), Err(WireError::TrailingBytes(1)));
        bytes.pop();
        if let Some(byte) = bytes.get_mut(20) {
            *byte ^= 0x01;
        }
        assert_eq!(WorkerAddressWire::decode(&bytes), Err(WireError::Checksum));
    }

    #[test]
    #[should_panic(expected = "invalid worker address")]
    fn encode_panics_on_invalid_address() {
        let _ = WorkerAddressWire { transports: Vec::new(), ..sample_worker_address() }.encode();
    }
}
