//! Client and server over a listener: the Rust counterpart of UCX's `ucp_client_server`.
//!
//! The server listens on a socket address ([`Worker::listen`]); its connection handler keeps each
//! [`ConnRequest`], which the main loop accepts by creating an endpoint from it
//! ([`EpParams::conn_request`]). The client connects to the address ([`EpParams::sockaddr`]). Then
//! the client sends a message and the server answers with one, over the API `--mode` picks:
//!
//! - `tag`: [`Endpoint::tag_send`] and [`Worker::tag_recv`];
//! - `stream`: [`Endpoint::stream_send`] and [`Endpoint::stream_recv`] (waiting for all the bytes);
//! - `am`: [`Endpoint::am_send`] and an active-message handler ([`Worker::set_am_handler`]) that
//!   receives the data with [`zcx::AmMessage::recv_data`] (copied at once when it came eagerly,
//!   fetched from the sender when it came by rendezvous).
//!
//! Each side knows what the other sends, prints what it received and fails if it differs. The
//! server serves one client, then exits.
//!
//! ```sh
//! cargo run --example client_server -- server 127.0.0.1:13337 --mode tag    # port 0 picks a free port
//! cargo run --example client_server -- client 127.0.0.1:13337 --mode tag
//! ```
//!
//! Both sides must use the same mode (`tag` by default). `ZCX_*` variables apply as usual.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use zcx::{
    AmSendParams, CloseMode, ConnRequest, Context, Endpoint, EpParams, Features, ListenerParams, Request,
    RequestParams, Status, TagSendParams, Worker, WorkerParams,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const TAG: u64 = 0xc5;
const AM_ID: u16 = 7;

const USAGE: &str = "\
usage: client_server server|client [ADDR] [--mode tag|stream|am]
ADDR is 127.0.0.1:13337 unless given.";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tag,
    Stream,
    Am,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Tag => "tag",
            Mode::Stream => "stream",
            Mode::Am => "am",
        }
    }
}

/// Receives of active-message data the handler started, in arrival order.
type AmInbox = Arc<Mutex<VecDeque<Request<Vec<u8>>>>>;

fn main() -> ExitCode {
    let Some((server, addr, mode)) = parse_args() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(server, addr, mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(server: bool, addr: SocketAddr, mode: Mode) -> Result<()> {
    let ctx = Context::with_features(Features::TAG | Features::STREAM | Features::AM)?;
    let worker = ctx.create_worker(&WorkerParams::default())?;
    let inbox = AmInbox::default();
    if mode == Mode::Am {
        let queue = Arc::clone(&inbox);
        worker.set_am_handler(
            AM_ID,
            Some(Box::new(move |msg: &mut zcx::AmMessage| {
                // The handler runs inside `progress`: start the receive and let the main loop wait.
                match msg.recv_data(vec![0u8; msg.data_len()]) {
                    Ok(request) => queue.lock().unwrap().push_back(request),
                    Err(status) => eprintln!("active message dropped: {status}"),
                }
                Status::Ok
            })),
        );
    }
    if server {
        run_server(&worker, addr, mode, &inbox)
    } else {
        run_client(&worker, addr, mode, &inbox)
    }
}

fn run_server(worker: &Worker, addr: SocketAddr, mode: Mode, inbox: &AmInbox) -> Result<()> {
    let pending: Arc<Mutex<Option<ConnRequest>>> = Arc::default();
    let slot = Arc::clone(&pending);
    let listener = worker.listen(ListenerParams {
        sockaddr: Some(addr),
        // Runs inside `progress`; a request not taken by the time the next one comes is dropped,
        // which rejects it.
        conn_handler: Some(Box::new(move |request| *slot.lock().unwrap() = Some(request))),
        ..Default::default()
    })?;
    println!("server: listening on {} ({} mode)", listener.sockaddr(), mode.name());

    let request = loop {
        if let Some(request) = pending.lock().unwrap().take() {
            break request;
        }
        worker.progress();
    };
    let client = request.client_addr().map_or("an unknown address".into(), |a| a.to_string());
    println!("server: connection request from {client}");
    let ep = worker.create_endpoint(EpParams::conn_request(request))?;

    let expected = message(mode, "client");
    let got = receive(worker, &ep, mode, inbox, expected.len())?;
    check("server", &got, &expected)?;
    send(&ep, mode, message(mode, "server"))?;
    close(&ep)
}

fn run_client(worker: &Worker, addr: SocketAddr, mode: Mode, inbox: &AmInbox) -> Result<()> {
    let ep = worker.create_endpoint(EpParams::sockaddr(addr))?;
    println!("client: connecting to {addr} ({} mode)", mode.name());
    // Operations issued while the endpoint connects go out once it has.
    send(&ep, mode, message(mode, "client"))?;
    let expected = message(mode, "server");
    let got = receive(worker, &ep, mode, inbox, expected.len())?;
    check("client", &got, &expected)?;
    close(&ep)
}

/// The message the `from` side sends.
fn message(mode: Mode, from: &str) -> String {
    format!("{} message from the {from}", mode.name())
}

/// Sends `text` and waits until its buffer is free again.
fn send(ep: &Endpoint, mode: Mode, text: String) -> Result<()> {
    let bytes = text.into_bytes();
    match mode {
        Mode::Tag => ep.tag_send(bytes, TAG, TagSendParams::default())?.wait()?,
        Mode::Stream => ep.stream_send(bytes, RequestParams::default())?.wait()?,
        Mode::Am => ep.am_send(AM_ID, &[], bytes, AmSendParams::default())?.wait()?,
    };
    Ok(())
}

/// Receives a message of `len` bytes.
fn receive(worker: &Worker, ep: &Endpoint, mode: Mode, inbox: &AmInbox, len: usize) -> Result<Vec<u8>> {
    let done = match mode {
        Mode::Tag => worker.tag_recv(vec![0u8; len], TAG, u64::MAX, RequestParams::default())?.wait()?,
        // `waitall`: complete once all `len` bytes are there, however the stream split them.
        Mode::Stream => ep.stream_recv(vec![0u8; len], true, RequestParams::default())?.wait()?,
        Mode::Am => loop {
            let next = inbox.lock().unwrap().pop_front();
            match next {
                Some(request) => break request.wait()?,
                None => {
                    worker.progress();
                }
            }
        },
    };
    let mut bytes = done.buf;
    bytes.truncate(done.info.length);
    Ok(bytes)
}

/// Prints what `who` received, and fails unless it is `expected`.
fn check(who: &str, got: &[u8], expected: &str) -> Result<()> {
    let text = String::from_utf8_lossy(got);
    println!("{who}: received \"{text}\"");
    if text != expected {
        return Err(format!("{who}: expected \"{expected}\"").into());
    }
    Ok(())
}

/// Closes `ep` once what was sent on it has arrived (`ucp_ep_close_nbx` without `FORCE`).
fn close(ep: &Endpoint) -> Result<()> {
    ep.close(CloseMode::Flush)?.wait()?;
    Ok(())
}

fn parse_args() -> Option<(bool, SocketAddr, Mode)> {
    let mut args = std::env::args().skip(1);
    let server = match args.next()?.as_str() {
        "server" => true,
        "client" => false,
        _ => return None,
    };
    let mut addr = SocketAddr::from(([127, 0, 0, 1], 13337));
    let mut mode = Mode::Tag;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mode" => {
                let name = args.next()?;
                mode = [Mode::Tag, Mode::Stream, Mode::Am].into_iter().find(|m| m.name() == name)?;
            }
            a if !a.starts_with('-') => addr = a.parse().ok()?,
            _ => return None,
        }
    }
    Some((server, addr, mode))
}
