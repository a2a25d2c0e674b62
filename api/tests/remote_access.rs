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

/// Two workers and an endpoint from one to the other that has not connected yet: nothing was
/// progressed, as in a program that unpacks its peer's keys right after creating the endpoint
/// (`ucx_perftest` does).
struct Unwired {
    ctx: Context,
    server: Worker,
    client: Worker,
    ep: Endpoint,
    accepted: AcceptedAll,
    _listener: zcx::Listener,
}

impl Unwired {
    fn new() -> Unwired {
        let ctx = Context::with_features(Features::TAG | Features::RMA | Features::AMO32 | Features::AMO64)
            .unwrap();
        let server = ctx.create_worker(&WorkerParams::default()).unwrap();
        let client = ctx.create_worker(&WorkerParams::default()).unwrap();
        let (listener, accepted) = collecting_listener(&server);
        let ep = client.create_endpoint(EpParams::sockaddr(listener.sockaddr())).unwrap();
        Unwired { ctx, server, client, ep, accepted, _listener: listener }
    }

    fn workers(&self) -> [&Worker; 2] {
        [&self.client, &self.server]
    }

    /// Progresses both workers until the endpoint is connected; true when it runs over shared
    /// memory, where keys may open a direct view.
    fn connect(&self) -> bool {
        progress_until(&self.workers(), "the endpoint to connect", || {
            !self.accepted.lock().unwrap().is_empty() && self.ep.query().unwrap().status == Status::Ok
        });
        self.ep.query().unwrap().transports == ["shm"]
    }

    fn outcome<B: Send + 'static>(&self, issued: zcx::Result<Request<B>>) -> Result<B, Status> {
        Ok(wait(&self.workers(), issued?)?.buf)
    }
}

/// A key unpacked before its endpoint connected, as `ucx_perftest` unpacks them: over shared
/// memory the owner's verdict on it comes back with the endpoint's first round trip (here a
/// flush), after which puts, gets and atomics are done by the calling thread before the call
/// returns, with the owner's worker never progressed again; and the owner's bounds still hold
/// there.
#[test]
fn a_key_unpacked_before_its_endpoint_connects_is_used_directly_after_a_round_trip() {
    let p = Unwired::new();
    let len = 64 << 10;
    let memh = region(&p.ctx, len, RW, 0x5A);
    let base = memh.address() as u64;
    let rkey = p.ep.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
    assert!(p.ep.put_direct(&[1; 8], base, &rkey).is_none(), "direct before the owner vouched for the key");
    let on_shm = p.connect();
    wait(&p.workers(), p.ep.flush().unwrap()).unwrap();
    if !on_shm {
        // Over the network every access goes to the owner.
        assert!(p.ep.put_direct(&[1; 8], base, &rkey).is_none());
        assert!(p.ep.get_direct(&mut [0; 8], base, &rkey).is_none());
        assert!(p.ep.atomic_direct(AtomicOp::Add, AtomicSize::U64, 1, 0, base, &rkey).is_none());
        let got = p.outcome(p.ep.get(vec![0u8; 8], base, &rkey, RequestParams::default())).unwrap();
        assert_eq!(got, vec![0x5A; 8]);
        return;
    }
    // From here on the owner's worker is never progressed.
    assert_eq!(p.ep.put_direct(&[0x11; 16], base + 64, &rkey), Some(Ok(())));
    assert_eq!(bytes_at(memh.address().wrapping_add(64), 16), vec![0x11; 16]);
    let mut got = [0u8; 16];
    assert_eq!(p.ep.get_direct(&mut got, base + 56, &rkey), Some(Ok(())));
    assert_eq!(got[..8], [0x5A; 8]);
    assert_eq!(got[8..], [0x11; 8]);
    let old = p.ep.atomic_direct(AtomicOp::Add, AtomicSize::U64, 5, 0, base + 128, &rkey);
    assert_eq!(old, Some(Ok(u64::from_le_bytes([0x5A; 8]))));
    let swapped = p.ep.atomic_direct(AtomicOp::Cswap, AtomicSize::U32, 7, 0x5A5A_5A5A, base + 136, &rkey);
    assert_eq!(swapped, Some(Ok(0x5A5A_5A5A)));
    assert_eq!(
        bytes_at(memh.address().wrapping_add(128), 8),
        (u64::from_le_bytes([0x5A; 8]) + 5).to_le_bytes()
    );
    assert_eq!(bytes_at(memh.address().wrapping_add(136), 4), 7u32.to_le_bytes());
    // The calls with requests complete at once too.
    let put = p.ep.put(vec![0x22; 8], base + 256, &rkey, RequestParams::default()).unwrap();
    assert!(put.completed_at_once(), "a put through a vouched key went to the owner");
    assert_eq!(bytes_at(memh.address().wrapping_add(256), 8), vec![0x22; 8]);
    // Past the end: refused here, whole, as the owner would refuse it.
    let before = snapshot(&memh);
    assert_eq!(p.ep.put_direct(&[0xEE; 16], base + len as u64 - 8, &rkey), Some(Err(Status::InvalidAddr)));
    assert_eq!(p.ep.get_direct(&mut [0; 16], base + len as u64 - 8, &rkey), Some(Err(Status::InvalidAddr)));
    let past = p.ep.atomic_direct(AtomicOp::Swap, AtomicSize::U64, 1, 0, base + len as u64, &rkey);
    assert_eq!(past, Some(Err(Status::InvalidAddr)));
    assert!(snapshot(&memh) == before, "a refused direct access wrote");
}

/// Keys edited by a hostile peer (longer, base moved with or without the locator, locator moved,
/// write protection added) and unpacked before the endpoint connected: the direct calls never
/// read or write a byte the owner did not register for them, before or after the owner saw
/// accesses with them. The honest key beside them does go direct, so the direct path was open.
#[test]
fn edited_keys_unpacked_before_their_endpoint_connects_reach_nothing_directly() {
    let p = Unwired::new();
    let parent = region(&p.ctx, MIB, LOCAL, 0x5A);
    let (rw_off, ro_off, inner_len) = (256 << 10, 512 << 10, 64 << 10);
    // SAFETY: both ranges lie inside `parent`, which outlives them.
    let (rw, ro) = unsafe {
        let at = |off: usize| MemMapParams::new().address(parent.address().wrapping_add(off));
        (
            p.ctx.mem_map(&at(rw_off).length(inner_len).prot(RW)).unwrap(),
            p.ctx.mem_map(&at(ro_off).length(inner_len).prot(RO)).unwrap(),
        )
    };
    type Edit = fn(&mut RkeyWire);
    let edits: [(&str, &MemHandle, Edit); 6] = [
        ("honest", &rw, |_| {}),
        ("longer", &rw, |w| w.length = 512 << 10),
        ("base moved down", &rw, |w| {
            w.base -= 128 << 10;
            w.length += 128 << 10;
            if let Some(shm) = &mut w.shm {
                shm.map_offset -= 128 << 10;
            }
        }),
        ("locator moved", &rw, |w| {
            if let Some(shm) = &mut w.shm {
                shm.map_offset += 128 << 10;
            }
        }),
        ("base moved, locator kept", &rw, |w| w.base += 32 << 10),
        ("write added", &ro, |w| w.prot |= RW.bits()),
    ];
    let keys: Vec<(&str, &MemHandle, EpRkey)> =
        edits.into_iter().map(|(name, memh, edit)| (name, memh, forged(&p.ep, memh, edit))).collect();
    let on_shm = p.connect();
    let before = snapshot(&parent);
    let mut honest_went_direct = false;
    for round in 0..3 {
        for (name, memh, rkey) in &keys {
            let base = memh.address() as u64;
            // An access through the owner first, which also asks it to vouch for the key. Its
            // outcome is the owner's to decide; it writes the bytes that are there already.
            let _ = p.outcome(p.ep.put(vec![0x5A; 8], base, rkey, RequestParams::default()));
            let _ = p.outcome(p.ep.get(vec![0u8; 8], base, rkey, RequestParams::default()));
            let what = |at: &str| format!("{name} key, round {round}, {at}");
            for outside in [base + inner_len as u64, base + (128 << 10), base - 8, base - (64 << 10)] {
                let at = format!("at {:+}", outside as i64 - base as i64);
                let put = p.ep.put_direct(&[0xEE; 8], outside, rkey);
                assert!(!matches!(put, Some(Ok(()))), "direct put outside accepted: {}", what(&at));
                let get = p.ep.get_direct(&mut [0; 8], outside, rkey);
                assert!(!matches!(get, Some(Ok(()))), "direct get outside accepted: {}", what(&at));
                let amo = p.ep.atomic_direct(AtomicOp::Add, AtomicSize::U64, 1, 0, outside, rkey);
                assert!(!matches!(amo, Some(Ok(_))), "direct atomic outside accepted: {}", what(&at));
            }
            let inside = p.ep.get_direct(&mut [0; 8], base + 8, rkey);
            if *name == "honest" {
                honest_went_direct |= inside == Some(Ok(()));
            }
            if memh.prot() == RO {
                let put = p.ep.put_direct(&[0xEE; 8], base + 8, rkey);
                assert!(!matches!(put, Some(Ok(()))), "direct put into read-only memory: {}", what("inside"));
                let amo = p.ep.atomic_direct(AtomicOp::Add, AtomicSize::U64, 1, 0, base + 8, rkey);
                assert!(!matches!(amo, Some(Ok(_))), "direct atomic on read-only memory: {}", what("inside"));
            }
            assert!(snapshot(&parent) == before, "{}: bytes changed", what("after its accesses"));
        }
    }
    assert_eq!(honest_went_direct, on_shm, "the honest key's direct path (shared memory: {on_shm})");
    drop((rw, ro));
}

/// `ucp_get_nbi`: the bytes land in registered memory by the next flush, which reports a get the
/// owner refused (a key edited so that only the owner can tell); a range past what the key claims
/// is refused at once, and nothing lands outside the slice.
#[test]
fn get_nbi_lands_by_the_flush_which_reports_a_refusal() {
    let p = Pair::new();
    let remote = region(&p.ctx, 4096, RO, 0x3C);
    let local = region(&p.ctx, 4096, LOCAL, 0);
    let rkey = p.ep.rkey_unpack(&remote.rkey_pack().unwrap()).unwrap();
    let base = remote.address() as u64;
    let done_at_once = p.ep.get_nbi(local.slice(100, 200).unwrap(), base + 8, &rkey).unwrap();
    if std::env::var("ZCX_TLS").is_ok_and(|tls| tls == "tcp") {
        assert!(!done_at_once, "a get over TCP lands later");
    }
    wait(&p.workers(), p.ep.flush().unwrap()).unwrap();
    let got = snapshot(&local);
    assert!(got[100..300].iter().all(|&b| b == 0x3C), "the bytes landed by the flush");
    assert!(got[..100].iter().chain(&got[300..]).all(|&b| b == 0), "only the slice was written");

    assert!(p.ep.get_nbi(local.slice(0, 64).unwrap(), base + 4096 - 8, &rkey).is_err());

    let forged_key = forged(&p.ep, &remote, |wire| wire.access_key[0] ^= 1);
    let before = snapshot(&local);
    let issued = p.ep.get_nbi(local.slice(0, 64).unwrap(), base, &forged_key);
    if std::env::var("ZCX_TLS").is_ok_and(|tls| tls == "tcp") {
        // Over TCP only the owner can tell the key is wrong: the refusal comes with the flush.
        assert_eq!(issued, Ok(false));
    }
    if issued.is_ok() {
        let flushed = wait(&p.workers(), p.ep.flush().unwrap());
        assert!(flushed.is_err(), "the flush after a refused get reports it");
    }
    assert_eq!(snapshot(&local), before, "a refused get wrote nothing");
    wait(&p.workers(), p.ep.flush().unwrap()).expect("the next flush reports nothing old");
}

/// `ucp_worker_fence` orders a put that went through the owner (sent before the owner's verdict
/// on the key came back) before a later one the caller could do itself: the later one waits
/// for the earlier to settle, instead of landing first and being overwritten by it. Once they
/// settled, direct accesses go on.
#[test]
fn a_fence_keeps_a_direct_put_behind_an_earlier_one_through_the_owner() {
    let p = Pair::new();
    if !p.ep.query().unwrap().transports.contains(&"shm") {
        println!("skipped: the endpoint is not on shared memory (ZCX_TLS)");
        return;
    }
    let memh = region(&p.ctx, 4096, RW, 0);
    let base = memh.address() as u64;
    let rkey = p.ep.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
    // The owner answers the key check; the client has not read the answer yet, so its first
    // put goes through the owner, which has not performed it yet either.
    p.server.progress();
    p.ep.put_nbi(b"old-old-", base, &rkey).unwrap();
    // Now the client reads the verdict: the key could be used directly from here on.
    for _ in 0..10 {
        p.client.progress();
    }
    p.client.fence().unwrap();
    assert!(p.ep.put_direct(b"new-new-", base, &rkey).is_none(), "a direct put overtook the fence");
    p.ep.put_nbi(b"new-new-", base, &rkey).unwrap();
    p.flushed().unwrap();
    assert_eq!(bytes_at(memh.address(), 8), b"new-new-".to_vec(), "the earlier put landed last");
    // Everything before the fence settled: direct again.
    assert_eq!(p.ep.put_direct(b"direct!!", base, &rkey), Some(Ok(())));
    assert_eq!(bytes_at(memh.address(), 8), b"direct!!".to_vec());
}
