//! `proto::reliable::wire::Packet::new_checked`, the datagram header of unreliable links, on
//! peer bytes, against this crate's own reading of the documented layout: same verdict (the same
//! error, or the same header and payload), and an accepted datagram re-emits (`Header::emit`, and
//! `emit_split` at any split of the payload) to exactly its bytes before any link padding.
//! Structured headers are emitted exactly when they follow the rules, and parse back to
//! themselves, padding or not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::proto::reliable::wire::{
    EmitError, Error, Header, Kind, Packet, HEADER_LEN, MAX_PAYLOAD_LEN,
};

/// The layout as documented: magic "ZX", version 2, kind, src, dst, seq, ack, credit, payload
/// length, reserved 0, CRC-32 of the payload then bytes 0..36; trailing bytes are padding.
fn model(d: &[u8]) -> Result<(Header, &[u8]), Error> {
    if d.len() < HEADER_LEN {
        return Err(Error::Truncated);
    }
    if d[..2] != *b"ZX" {
        return Err(Error::BadMagic);
    }
    if d[2] != 2 {
        return Err(Error::UnsupportedVersion(d[2]));
    }
    let u16_at = |at: usize| u16::from_le_bytes([d[at], d[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let len = usize::from(u16_at(32));
    let payload = d.get(HEADER_LEN..HEADER_LEN + len).ok_or(Error::Truncated)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(payload);
    crc.update(&d[..36]);
    if crc.finalize() != u32_at(36) {
        return Err(Error::BadChecksum);
    }
    let kind = match d[3] {
        1 => Kind::Data,
        2 => Kind::Ack,
        other => return Err(Error::UnknownKind(other)),
    };
    if u16_at(34) != 0 {
        return Err(Error::BadField("reserved"));
    }
    let header = Header {
        kind,
        src_session: u32_at(4),
        dst_session: u32_at(8),
        seq: u64_at(12),
        ack: u64_at(20),
        credit: u32_at(28),
    };
    if kind == Kind::Ack && header.seq != 0 {
        return Err(Error::BadField("seq"));
    }
    if kind == Kind::Ack && len != 0 {
        return Err(Error::BadField("payload len"));
    }
    if header.credit == 0 {
        return Err(Error::BadField("credit"));
    }
    Ok((header, payload))
}

/// Sets the checksum from the announced payload, when the datagram holds it.
fn fix_checksum(d: &mut [u8]) {
    if d.len() < HEADER_LEN {
        return;
    }
    let len = usize::from(u16::from_le_bytes([d[32], d[33]]));
    let Some(payload) = d.get(HEADER_LEN..HEADER_LEN + len) else { return };
    let mut crc = crc32fast::Hasher::new();
    crc.update(payload);
    crc.update(&d[..36]);
    let crc = crc.finalize();
    d[36..40].copy_from_slice(&crc.to_le_bytes());
}

fn check_bytes(d: &[u8], split: usize) {
    let parsed = Packet::new_checked(d);
    let expected = model(d);
    match (&parsed, &expected) {
        (Ok(p), Ok((header, payload))) => {
            assert_eq!(p.header(), *header);
            assert_eq!(p.payload(), *payload);
            assert_eq!(
                (p.kind(), p.src_session(), p.dst_session(), p.seq(), p.ack(), p.credit()),
                (header.kind, header.src_session, header.dst_session, header.seq, header.ack, header.credit)
            );
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("new_checked {parsed:?}, documented layout {expected:?}"),
    }
    let Ok(p) = parsed else { return };
    let wire = &d[..p.wire_len()];
    let mut buf = vec![0u8; wire.len()];
    assert_eq!(p.header().emit(p.payload(), &mut buf), Ok(wire.len()));
    assert_eq!(buf, wire, "an accepted datagram does not re-emit to its bytes");
    let split = split % (p.payload().len() + 1);
    let mut buf = vec![0u8; HEADER_LEN + split];
    let crc = crc32fast::hash(p.payload());
    let external = p.payload().len() - split;
    assert_eq!(p.header().emit_split(&p.payload()[..split], external, crc, &mut buf), Ok(buf.len()));
    assert_eq!(buf, wire[..HEADER_LEN + split], "emit_split differs from emit");
}

fn structured(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<()> {
    let kind = if u.arbitrary()? { Kind::Data } else { Kind::Ack };
    let header = Header {
        kind,
        src_session: u.arbitrary()?,
        dst_session: u.arbitrary()?,
        seq: if kind == Kind::Ack && u.arbitrary()? { 0 } else { u.arbitrary()? },
        ack: u.arbitrary()?,
        credit: if u.arbitrary()? { u.int_in_range(1..=u32::MAX)? } else { u.arbitrary()? },
    };
    let len = if kind == Kind::Ack && u.arbitrary()? { 0 } else { u.int_in_range(0..=300)? };
    let payload = u.bytes(len)?;
    let padding = u.int_in_range(0..=20)?;
    let short = u.int_in_range(0..=3usize)? == 0;
    let size = if short {
        u.int_in_range(0..=HEADER_LEN + payload.len())?
    } else {
        HEADER_LEN + payload.len() + padding
    };
    let mut buf = vec![0xA5u8; size];
    let valid = header.credit != 0 && (kind == Kind::Data || (header.seq == 0 && payload.is_empty()));
    match header.emit(payload, &mut buf) {
        Ok(n) => {
            assert!(valid, "emitted {header:?} that the parser refuses");
            assert_eq!(n, HEADER_LEN + payload.len());
            let p = Packet::new_checked(&buf).expect("an emitted datagram parses, padding or not");
            assert_eq!((p.header(), p.payload()), (header, payload));
            assert_eq!(p.wire_len(), n);
            check_bytes(&buf, n);
        }
        Err(EmitError::BufferTooSmall { needed }) => {
            assert!(valid);
            assert_eq!(needed, HEADER_LEN + payload.len());
            assert!(size < needed);
            assert!(buf.iter().all(|&b| b == 0xA5), "a refused emit wrote");
        }
        Err(EmitError::PayloadTooLong) => assert!(payload.len() > MAX_PAYLOAD_LEN),
        Err(EmitError::BadField(_)) => {
            assert!(!valid, "refused a valid {header:?}");
            assert!(buf.iter().all(|&b| b == 0xA5), "a refused emit wrote");
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    if control & 0x80 != 0 {
        zcx_fuzz::with_unstructured(rest, structured);
        return;
    }
    let mut d = rest.to_vec();
    if control & 0x03 != 0 {
        fix_checksum(&mut d);
    }
    check_bytes(&d, usize::from(control >> 2));
});
