//! IOV sends and receives (`ucp_dt_make_iov`): a message sent from several buffers arrives whole,
//! and one received into several fills them in order, eager and rendezvous alike, over tag and
//! stream endpoints.

mod common;

use common::net::{accepting_listener, progress_until, wait};
use zcx::{Context, EpParams, Features, IovRecv, IovSend, RequestParams, TagSendParams, WorkerParams};

/// `len` bytes of a pattern that differs in every part of a message.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Splits `len` into parts of uneven sizes, some empty.
fn sizes(len: usize) -> Vec<usize> {
    let mut left = len;
    let mut out = Vec::new();
    for size in [1, 0, len / 3, 7, 0, len / 5] {
        let n = size.min(left);
        out.push(n);
        left -= n;
    }
    out.push(left);
    out
}

#[test]
fn tag_and_stream_messages_travel_between_parts() {
    let ctx = Context::with_features(Features::TAG | Features::STREAM).unwrap();
    let server = ctx.create_worker(&WorkerParams::default()).unwrap();
    let client = ctx.create_worker(&WorkerParams::default()).unwrap();
    let (listener, accepted) = accepting_listener(&server);
    let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
    progress_until(&[&client, &server], "accept", || accepted.lock().unwrap().is_some());
    let server_ep = accepted.lock().unwrap().take().unwrap();
    let workers = [&client, &server];
    // Eager and rendezvous sizes.
    for (round, len) in [100usize, 300_000].into_iter().enumerate() {
        let message = pattern(len, round as u8);
        let parts: Vec<Vec<u8>> = {
            let mut at = 0;
            sizes(len)
                .into_iter()
                .map(|n| {
                    at += n;
                    message[at - n..at].to_vec()
                })
                .collect()
        };
        // Tag: sent from parts, received into parts of other sizes.
        let recv_parts: Vec<Vec<u8>> = sizes(len).into_iter().rev().map(|n| vec![0u8; n]).collect();
        let recv = server.tag_recv(IovRecv::new(recv_parts), 5, u64::MAX, RequestParams::default()).unwrap();
        let send = ep.tag_send(IovSend::new(parts.clone()), 5, TagSendParams::default()).unwrap();
        let got = wait(&workers, recv).unwrap();
        assert_eq!(got.info.length, len);
        assert_eq!(got.buf.scatter(got.info.length).concat(), message);
        assert_eq!(wait(&workers, send).unwrap().buf.into_parts(), parts);
        // Stream: the same both ways round.
        let recv = ep
            .stream_recv(
                IovRecv::new(vec![vec![0u8; len / 2], vec![0u8; len - len / 2]]),
                true,
                RequestParams::default(),
            )
            .unwrap();
        server_ep.stream_send(IovSend::new(parts.clone()), RequestParams::default()).unwrap();
        let got = wait(&workers, recv).unwrap();
        assert_eq!(got.buf.scatter(got.info.length).concat(), message);
    }
}

/// A message longer than the parts fills them and reports truncation, as a contiguous receive
/// of that total length would.
#[test]
fn a_message_longer_than_the_parts_is_truncated() {
    let ctx = Context::with_features(Features::TAG).unwrap();
    let one = ctx.create_worker(&WorkerParams::default()).unwrap();
    let two = ctx.create_worker(&WorkerParams::default()).unwrap();
    let ep = one.create_endpoint(EpParams::remote_address(two.address())).unwrap();
    let recv = two
        .tag_recv(IovRecv::new(vec![vec![0u8; 2], vec![0u8; 3]]), 1, u64::MAX, RequestParams::default())
        .unwrap();
    ep.tag_send(IovSend::new(vec![b"abcdefgh".to_vec()]), 1, TagSendParams::default()).unwrap();
    let result = wait(&[&one, &two], recv);
    assert_eq!(result.err(), Some(zcx::Status::MessageTruncated));
}
