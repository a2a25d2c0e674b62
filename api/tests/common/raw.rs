//! A peer that speaks zcx's TCP framing by hand, to send what no honest worker would.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};

/// Writes one transport frame (length prefix + bytes) to a raw socket.
pub fn raw_frame(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut framed = (bytes.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed)
}

/// The bytes of a frame carrying `op` and `payload`.
pub fn op_frame(op: &Op, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = op.encode(&mut header);
    let mut frame = header[..n].to_vec();
    frame.extend_from_slice(payload);
    frame
}

/// Sends a handshake step as a frame.
pub fn raw_hello(stream: &mut TcpStream, step: &zcx_control::HandshakeWire) -> std::io::Result<()> {
    raw_frame(stream, &op_frame(&Op::Hello, &step.encode()))
}

/// Every byte that arrives on `stream` while `during` runs in a loop for `window`.
pub fn received_while(stream: &mut TcpStream, window: Duration, mut during: impl FnMut()) -> Vec<u8> {
    stream.set_nonblocking(true).expect("nonblocking raw socket");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + window;
    while Instant::now() < end {
        during();
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    got
}
