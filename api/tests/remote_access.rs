//! Remote access is all or nothing, and decided by the owner's own records.
//!
//! Two attacks an earlier version let through:
//! - a put (or get) whose range starts inside a region and ends outside it was refused only after
//!   the fragments that fit had been written;
//! - over shared memory, once the owner had accepted one access with a key, later accesses were
//!   checked against the bounds and protection written in the packed key, so a peer that edited a
//!   key it was given (longer, shifted, or with protection the owner never granted) read and wrote
//!   outside what the owner allowed.
//!
//! Each test runs over whatever transport the process picks (shared memory by default; the suite
//! runs this file again with `ZCX_TLS=tcp`), and checks the owner's bytes, not only the status.

mod common;

use std::sync::Arc;

use common::net::{collecting_listener, progress_until, wait, AcceptedAll};
use zcx::{
    AtomicOp, AtomicSize, Context, Endpoint, EpParams, EpRkey, Features, MemHandle, MemMapParams, Prot,
    Request, RequestParams, Status, Worker, WorkerParams,
};
use zcx_control::RkeyWire;

const RW: Prot = Prot::LOCAL_READ.union(Prot::LOCAL_WRITE).union(Prot::REMOTE_READ).union(Prot::REMOTE_WRITE);
const RO: Prot = Prot::LOCAL_READ.union(Prot::LOCAL_WRITE).union(Prot::REMOTE_READ);
const LOCAL: Prot = Prot::LOCAL_READ.union(Prot::LOCAL_WRITE);
const MIB: usize = 1 << 20;

struct Pair {
    ctx: Context,
    server: Worker,
    client: Worker,
    ep: Endpoint,
    _server_eps: AcceptedAll,
}

impl Pair {
    fn new() -> Pair {
        let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AMO32 | Features::AMO64)
            .unwrap();
        let server = ctx.create_worker(&WorkerParams::default()).unwrap();
        let client = ctx.create_worker(&WorkerParams::default()).unwrap();
        let (listener, eps) = collecting_listener(&server);
        let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
        let pair = Pair { ctx, server, client, ep, _server_eps: eps };
        let connected = Arc::clone(&pair._server_eps);
        progress_until(&pair.workers(), "the server to accept", || !connected.lock().unwrap().is_empty());
        // One round trip, so the endpoint runs on its final transport before keys are unpacked.
        wait(&pair.workers(), pair.ep.flush().unwrap()).unwrap();
        pair
    }

    fn workers(&self) -> [&Worker; 2] {
        [&self.client, &self.server]
    }

    /// The outcome of an operation, whether it was refused at once or by the target.
    fn outcome<B: Send + 'static>(&self, issued: zcx::Result<Request<B>>) -> Result<B, Status> {
        Ok(wait(&self.workers(), issued?)?.buf)
    }

    fn flushed(&self) -> Result<(), Status> {
        self.outcome(self.ep.flush()).map(drop)
    }
}

/// A region filled with `fill`.
fn region(ctx: &Context, len: usize, prot: Prot, fill: u8) -> MemHandle {
    let memh = ctx.mem_map(&MemMapParams::alloc(len).prot(prot)).unwrap();
    // SAFETY: `len` bytes mapped by the handle.
    unsafe { std::ptr::write_bytes(memh.address(), fill, len) };
    memh
}

/// `len` bytes at `addr` of memory this test mapped.
fn bytes_at(addr: *const u8, len: usize) -> Vec<u8> {
    // SAFETY: every caller passes a range inside a live handle of this test.
    unsafe { std::slice::from_raw_parts(addr, len) }.to_vec()
}

fn snapshot(memh: &MemHandle) -> Vec<u8> {
    bytes_at(memh.address(), memh.length())
}

/// The handle's packed key, edited by `edit`, unpacked on the endpoint.
fn forged(ep: &Endpoint, memh: &MemHandle, edit: impl FnOnce(&mut RkeyWire)) -> EpRkey {
    let mut wire = RkeyWire::decode(&memh.rkey_pack().unwrap()).unwrap();
    edit(&mut wire);
    ep.rkey_unpack(&wire.encode()).unwrap()
}

/// Puts, gets and implicit puts that start inside the region and end outside it are refused
/// whole: by the initiator where the key shows it, by the target where the key claims more than
/// the owner registered (so only the target's check of the whole range stands between the put and
/// the bytes past the region), and by either once the owner vouched for the key.
#[test]
fn accesses_that_run_past_the_end_are_refused_before_any_byte_moves() {
    let p = Pair::new();
    // The region lies inside a larger allocation, so bytes past its end are mapped, and a
    // fragment that got through would land there rather than fault.
    let parent = region(&p.ctx, 4 * MIB, LOCAL, 0x5A);
    let region_addr = parent.address().wrapping_add(MIB);
    // SAFETY: the range lies inside `parent`, which outlives `memh`.
    let memh =
        p.ctx.mem_map(&unsafe { MemMapParams::new().address(region_addr) }.length(MIB).prot(RW)).unwrap();
    let base = memh.address() as u64;
    let before = snapshot(&parent);
    for kind in ["fresh", "vouched", "claims more"] {
        let rkey = match kind {
            "claims more" => forged(&p.ep, &memh, |w| {
                w.length = 2 * MIB as u64;
                // Without a locator the key never opens a direct view: every access goes to the owner.
                w.shm = None;
            }),
            _ => p.ep.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap(),
        };
        if kind == "vouched" {
            // An honest access first: the key is then known good to the owner.
            let got = p.outcome(p.ep.get(vec![0u8; 8], base, &rkey, RequestParams::default())).unwrap();
            assert_eq!(got, vec![0x5A; 8]);
        }
        let straddles =
            [(base, MIB + 1), (base + 768 * 1024, MIB), (base + MIB as u64 - 1, 2), (base, 2 * MIB)];
        for (addr, len) in straddles {
            let what = format!("{len} bytes at base+{:#x} ({kind} key)", addr - base);
            let put = p.outcome(p.ep.put(vec![0xEE; len], addr, &rkey, RequestParams::default()));
            assert_eq!(put.unwrap_err(), Status::InvalidAddr, "put of {what}");
            assert!(snapshot(&parent) == before, "a refused put of {what} wrote");
            let get = p.outcome(p.ep.get(vec![0u8; len], addr, &rkey, RequestParams::default()));
            assert_eq!(get.unwrap_err(), Status::InvalidAddr, "get of {what}");
            let nbi = p.ep.put_nbi(&vec![0xEE; len], addr, &rkey).and_then(|()| p.flushed());
            assert_eq!(nbi.unwrap_err(), Status::InvalidAddr, "implicit put of {what}");
            assert!(snapshot(&parent) == before, "a refused implicit put of {what} wrote");
        }
        // The key and the endpoint still work for accesses inside.
        let put = p.outcome(p.ep.put(vec![0x11; 16], base + 64, &rkey, RequestParams::default()));
        assert!(put.is_ok(), "{kind} key: put inside refused");
        assert_eq!(bytes_at(region_addr.wrapping_add(64), 16), vec![0x11; 16]);
        // SAFETY: 16 bytes inside the handle.
        unsafe { std::ptr::write_bytes(region_addr.wrapping_add(64), 0x5A, 16) };
    }
}

/// A read-only region, and a key whose protection was edited to add `REMOTE_WRITE`: the owner
/// accepts reads with it, never writes, also after it accepted a read.
#[test]
fn a_key_edited_to_add_write_protection_never_writes() {
    let p = Pair::new();
    let memh = region(&p.ctx, 64 << 10, RO, 0x5A);
    let base = memh.address() as u64;
    let before = snapshot(&memh);
    let rkey = forged(&p.ep, &memh, |w| w.prot |= RW.bits());
    for round in 0..3 {
        // Reads are what the owner allowed: they may go through.
        let got = p.outcome(p.ep.get(vec![0u8; 8], base, &rkey, RequestParams::default()));
        if let Ok(got) = got {
            assert_eq!(got, vec![0x5A; 8]);
        }
        let put = p.outcome(p.ep.put(vec![1u8; 8], base, &rkey, RequestParams::default()));
        assert_eq!(put.unwrap_err(), Status::InvalidParam, "put, round {round}");
        let nbi = p.ep.put_nbi(&[1u8; 8], base, &rkey).and_then(|()| p.flushed());
        assert_eq!(nbi.unwrap_err(), Status::InvalidParam, "implicit put, round {round}");
        for size in [AtomicSize::U32, AtomicSize::U64] {
            let amo = p.ep.atomic(AtomicOp::Swap, size, 1, 0, base, &rkey, RequestParams::default());
            assert_eq!(p.outcome(amo).unwrap_err(), Status::InvalidParam, "{size:?} atomic, round {round}");
        }
        assert!(snapshot(&memh) == before, "round {round}: the read-only region was written");
    }
}

/// A region registered inside a larger allocation, and keys edited to reach the rest of it: a
/// longer length, a base moved down, a locator offset moved. None of them reads or writes a byte
/// outside the registered range, before or after the owner accepted an access inside it.
#[test]
fn keys_edited_to_reach_past_their_region_touch_nothing_outside_it() {
    let p = Pair::new();
    // The allocation itself is not remotely accessible; only the registered middle is.
    let parent = region(&p.ctx, MIB, LOCAL, 0x5A);
    let inner_off = 256 << 10;
    let inner_len = 64 << 10;
    let inner_addr = parent.address().wrapping_add(inner_off);
    // SAFETY: the range lies inside `parent`, which outlives `inner`.
    let inner = p
        .ctx
        .mem_map(&unsafe { MemMapParams::new().address(inner_addr) }.length(inner_len).prot(RW))
        .unwrap();
    let inner_base = inner.address() as u64;
    let before = snapshot(&parent);
    type Edit = fn(&mut RkeyWire);
    let edits: [(&str, Edit); 4] = [
        ("longer", |w| w.length = 512 << 10),
        ("base moved down", |w| {
            w.base -= 128 << 10;
            w.length += 128 << 10;
            if let Some(shm) = &mut w.shm {
                shm.map_offset -= 128 << 10;
            }
        }),
        ("locator moved", |w| {
            if let Some(shm) = &mut w.shm {
                shm.map_offset += 512 << 10;
            }
        }),
        ("base moved, locator kept", |w| w.base += 32 << 10),
    ];
    for (name, edit) in edits {
        let rkey = forged(&p.ep, &inner, edit);
        for round in 0..3 {
            // Inside the registered range, what the owner allowed (the owner may also refuse the
            // key outright). What matters is which bytes it touches.
            let inside = p.outcome(p.ep.put(vec![0x22; 8], inner_base, &rkey, RequestParams::default()));
            if inside.is_ok() {
                assert_eq!(bytes_at(inner_addr, 8), vec![0x22; 8], "{name}: put landed elsewhere");
                // SAFETY: 8 bytes inside `inner`.
                unsafe { std::ptr::write_bytes(inner_addr, 0x5A, 8) };
            }
            let got = p.outcome(p.ep.get(vec![0u8; 8], inner_base + 8, &rkey, RequestParams::default()));
            if let Ok(got) = got {
                assert_eq!(got, vec![0x5A; 8], "{name}: get read elsewhere");
            }
            for outside in [inner_base + inner_len as u64, inner_base + (128 << 10), inner_base - 8] {
                let what = format!("{name}, round {round}, at inner{:+}", outside as i64 - inner_base as i64);
                let put = p.outcome(p.ep.put(vec![0xEE; 8], outside, &rkey, RequestParams::default()));
                assert!(put.is_err(), "put outside the region accepted: {what}");
                let get = p.outcome(p.ep.get(vec![0u8; 8], outside, &rkey, RequestParams::default()));
                assert!(get.is_err(), "get outside the region accepted: {what}");
                let nbi = p.ep.put_nbi(&[0xEE; 8], outside, &rkey).and_then(|()| p.flushed());
                assert!(nbi.is_err(), "implicit put outside the region accepted: {what}");
                let amo = p.ep.atomic(
                    AtomicOp::Add,
                    AtomicSize::U64,
                    1,
                    0,
                    outside,
                    &rkey,
                    RequestParams::default(),
                );
                assert!(p.outcome(amo).is_err(), "atomic outside the region accepted: {what}");
            }
            assert!(snapshot(&parent) == before, "{name}, round {round}: bytes changed");
        }
    }
    drop(inner);
}
