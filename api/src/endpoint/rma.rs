//! One-sided operations: `ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx`, and the
//! endpoint-bound remote key of `ucp_ep_rkey_unpack`.
//!
//! Without a vouched same-host key they go to the target, whose protocol engine executes them
//! (emulated RMA: no link's caps say native today): it checks the access key, the bounds and the
//! protection against its remote-access table before touching a byte, and answers with the
//! status. A put completes when the target acknowledged it, so its status is the target's
//! verdict. Over shared memory, once the owner vouched for the key (a `KeyCheck` asked with
//! [`zcx_engine::Engine::key_check`]), they are CPU copies and atomics on the peer's region
//! mapped here, done before the call returns and without the worker's lock (see [`EpRkey`]).

use zcx_dataplane::proto::rma_exec;
pub use zcx_dataplane::proto::AtomicOp;
use zcx_dataplane::transport_set::member_of;
use zcx_engine::{EndpointId, OpId, Phase, RecvBuffer, SendBuffer, Start};

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::put_help::Direction;
use crate::endpoint::Endpoint;
use crate::mem::Prot;
use crate::request::{AfterUnlock, OpInfo, OpSink, ReqCell, Request, RequestParams, WorkerLocked};
use crate::rkey::RemoteKey;
use crate::status::{fail_with, Result, Status};
use crate::worker::state::{State, DIRECT_LIVE, DIRECT_ORDERED};

/// Operand size of an atomic (`UCP_FEATURE_AMO32` / `AMO64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicSize {
    /// 32-bit.
    U32,
    /// 64-bit.
    U64,
}

impl AtomicSize {
    fn bytes(self) -> u8 {
        match self {
            AtomicSize::U32 => 4,
            AtomicSize::U64 => 8,
        }
    }
}

/// A remote key bound to the endpoint that unpacked it (`ucp_ep_rkey_unpack`): usable for RMA on
/// that endpoint only.
///
/// Over shared memory the key's region is mapped here and accessed with CPU copies and atomics,
/// but only once its owner has vouched for the key as a whole: unpacking the key asks the owner
/// ([`KeyCheck`](zcx_dataplane::proto::wire::Op::KeyCheck)), which says yes only when every claim
/// of the key (region, access key, base, length, protection, memfd locator) equals its own
/// record. Asked at unpack time, the verdict comes back with the endpoint's first round trip
/// (a program's flush after connecting, as `ucx_perftest` does), so operations after it are
/// direct even when the owner's worker is never progressed again. Until then, and for good when
/// the owner says no, operations go to the owner,
/// which checks each one against its record as over any transport. So the bounds and protection
/// enforced here are always the owner's: a key edited to be longer, shifted or more permissive
/// never opens a direct view. As in UCP, the owner must not unmap a region while peers still use
/// keys for it.
#[derive(Debug)]
pub struct EpRkey {
    ep: EndpointId,
    /// The owner's region id and access key, as the engine sends them in emulated operations.
    engine_key: zcx_engine::RemoteKey,
    rkey: RemoteKey,
    /// Where the owner's verdict on the key stands ([`Vouch`]).
    vouch: Arc<AtomicU8>,
    /// The region's local mapping, filled by the first operation after the owner vouched for the
    /// key that finds the endpoint ready over shared memory: later operations check bounds and
    /// prot against it and add an offset, nothing more.
    window: OnceLock<Window>,
    /// `ZCX_SHM_HELP` (the smallest put or get the target helps copy, `usize::MAX` when off),
    /// kept here where a direct put or get reads it with the key's other fields.
    help_min: usize,
}

/// The states of [`EpRkey::vouch`].
struct Vouch;

impl Vouch {
    /// Not asked yet, or the answer was lost with a failed link: the next operation asks.
    const UNASKED: u8 = 0;
    /// Asked; operations go to the owner meanwhile.
    const ASKED: u8 = 1;
    /// The owner's record equals the key: direct access may use the key's bounds and prot.
    const VOUCHED: u8 = 2;
    /// The owner refused the key: every operation with it goes to the owner.
    const REFUSED: u8 = 3;
    /// The owner vouched, but the endpoint was not on a shared-memory link when an operation
    /// looked: operations go to the owner, and the next one that finds the endpoint there turns
    /// this back into [`Vouch::VOUCHED`].
    const VOUCHED_ELSEWHERE: u8 = 4;
}

/// The completion of a key check: records the owner's verdict.
struct KeyCheckSink {
    vouch: Arc<AtomicU8>,
}

impl OpSink for KeyCheckSink {
    fn complete(&self, _held: &WorkerLocked, status: Status, _info: OpInfo) -> AfterUnlock {
        let verdict = match status {
            Status::Ok => Vouch::VOUCHED,
            Status::InvalidParam | Status::InvalidAddr => Vouch::REFUSED,
            // No verdict (the endpoint failed or closed): a later operation may ask again.
            _ => Vouch::UNASKED,
        };
        self.vouch.store(verdict, Ordering::Release);
        AfterUnlock::NOTHING
    }
}

/// Where a vouched key's region lies in the peer's address space and in ours.
#[derive(Debug)]
struct Window {
    /// The region's first remote address.
    base: u64,
    /// One past its last remote address.
    end: u64,
    prot: Prot,
    /// The local address of `base` in our mapping of the peer's memfd (kept mapped by the key).
    local: usize,
    /// The endpoint's direct-access flags (`EpState::direct_rma`): live until it fails or
    /// closes, ordered but after a fence that found operations through the peer unsettled.
    /// Read without the worker's lock, so direct accesses take no lock at all.
    flags: Arc<AtomicU8>,
}

impl EpRkey {
    /// The owner's region id and access key, which the owner checks an access against.
    pub(super) fn region_and_key(&self) -> (u64, [u8; 16]) {
        (self.engine_key.region, self.engine_key.access_key)
    }

    /// The smallest direct put with this key that the target helps copy.
    #[inline(always)]
    pub(super) fn help_min(&self) -> usize {
        self.help_min
    }

    /// The key's region as the owner described it (base, length, prot, `rkey_ptr`).
    pub fn remote_key(&self) -> &RemoteKey {
        &self.rkey
    }

    /// What the initiator can check of an access before it goes to the owner: the protection and
    /// bounds the key claims, in the owner's order (so the status is the one the owner would
    /// give). An honest key's claims are the owner's record, so what they refuse the owner would
    /// refuse too; a forged key's claims prove nothing either way, and the owner checks every
    /// access with it against its own record.
    fn check_claims(&self, addr: u64, len: u64, need: Prot) -> Result<()> {
        let key = &self.rkey;
        if !key.prot().contains(need) {
            return Err(refused_without(need));
        }
        let end = key.base().saturating_add(key.length());
        if addr < key.base() || addr.checked_add(len).is_none_or(|last| last > end) {
            return Err(refused_outside());
        }
        Ok(())
    }
}

impl Endpoint {
    /// `ucp_ep_rkey_unpack`: the key is valid on this endpoint only.
    pub fn rkey_unpack(&self, packed: &[u8]) -> Result<EpRkey> {
        let rkey = self.shared().ctx.rkey_unpack(packed)?;
        let wire = rkey.wire();
        let rkey = EpRkey {
            ep: self.id(),
            engine_key: zcx_engine::RemoteKey {
                region: wire.region_id,
                access_key: wire.access_key,
                // Used on a link whose transport does RMA natively (verbs); elsewhere the
                // owner's engine executes the operation by region id and access key.
                packed: rkey.domain_entry(zcx_dataplane::domain::DomainId::VERBS).map(|entry| {
                    crate::rkey::NativeKey { base: rkey.base(), len: rkey.length(), entry }.encode()
                }),
            },
            rkey,
            vouch: Arc::new(AtomicU8::new(Vouch::UNASKED)),
            window: OnceLock::new(),
            help_min: self.shared().ctx.inner.help_min,
        };
        if rkey.rkey.is_shareable() {
            let mut guard = self.shared().lock();
            Self::prepare_direct(&mut guard.st, self.id(), &rkey);
            guard.drain();
        }
        Ok(rkey)
    }

    /// Where `[remote_addr, remote_addr + len)` of the key's region is mapped here, when the
    /// endpoint reaches its peer through shared memory, the region is memfd-backed and its owner
    /// vouched for the key: the operation is then a CPU copy or atomic on that mapping, done before
    /// the call returns, without the worker's lock. `None`: use the emulated path (the peer
    /// executes the operation). `Some(Err)`: the access is refused here exactly as the target
    /// would refuse it, and no byte is touched.
    #[inline(always)]
    fn direct_view(&self, rkey: &EpRkey, remote_addr: u64, len: u64, need: Prot) -> Option<Result<*mut u8>> {
        // A key unpacked on another endpoint is never used directly here.
        if rkey.ep != self.id() {
            return None;
        }
        let window = match rkey.window.get() {
            Some(window) => window,
            None => self.open_window(rkey)?,
        };
        let flags = window.flags.load(Ordering::Acquire);
        if flags != DIRECT_LIVE | DIRECT_ORDERED
            && (flags & DIRECT_LIVE == 0 || !self.settled_since_fence(rkey.ep))
        {
            return None;
        }
        if remote_addr < window.base || remote_addr.checked_add(len).is_none_or(|last| last > window.end) {
            return Some(Err(refused_outside()));
        }
        if !window.prot.contains(need) {
            return Some(Err(refused_without(need)));
        }
        crate::worker::quiet::note_issued();
        // `remote_addr - base < end - base`, the region's length, which the key's mapping covers.
        Some(Ok((window.local + (remote_addr - window.base) as usize) as *mut u8))
    }

    /// Maps the key's region once its owner vouched for it and the endpoint is ready over shared
    /// memory (a look under the worker's lock, once). `None` while it is not, or when the mapping
    /// fails (owner gone, kernel refuses): the emulated path then reports it.
    #[cold]
    fn open_window<'k>(&self, rkey: &'k EpRkey) -> Option<&'k Window> {
        if rkey.vouch.load(Ordering::Acquire) != Vouch::VOUCHED {
            return None;
        }
        let key = &rkey.rkey;
        let end = key.base().checked_add(key.length())?;
        if key.length() == 0 {
            return None;
        }
        let Some(flags) = Self::direct_flags(&self.shared().lock().st, rkey.ep) else {
            // Not on shared memory (yet): no more looks under the lock until an operation through
            // the owner finds it there (`prepare_direct`).
            let _ = rkey.vouch.compare_exchange(
                Vouch::VOUCHED,
                Vouch::VOUCHED_ELSEWHERE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return None;
        };
        let local = key.ptr(key.base()).ok()? as usize;
        Some(rkey.window.get_or_init(|| {
            let region = rkey.engine_key.region;
            tracing::debug!(ep = %rkey.ep, region, "direct RMA through the peer's mapping");
            Window { base: key.base(), end, prot: key.prot(), local, flags }
        }))
    }

    /// After a fence: whether the one-sided operations endpoint `ep` sent through its peer have
    /// all been performed, so direct accesses may go on (and then they do, without this look);
    /// if not, makes sure a flush that will tell is out.
    #[cold]
    fn settled_since_fence(&self, ep: EndpointId) -> bool {
        let mut core = self.shared().lock();
        let st = &mut core.st;
        if st.engine.rma_settled(ep) {
            if let Some(state) = st.eps.get_mut(&ep) {
                state.direct_rma.fetch_or(DIRECT_ORDERED, Ordering::Release);
                state.settling = None;
            }
            return true;
        }
        let settling = st.eps.get(&ep).and_then(|state| state.settling);
        if settling.is_none_or(|op| !st.engine.is_pending(op)) {
            let flush = st.engine.settle_rma(ep).ok();
            if let Some(state) = st.eps.get_mut(&ep) {
                state.settling = flush;
            }
            core.drain();
        }
        false
    }

    /// The direct-access flags of endpoint `ep` when it is ready on a shared-memory link.
    fn direct_flags(st: &State, ep: EndpointId) -> Option<Arc<AtomicU8>> {
        let on_shm = st.engine.phase(ep) == Some(Phase::Ready)
            && st.engine.link_of(ep).is_some_and(|link| st.shm_member == Some(member_of(link)));
        st.eps.get(&ep).filter(|_| on_shm).map(|state| Arc::clone(&state.direct_rma))
    }

    /// Readies `rkey` (memfd-backed) for direct access, under the worker's lock: asks the owner
    /// to vouch for the key (see [`EpRkey`]) while a shared-memory link may be, or become, the
    /// endpoint's: when it is ready on one, or still connecting. The key check goes before any
    /// operation that follows, so the owner answers in order; one that cannot be sent, or whose
    /// answer was lost with a failed link, is asked again by a later operation through the owner.
    fn prepare_direct(st: &mut State, ep: EndpointId, rkey: &EpRkey) {
        if !rkey.rkey.is_shareable() {
            return;
        }
        let phase = st.engine.phase(ep);
        let on_shm = Self::direct_flags(st, ep).is_some();
        if on_shm {
            // Vouched while elsewhere: the next operation opens the window.
            let _ = rkey.vouch.compare_exchange(
                Vouch::VOUCHED_ELSEWHERE,
                Vouch::VOUCHED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        let may_go_direct = on_shm || phase == Some(Phase::Connecting);
        if !may_go_direct || rkey.vouch.load(Ordering::Acquire) != Vouch::UNASKED {
            return;
        }
        let Ok(claim) = rkey.rkey.wire().try_encode() else { return };
        let Ok(op) = st.engine.key_check(ep, &claim) else { return };
        rkey.vouch.store(Vouch::ASKED, Ordering::Release);
        st.sinks.insert(op, Arc::new(KeyCheckSink { vouch: Arc::clone(&rkey.vouch) }));
    }

    #[inline]
    fn check_rkey(&self, rkey: &EpRkey) -> Result<()> {
        if rkey.ep != self.id() {
            return Err(refused_foreign_key());
        }
        Ok(())
    }

    /// `ucp_put_nbx`: writes `buf` at `remote_addr` in the region of `rkey`. Completes when the
    /// target applied it (or refused: INVALID_ADDR outside the region, INVALID_PARAM for a bad key
    /// or missing REMOTE_WRITE).
    #[inline]
    pub fn put<B: SendBuf>(
        &self,
        buf: B,
        remote_addr: u64,
        rkey: &EpRkey,
        params: RequestParams,
    ) -> Result<Request<B>> {
        self.check_rkey(rkey)?;
        let bytes = buf.as_bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        match self.put_direct(bytes, remote_addr, rkey) {
            Some(Ok(())) => Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() })),
            Some(Err(status)) => Err(status),
            None => self.put_emulated(buf, (ptr, len), remote_addr, rkey, params),
        }
    }

    /// Extension: [`Endpoint::put`] (`ucp_put_nbx`) done before the call returns, without a
    /// request, when it can be: over shared memory with a key its owner vouched for. `None`: the
    /// put has to go to the target, so nothing was done; use [`Endpoint::put`]. Otherwise the
    /// final result: the bytes are in the target's memory, or the access was refused as the
    /// target would refuse it and no byte moved. For callers that need no request for an
    /// operation that completed at once (the C API's `ucp_put_nbx` returning `UCS_OK`).
    #[inline(always)]
    pub fn put_direct(&self, bytes: &[u8], remote_addr: u64, rkey: &EpRkey) -> Option<Result<()>> {
        let len = bytes.len();
        let dst = match self.direct_view(rkey, remote_addr, len as u64, Prot::REMOTE_WRITE)? {
            Ok(dst) => dst,
            Err(status) => return Some(Err(status)),
        };
        // `dst..dst + len` lies in the peer's region mapped here, which the key keeps mapped;
        // `bytes` is the caller's, borrowed for the whole copy. The two never overlap (ours is
        // not the peer's view).
        if len >= rkey.help_min() {
            // SAFETY: the two ranges above are valid and disjoint for `len` bytes.
            return Some(unsafe {
                self.helped(Direction::Put, (bytes.as_ptr(), dst, len), remote_addr, rkey)
            });
        }
        if len > 0 {
            // SAFETY: as above.
            unsafe { zcx_dataplane::copy::copy_bytes(bytes.as_ptr(), dst, len) };
        }
        Some(Ok(()))
    }

    /// The put of [`Endpoint::put`] executed by the target. Out of line, so the direct path stays
    /// small enough to inline into the caller.
    #[inline(never)]
    fn put_emulated<B: SendBuf>(
        &self,
        buf: B,
        (ptr, len): (*const u8, usize),
        remote_addr: u64,
        rkey: &EpRkey,
        params: RequestParams,
    ) -> Result<Request<B>> {
        let range = (remote_addr, len as u64, Prot::REMOTE_WRITE);
        self.emulated(buf, range, rkey, params, |engine, cookie| {
            // SAFETY: `SendBuf` keeps the bytes in place while the buffer moves into the request
            // cell, which owns it until the operation completes.
            let send_buf = unsafe { SendBuffer::new(ptr, len) }.with_cookie(cookie);
            engine.put(self.id(), send_buf, remote_addr, &rkey.engine_key)
        })
    }

    /// Starts an RMA operation for the target to execute on `(remote_addr, len)`, which needs
    /// `prot`: the key's claims checked here first, the owner asked to vouch for the key when a
    /// direct view could follow, then `start` with the cookie of the request's slot.
    fn emulated<B: Send + 'static>(
        &self,
        buf: B,
        (remote_addr, len, prot): (u64, u64, Prot),
        rkey: &EpRkey,
        params: RequestParams,
        start: impl FnOnce(&mut zcx_engine::Engine, zcx_engine::Cookie) -> Result<OpId>,
    ) -> Result<Request<B>> {
        rkey.check_claims(remote_addr, len, prot)?;
        let shared = self.shared();
        let mut guard = shared.lock();
        let st = &mut guard.st;
        st.usable_ep(self.id())?;
        Self::prepare_direct(st, self.id(), rkey);
        let cookie = st.sinks.reserve();
        let started = start(&mut st.engine, cookie).map(Start::Pending);
        let result = st.cookie_request(shared, cookie, started, buf, params.callback, false);
        guard.drain();
        result
    }

    /// `ucp_put_nbi`: writes `bytes` at `remote_addr` in the region of `rkey` and returns once it
    /// no longer needs them, so the caller may reuse the buffer at once. There is no request: the
    /// put is complete, and the target's verdict known, when a later [`Endpoint::flush`] (or
    /// [`crate::Worker::flush`]) completes, with the status of the first put it refused since the
    /// previous flush. Errors found here (a key of another endpoint, an access outside a region
    /// mapped here) are returned at once.
    ///
    /// Over shared memory with a vouched key this is one copy and no lock, as [`Endpoint::put`]
    /// without its request: the call for message-rate loops. Otherwise small puts are copied into
    /// the transport's queue and large ones into a buffer the put owns until acknowledged.
    #[inline]
    pub fn put_nbi(&self, bytes: &[u8], remote_addr: u64, rkey: &EpRkey) -> Result<()> {
        self.check_rkey(rkey)?;
        match self.put_direct(bytes, remote_addr, rkey) {
            Some(result) => result,
            None => self.put_nbi_by_target(bytes, remote_addr, rkey),
        }
    }

    #[inline(never)]
    fn put_nbi_by_target(&self, bytes: &[u8], remote_addr: u64, rkey: &EpRkey) -> Result<()> {
        rkey.check_claims(remote_addr, bytes.len() as u64, Prot::REMOTE_WRITE)?;
        let mut guard = self.shared().lock();
        let st = &mut guard.st;
        st.usable_ep(self.id())?;
        Self::prepare_direct(st, self.id(), rkey);
        let result = st.engine.put_nbi(self.id(), bytes, remote_addr, &rkey.engine_key);
        // A small one is an inline transmit: sent before `bytes` goes back to the caller.
        guard.drain();
        result
    }

    /// `ucp_get_nbx`: reads `buf.len()` bytes at `remote_addr` into `buf`.
    #[inline]
    pub fn get<B: RecvBuf>(
        &self,
        mut buf: B,
        remote_addr: u64,
        rkey: &EpRkey,
        params: RequestParams,
    ) -> Result<Request<B>> {
        self.check_rkey(rkey)?;
        let dst = buf.as_mut_bytes();
        let (ptr, len) = (dst.as_mut_ptr(), dst.len());
        match self.get_direct(dst, remote_addr, rkey) {
            Some(Ok(())) => Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() })),
            Some(Err(status)) => Err(status),
            None => self.get_emulated(buf, (ptr, len), remote_addr, rkey, params),
        }
    }

    /// `ucp_get_nbi`: reads `dst.len()` bytes at `remote_addr` into `dst` with no request: the
    /// bytes are there once a later [`Endpoint::flush`] (or [`crate::Worker::flush`]) completes,
    /// and that flush reports the first get that failed since the previous one. `dst` is dropped
    /// when the get ends, so it is memory the caller reads elsewhere: registered memory
    /// ([`crate::MemHandle::slice`]). `Ok(true)`: the bytes are there already (UCP's `UCS_OK`;
    /// over shared memory with a vouched key, the copy is done before the call returns);
    /// `Ok(false)`: by the next flush (`UCS_INPROGRESS`). Errors found here (a key of another
    /// endpoint, an access outside the region it claims) are returned at once.
    pub fn get_nbi<B: RecvBuf>(&self, mut dst: B, remote_addr: u64, rkey: &EpRkey) -> Result<bool> {
        self.check_rkey(rkey)?;
        let bytes = dst.as_mut_bytes();
        let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
        if let Some(result) = self.get_direct(bytes, remote_addr, rkey) {
            return result.map(|()| true);
        }
        let range = (remote_addr, len as u64, Prot::REMOTE_READ);
        let request = self.emulated(dst, range, rkey, RequestParams::default(), |engine, cookie| {
            // SAFETY: the slice keeps its mapping alive and in place while it moves into the
            // request cell, which owns it until the operation completes.
            let recv_buf = unsafe { RecvBuffer::new(ptr, len) }.with_cookie(cookie);
            engine.get_nbi(self.id(), recv_buf, remote_addr, &rkey.engine_key)
        })?;
        // Dropped as `ucp_request_free` drops a request: the get goes on, holding `dst`.
        drop(request);
        Ok(false)
    }

    /// Extension: [`Endpoint::get`] (`ucp_get_nbx`) done before the call returns, without a
    /// request, when it can be (as [`Endpoint::put_direct`]). `None`: nothing was done; use
    /// [`Endpoint::get`]. Otherwise the final result: `dst` holds the bytes, or the access was
    /// refused as the target would refuse it and `dst` is untouched.
    #[inline(always)]
    pub fn get_direct(&self, dst: &mut [u8], remote_addr: u64, rkey: &EpRkey) -> Option<Result<()>> {
        let len = dst.len();
        let src = match self.direct_view(rkey, remote_addr, len as u64, Prot::REMOTE_READ)? {
            Ok(src) => src,
            Err(status) => return Some(Err(status)),
        };
        // `src..src + len` lies in the peer's region mapped here, kept mapped by the key; `dst` is
        // the caller's, borrowed writable for the whole copy. They never overlap.
        if len >= rkey.help_min() {
            // SAFETY: the two ranges above are valid and disjoint for `len` bytes.
            return Some(unsafe {
                self.helped(Direction::Get, (src, dst.as_mut_ptr(), len), remote_addr, rkey)
            });
        }
        if len > 0 {
            // SAFETY: as above.
            unsafe { zcx_dataplane::copy::copy_bytes(src, dst.as_mut_ptr(), len) };
        }
        Some(Ok(()))
    }

    /// The get of [`Endpoint::get`] executed by the target. Out of line, so the direct path stays
    /// small enough to inline into the caller.
    #[inline(never)]
    fn get_emulated<B: RecvBuf>(
        &self,
        buf: B,
        (ptr, len): (*mut u8, usize),
        remote_addr: u64,
        rkey: &EpRkey,
        params: RequestParams,
    ) -> Result<Request<B>> {
        let range = (remote_addr, len as u64, Prot::REMOTE_READ);
        self.emulated(buf, range, rkey, params, |engine, cookie| {
            // SAFETY: `RecvBuf` keeps the bytes in place and writable while the buffer moves
            // into the request cell, which owns it until the operation completes.
            let recv_buf = unsafe { RecvBuffer::new(ptr, len) }.with_cookie(cookie);
            engine.get(self.id(), recv_buf, remote_addr, &rkey.engine_key)
        })
    }

    /// `ucp_atomic_op_nbx`: `op` on the 32- or 64-bit word at `remote_addr`. The completion's
    /// `info.value` is the previous value (fetching form); CSWAP stores `value` only if the word
    /// equals `compare`. A target address not aligned to the operand size → INVALID_PARAM.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &EpRkey,
        params: RequestParams,
    ) -> Result<Request<()>> {
        self.check_rkey(rkey)?;
        let bytes = size.bytes();
        if remote_addr % u64::from(bytes) != 0 {
            return Err(fail_with(
                Status::InvalidParam,
                format!("atomic target {remote_addr:#x} not {bytes}-byte aligned"),
            ));
        }
        match self.atomic_direct(op, size, value, compare, remote_addr, rkey) {
            Some(Ok(old)) => {
                return Ok(Request::ready(
                    (),
                    OpInfo { length: usize::from(bytes), value: old, ..OpInfo::default() },
                ));
            }
            Some(Err(status)) => return Err(status),
            None => {}
        }
        let need = Prot::REMOTE_READ | Prot::REMOTE_WRITE;
        rkey.check_claims(remote_addr, u64::from(bytes), need)?;
        let shared = self.shared();
        let mut guard = shared.lock();
        let st = &mut guard.st;
        st.usable_ep(self.id())?;
        Self::prepare_direct(st, self.id(), rkey);
        let op: OpId =
            st.engine.atomic(self.id(), op, bytes, value, compare, remote_addr, &rkey.engine_key)?;
        let cell = ReqCell::new(shared, (), params.callback);
        st.sinks.insert(op, cell.clone());
        guard.drain();
        Ok(Request::pending(cell))
    }

    /// Extension: [`Endpoint::atomic`] (`ucp_atomic_op_nbx`) done before the call returns,
    /// without a request, when it can be (as [`Endpoint::put_direct`]): the previous value, or
    /// the refusal the target would give, with the word untouched. `None`: nothing was done
    /// (also for a target address not aligned to the operand size); use [`Endpoint::atomic`].
    #[inline(always)]
    pub fn atomic_direct(
        &self,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &EpRkey,
    ) -> Option<Result<u64>> {
        let bytes = size.bytes();
        if remote_addr % u64::from(bytes) != 0 {
            return None;
        }
        let need = Prot::REMOTE_READ | Prot::REMOTE_WRITE;
        let word = match self.direct_view(rkey, remote_addr, u64::from(bytes), need)? {
            Ok(word) => word,
            Err(status) => return Some(Err(status)),
        };
        // Misaligned in our view of the region (cannot happen for zcx allocations): emulated.
        if word as usize % usize::from(bytes) != 0 {
            return None;
        }
        // SAFETY: `word` is aligned to the operand size (just checked) and its `bytes` bytes lie
        // in the peer's region mapped here, kept mapped by the key. Peers access atomic targets
        // atomically only, as the RMA contract requires.
        Some(Ok(unsafe { rma_exec::apply_atomic(word, op, bytes, value, compare) }))
    }
}

/// The refusal of a direct access outside the key's region. Out of line, like the next one: the
/// message's formatting would otherwise keep the direct path from inlining into its caller.
#[cold]
#[inline(never)]
fn refused_outside() -> Status {
    fail_with(Status::InvalidAddr, "remote access outside the region".into())
}

/// The refusal of a key unpacked on another endpoint.
#[cold]
#[inline(never)]
fn refused_foreign_key() -> Status {
    fail_with(Status::InvalidParam, "remote key unpacked on another endpoint".into())
}

/// The refusal of a direct access the region's protection does not allow.
#[cold]
#[inline(never)]
fn refused_without(need: Prot) -> Status {
    fail_with(Status::InvalidParam, format!("the region lacks {need:?}"))
}
