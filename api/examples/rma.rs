//! Remote memory access: put, get and an atomic on memory of another process.
//!
//! The server maps a region the client may read and write ([`zcx::Context::mem_map`] with remote
//! protection), writes a greeting and a counter into it, and sends the client the region's address
//! and packed remote key ([`zcx::MemHandle::rkey_pack`]) in a tag message. The client unpacks the
//! key on its endpoint ([`Endpoint::rkey_unpack`]) and, without the server's code taking part:
//!
//! 1. reads the greeting with [`Endpoint::get`];
//! 2. writes a text next to it with [`Endpoint::put`];
//! 3. adds to the counter with a fetching [`Endpoint::atomic`] (`ucp_atomic_op_nbx` with
//!    `UCP_ATOMIC_OP_ADD`), which returns the value it replaced;
//! 4. flushes the endpoint ([`Endpoint::flush`]): every operation issued so far has completed at
//!    the server;
//! 5. reads the text back, then tells the server it is done.
//!
//! The server then reads its own memory and checks what the put and the atomic left there. Each
//! side prints what it saw and fails if it is not what the other side wrote. (zcx carries the
//! operations over shared memory between processes of one host, over TCP otherwise; the server's
//! worker must be progressed meanwhile, as it is here while it waits for the client's message.)
//!
//! ```sh
//! cargo run --example rma -- server 127.0.0.1:13337    # port 0 picks a free port
//! cargo run --example rma -- client 127.0.0.1:13337
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use zcx::{
    AtomicOp, AtomicSize, CloseMode, Context, Endpoint, EpParams, Features, ListenerParams, MemHandle,
    MemMapParams, Prot, RequestParams, TagSendParams, Worker, WorkerParams,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The server's message with the region's address and key.
const KEY_TAG: u64 = 1;
/// The client's message saying it is done.
const DONE_TAG: u64 = 2;

// The region, and where each thing lies in it; the counter is 8-byte aligned, as the target of a
// 64-bit atomic must be.
const REGION_LEN: usize = 4096;
const GREETING_AT: usize = 0;
const PUT_AT: usize = 64;
const COUNTER_AT: usize = 128;

const GREETING: &[u8] = b"hello from the server's memory";
const PUT_TEXT: &[u8] = b"written by the client with put";
const COUNTER_START: u64 = 41;
const ADD: u64 = 1;

const USAGE: &str = "\
usage: rma server|client [ADDR]
ADDR is 127.0.0.1:13337 unless given.";

fn main() -> ExitCode {
    let Some((server, addr)) = parse_args() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(server, addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(server: bool, addr: SocketAddr) -> Result<()> {
    let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AMO64)?;
    let worker = ctx.create_worker(&WorkerParams::default())?;
    if server {
        run_server(&worker, addr)
    } else {
        run_client(&worker, addr)
    }
}

fn run_server(worker: &Worker, addr: SocketAddr) -> Result<()> {
    // An accept handler takes every client as it comes: no decision to make on the request.
    let accepted: Arc<Mutex<Option<Endpoint>>> = Arc::default();
    let slot = Arc::clone(&accepted);
    let listener = worker.listen(ListenerParams {
        sockaddr: Some(addr),
        accept_handler: Some(Box::new(move |ep| *slot.lock().unwrap() = Some(ep))),
        ..Default::default()
    })?;
    println!("server: listening on {}", listener.sockaddr());

    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
    let memh = worker.context().mem_map(&MemMapParams::alloc(REGION_LEN).prot(prot))?;
    write(&memh, GREETING_AT, GREETING);
    // Atomics work on the word in the host's byte order.
    write(&memh, COUNTER_AT, &COUNTER_START.to_ne_bytes());

    let ep = loop {
        if let Some(ep) = accepted.lock().unwrap().take() {
            break ep;
        }
        worker.progress();
    };
    let key = memh.rkey_pack()?;
    let mut key_msg = (memh.address() as u64).to_le_bytes().to_vec();
    key_msg.extend_from_slice(&key);
    ep.tag_send(key_msg, KEY_TAG, TagSendParams::default())?.wait()?;
    println!("server: sent the address and the {}-byte key of a {REGION_LEN}-byte region", key.len());

    // The client's operations are served while this waits.
    worker.tag_recv(Vec::new(), DONE_TAG, u64::MAX, RequestParams::default())?.wait()?;
    let text = memh.slice(PUT_AT, PUT_TEXT.len())?.to_vec();
    check("server: the put left", &text, PUT_TEXT)?;
    let counter = u64::from_ne_bytes(memh.slice(COUNTER_AT, 8)?.to_vec().try_into().expect("8 bytes"));
    println!("server: the counter is {counter}");
    if counter != COUNTER_START + ADD {
        return Err(format!("server: expected the counter at {}", COUNTER_START + ADD).into());
    }
    close(&ep)
}

fn run_client(worker: &Worker, addr: SocketAddr) -> Result<()> {
    let ep = worker.create_endpoint(EpParams::sockaddr(addr))?;
    // Connecting goes on in the background; a flush completes once it has (or fails if it cannot).
    ep.flush()?.wait()?;
    // A packed key is far shorter than this; the completion says how long the message was.
    let done = worker.tag_recv(vec![0u8; 4096], KEY_TAG, u64::MAX, RequestParams::default())?.wait()?;
    let (base, key) = done.buf[..done.info.length].split_at(8);
    let base = u64::from_le_bytes(base.try_into()?);
    let rkey = ep.rkey_unpack(key)?;
    println!("client: got a {}-byte key to the server's region at {base:#x}", key.len());
    let at = |offset: usize| base + offset as u64;

    let got = ep.get(vec![0u8; GREETING.len()], at(GREETING_AT), &rkey, RequestParams::default())?.wait()?;
    check("client: get read", &got.buf, GREETING)?;

    ep.put(PUT_TEXT, at(PUT_AT), &rkey, RequestParams::default())?.wait()?;
    println!("client: put \"{}\"", String::from_utf8_lossy(PUT_TEXT));

    let add =
        ep.atomic(AtomicOp::Add, AtomicSize::U64, ADD, 0, at(COUNTER_AT), &rkey, RequestParams::default());
    let before = add?.wait()?.info.value;
    println!("client: fetch-add of {ADD} found {before}");
    if before != COUNTER_START {
        return Err(format!("client: expected the counter at {COUNTER_START}").into());
    }

    ep.flush()?.wait()?;
    println!("client: flushed");

    let back = ep.get(vec![0u8; PUT_TEXT.len()], at(PUT_AT), &rkey, RequestParams::default())?.wait()?;
    check("client: get read back", &back.buf, PUT_TEXT)?;

    // A synchronous send completes once the server has received it.
    let sync = TagSendParams { sync: true, ..Default::default() };
    ep.tag_send(Vec::new(), DONE_TAG, sync)?.wait()?;
    close(&ep)
}

/// Copies `bytes` into the region at `offset`.
fn write(memh: &MemHandle, offset: usize, bytes: &[u8]) {
    assert!(offset + bytes.len() <= memh.length());
    // SAFETY: the range lies inside the handle's mapping (checked above), which lives as long as
    // `memh`, and no peer has the region's key yet, so nothing else writes it meanwhile.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), memh.address().add(offset), bytes.len()) };
}

/// Prints what was found, and fails unless it is `expected`.
fn check(what: &str, got: &[u8], expected: &[u8]) -> Result<()> {
    println!("{what} \"{}\"", String::from_utf8_lossy(got));
    if got != expected {
        return Err(
            format!("{what} the wrong bytes: expected \"{}\"", String::from_utf8_lossy(expected)).into()
        );
    }
    Ok(())
}

/// Closes `ep` once what was issued on it has completed (`ucp_ep_close_nbx` without `FORCE`).
fn close(ep: &Endpoint) -> Result<()> {
    ep.close(CloseMode::Flush)?.wait()?;
    Ok(())
}

fn parse_args() -> Option<(bool, SocketAddr)> {
    let mut args = std::env::args().skip(1);
    let server = match args.next()?.as_str() {
        "server" => true,
        "client" => false,
        _ => return None,
    };
    let addr = match args.next() {
        Some(addr) => addr.parse().ok()?,
        None => SocketAddr::from(([127, 0, 0, 1], 13337)),
    };
    args.next().is_none().then_some((server, addr))
}
