//! Two workers that make endpoints to each other's address share one connection (UCP's pairing):
//! a stream sent on one endpoint arrives on the other, whether the endpoints were made one after
//! the other or at once. And a third process that claims to be one of the workers (names are
//! public) gets nothing meant for that worker.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::net::wait;
use common::raw::{raw_hello, received_while};
use zcx::{Context, Endpoint, EpParams, Features, RequestParams, TagSendParams, Worker, WorkerParams};
use zcx_control::{HandshakeWire, TransportAddress, WorkerAddressWire};

fn context() -> Context {
    Context::with_features(Features::TAG | Features::STREAM).unwrap()
}

fn worker(ctx: &Context, name: &str) -> Worker {
    let name = format!("{name}-{}", std::process::id());
    ctx.create_worker(&WorkerParams { name: Some(name), ..Default::default() }).unwrap()
}

fn endpoint_to(from: &Worker, to: &Worker) -> Endpoint {
    from.create_endpoint(EpParams::remote_address(to.address())).unwrap()
}

/// A stream sent on `a` arrives on `b` and one sent on `b` arrives on `a`: the two are one
/// connection.
fn assert_paired(workers: &[&Worker], a: &Endpoint, b: &Endpoint) {
    for (from, to, bytes) in [(a, b, b"from a to b"), (b, a, b"from b to a")] {
        let recv = to.stream_recv(vec![0u8; bytes.len()], true, RequestParams::default()).unwrap();
        from.stream_send(bytes.to_vec(), RequestParams::default()).unwrap();
        let got = wait(workers, recv).expect("stream bytes arrive on the paired endpoint");
        assert_eq!(&got.buf[..], &bytes[..]);
    }
}

/// Progresses until a tag message sent on `ep` reaches `to`: `ep` is connected.
fn connected(workers: &[&Worker], ep: &Endpoint, to: &Worker, tag: u64) {
    let recv = to.tag_recv(vec![0u8; 2], tag, u64::MAX, RequestParams::default()).unwrap();
    ep.tag_send(b"up".to_vec(), tag, TagSendParams::default()).unwrap();
    wait(workers, recv).expect("a tag message on a new endpoint");
}

#[test]
fn endpoints_made_one_after_the_other_share_a_connection() {
    let ctx = context();
    let (one, two) = (worker(&ctx, "one"), worker(&ctx, "two"));
    let first = endpoint_to(&one, &two);
    connected(&[&one, &two], &first, &two, 1);
    let second = endpoint_to(&two, &one);
    assert_paired(&[&one, &two], &first, &second);
}

#[test]
fn endpoints_made_at_once_share_a_connection() {
    let ctx = context();
    for (a, b) in [("aa", "zz"), ("zz", "aa")] {
        let (one, two) = (worker(&ctx, a), worker(&ctx, b));
        let first = endpoint_to(&one, &two);
        let second = endpoint_to(&two, &one);
        assert_paired(&[&one, &two], &first, &second);
    }
}

/// A raw TCP connection to `victim`'s worker address.
fn dial(victim: &Worker) -> TcpStream {
    let address = WorkerAddressWire::decode(victim.address()).unwrap();
    let tcp = address
        .transports
        .iter()
        .find_map(|t| match t {
            TransportAddress::Uring { addr } => Some(*addr),
            _ => None,
        })
        .expect("the worker listens on TCP");
    TcpStream::connect(tcp).unwrap()
}

/// A connection request that claims to come from `claimed` (whose address anyone it was given
/// to has), with a token of the impostor's choosing. The address it gives is `claimed`'s as a
/// worker on another host would give it (TCP only), so the answer comes back on the impostor's
/// own connection.
fn claim(claimed: &Worker, token: u64) -> HandshakeWire {
    let mut client_address = WorkerAddressWire::decode(claimed.address()).unwrap();
    client_address.boot_id = None;
    client_address.transports.retain(|t| matches!(t, TransportAddress::Uring { .. }));
    HandshakeWire::ConnRequest {
        client_id: 0,
        ep_name: "impostor".into(),
        err_mode_peer: false,
        client_address,
        client_ep_id: token,
        pair_token: 0,
    }
}

const SECRET: &[u8] = b"meant for the real worker only";

/// `victim` sends SECRET on `ep` (to `real`): the real worker gets it, and the impostor's socket
/// sees none of it.
fn secret_reaches_only_the_real_worker(
    victim: &Worker,
    real: &Worker,
    ep: &Endpoint,
    impostor: &mut TcpStream,
) {
    let recv = real.tag_recv(vec![0u8; SECRET.len()], 99, u64::MAX, RequestParams::default()).unwrap();
    ep.tag_send(SECRET.to_vec(), 99, TagSendParams::default()).unwrap();
    let mut recv = Some(recv);
    let mut got = None;
    let seen = received_while(impostor, Duration::from_millis(500), || {
        victim.progress();
        real.progress();
        if let Some(r) = recv.take() {
            match r.try_take() {
                Ok(done) => got = Some(done.expect("tag receive").buf),
                Err(r) => recv = Some(r),
            }
        }
    });
    if let Some(r) = recv {
        got = Some(wait(&[victim, real], r).expect("tag receive").buf);
    }
    assert_eq!(got.as_deref(), Some(SECRET));
    assert!(!seen.windows(SECRET.len()).any(|w| w == SECRET), "the impostor received the secret");
}

/// An impostor connects to `victim` first, claiming to be `real`. The victim's endpoint to the
/// real worker must not take the impostor's connection: the pairing proposal carries the
/// impostor's token, which the real worker never issued.
#[test]
fn an_impostor_that_connected_first_gets_nothing() {
    let ctx = context();
    let (victim, real) = (worker(&ctx, "victim"), worker(&ctx, "real"));
    let mut impostor = dial(&victim);
    raw_hello(&mut impostor, &claim(&real, 0x1234_5678)).unwrap();
    // The victim accepts the claim as an implicit endpoint; the impostor sees the answer.
    let answer = received_while(&mut impostor, Duration::from_millis(300), || {
        victim.progress();
    });
    assert!(!answer.is_empty(), "the victim answered the impostor's request");
    let ep = endpoint_to(&victim, &real);
    secret_reaches_only_the_real_worker(&victim, &real, &ep, &mut impostor);
    // The real worker's own endpoint back still pairs with the victim's.
    let back = endpoint_to(&real, &victim);
    assert_paired(&[&victim, &real], &ep, &back);
}

/// An impostor's request, claiming to be `real`, crosses the victim's unanswered request to the
/// real worker, with the impostor's proof of a token it guessed. Whichever name is smaller, the
/// victim's endpoint stays on the connection it dialled.
#[test]
fn an_impostor_whose_request_crosses_ours_gets_nothing() {
    let ctx = context();
    for (victim_name, real_name) in [("zz-victim", "aa-real"), ("aa-victim", "zz-real")] {
        let (victim, real) = (worker(&ctx, victim_name), worker(&ctx, real_name));
        // The real worker does not progress yet: the victim's request stays unanswered.
        let ep = endpoint_to(&victim, &real);
        let mut impostor = dial(&victim);
        raw_hello(&mut impostor, &claim(&real, 0x5151)).unwrap();
        raw_hello(&mut impostor, &HandshakeWire::PairProof { client_ep_id: 0x0BAD_CAFE }).unwrap();
        received_while(&mut impostor, Duration::from_millis(200), || {
            victim.progress();
        });
        secret_reaches_only_the_real_worker(&victim, &real, &ep, &mut impostor);
    }
}

/// A flood of impostors' requests crossing the victim's own request: the victim holds a bounded
/// number and answers the rest at once, keeps serving, and its endpoint still reaches only the
/// real worker.
#[test]
fn a_flood_of_crossing_claims_is_bounded_and_harmless() {
    let ctx = context();
    let (victim, real) = (worker(&ctx, "zz-victim"), worker(&ctx, "aa-real"));
    let ep = endpoint_to(&victim, &real);
    let mut impostors: Vec<TcpStream> = (0..200).map(|_| dial(&victim)).collect();
    for (i, impostor) in impostors.iter_mut().enumerate() {
        raw_hello(impostor, &claim(&real, 0x1000 + i as u64)).unwrap();
    }
    let mut first = impostors.pop().unwrap();
    received_while(&mut first, Duration::from_millis(300), || {
        victim.progress();
    });
    secret_reaches_only_the_real_worker(&victim, &real, &ep, &mut first);
    for impostor in &mut impostors {
        let seen = received_while(impostor, Duration::from_millis(1), || {
            victim.progress();
        });
        assert!(!seen.windows(SECRET.len()).any(|w| w == SECRET), "an impostor received the secret");
    }
}
