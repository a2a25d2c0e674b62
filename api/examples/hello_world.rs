//! Hello world over zcx: the Rust counterpart of UCX's `ucp_hello_world`.
//!
//! A server and a client process exchange their worker addresses over a plain TCP socket, connect
//! endpoints to each other by those addresses, and the server sends a tagged message that the
//! client probes for, receives and prints:
//!
//! 1. the server sends its worker address ([`Worker::address`]) to the client over TCP;
//! 2. the client connects an endpoint to it ([`EpParams::remote_address`]) and sends its own worker
//!    address in a tag message;
//! 3. the server probes for that message ([`Worker::tag_probe_remove`]), receives it, connects an
//!    endpoint back to the client and sends it the message;
//! 4. the client probes for the message, receives it and prints it;
//! 5. one byte each way over TCP, so neither side closes its endpoint while the other still uses it.
//!
//! Run the server, then the client in another terminal:
//!
//! ```sh
//! cargo run --example hello_world -- server 127.0.0.1:13337    # port 0 picks a free port
//! cargo run --example hello_world -- client 127.0.0.1:13337
//! ```
//!
//! Options: `--wait` (either side) sleeps in [`Worker::wait`] (`ucp_worker_wait`) whenever progress
//! finds nothing to do, instead of busy-polling; `--message TEXT` (server) is the text to send.
//! `ZCX_*` variables apply as usual: with `ZCX_TLS=tcp` the endpoints stay off shared memory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;

use zcx::{
    CloseMode, Context, Endpoint, EpParams, Features, RequestParams, TagSendParams, Worker, WorkerParams,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The tag of both messages; receives match all of its bits.
const TAG: u64 = 0x1337_a880;

const USAGE: &str = "\
usage: hello_world server [ADDR] [--wait] [--message TEXT]
       hello_world client [ADDR] [--wait]
ADDR is 127.0.0.1:13337 unless given.";

struct Options {
    server: bool,
    addr: SocketAddr,
    wait: bool,
    message: String,
}

fn main() -> ExitCode {
    let Some(opts) = parse_args() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Options) -> Result<()> {
    let mut features = Features::TAG;
    if opts.wait {
        features |= Features::WAKEUP;
    }
    let ctx = Context::with_features(features)?;
    let worker = ctx.create_worker(&WorkerParams::default())?;
    if opts.server {
        server(&worker, opts)
    } else {
        client(&worker, opts)
    }
}

fn server(worker: &Worker, opts: &Options) -> Result<()> {
    let listener = TcpListener::bind(opts.addr)?;
    println!("server: waiting for a client on {}", listener.local_addr()?);
    let (mut sock, peer) = listener.accept()?;
    send_blob(&mut sock, worker.address())?;

    let client_address = probe_and_recv(worker, opts.wait)?;
    println!("server: received the worker address of the client at {peer} ({} bytes)", client_address.len());
    let ep = worker.create_endpoint(EpParams::remote_address(&client_address))?;
    ep.tag_send(opts.message.clone().into_bytes(), TAG, TagSendParams::default())?.wait()?;
    println!("server: sent {} bytes", opts.message.len());

    barrier(&mut sock)?;
    close(&ep)
}

fn client(worker: &Worker, opts: &Options) -> Result<()> {
    let mut sock = TcpStream::connect(opts.addr)?;
    let server_address = recv_blob(&mut sock)?;
    let ep = worker.create_endpoint(EpParams::remote_address(&server_address))?;
    // The worker address is a byte string like any other payload.
    ep.tag_send(worker.address().to_vec(), TAG, TagSendParams::default())?.wait()?;

    let message = String::from_utf8(probe_and_recv(worker, opts.wait)?)?;
    println!("client: received the message: {message}");

    barrier(&mut sock)?;
    close(&ep)
}

/// Waits for the next message with [`TAG`] as UCX's example does: probe, progressing (or sleeping)
/// until one is there, then receive it into a buffer of its length.
fn probe_and_recv(worker: &Worker, sleep: bool) -> Result<Vec<u8>> {
    let message = loop {
        if let Some(message) = worker.tag_probe_remove(TAG, u64::MAX) {
            break message;
        }
        // Sleep only when progress found nothing to do: `wait` returns at once if work arrived since.
        if worker.progress() == 0 && sleep {
            worker.wait()?;
        }
    };
    let len = message.length();
    Ok(message.recv(vec![0u8; len], RequestParams::default())?.wait()?.buf)
}

/// Closes `ep` after its outstanding operations completed (`ucp_ep_close_nbx` without `FORCE`).
fn close(ep: &Endpoint) -> Result<()> {
    ep.close(CloseMode::Flush)?.wait()?;
    Ok(())
}

/// Sends `bytes` with a 4-byte length in front.
fn send_blob(sock: &mut TcpStream, bytes: &[u8]) -> Result<()> {
    sock.write_all(&u32::try_from(bytes.len())?.to_le_bytes())?;
    sock.write_all(bytes)?;
    Ok(())
}

/// Receives what [`send_blob`] sent.
fn recv_blob(sock: &mut TcpStream) -> Result<Vec<u8>> {
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)?;
    let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
    sock.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// Returns once the peer has reached its own barrier too.
fn barrier(sock: &mut TcpStream) -> Result<()> {
    sock.write_all(&[1])?;
    sock.read_exact(&mut [0u8])?;
    Ok(())
}

fn parse_args() -> Option<Options> {
    let mut args = std::env::args().skip(1);
    let server = match args.next()?.as_str() {
        "server" => true,
        "client" => false,
        _ => return None,
    };
    let mut opts = Options {
        server,
        addr: SocketAddr::from(([127, 0, 0, 1], 13337)),
        wait: false,
        message: "Hello, world! (a tag message over zcx)".into(),
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--wait" => opts.wait = true,
            "--message" if server => opts.message = args.next()?,
            addr if !addr.starts_with('-') => opts.addr = addr.parse().ok()?,
            _ => return None,
        }
    }
    Some(opts)
}
