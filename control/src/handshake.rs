//! The connection handshake sent over a sockaddr connection before any data: the client's
//! connection request (what a listener's callback inspects with `ucp_conn_request_query`), and
//! the server's answer, an acceptance (`ucp_ep_create` with `UCP_EP_PARAM_FIELD_CONN_REQUEST`) or
//! a rejection (`ucp_listener_reject`).
//!
//! Every step is one [`FrameKind::Handshake`] frame whose step field says which one it is. A
//! worker address travels as a whole nested [`FrameKind::WorkerAddress`] frame in one field, so
//! it is checked exactly as a standalone address is, its own checksum included.

use crate::error::WireError;
use crate::fields::Fields;
use crate::frame::{decode_frame, FrameKind, FrameWriter};
use crate::name::{decode_name, validate_name};
use crate::tag;
use crate::worker_address::WorkerAddressWire;

/// Step value of [`HandshakeWire::ConnRequest`].
const STEP_CONN_REQUEST: u8 = 1;
/// Step value of [`HandshakeWire::Accept`].
const STEP_ACCEPT: u8 = 2;
/// Step value of [`HandshakeWire::Reject`].
const STEP_REJECT: u8 = 3;
/// Step value of [`HandshakeWire::PairProof`].
const STEP_PAIR_PROOF: u8 = 4;

/// The most negative status a rejection may carry; `ucs_status_t` error codes lie in
/// `-100..=-1` (`UCS_ERR_LAST` is -100).
pub const REJECT_STATUS_MIN: i8 = -100;
/// The least negative status a rejection may carry (`UCS_ERR_NO_MESSAGE`); 0 is `UCS_OK` and
/// positive values are not errors, so neither can explain a rejection.
pub const REJECT_STATUS_MAX: i8 = -1;

/// One step of the connection handshake.
///
/// Encoded as a [`FrameKind::Handshake`] frame whose fields are all critical. A field that
/// belongs to another step is therefore rejected as an unknown critical field, so a frame cannot
/// be read as two different steps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HandshakeWire {
    /// The client asks to connect; the listener sees it as a `ucp_conn_request_h`.
    ConnRequest {
        /// The client worker's id (`UCP_WORKER_PARAM_FIELD_CLIENT_ID`), reported by
        /// `ucp_conn_request_query` as `UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID`.
        client_id: u64,
        /// The client endpoint's name (`UCP_EP_PARAM_FIELD_NAME`): UTF-8, at most
        /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, no NUL.
        ep_name: String,
        /// Whether the client endpoint uses `UCP_ERR_HANDLING_MODE_PEER`, so the server endpoint
        /// can match it.
        err_mode_peer: bool,
        /// The client worker's address, for reaching it over the transports both sides offer.
        client_address: WorkerAddressWire,
        /// The client endpoint's id, echoed in the answer so the client can match it. A random,
        /// unguessable token: only the worker the request reached learns it.
        client_ep_id: u64,
        /// 0, or the `client_ep_id` of a request the server's worker sent the client earlier: the
        /// client proposes that its new endpoint share that connection. The server agrees only if
        /// the token is one of its own, which proves the client received that request.
        pair_token: u64,
    },
    /// The server accepted the request and created its endpoint.
    Accept {
        /// The server worker's address.
        server_address: WorkerAddressWire,
        /// The server endpoint's id, which the client addresses its traffic to.
        server_ep_id: u64,
        /// The `client_ep_id` of the request being answered.
        client_ep_id: u64,
        /// 0, or the `client_ep_id` of the server's own request to the client that this answer
        /// pairs with: the two workers' endpoints to each other are one connection from now on.
        pair_token: u64,
    },
    /// The server refused the request (`ucp_listener_reject`).
    Reject {
        /// Why, as a `ucs_status_t` error code in
        /// [`REJECT_STATUS_MIN`]`..=`[`REJECT_STATUS_MAX`] (`UCS_ERR_REJECTED` is -22).
        reason_status: i8,
        /// The `client_ep_id` of the request being answered.
        client_ep_id: u64,
    },
    /// Sent on a client's connection while its connection request is unanswered, when the
    /// server's worker sent the client a request of its own meanwhile (the two crossed): proves
    /// the sender received that request, so the server may answer for both on this connection.
    PairProof {
        /// The `client_ep_id` of the server's crossing request.
        client_ep_id: u64,
    },
}

impl HandshakeWire {
    /// The frame for this step.
    ///
    /// # Panics
    ///
    /// If the step breaks a rule of [`HandshakeWire::validate`]; use
    /// [`HandshakeWire::try_encode`] to get the error instead.
    pub fn encode(&self) -> Vec<u8> {
        match self.try_encode() {
            Ok(bytes) => bytes,
            Err(error) => panic!("HandshakeWire::encode: invalid handshake: {error}"),
        }
    }

    /// The frame for this step, or why it cannot be sent.
    pub fn try_encode(&self) -> Result<Vec<u8>, WireError> {
        self.validate()?;
        let mut frame = FrameWriter::new(FrameKind::Handshake);
        self.write_fields(&mut frame)?;
        frame.finish()
    }

    /// Appends every field, in tag order, without validating anything; fails only if a nested
    /// worker address does not fit a frame.
    fn write_fields(&self, frame: &mut FrameWriter) -> Result<(), WireError> {
        match self {
            HandshakeWire::ConnRequest {
                client_id,
                ep_name,
                err_mode_peer,
                client_address,
                client_ep_id,
                pair_token,
            } => {
                frame.field(tag::HANDSHAKE_STEP, &[STEP_CONN_REQUEST]);
                frame.field(tag::CLIENT_ID, &client_id.to_le_bytes());
                frame.field(tag::EP_NAME, ep_name.as_bytes());
                frame.field(tag::ERR_MODE_PEER, &[u8::from(*err_mode_peer)]);
                frame.field(tag::WORKER_ADDRESS, &client_address.encode_unchecked()?);
                frame.field(tag::CLIENT_EP_ID, &client_ep_id.to_le_bytes());
                pair_field(frame, *pair_token);
            }
            HandshakeWire::Accept { server_address, server_ep_id, client_ep_id, pair_token } => {
                frame.field(tag::HANDSHAKE_STEP, &[STEP_ACCEPT]);
                frame.field(tag::WORKER_ADDRESS, &server_address.encode_unchecked()?);
                frame.field(tag::CLIENT_EP_ID, &client_ep_id.to_le_bytes());
                frame.field(tag::SERVER_EP_ID, &server_ep_id.to_le_bytes());
                pair_field(frame, *pair_token);
            }
            HandshakeWire::PairProof { client_ep_id } => {
                frame.field(tag::HANDSHAKE_STEP, &[STEP_PAIR_PROOF]);
                frame.field(tag::CLIENT_EP_ID, &client_ep_id.to_le_bytes());
            }
            HandshakeWire::Reject { reason_status, client_ep_id } => {
                frame.field(tag::HANDSHAKE_STEP, &[STEP_REJECT]);
                frame.field(tag::CLIENT_EP_ID, &client_ep_id.to_le_bytes());
                frame.field(tag::REJECT_STATUS, &reason_status.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Checks and decodes a handshake step received from a peer.
    pub fn decode(bytes: &[u8]) -> Result<HandshakeWire, WireError> {
        let mut fields = decode_frame(bytes, FrameKind::Handshake)?;
        let [step] = fields.require_array(tag::HANDSHAKE_STEP, "step")?;
        let client_ep_id = u64::from_le_bytes(fields.require_array(tag::CLIENT_EP_ID, "client_ep_id")?);
        let wire = match step {
            STEP_CONN_REQUEST => HandshakeWire::ConnRequest {
                client_id: u64::from_le_bytes(fields.require_array(tag::CLIENT_ID, "client_id")?),
                ep_name: decode_name(fields.require(tag::EP_NAME, "ep_name")?)?,
                err_mode_peer: match fields.require_array(tag::ERR_MODE_PEER, "err_mode_peer")? {
                    [0] => false,
                    [1] => true,
                    _ => return Err(WireError::Invalid("error mode flag is neither 0 nor 1")),
                },
                client_address: worker_address(&mut fields, "client_address")?,
                client_ep_id,
                pair_token: pair_token(&mut fields)?,
            },
            STEP_ACCEPT => HandshakeWire::Accept {
                server_address: worker_address(&mut fields, "server_address")?,
                server_ep_id: u64::from_le_bytes(fields.require_array(tag::SERVER_EP_ID, "server_ep_id")?),
                client_ep_id,
                pair_token: pair_token(&mut fields)?,
            },
            STEP_PAIR_PROOF => HandshakeWire::PairProof { client_ep_id },
            STEP_REJECT => HandshakeWire::Reject {
                reason_status: i8::from_le_bytes(fields.require_array(tag::REJECT_STATUS, "reason_status")?),
                client_ep_id,
            },
            _ => return Err(WireError::Invalid("unknown handshake step")),
        };
        fields.finish()?;
        wire.validate()?;
        Ok(wire)
    }

    /// Checks every rule a decoded step must satisfy: a valid endpoint name and worker address,
    /// and a rejection status that is a `ucs_status_t` error code.
    pub fn validate(&self) -> Result<(), WireError> {
        match self {
            HandshakeWire::ConnRequest { ep_name, client_address, .. } => {
                validate_name(ep_name)?;
                client_address.validate()
            }
            HandshakeWire::Accept { server_address, .. } => server_address.validate(),
            HandshakeWire::PairProof { .. } => Ok(()),
            HandshakeWire::Reject { reason_status, .. } => {
                if (REJECT_STATUS_MIN..=REJECT_STATUS_MAX).contains(reason_status) {
                    Ok(())
                } else {
                    Err(WireError::Invalid("rejection status is not a ucs_status_t error code"))
                }
            }
        }
    }

    /// The client endpoint this step concerns; every step carries it, so the client can route
    /// an answer to the endpoint that asked.
    pub fn client_ep_id(&self) -> u64 {
        match self {
            HandshakeWire::ConnRequest { client_ep_id, .. }
            | HandshakeWire::Accept { client_ep_id, .. }
            | HandshakeWire::Reject { client_ep_id, .. }
            | HandshakeWire::PairProof { client_ep_id } => *client_ep_id,
        }
    }
}

/// Writes the optional pairing token: absent when 0, so a step that pairs nothing is the same
/// frame as before pairing existed.
fn pair_field(frame: &mut FrameWriter, token: u64) {
    if token != 0 {
        frame.field(tag::PAIR_TOKEN, &token.to_le_bytes());
    }
}

/// Reads the optional pairing token; present and 0 is refused, as no token is 0.
fn pair_token(fields: &mut Fields<'_>) -> Result<u64, WireError> {
    match fields.take_array::<8>(tag::PAIR_TOKEN)? {
        None => Ok(0),
        Some(bytes) => match u64::from_le_bytes(bytes) {
            0 => Err(WireError::Invalid("pairing token is 0")),
            token => Ok(token),
        },
    }
}

/// Decodes the nested worker address frame, named `name` if it is missing.
fn worker_address(fields: &mut Fields<'_>, name: &'static str) -> Result<WorkerAddressWire, WireError> {
    WorkerAddressWire::decode(fields.require(tag::WORKER_ADDRESS, name)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::MAX_FRAME_LEN;
    use crate::name::MAX_NAME_LEN;
    use crate::samples::{largest_worker_address, sample_worker_address};
    use crate::transport_address::TransportAddress;

    fn conn_request() -> HandshakeWire {
        HandshakeWire::ConnRequest {
            client_id: 0x00C1_1E47,
            ep_name: "client-ep".into(),
            err_mode_peer: true,
            client_address: sample_worker_address(),
            client_ep_id: 5,
            pair_token: 0,
        }
    }

    fn accept() -> HandshakeWire {
        let server_address = WorkerAddressWire {
            worker_uid: [9; 16],
            name: "server".into(),
            boot_id: None,
            transports: vec![TransportAddress::Uring { addr: "[fe80::7%4]:9000".parse().unwrap() }],
        };
        HandshakeWire::Accept { server_address, server_ep_id: u64::MAX, client_ep_id: 5, pair_token: 0 }
    }

    fn reject() -> HandshakeWire {
        HandshakeWire::Reject { reason_status: -22, client_ep_id: 5 }
    }

    /// The frame of `step`, unvalidated, with `extra` fields appended.
    fn frame_with(step: &HandshakeWire, extra: &[(u8, &[u8])]) -> Vec<u8> {
        let mut frame = FrameWriter::new(FrameKind::Handshake);
        step.write_fields(&mut frame).unwrap();
        for &(tag, value) in extra {
            frame.field(tag, value);
        }
        frame.finish().unwrap()
    }

    /// The frame of `step` with field `field` replaced by `replacement`, or removed if that is
    /// `None`; bypasses validation.
    fn frame_replacing(step: &HandshakeWire, field: u8, replacement: Option<&[u8]>) -> Vec<u8> {
        let original = frame_with(step, &[]);
        let mut fields = decode_frame(&original, FrameKind::Handshake).unwrap();
        let mut frame = FrameWriter::new(FrameKind::Handshake);
        for tag in 0..=u8::MAX {
            let value = if tag == field { fields.take(tag).and(replacement) } else { fields.take(tag) };
            if let Some(value) = value {
                frame.field(tag, value);
            }
        }
        frame.finish().unwrap()
    }

    /// Checks that `step` is refused by `validate`, `try_encode` and `decode` alike.
    fn rejected(step: &HandshakeWire) -> WireError {
        let error = step.validate().unwrap_err();
        assert_eq!(step.try_encode(), Err(error.clone()));
        assert_eq!(HandshakeWire::decode(&frame_with(step, &[])), Err(error.clone()));
        error
    }

    #[test]
    fn every_step_round_trips() {
        for step in [conn_request(), accept(), reject()] {
            assert_eq!(HandshakeWire::decode(&step.encode()), Ok(step.clone()));
            assert_eq!(step.client_ep_id(), 5);
        }
        for reason_status in [REJECT_STATUS_MIN, REJECT_STATUS_MAX] {
            let step = HandshakeWire::Reject { reason_status, client_ep_id: 0 };
            assert_eq!(HandshakeWire::decode(&step.encode()), Ok(step));
        }
        let plain = HandshakeWire::ConnRequest {
            client_id: 0,
            ep_name: String::new(),
            err_mode_peer: false,
            client_address: accept_address(),
            client_ep_id: 1,
            pair_token: 0,
        };
        assert_eq!(HandshakeWire::decode(&plain.encode()), Ok(plain));
    }

    #[test]
    fn pairing_steps_round_trip() {
        let mut request = conn_request();
        if let HandshakeWire::ConnRequest { pair_token, .. } = &mut request {
            *pair_token = 0xFEED;
        }
        let mut answer = accept();
        if let HandshakeWire::Accept { pair_token, .. } = &mut answer {
            *pair_token = u64::MAX;
        }
        let proof = HandshakeWire::PairProof { client_ep_id: 5 };
        for step in [request, answer, proof] {
            assert_eq!(HandshakeWire::decode(&step.encode()), Ok(step.clone()));
            assert_eq!(step.client_ep_id(), 5);
        }
        // No token is written as no field: the frame of a step that pairs nothing is unchanged.
        let bytes = conn_request().encode();
        let mut fields = decode_frame(&bytes, FrameKind::Handshake).unwrap();
        assert_eq!(fields.take(tag::PAIR_TOKEN), None);
    }

    #[test]
    fn rejects_zero_or_misplaced_pair_token() {
        for step in [conn_request(), accept()] {
            let zero = frame_with(&step, &[(tag::PAIR_TOKEN, &[0; 8])]);
            assert!(matches!(HandshakeWire::decode(&zero), Err(WireError::Invalid(_))));
            let short = frame_with(&step, &[(tag::PAIR_TOKEN, &[1; 7])]);
            assert_eq!(
                HandshakeWire::decode(&short),
                Err(WireError::BadFieldLength { field: tag::PAIR_TOKEN, len: 7 })
            );
        }
        for step in [reject(), HandshakeWire::PairProof { client_ep_id: 5 }] {
            let bytes = frame_with(&step, &[(tag::PAIR_TOKEN, &[1; 8])]);
            assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::UnknownCriticalField(tag::PAIR_TOKEN)));
        }
    }

    fn accept_address() -> WorkerAddressWire {
        match accept() {
            HandshakeWire::Accept { server_address, .. } => server_address,
            _ => unreachable!(),
        }
    }

    #[test]
    fn largest_request_fits_a_frame() {
        let step = HandshakeWire::ConnRequest {
            client_id: 1,
            ep_name: "e".repeat(MAX_NAME_LEN),
            err_mode_peer: false,
            client_address: largest_worker_address(),
            client_ep_id: 2,
            pair_token: u64::MAX,
        };
        let bytes = step.encode();
        assert!(bytes.len() <= MAX_FRAME_LEN);
        assert_eq!(HandshakeWire::decode(&bytes), Ok(step));
    }

    #[test]
    fn nested_address_is_a_worker_address_frame() {
        let bytes = conn_request().encode();
        let mut fields = decode_frame(&bytes, FrameKind::Handshake).unwrap();
        let nested = fields.take(tag::WORKER_ADDRESS).unwrap();
        assert_eq!(WorkerAddressWire::decode(nested), Ok(sample_worker_address()));
    }

    #[test]
    fn rejects_reject_status_out_of_range() {
        for reason_status in [0, 1, i8::MAX, -101, i8::MIN] {
            let step = HandshakeWire::Reject { reason_status, client_ep_id: 5 };
            assert!(matches!(rejected(&step), WireError::Invalid(_)), "{reason_status}");
        }
    }

    #[test]
    fn rejects_long_or_nul_ep_name() {
        let long = HandshakeWire::ConnRequest {
            client_id: 1,
            ep_name: "e".repeat(MAX_NAME_LEN + 1),
            err_mode_peer: false,
            client_address: sample_worker_address(),
            client_ep_id: 2,
            pair_token: 0,
        };
        assert_eq!(rejected(&long), WireError::TooLong { len: MAX_NAME_LEN + 1, max: MAX_NAME_LEN });
        let bytes = frame_replacing(&conn_request(), tag::EP_NAME, Some(b"\xC0\x80"));
        assert!(matches!(HandshakeWire::decode(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_invalid_nested_address() {
        let bad = WorkerAddressWire { transports: Vec::new(), ..sample_worker_address() };
        let request = HandshakeWire::ConnRequest {
            client_id: 1,
            ep_name: String::new(),
            err_mode_peer: false,
            client_address: bad.clone(),
            client_ep_id: 2,
            pair_token: 0,
        };
        assert!(matches!(rejected(&request), WireError::Invalid(_)));
        let answer =
            HandshakeWire::Accept { server_address: bad, server_ep_id: 1, client_ep_id: 2, pair_token: 0 };
        assert!(matches!(rejected(&answer), WireError::Invalid(_)));
    }

    #[test]
    fn rejects_corrupted_nested_address() {
        let mut nested = sample_worker_address().encode();
        if let Some(byte) = nested.get_mut(12) {
            *byte ^= 0x10;
        }
        let bytes = frame_replacing(&conn_request(), tag::WORKER_ADDRESS, Some(&nested));
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::Checksum));
        let rkey = crate::samples::sample_rkey().encode();
        let bytes = frame_replacing(&accept(), tag::WORKER_ADDRESS, Some(&rkey));
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::WrongKind { expected: 3, found: 1 }));
    }

    #[test]
    fn rejects_unknown_step_and_bad_flag() {
        for step in [0, 5, 0xFF] {
            let bytes = frame_replacing(&reject(), tag::HANDSHAKE_STEP, Some(&[step]));
            assert!(matches!(HandshakeWire::decode(&bytes), Err(WireError::Invalid(_))), "{step}");
        }
        let bytes = frame_replacing(&conn_request(), tag::ERR_MODE_PEER, Some(&[2]));
        assert!(matches!(HandshakeWire::decode(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_fields_of_another_step() {
        let bytes = frame_with(&reject(), &[(tag::SERVER_EP_ID, &[0; 8])]);
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::UnknownCriticalField(tag::SERVER_EP_ID)));
        // An acceptance relabelled as a rejection has no status to give.
        let bytes = frame_replacing(&accept(), tag::HANDSHAKE_STEP, Some(&[STEP_REJECT]));
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::MissingField("reason_status")));
    }

    #[test]
    fn rejects_missing_required_fields() {
        let cases = [
            (conn_request(), tag::HANDSHAKE_STEP, "step"),
            (conn_request(), tag::CLIENT_ID, "client_id"),
            (conn_request(), tag::EP_NAME, "ep_name"),
            (conn_request(), tag::ERR_MODE_PEER, "err_mode_peer"),
            (conn_request(), tag::WORKER_ADDRESS, "client_address"),
            (conn_request(), tag::CLIENT_EP_ID, "client_ep_id"),
            (accept(), tag::WORKER_ADDRESS, "server_address"),
            (accept(), tag::SERVER_EP_ID, "server_ep_id"),
            (accept(), tag::CLIENT_EP_ID, "client_ep_id"),
            (reject(), tag::REJECT_STATUS, "reason_status"),
            (reject(), tag::CLIENT_EP_ID, "client_ep_id"),
        ];
        for (step, field, name) in cases {
            let bytes = frame_replacing(&step, field, None);
            assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::MissingField(name)), "{name}");
        }
    }

    #[test]
    fn rejects_wrong_fixed_field_lengths() {
        let cases = [
            (conn_request(), tag::HANDSHAKE_STEP, 1),
            (conn_request(), tag::CLIENT_ID, 8),
            (conn_request(), tag::ERR_MODE_PEER, 1),
            (conn_request(), tag::CLIENT_EP_ID, 8),
            (accept(), tag::SERVER_EP_ID, 8),
            (reject(), tag::REJECT_STATUS, 1),
        ];
        for (step, field, len) in cases {
            for wrong in [0, len + 1] {
                let bytes = frame_replacing(&step, field, Some(&vec![1; wrong]));
                assert_eq!(
                    HandshakeWire::decode(&bytes),
                    Err(WireError::BadFieldLength { field, len: wrong })
                );
            }
        }
    }

    #[test]
    fn rejects_unknown_critical_field_and_skips_non_critical() {
        let critical = frame_with(&accept(), &[(0xF1, b"")]);
        assert_eq!(HandshakeWire::decode(&critical), Err(WireError::UnknownCriticalField(0xF1)));
        let hint = frame_with(&accept(), &[(0x01, b"hint")]);
        assert_eq!(HandshakeWire::decode(&hint), Ok(accept()));
    }

    #[test]
    fn kinds_do_not_mix() {
        let address = sample_worker_address().encode();
        assert_eq!(HandshakeWire::decode(&address), Err(WireError::WrongKind { expected: 4, found: 3 }));
        let rkey = crate::samples::sample_rkey().encode();
        assert_eq!(HandshakeWire::decode(&rkey), Err(WireError::WrongKind { expected: 4, found: 1 }));
        let memh = crate::samples::sample_exported_memh().encode();
        assert_eq!(HandshakeWire::decode(&memh), Err(WireError::WrongKind { expected: 4, found: 2 }));
        let handshake = reject().encode();
        assert_eq!(
            WorkerAddressWire::decode(&handshake),
            Err(WireError::WrongKind { expected: 3, found: 4 })
        );
        assert_eq!(crate::RkeyWire::decode(&handshake), Err(WireError::WrongKind { expected: 1, found: 4 }));
        assert_eq!(
            crate::ExportedMemhWire::decode(&handshake),
            Err(WireError::WrongKind { expected: 2, found: 4 })
        );
    }

    #[test]
    fn rejects_corruption_and_trailing_bytes() {
        let mut bytes = conn_request().encode();
        bytes.push(0);
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::TrailingBytes(1)));
        bytes.pop();
        if let Some(byte) = bytes.get_mut(9) {
            *byte ^= 0x80;
        }
        assert_eq!(HandshakeWire::decode(&bytes), Err(WireError::Checksum));
    }

    #[test]
    #[should_panic(expected = "invalid handshake")]
    fn encode_panics_on_invalid_step() {
        let _ = HandshakeWire::Reject { reason_status: 0, client_ep_id: 1 }.encode();
    }
}
