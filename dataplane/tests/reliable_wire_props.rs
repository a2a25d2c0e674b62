//! Properties of the reliability header and of a session fed hostile datagrams: every valid
//! header round-trips; no byte string (random, or a valid datagram with bytes flipped, cut or
//! added) makes the parser or a session panic; a damaged datagram is refused or reads exactly
//! as the original; and a session never delivers a payload that was not sent, nor out of order.
//!
//! Runs in about two seconds in a debug build.

use proptest::prelude::*;
use zcx_dataplane::proto::reliable::wire::{Error, Header, Kind, Packet, HEADER_LEN, MAGIC, VERSION};
use zcx_dataplane::proto::reliable::{Config, Delivery, Session};

const CASES: u32 = 2000;
/// Fewer for the session properties: each case generates and pushes a few kilobytes.
const SESSION_CASES: u32 = 400;

fn arb_header() -> impl Strategy<Value = (Header, Vec<u8>)> {
    let data = (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>(), 1..=u32::MAX).prop_flat_map(
        |(src, dst, seq, ack, credit)| {
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(move |payload| {
                let header =
                    Header { kind: Kind::Data, src_session: src, dst_session: dst, seq, ack, credit };
                (header, payload)
            })
        },
    );
    let ack = (any::<u32>(), any::<u32>(), any::<u64>(), 1..=u32::MAX).prop_map(|(src, dst, ack, credit)| {
        (Header { kind: Kind::Ack, src_session: src, dst_session: dst, seq: 0, ack, credit }, vec![])
    });
    prop_oneof![3 => data, 1 => ack]
}

fn encode(header: &Header, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN + payload.len()];
    let len = header.emit(payload, &mut buf).expect("a valid header emits");
    assert_eq!(len, buf.len());
    buf
}

/// How a datagram gets damaged on the way.
#[derive(Clone, Debug)]
enum Damage {
    /// One byte xored with a non-zero value: a burst of at most 8 bits, which CRC-32 always
    /// catches.
    Flip(prop::sample::Index, u8),
    /// Several bytes overwritten anywhere.
    Scribble(Vec<(prop::sample::Index, u8)>),
    /// Cut short.
    Truncate(prop::sample::Index),
    /// Bytes appended (link padding).
    Extend(Vec<u8>),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(at, xor)| Damage::Flip(at, xor)),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 2..6)
            .prop_map(Damage::Scribble),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        proptest::collection::vec(any::<u8>(), 1..40).prop_map(Damage::Extend),
    ]
}

fn apply(damage: &Damage, datagram: &[u8]) -> Vec<u8> {
    let mut bytes = datagram.to_vec();
    match damage {
        Damage::Flip(at, xor) => {
            let i = at.index(bytes.len());
            bytes[i] ^= xor;
        }
        Damage::Scribble(writes) => {
            for (at, value) in writes {
                let i = at.index(bytes.len());
                bytes[i] = *value;
            }
        }
        Damage::Truncate(at) => bytes.truncate(at.index(bytes.len())),
        Damage::Extend(tail) => bytes.extend_from_slice(tail),
    }
    bytes
}

fn config() -> Config {
    Config { window: 16, send_queue: 16, max_payload: 300, ..Config::default() }
}

/// The datagrams session 1 sends to session 2 for `messages`, in order.
fn wire_of(messages: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut sender = Session::new(config(), 1, 2).unwrap();
    let mut buf = vec![0u8; config().datagram_len()];
    let mut wire = Vec::new();
    for message in messages {
        sender.send(message).unwrap();
        let len = sender.poll_transmit(0, &mut buf).unwrap();
        wire.push(buf[..len].to_vec());
    }
    wire
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn every_header_round_trips_with_its_payload((header, payload) in arb_header(), pad in 0usize..20) {
        let mut datagram = encode(&header, &payload);
        datagram.resize(datagram.len() + pad, 0xA5);
        let packet = Packet::new_checked(&datagram).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(packet.header(), header);
        prop_assert_eq!(packet.payload(), &payload[..]);
        prop_assert_eq!(packet.wire_len(), HEADER_LEN + payload.len());
    }

    #[test]
    fn random_bytes_never_panic_and_what_parses_is_canonical(
        bytes in proptest::collection::vec(any::<u8>(), 0..120),
        prefixed in any::<bool>(),
    ) {
        let mut datagram = bytes;
        if prefixed {
            datagram.splice(0..0, [MAGIC[0], MAGIC[1], VERSION]);
        }
        if let Ok(packet) = Packet::new_checked(&datagram) {
            let again = encode(&packet.header(), packet.payload());
            prop_assert_eq!(&datagram[..again.len()], &again[..]);
        }
    }

    #[test]
    fn a_damaged_datagram_is_refused_or_reads_as_the_original(
        (header, payload) in arb_header(),
        damage in arb_damage(),
    ) {
        let datagram = encode(&header, &payload);
        let damaged = apply(&damage, &datagram);
        let result = Packet::new_checked(&damaged);
        match (&damage, result) {
            (Damage::Flip(..), result) => prop_assert!(result.is_err(), "a flipped byte went unnoticed"),
            (Damage::Truncate(_), result) => prop_assert_eq!(result, Err(Error::Truncated)),
            (_, Ok(packet)) => {
                prop_assert_eq!(packet.header(), header);
                prop_assert_eq!(packet.payload(), &payload[..]);
            }
            (_, Err(_)) => {}
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: SESSION_CASES, ..ProptestConfig::default() })]

    /// A receiver fed the sender's datagrams, each possibly damaged, duplicated or out of turn,
    /// mixed with garbage: whatever it delivers is exactly the next sent message; and once the
    /// clean datagrams follow, it delivers the rest.
    #[test]
    fn a_session_delivers_only_sent_messages_in_order(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..12),
        feed in proptest::collection::vec(
            (any::<prop::sample::Index>(), proptest::option::of(arb_damage())), 0..40),
        garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..4),
    ) {
        let wire = wire_of(&messages);
        let mut receiver = Session::new(config(), 2, 1).unwrap();
        let mut delivered = 0usize;
        let check = |result: Result<Delivery<'_>, _>, delivered: &mut usize| {
            if let Ok(Delivery::Message(payload)) = result {
                prop_assert!(*delivered < messages.len(), "more deliveries than messages");
                prop_assert_eq!(payload, &messages[*delivered][..], "message {} differs", *delivered);
                *delivered += 1;
            }
            Ok(())
        };
        for junk in &garbage {
            check(receiver.on_datagram(0, junk), &mut delivered)?;
        }
        for (pick, damage) in &feed {
            let datagram = &wire[pick.index(wire.len())];
            let bytes = match damage {
                Some(damage) => apply(damage, datagram),
                None => datagram.clone(),
            };
            check(receiver.on_datagram(1, &bytes), &mut delivered)?;
        }
        for datagram in &wire {
            check(receiver.on_datagram(2, datagram), &mut delivered)?;
        }
        prop_assert_eq!(delivered, messages.len());
        prop_assert_eq!(receiver.received(), messages.len() as u64);
    }

    /// Well-formed datagrams with arbitrary fields (a confused or forged peer) never panic a
    /// session nor break its bounds.
    #[test]
    fn arbitrary_well_formed_datagrams_keep_a_session_sane(
        sent in 0usize..12,
        packets in proptest::collection::vec(arb_header(), 1..30),
        aimed in any::<bool>(),
    ) {
        let mut session = Session::new(config(), 2, 1).unwrap();
        let mut buf = vec![0u8; config().datagram_len()];
        for i in 0..sent {
            session.send(&[i as u8]).unwrap();
        }
        let mut now = 0;
        for (mut header, payload) in packets {
            if aimed {
                header.src_session = 1;
                header.dst_session = 2;
                // Small numbers, so some land on the expected sequence and on real acks.
                header.seq = if header.kind == Kind::Data { header.seq % 4 } else { 0 };
                header.ack %= 16;
            }
            now += 1_000;
            let _ = session.on_datagram(now, &encode(&header, &payload));
            let _ = session.handle_timeout(now);
            while session.poll_transmit(now, &mut buf).is_some() {}
            prop_assert!(session.in_flight() <= u64::from(config().window));
            prop_assert!(session.acked() <= sent as u64);
            prop_assert_eq!(session.unacked() as u64 + session.acked(), sent as u64);
        }
    }
}
