//! `HandshakeWire::decode` on peer bytes: accepted frames re-encode to their canonical form and decode
//! back to the same value; structured values round-trip through encode and decode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_control::HandshakeWire;

fuzz_target!(|data: &[u8]| zcx_fuzz::control::fuzz::<HandshakeWire>(data));
