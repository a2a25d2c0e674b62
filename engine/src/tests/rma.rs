//! RMA, atomics, fences and flushes, emulated and native.

use zcx_dataplane::access::{PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_dataplane::proto::wire::{AtomicOp, Op};

use super::pair::{pattern, pending, recv_buf, send_buf, Net, Pair, Who};
use crate::{RemoteKey, RmaKind, Start, Status};

#[test]
fn put_writes_the_peers_region_emulated_and_native() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let region = p.b.register_rw(512);
        let (addr, key) = (p.b.region(region).addr(8), p.b.region(region).key.clone());
        let data = pattern(3000, 1);
        let put = p.a.engine.put(p.a.ep, send_buf(&data), addr, &key).unwrap();
        p.drive();
        assert_eq!(p.a.status(put), Status::Ok, "{net:?}");
        assert_eq!(&p.b.region(region).bytes()[8..3008], &data[..], "{net:?}");
        let frames = p.log.iter().filter(|(_, op)| matches!(op, Op::Put { .. })).count();
        assert_eq!(frames > 0, !net.native, "put frames only when emulated ({net:?})");
        p.assert_no_leaks();
    }
}

#[test]
fn get_reads_the_peers_region_emulated_and_native() {
    for net in [Net::emulated(), Net::native(), Net { placed: true, ..Net::emulated() }] {
        let mut p = Pair::new(net);
        let region = p.b.register_rw(512);
        let key = p.b.region(region).key.clone();
        let source = pattern(2500, 2);
        let put = p.a.engine.put(p.a.ep, send_buf(&source), p.b.region(region).addr(0), &key).unwrap();
        p.drive();
        assert_eq!(p.a.status(put), Status::Ok);
        let mut out = vec![0u8; 2000];
        let get = p.a.engine.get(p.a.ep, recv_buf(&mut out), p.b.region(region).addr(100), &key).unwrap();
        p.drive();
        assert_eq!(p.a.status(get), Status::Ok, "{net:?}");
        assert_eq!(&out[..], &source[100..2100], "{net:?}");
        p.assert_no_leaks();
    }
}

#[test]
fn atomics_return_the_old_value_emulated_and_native() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let region = p.b.register_rw(4);
        let key = p.b.region(region).key.clone();
        let word = p.b.region(region).addr(8);
        let e = p.a.ep;
        let add = p.a.engine.atomic(e, AtomicOp::Add, 8, 5, 0, word, &key).unwrap();
        p.drive();
        let swap = p.a.engine.atomic(e, AtomicOp::Swap, 8, 100, 0, word, &key).unwrap();
        p.drive();
        let miss = p.a.engine.atomic(e, AtomicOp::Cswap, 8, 7, 99, word, &key).unwrap();
        p.drive();
        let hit = p.a.engine.atomic(e, AtomicOp::Cswap, 8, 7, 100, word, &key).unwrap();
        p.drive();
        let small =
            p.a.engine.atomic(e, AtomicOp::Or, 4, 0xF0, 0, p.b.region(region).addr(16), &key).unwrap();
        p.drive();
        let old = |op| p.a.info(op).value;
        assert_eq!((old(add), old(swap), old(miss), old(hit), old(small)), (0, 5, 100, 100, 0), "{net:?}");
        assert_eq!(p.b.region(region).word(1), 7);
        assert_eq!(p.b.region(region).word(2), 0xF0);
        assert_eq!(p.a.engine.atomic(e, AtomicOp::Add, 2, 1, 0, word, &key), Err(Status::InvalidParam));
        assert_eq!(p.a.engine.atomic(e, AtomicOp::Add, 8, 1, 0, word + 4, &key), Err(Status::InvalidParam));
        p.assert_no_leaks();
    }
}

#[test]
fn the_owner_refuses_out_of_bounds_wrong_protection_and_wrong_keys() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let rw = p.b.register_rw(8);
        let read_only = p.b.register(8, PROT_REMOTE_READ);
        let write_only = p.b.register(8, PROT_REMOTE_WRITE);
        let data = pattern(16, 3);
        let e = p.a.ep;
        let (rw_key, ro_key) = (p.b.region(rw).key.clone(), p.b.region(read_only).key.clone());
        let past_end = p.a.engine.put(e, send_buf(&data), p.b.region(rw).addr(56), &rw_key).unwrap();
        let to_read_only =
            p.a.engine.put(e, send_buf(&data), p.b.region(read_only).addr(0), &ro_key).unwrap();
        let mut out = vec![0u8; 8];
        let wo_key = p.b.region(write_only).key.clone();
        let from_write_only =
            p.a.engine.get(e, recv_buf(&mut out), p.b.region(write_only).addr(0), &wo_key).unwrap();
        let mut forged = rw_key.clone();
        forged.access_key[0] ^= 1;
        forged.packed = forged.packed.map(|packed| {
            let mut bytes = packed.to_vec();
            bytes[8] ^= 1;
            bytes.into()
        });
        let with_forged =
            p.a.engine.atomic(e, AtomicOp::Add, 8, 1, 0, p.b.region(rw).addr(0), &forged).unwrap();
        p.drive();
        assert_eq!(p.a.status(past_end), Status::InvalidAddr, "{net:?}");
        assert_eq!(p.a.status(to_read_only), Status::InvalidParam, "{net:?}");
        assert_eq!(p.a.status(from_write_only), Status::InvalidParam, "{net:?}");
        assert_eq!(p.a.status(with_forged), Status::InvalidParam, "{net:?}");
        assert!(p.b.region(rw).bytes().iter().all(|&b| b == 0), "a refused access wrote ({net:?})");
        assert!(p.b.region(read_only).bytes().iter().all(|&b| b == 0));
        assert_eq!(out, vec![0u8; 8]);
        p.assert_no_leaks();
    }
}

#[test]
fn flush_completes_only_after_earlier_native_puts_completed_remotely() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let region = p.b.register_rw(8);
    let key = p.b.region(region).key.clone();
    let data = pattern(8, 4);
    let put = p.a.engine.put(p.a.ep, send_buf(&data), p.b.region(region).addr(0), &key).unwrap();
    let flush = p.a.engine.flush(p.a.ep, false).unwrap();
    p.drive();
    assert!(!p.a.done(flush), "the flush overtook a put still in flight");
    p.finish_rma();
    p.drive();
    assert_eq!((p.a.status(put), p.a.status(flush)), (Status::Ok, Status::Ok));
    let position = |op| p.a.order.iter().position(|&done| done == op).unwrap();
    assert!(position(put) < position(flush));
    p.assert_no_leaks();
}

#[test]
fn flush_completes_after_emulated_puts_were_acknowledged() {
    let mut p = Pair::new(Net { payloads_later: true, ..Net::emulated() });
    let region = p.b.register_rw(512);
    let key = p.b.region(region).key.clone();
    let data = pattern(4000, 5);
    let put = p.a.engine.put(p.a.ep, send_buf(&data), p.b.region(region).addr(0), &key).unwrap();
    let flush = p.a.engine.flush(p.a.ep, false).unwrap();
    p.drive();
    assert!(!p.a.done(flush));
    for _ in 0..50 {
        p.return_payloads();
        p.drive();
    }
    assert_eq!((p.a.status(put), p.a.status(flush)), (Status::Ok, Status::Ok));
    assert_eq!(&p.b.region(region).bytes()[..4000], &data[..]);
    p.assert_no_leaks();
}

#[test]
fn fence_holds_later_rma_until_earlier_rma_completed() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let region = p.b.register_rw(8);
    let key = p.b.region(region).key.clone();
    let (first, second) = (vec![1u8; 8], vec![2u8; 8]);
    let addr = p.b.region(region).addr(0);
    let put1 = p.a.engine.put(p.a.ep, send_buf(&first), addr, &key).unwrap();
    p.a.engine.fence(p.a.ep).unwrap();
    let put2 = p.a.engine.put(p.a.ep, send_buf(&second), addr, &key).unwrap();
    p.drive();
    assert_eq!(p.held_rma(), 1, "the put after the fence was issued before the one before it completed");
    p.finish_rma();
    p.drive();
    assert!(p.a.done(put1));
    assert_eq!(p.held_rma(), 1);
    p.finish_rma();
    p.drive();
    assert_eq!((p.a.status(put1), p.a.status(put2)), (Status::Ok, Status::Ok));
    assert_eq!(p.b.region(region).word(0), u64::from_le_bytes([2; 8]));
    p.assert_no_leaks();
}

#[test]
fn without_a_fence_native_rma_is_issued_at_once() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let region = p.b.register_rw(8);
    let key = p.b.region(region).key.clone();
    let data = vec![1u8; 8];
    let addr = p.b.region(region).addr(0);
    p.a.engine.put(p.a.ep, send_buf(&data), addr, &key).unwrap();
    p.a.engine.put(p.a.ep, send_buf(&data), addr, &key).unwrap();
    // A fence with nothing in flight holds nothing.
    let mut q = Pair::new(Net { rma_later: true, ..Net::native() });
    q.a.engine.fence(q.a.ep).unwrap();
    p.drive();
    assert_eq!(p.held_rma(), 2);
    p.finish_rma();
    p.drive();
    p.assert_no_leaks();
    q.assert_no_leaks();
}

#[test]
fn emulated_fence_orders_a_get_after_an_earlier_put() {
    let mut p = Pair::new(Net::emulated());
    let region = p.b.register_rw(8);
    let key = p.b.region(region).key.clone();
    let data = pattern(8, 6);
    let addr = p.b.region(region).addr(0);
    let put = p.a.engine.put(p.a.ep, send_buf(&data), addr, &key).unwrap();
    p.a.engine.fence(p.a.ep).unwrap();
    let mut out = vec![0u8; 8];
    let get = p.a.engine.get(p.a.ep, recv_buf(&mut out), addr, &key).unwrap();
    p.drive();
    assert_eq!((p.a.status(put), p.a.status(get)), (Status::Ok, Status::Ok));
    assert_eq!(out, data);
    let first_get = p.log.iter().position(|(_, op)| matches!(op, Op::Get { .. })).unwrap();
    let put_ack =
        p.log.iter().position(|(who, op)| *who == Who::B && matches!(op, Op::RmaAck { .. })).unwrap();
    assert!(put_ack < first_get, "the get left before the put was acknowledged");
    p.assert_no_leaks();
}

#[test]
fn worker_flush_completes_when_the_endpoint_flushed() {
    let mut p = Pair::new(Net::emulated());
    let flush = pending(p.a.engine.flush_worker(|_| false));
    p.drive();
    assert_eq!(p.a.status(flush), Status::Ok);
    p.assert_no_leaks();
    let mut empty = Pair::new(Net::emulated());
    empty.assert_no_leaks();
    assert_eq!(empty.a.engine.flush_worker(|_| false), Start::Done(Status::Ok, Default::default()));
}

#[test]
fn a_flush_ends_on_the_origins_records_only_when_all_is_delivered_and_covered() {
    let mut p = Pair::new(Net::emulated());
    let region = p.b.register_rw(8);
    let key = p.b.region(region).key.clone();
    let flush_reqs = |p: &Pair| {
        p.log.iter().filter(|(who, op)| *who == Who::A && matches!(op, Op::FlushReq { .. })).count()
    };
    let data = pattern(40, 3);
    // B never runs. Once A's send left its engine and its transport says the link delivered
    // everything, the flushes end on A's own records.
    let start = p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let send = p.a.track(start);
    p.drain(Who::A);
    let flush = p.a.engine.flush(p.a.ep, true).unwrap();
    let worker_flush = pending(p.a.engine.flush_worker(|_| true));
    p.drain(Who::A);
    assert_eq!(
        (p.a.status(send), p.a.status(flush), p.a.status(worker_flush)),
        (Status::Ok, Status::Ok, Status::Ok)
    );
    // The transport still holds something of the link: only the peer's answer tells.
    let undelivered = p.a.engine.flush(p.a.ep, false).unwrap();
    // A frame still in the engine's outbox: the same, whatever the transport says.
    p.a.engine.tag_send(p.a.ep, send_buf(&data), 1, false).unwrap();
    let queued = p.a.engine.flush(p.a.ep, true).unwrap();
    p.drain(Who::A);
    assert!(!p.a.done(undelivered) && !p.a.done(queued), "a flush ended while frames could still be lost");
    p.drive();
    assert_eq!((p.a.status(undelivered), p.a.status(queued)), (Status::Ok, Status::Ok));
    // An untracked implicit put is confirmed only by the peer's answer to a flush behind it.
    p.a.engine.put_nbi(p.a.ep, &data[..8], p.b.region(region).addr(0), &key).unwrap();
    p.drain(Who::A);
    let covering = p.a.engine.flush(p.a.ep, true).unwrap();
    p.drain(Who::A);
    assert!(!p.a.done(covering), "a flush completed before the peer performed an implicit put");
    p.drive();
    assert_eq!(p.a.status(covering), Status::Ok);
    assert_eq!(p.b.region(region).bytes()[..8], data[..8]);
    assert_eq!(flush_reqs(&p), 3);
    // Covered now: the next flush is local again.
    let again = p.a.engine.flush(p.a.ep, true).unwrap();
    p.drain(Who::A);
    assert_eq!(p.a.status(again), Status::Ok);
    p.drive();
    assert_eq!(flush_reqs(&p), 3);
    for _ in 0..2 {
        let mut got = vec![0u8; 40];
        assert!(matches!(p.b.engine.tag_recv(recv_buf(&mut got), 1, u64::MAX), Start::Done(Status::Ok, _)));
        assert_eq!(got, data);
    }
    p.assert_no_leaks();
}

#[test]
fn native_requests_name_the_link_the_key_and_the_memory() {
    let mut p = Pair::new(Net { rma_later: true, ..Net::native() });
    let key = RemoteKey { region: 9, access_key: [1; 16], packed: Some(vec![7u8; 24].into()) };
    let data = pattern(32, 7);
    let put = p.a.engine.put(p.a.ep, send_buf(&data), 0x1000, &key).unwrap();
    let request = p.a.engine.poll_rma().expect("a native put");
    assert_eq!(
        (request.token, request.kind, request.len, request.remote_addr),
        (put, RmaKind::Put, 32, 0x1000)
    );
    assert_eq!(request.local.cast_const(), data.as_ptr());
    assert_eq!(&request.remote_key[..], &[7u8; 24][..]);
    p.a.engine.rma_done(put, Status::Ok, 0);
    p.drive();
    assert_eq!(p.a.status(put), Status::Ok);
    // A key without a packed part for this transport is emulated.
    let emulated = RemoteKey { packed: None, ..key };
    let get_buf = &mut [0u8; 4];
    p.a.engine.get(p.a.ep, recv_buf(get_buf), 0x1000, &emulated).unwrap();
    assert!(p.a.engine.poll_rma().is_none());
    p.drive();
    p.assert_no_leaks();
}

#[test]
fn empty_put_and_get_complete_after_the_owner_checked_them() {
    for net in [Net::emulated(), Net::native()] {
        let mut p = Pair::new(net);
        let region = p.b.register_rw(1);
        let key = p.b.region(region).key.clone();
        let put = p.a.engine.put(p.a.ep, send_buf(&[]), p.b.region(region).addr(0), &key).unwrap();
        let get = p.a.engine.get(p.a.ep, recv_buf(&mut []), p.b.region(region).addr(8), &key).unwrap();
        let outside = p.a.engine.put(p.a.ep, send_buf(&[]), p.b.region(region).addr(9), &key).unwrap();
        p.drive();
        assert_eq!((p.a.status(put), p.a.status(get)), (Status::Ok, Status::Ok), "{net:?}");
        assert_eq!(p.a.status(outside), Status::InvalidAddr, "{net:?}");
        p.assert_no_leaks();
    }
}

#[test]
fn key_checks_are_answered_from_the_owners_records() {
    let mut p = Pair::new(Net::emulated());
    p.inject(Who::A, {
        let mut header = [0u8; zcx_dataplane::proto::MAX_HEADER_LEN];
        let n = Op::KeyCheck { req: 5 }.encode(&mut header);
        let mut frame = header[..n].to_vec();
        frame.extend_from_slice(b"not a packed key");
        frame
    });
    p.drive();
    assert!(matches!(p.log.last(), Some((Who::B, Op::RmaAck { req: 5, status: -5, .. }))));
    assert!(p.b.errors.is_empty());
    p.assert_no_leaks();
}

#[test]
fn a_large_get_is_answered_a_window_at_a_time_as_the_outbox_drains() {
    let mut p = Pair::new(Net::emulated());
    let region = p.b.register_rw(4096);
    p.b.region(region).write(0, &pattern(32 * 1024, 9));
    let key = p.b.region(region).key.clone();
    let mut out = vec![0u8; 32 * 1024];
    let get = p.a.engine.get(p.a.ep, recv_buf(&mut out), p.b.region(region).addr(0), &key).unwrap();
    let request = p.a.engine.poll_transmit().expect("the get request");
    p.b.engine.handle_frame(super::pair::LINK, request.header.as_bytes());
    let window = crate::EngineConfig::default().fragment_window as usize;
    let mut answers = 0;
    while let Some(transmit) = p.b.engine.poll_transmit() {
        assert!(p.b.engine.table_counts().outbox < window, "more than a window of copies at once");
        p.a.engine.handle_frame(
            super::pair::LINK,
            &[transmit.header.as_bytes(), &unsafe_bytes(&transmit)].concat(),
        );
        answers += 1;
    }
    assert!(answers > 32, "32 KiB in frames of 1 KiB, then the ack: {answers}");
    p.drive();
    assert_eq!(p.a.status(get), Status::Ok);
    assert_eq!(out, pattern(32 * 1024, 9));
    p.assert_no_leaks();
}

fn unsafe_bytes(transmit: &crate::Transmit) -> Vec<u8> {
    // SAFETY: owned or header-only payloads of the target's answers.
    unsafe { transmit.payload.bytes() }.to_vec()
}

#[test]
fn implicit_puts_are_reported_by_the_next_flush() {
    for net in [Net::emulated(), Net { rma_later: true, ..Net::native() }] {
        let mut p = Pair::new(net);
        let region = p.b.register_rw(512);
        let key = p.b.region(region).key.clone();
        let (small, large) = (pattern(40, 10), pattern(3000, 11));
        p.a.engine.put_nbi(p.a.ep, &small, p.b.region(region).addr(0), &key).unwrap();
        p.a.engine.put_nbi(p.a.ep, &large, p.b.region(region).addr(64), &key).unwrap();
        let flush = p.a.engine.flush(p.a.ep, false).unwrap();
        p.drive();
        if net.rma_later {
            assert!(!p.a.done(flush), "the flush overtook an implicit put in flight");
            p.finish_rma();
            p.drive();
        }
        assert_eq!(p.a.status(flush), Status::Ok, "{net:?}");
        let bytes = p.b.region(region).bytes();
        assert_eq!((&bytes[..40], &bytes[64..3064]), (&small[..], &large[..]), "{net:?}");
        // A refused implicit put fails the next flush, and only that one.
        p.a.engine.put_nbi(p.a.ep, &small, p.b.region(region).addr(4090), &key).unwrap();
        p.a.engine.put_nbi(p.a.ep, &large, p.b.region(region).addr(4000), &key).unwrap();
        let failed = p.a.engine.flush(p.a.ep, false).unwrap();
        p.drive();
        p.finish_rma();
        p.drive();
        assert_eq!(p.a.status(failed), Status::InvalidAddr, "{net:?}");
        let clean = p.a.engine.flush(p.a.ep, false).unwrap();
        p.drive();
        assert_eq!(p.a.status(clean), Status::Ok, "{net:?}");
        assert_eq!(p.a.order.len(), 3, "implicit puts complete nothing of their own");
        p.assert_no_leaks();
    }
}
