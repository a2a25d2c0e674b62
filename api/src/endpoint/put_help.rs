//! The initiator's side of a large shared-memory put or get copied by both sides (see
//! `zcx_dataplane::shm::put_help` for the protocol, `worker::put_help` for the target's side).
//!
//! A put or get is helped when it is at least `ZCX_SHM_HELP` bytes long (256 KiB by default),
//! goes straight to the peer's mapped region (a vouched key over shared memory), and its local
//! side lies in a region of this context that is memfd-backed and mapped with `REMOTE_READ` (a
//! put's source) or `REMOTE_WRITE` (a get's destination): the target then maps that region to
//! read (write) its chunks, so the region's protection is what lets it. Any other operation, or
//! one whose link is already helping another, is copied by the initiator alone, as before. The
//! operation still completes before the call returns, once both sides' chunks are copied.

use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::shm::put_help::{chunk_count, copy_chunk, CHUNK_SHIFT};

use crate::endpoint::rma::EpRkey;
use crate::endpoint::Endpoint;
use crate::mem::Prot;
use crate::status::{fail_with, Result, Status};

/// A direct put's or get's copy: `len` bytes from `src` to `dst`, one of them the peer's
/// `remote_addr` mapped here, the other this process's memory.
#[derive(Clone, Copy)]
struct HelpedBytes {
    src: *const u8,
    dst: *mut u8,
    len: usize,
    remote_addr: u64,
}

/// Which way a helped copy goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Direction {
    /// From this process to the peer.
    Put,
    /// From the peer to this process.
    Get,
}

impl Endpoint {
    /// The copy of a direct put or get of `len` bytes (at least the key's help threshold) from
    /// `src` to `dst`, one of them the peer's `remote_addr` mapped here (`way` says which): shared
    /// with the target's worker when the operation qualifies (see the module docs), by this
    /// thread alone otherwise. `Err` only when the target took part and never finished its share
    /// (it hung or died): the destination's bytes may then be incomplete.
    ///
    /// # Safety
    /// As for the direct operation's copy: `src..src + len` is readable and `dst..dst + len`
    /// writable for the whole call, and the two do not overlap.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn helped(
        &self,
        way: Direction,
        (src, dst, len): (*const u8, *mut u8, usize),
        remote_addr: u64,
        rkey: &EpRkey,
    ) -> Result<()> {
        let copy = HelpedBytes { src, dst, len, remote_addr };
        // SAFETY: the caller's contract.
        if let Some(result) = unsafe { self.helped_copy(way, copy, rkey) } {
            return result;
        }
        // SAFETY: the caller's contract.
        unsafe { zcx_dataplane::copy::copy_bytes(src, dst, len) };
        Ok(())
    }

    /// [`Endpoint::helped`] with the target's help; `None` when the copy cannot be helped and
    /// nothing was copied yet.
    ///
    /// # Safety
    /// As for [`Endpoint::helped`].
    unsafe fn helped_copy(&self, way: Direction, copy: HelpedBytes, rkey: &EpRkey) -> Option<Result<()>> {
        let HelpedBytes { src, dst, len, remote_addr } = copy;
        let direct = match self.direct() {
            Some(direct) => direct,
            None => {
                // The lane opens with the endpoint's first eager send; an RMA-only endpoint opens
                // it here, once.
                let mut guard = self.shared().lock();
                let crate::worker::state::Core { tl, st } = &mut *guard;
                if let Some(link) = st.engine.link_of(self.id()) {
                    self.offer_direct(tl, st, link);
                }
                drop(guard);
                self.direct()?
            }
        };
        // The local side, which the target maps: what it reads for a put, writes for a get.
        let (local, needed) = match way {
            Direction::Put => (src as u64, Prot::REMOTE_READ),
            Direction::Get => (dst as u64, Prot::REMOTE_WRITE),
        };
        let packed = self.shared().ctx.inner.help_sources.find(local as usize, len, needed)?;
        let chunks = chunk_count(len as u64, CHUNK_SHIFT)?;
        let mut job = direct.lane.start_help(chunks)?;
        let (region, key) = rkey.region_and_key();
        let (seq, len64) = (job.seq(), len as u64);
        let announce = match way {
            Direction::Put => Op::PutHelp {
                seq,
                chunk_shift: CHUNK_SHIFT,
                len: len64,
                src: local,
                region,
                key,
                addr: remote_addr,
            },
            Direction::Get => Op::GetHelp {
                seq,
                chunk_shift: CHUNK_SHIFT,
                len: len64,
                dst: local,
                region,
                key,
                addr: remote_addr,
            },
        };
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = announce.encode(&mut header);
        if !direct.lane.send(&header[..header_len], &packed) {
            // Dropping the job closes it: nothing was claimed, the caller copies it all.
            return None;
        }
        while let Some(chunk) = job.claim() {
            // SAFETY: the caller's contract, for the whole of `len`.
            unsafe { copy_chunk(src, dst, chunk, CHUNK_SHIFT, len64) };
        }
        let what = match way {
            Direction::Put => "put",
            Direction::Get => "get",
        };
        Some(job.finish(|| direct.lane.peer_alive()).map(drop).map_err(|theirs| {
            fail_with(
                Status::EndpointTimeout,
                format!("the target did not finish its {theirs} chunks of a helped {what}"),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zcx_control::RkeyWire;
    use zcx_dataplane::shm::put_help::HelpLane;

    use super::*;
    use crate::worker::test_pair::{progress_until, shm_pair, wait};
    use crate::{MemHandle, MemMapParams, Prot, RequestParams, Worker};

    const REMOTE: Prot =
        Prot::LOCAL_READ.union(Prot::LOCAL_WRITE).union(Prot::REMOTE_READ).union(Prot::REMOTE_WRITE);

    /// A client endpoint with a vouched key to a server region of `len` bytes, the server's worker
    /// on a busy-polling thread (as a target that can help).
    struct Setup {
        client: Worker,
        ep: Endpoint,
        target: MemHandle,
        rkey: EpRkey,
        _server_thread: crate::worker::ProgressThread,
        _rest: (Worker, Endpoint, crate::Listener),
    }

    fn setup(len: usize) -> Option<Setup> {
        let (client, server, ep, server_ep, listener) = shm_pair()?;
        let ctx = client.shared.ctx.clone();
        let target = ctx.mem_map(&MemMapParams::alloc(len).prot(REMOTE)).expect("target region");
        let rkey = ep.rkey_unpack(&target.rkey_pack().expect("pack")).expect("unpack");
        // The first put goes through the owner, which vouches for the key.
        let first =
            ep.put(vec![0u8; 8], target.address() as u64, &rkey, RequestParams::default()).expect("put");
        wait(&[&client, &server], first).expect("vouching put");
        // A large put opens the endpoint's direct lane (a heap source: copied alone).
        ep.put_nbi(&vec![0u8; len], target.address() as u64, &rkey).expect("lane-opening put");
        assert!(ep.direct().is_some(), "a large put opened the direct lane");
        let _server_thread = server.start_progress_thread().expect("progress thread");
        Some(Setup { client, ep, target, rkey, _server_thread, _rest: (server, server_ep, listener) })
    }

    fn lane(ep: &Endpoint) -> &HelpLane {
        ep.direct().expect("a direct lane").lane.help()
    }

    fn source(setup: &Setup, len: usize, prot: Prot) -> MemHandle {
        setup.client.shared.ctx.mem_map(&MemMapParams::alloc(len).prot(prot)).expect("source region")
    }

    fn fill(memh: &MemHandle, seed: u8) {
        // SAFETY: the region is mapped read-write for its length and only this test uses it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(memh.address(), memh.length()) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8;
        }
    }

    /// Puts all of `src` at the start of the target region and waits for the put.
    fn put_whole(s: &Setup, src: &MemHandle) {
        let len = src.length();
        let put = s.ep.put(
            src.slice(0, len).expect("slice"),
            s.target.address() as u64,
            &s.rkey,
            RequestParams::default(),
        );
        put.expect("put").wait().expect("put completes");
    }

    /// Gets all of `dst`'s length from the start of the target region into `dst` and waits.
    fn get_whole(s: &Setup, dst: &MemHandle) {
        let len = dst.length();
        let get = s.ep.get(
            dst.slice(0, len).expect("slice"),
            s.target.address() as u64,
            &s.rkey,
            RequestParams::default(),
        );
        get.expect("get").wait().expect("get completes");
    }

    fn bytes(memh: &MemHandle) -> &[u8] {
        // SAFETY: mapped for its length while `memh` lives; only read here.
        unsafe { std::slice::from_raw_parts(memh.address(), memh.length()) }
    }

    /// Large puts from a readable registered region land whole, and the target's worker copies
    /// part of them: the help words' count shows it.
    #[test]
    fn a_large_put_from_a_readable_region_lands_whole_and_the_target_takes_part() {
        let len = 8 << 20;
        let Some(s) = setup(len) else { return };
        let src = source(&s, len, REMOTE);
        until_the_target_helps(&s, "puts", |round| {
            fill(&src, round);
            put_whole(&s, &src);
            assert!(bytes(&s.target) == bytes(&src), "round {round}: the target's bytes differ");
        });
    }

    /// Runs `round` (a large put or get checked whole) until the target took part in one, at
    /// least four times. A busy CI machine may leave the target's thread off its core for a whole
    /// operation: a few tries give it a chance to take part.
    fn until_the_target_helps(s: &Setup, what: &str, mut round: impl FnMut(u8)) {
        for n in 0..40u8 {
            round(n);
            if lane(&s.ep).helped_chunks() > 0 && n >= 3 {
                return;
            }
        }
        panic!("the target never took part in 40 {what} of {} bytes", s.target.length());
    }

    /// Large gets into a writable registered region land whole, and the target's worker copies
    /// part of them.
    #[test]
    fn a_large_get_into_a_writable_region_lands_whole_and_the_target_takes_part() {
        let len = 8 << 20;
        let Some(s) = setup(len) else { return };
        let dst = source(&s, len, REMOTE);
        until_the_target_helps(&s, "gets", |round| {
            fill(&s.target, round);
            fill(&dst, round ^ 0xFF);
            get_whole(&s, &dst);
            assert!(bytes(&dst) == bytes(&s.target), "round {round}: the got bytes differ");
        });
    }

    /// A get into memory the target may not write (no REMOTE_WRITE, or not registered) is copied
    /// by the initiator alone, and lands whole.
    #[test]
    fn a_get_into_memory_the_target_may_not_write_is_copied_alone() {
        let len = 2 << 20;
        let Some(s) = setup(len) else { return };
        fill(&s.target, 3);
        let readable = source(&s, len, Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ);
        get_whole(&s, &readable);
        assert!(bytes(&readable) == bytes(&s.target));
        let mut heap = vec![0u8; len];
        s.ep.get_direct(&mut heap, s.target.address() as u64, &s.rkey).expect("direct").expect("get");
        assert!(heap == bytes(&s.target));
        assert_eq!(lane(&s.ep).helped_chunks(), 0, "the target helped with memory it may not write");
    }

    /// A put whose source the target may not read (no REMOTE_READ) or that is not registered is
    /// copied by the initiator alone, and lands whole.
    #[test]
    fn a_put_the_target_may_not_read_is_copied_alone() {
        let len = 2 << 20;
        let Some(s) = setup(len) else { return };
        let local = source(&s, len, Prot::LOCAL_READ | Prot::LOCAL_WRITE);
        fill(&local, 1);
        put_whole(&s, &local);
        assert!(bytes(&s.target) == bytes(&local));
        let heap: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        s.ep.put_nbi(&heap, s.target.address() as u64, &s.rkey).expect("put_nbi");
        assert!(bytes(&s.target) == &heap[..]);
        assert_eq!(lane(&s.ep).helped_chunks(), 0, "the target helped with memory it may not read");
    }

    /// `packed` (a packed key) decoded, changed by `change` and encoded again: a key as a lying
    /// initiator would announce it.
    fn edited(packed: &[u8], change: impl FnOnce(&mut RkeyWire)) -> Vec<u8> {
        let mut wire = RkeyWire::decode(packed).expect("decode");
        change(&mut wire);
        wire.try_encode().expect("encode")
    }

    /// A put-help announcement of a put of `len` bytes from `src` to `addr` of `region`.
    fn announcement(seq: u32, len: usize, src: u64, region: u64, key: [u8; 16], addr: u64) -> Op {
        Op::PutHelp { seq, chunk_shift: CHUNK_SHIFT, len: len as u64, src, region, key, addr }
    }

    /// A get-help announcement of a get of `len` bytes from `addr` of `region` to `dst`.
    fn get_announcement(seq: u32, len: usize, dst: u64, region: u64, key: [u8; 16], addr: u64) -> Op {
        Op::GetHelp { seq, chunk_shift: CHUNK_SHIFT, len: len as u64, dst, region, key, addr }
    }

    /// Starts a job over the whole target region, announces it as `forge` makes it (given the
    /// job's number) with `source_key` as the packed key of the initiator's side, and checks the
    /// target refused it: it claimed no chunk and wrote no byte of the target region.
    fn assert_refused(s: &Setup, what: &str, source_key: &[u8], forge: impl FnOnce(u32) -> Op) {
        assert_refused_watching(s, &s.target, what, source_key, forge)
    }

    /// [`assert_refused`], watching `watched` for writes (a get's destination).
    fn assert_refused_watching(
        s: &Setup,
        watched: &MemHandle,
        what: &str,
        source_key: &[u8],
        forge: impl FnOnce(u32) -> Op,
    ) {
        let len = s.target.length();
        // SAFETY: the region is mapped read-write; nothing else writes it now.
        unsafe { std::ptr::write_bytes(watched.address(), 0xEE, watched.length()) };
        let lane = &s.ep.direct().expect("lane").lane;
        let job = lane.start_help(chunk_count(len as u64, CHUNK_SHIFT).expect("chunks")).expect("idle lane");
        let mut header = [0u8; MAX_HEADER_LEN];
        let n = forge(job.seq()).encode(&mut header);
        assert!(lane.send(&header[..n], source_key), "{what}: announced");
        // A flush answered means the target read the announcement; a little more time lets a
        // wrongly queued job run.
        let flush = s.ep.flush().expect("flush");
        progress_until(&[&s.client], "the flush", || flush.is_done());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(job.finish(|| true), Ok(0), "{what}: the target claimed chunks");
        assert!(bytes(watched).iter().all(|&b| b == 0xEE), "{what}: the target wrote");
    }

    /// Set in a child process of [`a_source_key_of_a_live_third_process_is_refused`]: the child
    /// maps a region, prints its packed key and waits until its stdin closes.
    const OWNER_ROLE: &str = "ZCX_PUT_HELP_TEST_OWNER";

    /// A source key naming a memfd of a live process other than the link's peer: the key itself
    /// maps fine here (same user), so only the target's check of the peer's pid refuses it. The
    /// target claims nothing and writes nothing.
    #[test]
    fn a_source_key_of_a_live_third_process_is_refused() {
        use std::io::{BufRead, Write};
        if std::env::var_os(OWNER_ROLE).is_some() {
            let ctx = crate::Context::with_features(crate::Features::RMA).expect("context");
            let region = ctx.mem_map(&MemMapParams::alloc(1 << 20).prot(REMOTE)).expect("region");
            let packed = region.rkey_pack().expect("pack");
            let hex: String = packed.iter().map(|b| format!("{b:02x}")).collect();
            println!("key {:x} {hex}", region.address() as usize);
            std::io::stdout().flush().expect("flush");
            let _ = std::io::stdin().lines().next();
            return;
        }
        let len = 1 << 20;
        let Some(s) = setup(len) else { return };
        let mut owner = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "endpoint::put_help::tests::a_source_key_of_a_live_third_process_is_refused"])
            .args(["--nocapture", "--test-threads=1"])
            .env(OWNER_ROLE, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the owner");
        let stdout = owner.stdout.take().expect("stdout");
        // The harness prints the test's name on the same line, before the key.
        let mut lines = std::io::BufReader::new(stdout).lines().map(|line| line.expect("line"));
        let line = lines
            .by_ref()
            .find_map(|line| line.split_once("key ").map(|(_, key)| key.to_owned()))
            .expect("the owner's key");
        let mut words = line.split(' ');
        let owner_base = u64::from_str_radix(words.next().expect("base"), 16).expect("base");
        let hex = words.next().expect("key");
        let packed: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect();
        // The key is good: this process can map the owner's region through it.
        let owner_key =
            crate::rkey::RemoteKey::unpack_in(&s.client.shared.ctx.inner, &packed).expect("unpack");
        assert!(owner_key.ptr(owner_base).is_ok(), "the owner's region maps here");
        let (region, key) = s.rkey.region_and_key();
        let to = s.target.address() as u64;
        assert_refused(&s, "a third process's source", &packed, |seq| {
            announcement(seq, len, owner_base, region, key, to)
        });
        drop(owner.stdin.take());
        // Read to the end, so the owner's last lines do not meet a closed pipe.
        lines.for_each(drop);
        assert!(owner.wait().expect("the owner exits").success());
    }

    /// Announcements a target must refuse: a wrong destination key, a destination outside the
    /// region, a source outside its region, a source key naming another process or claiming no
    /// REMOTE_READ. The target claims no chunk of them and writes nothing, and the link goes on.
    #[test]
    fn a_forged_announcement_is_refused_without_a_byte_written() {
        let len = 1 << 20;
        let Some(s) = setup(len) else { return };
        let src = source(&s, len, REMOTE);
        fill(&src, 7);
        let packed = src.rkey_pack().expect("pack").to_vec();
        let other_pid = edited(&packed, |w| w.shm.as_mut().expect("memfd-backed").pid = 1);
        let no_read = edited(&packed, |w| w.prot &= !Prot::REMOTE_READ.bits());
        let (region, key) = s.rkey.region_and_key();
        let (from, to) = (src.address() as u64, s.target.address() as u64);
        assert_refused(&s, "wrong key", &packed, |seq| announcement(seq, len, from, region, [0; 16], to));
        assert_refused(&s, "destination past the region", &packed, |seq| {
            announcement(seq, len, from, region, key, to + 4096)
        });
        assert_refused(&s, "source past its region", &packed, |seq| {
            announcement(seq, len, from + 4096, region, key, to)
        });
        assert_refused(&s, "source of another process", &other_pid, |seq| {
            announcement(seq, len, from, region, key, to)
        });
        assert_refused(&s, "source without REMOTE_READ", &no_read, |seq| {
            announcement(seq, len, from, region, key, to)
        });
        // The link still carries a helped put.
        put_whole(&s, &src);
        assert!(bytes(&s.target) == bytes(&src));
    }

    /// Get announcements a target must refuse: a wrong key for its region, a range past its
    /// region or one its region does not allow reading, a destination past the initiator's
    /// region, a destination key naming another process, claiming no REMOTE_WRITE or with its
    /// base moved. The target claims no chunk of them and writes nothing into the destination,
    /// and the link goes on.
    #[test]
    fn a_forged_get_announcement_is_refused_without_a_byte_written() {
        let len = 1 << 20;
        let Some(s) = setup(len) else { return };
        let dst = source(&s, len, REMOTE);
        let packed = dst.rkey_pack().expect("pack").to_vec();
        let other_pid = edited(&packed, |w| w.shm.as_mut().expect("memfd-backed").pid = 1);
        let no_write = edited(&packed, |w| w.prot &= !Prot::REMOTE_WRITE.bits());
        // The base moved past the destination's start: the range starts before the region.
        let moved_base = edited(&packed, |w| w.base += 4096);
        let (region, key) = s.rkey.region_and_key();
        let (to, from) = (dst.address() as u64, s.target.address() as u64);
        let refused = |what: &str, key_bytes: &[u8], forge: &dyn Fn(u32) -> Op| {
            assert_refused_watching(&s, &dst, what, key_bytes, forge)
        };
        refused("wrong key", &packed, &|seq| get_announcement(seq, len, to, region, [0; 16], from));
        refused("source past the region", &packed, &|seq| {
            get_announcement(seq, len, to, region, key, from + 4096)
        });
        refused("destination past its region", &packed, &|seq| {
            get_announcement(seq, len, to + 4096, region, key, from)
        });
        refused("destination of another process", &other_pid, &|seq| {
            get_announcement(seq, len, to, region, key, from)
        });
        refused("destination without REMOTE_WRITE", &no_write, &|seq| {
            get_announcement(seq, len, to, region, key, from)
        });
        refused("destination before its edited base", &moved_base, &|seq| {
            get_announcement(seq, len, to, region, key, from)
        });
        // A region the target may write but not read: its key's region, refused for a get.
        let write_only = s.client.shared.ctx.mem_map(
            &MemMapParams::alloc(len).prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_WRITE),
        );
        let write_only = write_only.expect("write-only region");
        let wo_key = s.ep.rkey_unpack(&write_only.rkey_pack().expect("pack")).expect("unpack");
        let (wo_region, wo_access) = wo_key.region_and_key();
        refused("source without REMOTE_READ", &packed, &|seq| {
            get_announcement(seq, len, to, wo_region, wo_access, write_only.address() as u64)
        });
        // The link still carries a helped get.
        fill(&s.target, 9);
        get_whole(&s, &dst);
        assert!(bytes(&dst) == bytes(&s.target));
    }
}
