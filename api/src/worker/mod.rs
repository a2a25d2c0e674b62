//! `ucp_worker_*`: what owns the transports, the protocol engine and the API's records of
//! endpoints and operations in flight, and moves them forward from `progress`.
//!
//! One lock (`Core`: the transport set and [`state::State`], which holds the
//! [`zcx_engine::Engine`]) covers all of it. Under the lock, `progress` polls the transports
//! ([`dispatch`] hands each event to the engine, or to the handshake code), sends what the
//! engine has to send and turns its events into request completions ([`state::Core::drain`]),
//! and runs the timers; API calls run their engine command and drain the same way. User code
//! (callbacks, wakers, error, connection and AM handlers, put-help copies) is queued as
//! [`state::Deferred`] and run by `progress` after it released the lock.
//!
//! Two ways skip the general poll: while the worker is quiet, an empty call only looks at the
//! transports' doorbells without the lock ([`quiet`]), and a doorbell that rang has its one frame
//! taken and handled on its own ([`rung`]).

pub(crate) mod accept;
pub(crate) mod am;
pub(crate) mod am_lent;
mod bell_set;
pub(crate) mod dispatch;
pub(crate) mod ep_handle;
#[cfg(test)]
mod layering;
pub(crate) mod lifecycle;
pub(crate) mod pairing;
mod pending;
pub(crate) mod pull;
pub(crate) mod put_help;
pub(crate) mod quiet;
mod rung;
mod spin_wait;
pub(crate) mod state;
#[cfg(test)]
pub(crate) mod test_pair;
mod wakeup;

use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcx_control::WorkerAddressWire;
use zcx_dataplane::{
    LendSlot, Payload, SameHostFastPath as _, SetMember, ShmConfig, ShmTransport, Transport, TransportSet,
    UringConfig, UringTransport, Wakeup,
};
use zcx_hugepages::CpuSet;

use crate::context::Context;
use crate::request::{CancelTarget, Completer, OpInfo, ReqCell, Request, RequestParams, WorkerLocked};
use crate::status::{fail_with, Result, Status};
use ep_handle::Endpoint;
use state::{status_of, Core, Deferred, State};
use zcx_engine::{OpId, Start};

pub use am::{AmDesc, AmHandler, AmMessage};

/// `ucp_worker_params_t::thread_mode`. zcx workers are always safe to use from several threads
/// (the worker serialises them internally), so the mode documents intent and is reported back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadMode {
    /// `UCS_THREAD_MODE_SINGLE`.
    #[default]
    Single,
    /// `UCS_THREAD_MODE_SERIALIZED`.
    Serialized,
    /// `UCS_THREAD_MODE_MULTI`.
    Multi,
}

bitflags::bitflags! {
    /// `ucp_wakeup_event_types` (`UCP_WORKER_PARAM_FIELD_EVENTS`), same bit values. zcx's event fd
    /// reports every kind of event whatever the mask says (a superset is allowed by UCP), so the
    /// mask is kept for [`Worker::wakeup_events`] only.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WakeupEvents: u32 {
        /// `UCP_WAKEUP_RMA`
        const RMA = 1 << 0;
        /// `UCP_WAKEUP_AMO`
        const AMO = 1 << 1;
        /// `UCP_WAKEUP_TAG_SEND`
        const TAG_SEND = 1 << 2;
        /// `UCP_WAKEUP_TAG_RECV`
        const TAG_RECV = 1 << 3;
        /// `UCP_WAKEUP_TX`
        const TX = 1 << 10;
        /// `UCP_WAKEUP_RX`
        const RX = 1 << 11;
        /// `UCP_WAKEUP_EDGE`
        const EDGE = 1 << 16;
    }
}

/// `ucp_worker_params_t`.
#[derive(Clone, Debug, Default)]
pub struct WorkerParams {
    /// `UCP_WORKER_PARAM_FIELD_NAME`: shows in logs, endpoint names and the worker address.
    pub name: Option<String>,
    /// `UCP_WORKER_PARAM_FIELD_THREAD_MODE`.
    pub thread_mode: ThreadMode,
    /// `UCP_WORKER_PARAM_FIELD_CPU_MASK`: the CPUs the progress thread
    /// ([`Worker::start_progress_thread`]) is pinned to.
    pub cpu_mask: Option<CpuSet>,
    /// `UCP_WORKER_PARAM_FIELD_CLIENT_ID`: sent with connection requests, reported to the server
    /// by [`crate::ConnRequest::client_id`].
    pub client_id: u64,
    /// `UCP_WORKER_PARAM_FIELD_EVENTS`.
    pub events: WakeupEvents,
}

/// `ucp_worker_h`. Cheap to clone; every clone is the same worker. Dropping the last clone (and
/// every endpoint, listener and request of it) is `ucp_worker_destroy`.
#[derive(Clone)]
pub struct Worker {
    pub(crate) shared: Arc<WorkerShared>,
}

pub(crate) struct WorkerShared {
    pub ctx: Context,
    pub name: String,
    pub client_id: u64,
    pub thread_mode: ThreadMode,
    pub cpu_mask: Option<CpuSet>,
    pub events: WakeupEvents,
    pub wakeup: Wakeup,
    pub epoll: OwnedFd,
    pub pool: Arc<Mutex<Vec<Vec<u8>>>>,
    pub address: Vec<u8>,
    /// The worker's lock. Not `std`'s: every call that sends, receives or polls takes it, and
    /// `std`'s poison bookkeeping (a look at the thread's panic count on each lock and unlock)
    /// would be paid on every message; this one does not poison.
    core: parking_lot::Mutex<Core>,
    /// The lock-free fast path of an empty `progress` call.
    quiet: quiet::QuietWatch,
    /// The handler of the worker's lent active message (`State::lent`) may be running: the
    /// loan must not end yet. Set under the lock; cleared without it when the handler returns.
    lent_in_use: am_lent::LoanGate,
}

impl Context {
    /// `ucp_worker_create`.
    pub fn create_worker(&self, params: &WorkerParams) -> Result<Worker> {
        let config = self.config();
        let uring_config = UringConfig {
            sqpoll: config.uring_sqpoll(),
            spin_recv: config.uring_spin(),
            ..UringConfig::default()
        };
        // Shared memory first: it is polled first, and same-host endpoints use it. io_uring
        // always, since sockaddr listeners and connections (and the lane dial) go through it.
        let mut members: Vec<SetMember> = Vec::new();
        // Zero-copy from this size on, by the members that can do it; the DPDK member (added
        // below) has its own (`ZCX_DPDK_ZCOPY_THRESH`, usize::MAX on a port without chained
        // mbufs), which must not change it for the others. The engine's borrowed payloads go
        // zero-copy from their own link's threshold (`state::send_transmit`).
        let mut zcopy_threshold = 0;
        if config.transport_enabled("shm") {
            match ShmTransport::new(&ShmConfig::default()) {
                Ok(shm) => {
                    zcopy_threshold = shm.caps().zcopy_threshold;
                    members.push(SetMember::SameHost(Box::new(shm)));
                }
                Err(e) => tracing::warn!(%e, "shared-memory transport unavailable; same-host peers use TCP"),
            }
        }
        let uring = UringTransport::new(&uring_config)
            .map_err(|e| fail_with(status_of(e), format!("io_uring transport unavailable: {e}")))?;
        zcopy_threshold = zcopy_threshold.max(uring.caps().zcopy_threshold);
        members.push(SetMember::Plain(Box::new(uring)));
        // DPDK last: endpoints move to it after their handshake on TCP (see `dispatch`).
        #[cfg(feature = "dpdk")]
        if let Some(dpdk) = dpdk_member(config)? {
            members.push(SetMember::Plain(dpdk));
        }
        // Verbs after them: endpoints move to it after their handshake (see `dispatch`).
        #[cfg(feature = "verbs")]
        if let Some(verbs) = verbs_member(&self.inner, config)? {
            members.push(SetMember::Plain(verbs));
        }
        let tl = TransportSet::new(members).map_err(status_of)?;
        let spin_waits = spin_wait::SpinWaits::from_config(config.spin_wait()).unwrap_or_else(|| {
            tracing::warn!(
                value = config.spin_wait(),
                "ZCX_SPIN_WAIT is not auto, pause or lfence; using auto"
            );
            spin_wait::SpinWaits::auto()
        });
        let shm_member = tl.member_named("shm");
        let dpdk_member = tl.member_named("dpdk");
        let verbs_member = tl.member_named("verbs");
        let uid = crate::context::random_bytes()?;
        let name = params.name.clone().unwrap_or_else(|| format!("{}:{}", self.inner.name, hex4(&uid)));
        let address = WorkerAddressWire {
            worker_uid: uid,
            name: name.clone(),
            boot_id: zcx_control::local_boot_id(),
            transports: tl.addresses(),
        };
        let address_bytes = address
            .try_encode()
            .map_err(|e| fail_with(Status::InvalidParam, format!("worker address: {e}")))?;
        let wakeup = Wakeup::new().map_err(|e| fail_with(Status::IoError, format!("eventfd: {e}")))?;
        let epoll = wakeup::epoll_set(&[wakeup.as_fd()], &tl.event_fds())?;
        // A verbs link has caps of its own (`State::verbs_caps`): its smaller frames must not
        // shrink every other link's.
        let caps = zcx_dataplane::Caps { zcopy_threshold, ..tl.caps_without("verbs") };
        let mut st = State::new(self.inner.clone(), address, &caps);
        st.shm_member = shm_member;
        st.dpdk_member = dpdk_member;
        if let Some(member) = verbs_member {
            st.set_verbs(member, &caps_of_member(&tl, member), config);
        }
        let pool = Arc::clone(&st.pool);
        tracing::debug!(name, transports = ?tl.names(), ?spin_waits, "worker created");
        Ok(Worker {
            shared: Arc::new(WorkerShared {
                ctx: self.clone(),
                name,
                client_id: params.client_id,
                thread_mode: params.thread_mode,
                cpu_mask: params.cpu_mask.clone(),
                events: params.events,
                wakeup,
                epoll,
                pool,
                address: address_bytes,
                core: parking_lot::Mutex::new(Core { tl, st }),
                quiet: quiet::QuietWatch::new(spin_waits),
                lent_in_use: am_lent::LoanGate::new(),
            }),
        })
    }
}

/// The DPDK member of a new worker (`ZCX_TLS` allows `dpdk` and `ZCX_DPDK_PORT` names a port):
/// EAL is initialised with `ZCX_DPDK_EAL_ARGS` by the first worker of the process and stays
/// until the process exits (see `zcx_dataplane::dpdk::eal`). When `ZCX_TLS` names `dpdk`
/// itself, a missing port setting or a failure to start is the worker's failure; when `dpdk` is
/// only allowed (`all`), the worker goes without it, with a warning if it was configured.
#[cfg(feature = "dpdk")]
fn dpdk_member(config: &crate::Config) -> Result<Option<Box<dyn Transport>>> {
    use zcx_dataplane::dpdk::{open_with_process_eal, DpdkConfig};

    if !config.transport_enabled("dpdk") {
        return Ok(None);
    }
    let required = config.transport_required("dpdk");
    let Some(port) = config.dpdk_port() else {
        if required {
            return Err(fail_with(
                Status::InvalidParam,
                "ZCX_TLS names dpdk but ZCX_DPDK_PORT (and ZCX_DPDK_EAL_ARGS) are not set".into(),
            ));
        }
        return Ok(None);
    };
    let dpdk_config = DpdkConfig {
        port_name: port.to_owned(),
        mtu: config.dpdk_mtu(),
        pool_mbufs: config.dpdk_mbufs(),
        reliable: dpdk_session_config(config),
        zcopy_threshold: config.dpdk_zcopy_thresh(),
        drop_per_million: config.dpdk_drop_ppm(),
        ..DpdkConfig::default()
    };
    match open_with_process_eal(&config.dpdk_eal_args(), dpdk_config) {
        Ok(transport) => {
            tracing::debug!(port, mac = ?transport.mac(), "DPDK transport started");
            Ok(Some(Box::new(transport)))
        }
        Err(why) if required => {
            Err(fail_with(Status::NoDevice, format!("DPDK transport unavailable: {why}")))
        }
        Err(why) => {
            tracing::warn!(%why, "DPDK transport unavailable; endpoints use the other transports");
            Ok(None)
        }
    }
}

/// The reliability settings of a worker's DPDK links: `ZCX_DPDK_WINDOW` datagrams in flight
/// (the credit each end grants its peer is the same, or the peer's default grant would cap a
/// larger window), and a peer declared dead after about three keepalive intervals without an
/// acknowledgement, the same patience the keepalive gives a silent peer.
#[cfg(feature = "dpdk")]
fn dpdk_session_config(config: &crate::Config) -> zcx_dataplane::proto::reliable::Config {
    let base = zcx_dataplane::proto::reliable::Config::default();
    let patience =
        u64::try_from(config.keepalive_interval().as_nanos()).unwrap_or(u64::MAX).saturating_mul(3);
    let dead_after_rtos =
        u32::try_from(patience / base.max_rto_ns).unwrap_or(u32::MAX).max(base.dead_after_rtos);
    let window = config.dpdk_window();
    zcx_dataplane::proto::reliable::Config {
        window,
        send_queue: base.send_queue.max(window.saturating_mul(2)),
        receive_credit: window,
        dead_after_rtos,
        ..base
    }
}

/// The caps of member `member` of `tl`.
fn caps_of_member(tl: &TransportSet, member: usize) -> zcx_dataplane::Caps {
    tl.member_caps(member).clone()
}

/// The verbs member of a new worker: a transport on the context's verbs device, in its
/// protection domain (`ZCX_TLS` allows verbs and the context found a device). When `ZCX_TLS`
/// names `verbs` itself, a failure to start is the worker's failure; otherwise the worker goes
/// without it, with a warning.
#[cfg(feature = "verbs")]
fn verbs_member(
    ctx: &crate::context::ContextInner,
    config: &crate::Config,
) -> Result<Option<Box<dyn Transport>>> {
    use zcx_dataplane::verbs::{VerbsConfig, VerbsTransport};

    let Some(domain) = &ctx.verbs else {
        if config.transport_required("verbs") {
            return Err(fail_with(
                Status::NoDevice,
                "ZCX_TLS names verbs but no verbs device can be used (see ZCX_VERBS_DEVICE)".into(),
            ));
        }
        return Ok(None);
    };
    let verbs_config = VerbsConfig {
        gid_index: config.verbs_gid_index(),
        device_atomics: config.device_atomics(),
        ..VerbsConfig::default()
    };
    let pd = std::sync::Arc::clone(domain.protection_domain());
    match VerbsTransport::new(pd, std::sync::Arc::clone(domain.regions()), verbs_config) {
        Ok(transport) => Ok(Some(Box::new(transport))),
        Err(why) if config.transport_required("verbs") => {
            Err(fail_with(Status::NoDevice, format!("verbs transport unavailable: {why}")))
        }
        Err(why) => {
            tracing::warn!(%why, "verbs transport unavailable; endpoints use the other transports");
            Ok(None)
        }
    }
}

fn hex4(bytes: &[u8; 16]) -> String {
    bytes[..4].iter().map(|b| format!("{b:02x}")).collect()
}

impl Worker {
    /// Extension (no UCP counterpart): what the worker's transports counted so far, by name:
    /// for verbs the work requests posted and the RDMA writes, reads and atomics, which tell a
    /// benchmark or a test whether an operation ran on the NIC or as messages.
    pub fn transport_counters(&self) -> Vec<(&'static str, u64)> {
        self.shared.lock().tl.counters()
    }

    /// `ucp_worker_progress`: does all pending work, runs callbacks, and returns the number of
    /// events processed (0 when there was nothing to do).
    #[inline]
    pub fn progress(&self) -> usize {
        self.shared.progress()
    }

    /// `ucp_worker_query(UCP_WORKER_ATTR_FIELD_ADDRESS)`: the packed, versioned worker address a
    /// peer passes to [`crate::EpParams::remote_address`].
    pub fn address(&self) -> &[u8] {
        &self.shared.address
    }

    /// The worker's name (`UCP_WORKER_ATTR_FIELD_NAME`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The thread mode it was created with (`UCP_WORKER_ATTR_FIELD_THREAD_MODE`).
    pub fn thread_mode(&self) -> ThreadMode {
        self.shared.thread_mode
    }

    /// The wakeup events it was created with.
    pub fn wakeup_events(&self) -> WakeupEvents {
        self.shared.events
    }

    /// The CPUs its progress thread is pinned to (`UCP_WORKER_PARAM_FIELD_CPU_MASK`).
    pub fn cpu_mask(&self) -> Option<&CpuSet> {
        self.shared.cpu_mask.as_ref()
    }

    /// The context the worker belongs to.
    pub fn context(&self) -> &Context {
        &self.shared.ctx
    }

    /// `ucp_worker_get_efd`: readable when the worker has something to do. Use it after
    /// [`Worker::arm`] returned `Ok`.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.epoll.as_fd()
    }

    /// `ucp_worker_arm`: `Ok` when nothing is pending, so it is safe to sleep on the event fd;
    /// `Err(BUSY)` when events are pending (including a `signal`, which this consumes) and
    /// `progress` must be called first.
    pub fn arm(&self) -> Result<()> {
        self.shared.arm()
    }

    /// `ucp_worker_wait`: sleeps until the worker has something to do (returns at once when it
    /// already has). Keepalive timers also wake it.
    pub fn wait(&self) -> Result<()> {
        match self.shared.arm() {
            Err(Status::Busy) => return Ok(()),
            Err(other) => return Err(other),
            Ok(()) => {}
        }
        // Wake for the timers: keepalives, and connections that must make their request in time.
        let timeout = {
            let core = self.shared.lock();
            (core.st.keepalive / 2).min(core.st.incoming.timeout() / 2)
        };
        wakeup::wait_readable(self.shared.epoll.as_fd(), Some(timeout))?;
        // Keepalive deadlines may have passed while asleep.
        self.shared.lock().tick(Instant::now());
        Ok(())
    }

    /// `ucp_worker_signal`: wakes a `wait` or the event fd, from any thread. Signals before the
    /// next `arm` coalesce.
    pub fn signal(&self) {
        self.shared.wakeup.signal();
    }

    /// `ucp_worker_fence`: later RMA and AMO operations of every endpoint are performed after
    /// earlier ones. Those through the peer wait behind the engine's fence; direct ones (CPU
    /// copies into a peer's mapping) go through the peer too while earlier ones through it are
    /// unsettled.
    pub fn fence(&self) -> Result<()> {
        let mut core = self.shared.lock();
        let eps: Vec<_> = core.st.eps.keys().copied().collect();
        for ep in eps {
            // An endpoint that cannot carry operations has none to order.
            let _ = core.st.engine.fence(ep);
            if !core.st.engine.rma_settled(ep) {
                if let Some(state) = core.st.eps.get(&ep) {
                    state.direct_rma.fetch_and(!state::DIRECT_ORDERED, std::sync::atomic::Ordering::Release);
                }
            }
        }
        Ok(())
    }

    /// `ucp_worker_flush_nbx`: [`crate::Endpoint::flush`] of every endpoint: every one-sided
    /// operation issued so far completed at its target, every send at the origin.
    pub fn flush(&self) -> Result<Request<()>> {
        self.flush_with(RequestParams::default())
    }

    /// [`Worker::flush`] with a completion callback (`ucp_worker_flush_nbx`'s
    /// `UCP_OP_ATTR_FIELD_CALLBACK`), run from progress when it does not complete at once.
    pub fn flush_with(&self, params: RequestParams) -> Result<Request<()>> {
        let mut core = self.shared.lock();
        let Core { tl, st } = &mut *core;
        let stalled = &st.stalled;
        let started = st.engine.flush_worker(|link| state::link_delivered(tl, stalled, link));
        match started {
            Start::Done(status, _) => {
                core.drain();
                match status {
                    Status::Ok => Ok(Request::ready((), OpInfo::default())),
                    failure => Err(failure),
                }
            }
            Start::Pending(op) => {
                let cell = ReqCell::new(&self.shared, (), params.callback);
                core.st.sinks.insert(op, cell.clone());
                core.drain();
                Ok(Request::pending(cell))
            }
        }
    }

    /// Starts a thread that busy-polls this worker until the returned handle drops, pinned to the
    /// worker's `cpu_mask` when it has one. Callbacks then run on that thread.
    pub fn start_progress_thread(&self) -> Result<ProgressThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let worker = self.clone();
        let flag = Arc::clone(&stop);
        let cpus = self.shared.cpu_mask.clone();
        let handle = std::thread::Builder::new()
            .name(format!("zcx-progress-{}", self.shared.name))
            .spawn(move || {
                if let Some(cpus) = cpus {
                    if let Err(err) = zcx_hugepages::pin_current_thread(&cpus) {
                        tracing::warn!(%err, "progress thread not pinned");
                    }
                }
                while !flag.load(Ordering::Relaxed) {
                    // No `pause` between calls: a skipped call already bounds the loads in
                    // flight, at a fraction of its cost (see `quiet`).
                    worker.progress();
                }
            })
            .map_err(|e| fail_with(Status::NoResource, format!("progress thread: {e}")))?;
        Ok(ProgressThread { stop, handle: Some(handle) })
    }

    /// Number of endpoints the worker holds (open, closing, or failed but still referenced).
    pub fn endpoint_count(&self) -> usize {
        self.shared.lock().st.eps.len()
    }
}

/// A busy-polling progress thread; dropping it stops and joins the thread.
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("name", &self.shared.name).finish()
    }
}

impl WorkerShared {
    /// Whether some thread holds the worker's lock now, for tests of what runs outside it.
    #[cfg(test)]
    pub(crate) fn is_locked(&self) -> bool {
        self.core.try_lock().is_none()
    }

    pub(crate) fn lock(&self) -> CoreGuard<'_> {
        // The lock does not poison: core invariants hold between statements that can panic only
        // on a zcx bug, so a worker keeps serving after a panic elsewhere.
        CoreGuard { guard: Some(self.core.lock()), quiet: &self.quiet }
    }

    /// `progress`: the quiet watch's look inline (a busy-polling caller's usual call), the full
    /// poll out of line.
    #[inline]
    pub(crate) fn progress(self: &Arc<Self>) -> usize {
        match self.quiet.check() {
            quiet::Check::Skip => 0,
            quiet::Check::Doorbell(link) => self.rung_progress(link),
            check => self.full_progress(check),
        }
    }

    /// A full poll, of the kind `check` says (see [`quiet::Check`]): the periodic one runs the
    /// timers, a doorbell's leaves them to the periodic one, any other looks at the clock.
    #[inline(never)]
    fn full_progress(self: &Arc<Self>, check: quiet::Check) -> usize {
        self.full_progress_locked(self.lock(), check, &LendSlot::new(), true)
    }

    /// [`WorkerShared::full_progress`] with the worker's lock already taken (`guard`), frames
    /// offered through `slot`. With `poll` false, the transports are not polled: the rung path
    /// (see [`rung`]) read this call's frame already, and only what follows a poll runs.
    #[inline(always)]
    fn full_progress_locked(
        self: &Arc<Self>,
        guard: CoreGuard<'_>,
        check: quiet::Check,
        slot: &LendSlot,
        poll: bool,
    ) -> usize {
        let (deferred, lent, handlers, events) = {
            let mut guard = guard;
            let core = &mut *guard;
            // A loan whose handler returned is what keeps the usual worker of an active-message
            // exchange from arming (nothing else is left after the handler's call): ended here,
            // and the watch armed without polling when that leaves the worker quiet, for the
            // doorbells show all a poll would find then, and a general poll would cost the call
            // after each lent message far more.
            if poll
                && check == quiet::Check::Poll
                && core.st.lent.is_some()
                && self.end_loan(core)
                && core.is_quiet()
            {
                self.refresh_bells(core);
                let expects = core.st.expects_message();
                drop(guard);
                self.quiet.arm(expects);
                return 0;
            }
            if poll {
                if check == quiet::Check::Periodic {
                    // The only full poll of a quiet worker that a dormant transport's listener
                    // can count on (see `TransportSet::is_quiet`).
                    core.tl.poll_every_member_next();
                }
                // A message lent to an earlier call's handler goes back once the handler returned.
                let lend = (core.st.lent.is_none() || self.end_loan(core)).then_some(slot);
                core.st.events = 0;
                let Core { tl, st } = core;
                let mut sink = |event: zcx_dataplane::TlEvent<'_>| dispatch::on_event(st, event, lend);
                match (check, lend) {
                    (quiet::Check::Doorbell(_), _) => tl.poll_rung(&mut sink, lend),
                    (_, Some(lend)) => tl.poll_lending(&mut sink, lend),
                    (_, None) => tl.poll(&mut sink),
                };
            }
            core.after_poll();
            // Timers: on every periodic poll of a quiet worker, and on a busy worker's full poll
            // once the coarse clock moved. By time, not by a count of calls: a caller that spends
            // a second between calls (a validating debug benchmark on a loaded machine) must
            // still send its keepalives and stamp what it received, or a silence that is its own
            // looks like the peer's. A poll a doorbell brought to a quiet worker (a message at a
            // latency benchmark's receiver) skips the clock (a vDSO call on the message's path):
            // the watch counts it toward its next look at the clock, so the periodic poll still
            // comes every few calls however often the doorbells ring.
            match check {
                quiet::Check::Periodic => {
                    core.st.last_tick_coarse = quiet::coarse_now();
                    core.tick(Instant::now());
                }
                quiet::Check::Poll => {
                    let coarse = quiet::coarse_now();
                    if coarse != core.st.last_tick_coarse {
                        core.st.last_tick_coarse = coarse;
                        core.tick(Instant::now());
                    }
                }
                quiet::Check::Doorbell(_) | quiet::Check::Skip => {}
            }
            let events = core.st.events;
            // Its handler runs below, after the lock is released.
            let lent = self.take_lent(slot, &core.st);
            if core.st.deferred.is_empty() && lent.is_none() {
                // After events, only the rung path's tail looks: it follows one frame that left
                // work (an acknowledgement to send), not a burst a poll read.
                let quiet = (events == 0 || !poll) && core.is_quiet();
                if quiet {
                    self.refresh_bells(core);
                }
                let expects = quiet && core.st.expects_message();
                drop(guard);
                if quiet {
                    self.quiet.arm(expects);
                }
                return events;
            }
            // The AM handlers as they are now, when the batch's messages arrived: one reference
            // for the batch keeps them alive while they run unlocked.
            let am_queued = std::mem::take(&mut core.st.am_queued);
            let handlers = am_queued.then(|| Arc::clone(&core.st.am_handlers));
            let batch = if core.st.deferred.is_empty() {
                Batch::Empty
            } else if core.st.deferred.len() == 1 {
                // One item (a latency benchmark's message, a request's callback): taken out on
                // its own, so its list stays with the worker.
                Batch::One(core.st.deferred.pop().expect("one item"))
            } else {
                // The worker gets this thread's spare list (emptied by an earlier progress,
                // capacity kept), so the next batch allocates no list and the list taken here
                // goes back without taking the lock again.
                Batch::Many(std::mem::replace(&mut core.st.deferred, SPARE_DEFERRED.take()))
            };
            (batch, lent, handlers, events)
        };
        if let Some(lent) = lent {
            // SAFETY: the loan is out (taken in this poll) and `lent_in_use` is set, so no call
            // ends it before `deliver` returns.
            unsafe { lent.deliver(self, &self.lent_in_use) };
        }
        let count = usize::from(lent.is_some())
            + match deferred {
                Batch::Empty => 0,
                Batch::One(item) => {
                    self.run_deferred(item, handlers.as_deref());
                    1
                }
                Batch::Many(mut items) => {
                    let count = items.len();
                    for item in items.drain(..) {
                        self.run_deferred(item, handlers.as_deref());
                    }
                    SPARE_DEFERRED.set(items);
                    count
                }
            };
        // Dropped here, without the lock: it may hold the last reference to a replaced handler.
        drop(handlers);
        events.max(count)
    }

    fn run_deferred(self: &Arc<Self>, item: Deferred, am_handlers: Option<&am::AmHandlers>) {
        match item {
            Deferred::Callback(callback, status, info) => callback.call(status, &info),
            Deferred::Wake(waker) => waker.wake(),
            Deferred::ErrHandler { ep, handler, status } => {
                let endpoint = Endpoint::attach(self, ep);
                handler(&endpoint, status);
                drop(endpoint);
                lifecycle::forget_if_unowned(&mut self.lock().st, ep);
            }
            Deferred::ConnRequest { listener, request } => accept::run_conn_handler(self, listener, request),
            Deferred::Accepted { listener, ep } => accept::run_accept_handler(self, listener, ep),
            Deferred::Am(mut delivery) => match am_handlers {
                Some(handlers) => am::run_am(self, handlers, &mut delivery),
                // Cannot happen (queuing one sets `am_queued`); were it to, the message goes the
                // way of one without a handler (released, a rendezvous declined), rather than
                // taking the process down.
                None => am::run_am(self, &am::AmHandlers::default(), &mut delivery),
            },
            Deferred::Help(job) => put_help::run(&self.ctx.inner, job),
        }
    }

    fn arm(&self) -> Result<()> {
        if self.wakeup.drain() {
            return Err(Status::Busy);
        }
        let mut core = self.lock();
        if core.st.lent.is_some() && !self.end_loan(&mut core) {
            // A handler reads a lent message: the loan must end (by a later call) first.
            return Err(Status::Busy);
        }
        core.tl.prepare_sleep();
        for fd in core.tl.event_fds() {
            wakeup::drain_eventfd(fd);
        }
        if core.tl.has_events() || !core.st.deferred.is_empty() || !core.st.nothing_after_poll() {
            return Err(Status::Busy);
        }
        Ok(())
    }

    /// The message this call's poll lent to its handler (`slot` taken), marked in use: until the
    /// handler returns, no other call may end the loan. Call with the lock held.
    fn take_lent(&self, slot: &LendSlot, st: &State) -> Option<am_lent::LentAm> {
        self.lent_in_use.take(slot, &st.lent)
    }

    /// Gives the quiet watch the transports' doorbells when their set changed since it last
    /// got them (call before arming it).
    fn refresh_bells(&self, core: &mut Core) {
        let generation = core.tl.doorbell_generation();
        if generation != core.st.doorbell_generation {
            let mut bells = Vec::new();
            core.tl.doorbells(&mut bells);
            self.quiet.replace_bells(bells);
            core.st.doorbell_generation = generation;
        }
    }

    /// Ends the loan of the worker's lent message (see [`am_lent`]) unless its handler may still
    /// be reading it; true when ended. Not cold: every lent active message ends its loan here.
    fn end_loan(&self, core: &mut Core) -> bool {
        let Ok(lent) = self.lent_in_use.take_back(&mut core.st.lent) else { return false };
        if let Some(lent) = lent {
            core.tl.end_lend(lent.link);
            if !core.st.lent_tables.is_empty() {
                let tables = std::mem::take(&mut core.st.lent_tables);
                core.st.bury(tables);
            }
        }
        true
    }

    /// Undoes what cancelling a request needs (`target`), under the lock (`core`).
    fn cancel(&self, core: &mut CoreGuard<'_>, target: CancelTarget) {
        match target {
            CancelTarget::None => {}
            CancelTarget::Receive(id) => {
                core.st.engine.cancel(OpId::from_raw(id));
                core.drain();
            }
        }
        // Callbacks of cancelled requests run from the next progress, as UCP's do.
    }
}

impl Completer for WorkerShared {
    fn progress_once(self: Arc<Self>) -> usize {
        self.progress()
    }

    fn with_lock(&self, f: &mut dyn FnMut(&WorkerLocked)) {
        // The plain mutex, not a `CoreGuard`: what runs here (a look at a request, a waker or a
        // callback stored in it) leaves no work for progress, so the quiet watch stays armed.
        let core = self.core.lock();
        f(core.st.held());
    }

    fn cancel_request(&self, target: &dyn Fn(&WorkerLocked) -> CancelTarget) {
        let mut core = self.lock();
        let target = target(core.st.held());
        self.cancel(&mut core, target);
    }

    fn defer_callback(&self, callback: crate::request::Callback, status: Status, info: OpInfo) {
        self.lock().st.deferred.push(Deferred::Callback(callback, status, info));
    }
}

/// The worker's lock. Values handed to [`State::bury`] while it is held (handlers, endpoint
/// states: anything that may own application objects such as an `Endpoint`) are dropped only after
/// the lock is released, because their drop may need the lock again.
pub(crate) struct CoreGuard<'a> {
    guard: Option<parking_lot::MutexGuard<'a, Core>>,
    /// Disarmed when the guard goes, unless the worker is still quiet: whoever held the lock may
    /// have left work for `progress`.
    quiet: &'a quiet::QuietWatch,
}

impl Deref for CoreGuard<'_> {
    type Target = Core;

    fn deref(&self) -> &Core {
        self.guard.as_ref().expect("present until drop")
    }
}

impl DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        self.guard.as_mut().expect("present until drop")
    }
}

/// The deferred work a poll took out of the worker, to run without the lock.
enum Batch {
    Empty,
    One(Deferred),
    Many(Vec<Deferred>),
}

thread_local! {
    /// An empty list of deferred work with its capacity, swapped into the worker by `progress`.
    static SPARE_DEFERRED: std::cell::Cell<Vec<Deferred>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for CoreGuard<'_> {
    /// Small enough to inline into every locked call (each send takes the lock once): the usual
    /// case is a disarm and the mutex's own unlock; the graveyard is emptied out of line.
    #[inline]
    fn drop(&mut self) {
        // Gone already when `unlock_unchanged` released the lock.
        if self.guard.is_none() {
            return;
        }
        if self.quiet.is_armed() {
            let many = self.guard.as_ref().is_some_and(|core| core.st.eps.len() >= KEEP_ARMED_FROM);
            if many {
                self.keep_armed_if_quiet();
            } else {
                self.quiet.disarm();
            }
        }
        if self.guard.as_ref().is_some_and(|guard| !guard.st.graveyard.is_empty()) {
            self.unlock_and_bury();
        }
        // Otherwise the `guard` field's own drop unlocks.
    }
}

/// Endpoints from which releasing the lock keeps the quiet watch armed when the worker is still
/// quiet (see [`CoreGuard::keep_armed_if_quiet`]): the check costs about what a full poll of a
/// few links does, and a full poll's cost grows with the links, the check's does not.
const KEEP_ARMED_FROM: usize = 8;

impl CoreGuard<'_> {
    /// The watch was armed when the lock was taken: it stays armed when the worker is still quiet
    /// with the same doorbells (the call queued nothing, completed nothing, changed no link), so
    /// the caller's next `progress` looks at the doorbells instead of making a full poll, whose
    /// cost grows with the worker's links. Else it is disarmed.
    #[inline(never)]
    fn keep_armed_if_quiet(&mut self) {
        let quiet = self.guard.as_mut().is_some_and(|core| {
            core.is_quiet() && core.tl.doorbell_generation() == core.st.doorbell_generation
        });
        if quiet {
            // The caller is issuing work, not waiting for it (see `quiet::note_issued`).
            quiet::note_issued();
        } else {
            self.quiet.disarm();
        }
    }

    /// Unlocks after a call that left the worker's transports and queues as it found them: it
    /// queued nothing, sent nothing and completed nothing that a poll would have to pass on (a
    /// receive posted or matched at once, a rung frame that completed a receive). An armed watch
    /// then stays armed, so the caller's next `progress` looks at the doorbells instead of making
    /// the full poll that re-arms it; only whether a message is awaited may have changed.
    #[inline]
    pub(crate) fn unlock_unchanged(mut self) {
        if self.quiet.is_armed() {
            self.quiet.set_expecting(self.st.expects_message());
        }
        if self.st.graveyard.is_empty() {
            self.guard = None;
        } else {
            self.unlock_and_bury();
        }
    }

    /// Unlocks, then drops what was buried under the lock.
    #[cold]
    #[inline(never)]
    fn unlock_and_bury(&mut self) {
        let Some(mut guard) = self.guard.take() else { return };
        let buried = std::mem::take(&mut guard.st.graveyard);
        drop(guard);
        drop(buried);
    }
}

impl Core {
    /// Sends the handshakes built during the poll and everything the engine has to send.
    pub(crate) fn send_out(&mut self) {
        if !self.st.established.is_empty() {
            // Before anything goes out on them: the peer's answer to our accept may be large.
            let Core { tl, st } = self;
            for link in st.established.drain(..) {
                tl.link_established(link);
            }
        }
        if !self.st.lane_dials.is_empty() {
            lifecycle::open_lanes(self);
        }
        if !self.st.verbs_joins.is_empty() {
            lifecycle::join_verbs_lanes(self);
        }
        if !self.st.out.is_empty() {
            let Core { tl, st } = self;
            let mut header = [0u8; zcx_dataplane::proto::MAX_HEADER_LEN];
            let n = zcx_dataplane::proto::wire::Op::Hello.encode(&mut header);
            for frame in st.out.drain(..) {
                if let Err(e) = tl.send(frame.link, &header[..n], Payload::Copy(&frame.payload)) {
                    tracing::debug!(link = ?frame.link, %e, "handshake not sent");
                }
            }
        }
        self.drain();
    }

    /// Everything that follows a poll: engine output, handshakes, lane switches, closes.
    #[inline]
    fn after_poll(&mut self) {
        if !self.st.nothing_after_poll() {
            self.after_busy_poll();
        }
    }

    /// Nothing for a poll to do but what the transports' doorbells would show (see
    /// [`quiet`]): the worker's own queues are empty and every transport is quiet.
    fn is_quiet(&self) -> bool {
        let st = &self.st;
        st.nothing_after_poll()
            && st.deferred.is_empty()
            && st.incoming.is_empty()
            && st.lent.is_none()
            && self.tl.is_quiet()
    }

    /// [`Core::after_poll`] when the poll left something to do.
    #[inline(never)]
    fn after_busy_poll(&mut self) {
        self.send_out();
        if !self.st.lanes_taken.is_empty() {
            lifecycle::close_lanes_taken(self);
        }
        if !self.st.help_announced.is_empty() {
            put_help::check_announced(&self.tl, &mut self.st);
        }
        if !self.st.to_close.is_empty() {
            let links = std::mem::take(&mut self.st.to_close);
            for (link, force) in links {
                self.tl.close(link, force);
            }
        }
    }

    /// Timers: keepalives and silent peers (the engine's), connections that never completed
    /// their handshake, and endpoints that never got the server's answer.
    pub(crate) fn tick(&mut self, now: Instant) {
        if now < self.st.next_tick {
            return;
        }
        let interval = self.st.keepalive;
        self.st.next_tick = now + (interval / 4).min(self.st.incoming.timeout() / 4);
        if !self.st.incoming.is_empty() {
            // Past their time, or pushed out by newer ones while a listener is over its cap.
            let mut dropped = Vec::new();
            self.st.incoming.sweep(now, &mut dropped);
            self.st.to_close.extend(dropped.into_iter().map(|link| (link, true)));
        }
        let connect_timeout = (interval * 10).max(Duration::from_secs(10));
        let mut unanswered = Vec::new();
        let st = &mut self.st;
        for (&id, ep) in st.eps.iter() {
            if ep.lane.as_ref().is_some_and(|lane| lane.take_sent()) {
                st.engine.note_sent(id);
            }
            if ep.conn_token != 0
                && st.connecting.get(&ep.conn_token) == Some(&id)
                && now.duration_since(ep.created) >= connect_timeout
            {
                unanswered.push(id);
            }
        }
        for id in unanswered {
            tracing::warn!(ep = %id, "no answer from the server; endpoint failed");
            st.engine.fail_endpoint(id, Status::Unreachable);
        }
        if !st.held_requests.is_empty() {
            st.absorb_events();
            crate::worker::pairing::release_held(st);
        }
        st.engine.handle_timeout(now);
        self.drain();
        self.after_poll();
    }
}

#[cfg(all(test, feature = "dpdk"))]
mod tests {
    use super::dpdk_session_config;

    /// `ZCX_DPDK_WINDOW` is what may be in flight: each end grants its peer that much credit, so
    /// a window above the reliability protocol's default credit (32) is not capped by it.
    #[test]
    fn the_dpdk_window_is_not_capped_by_the_default_credit() {
        for window in [1u32, 32, 512, 4096] {
            let config = crate::Config::from_vars([("ZCX_DPDK_WINDOW", window.to_string())]).unwrap();
            let session = dpdk_session_config(&config);
            assert_eq!(session.window, window);
            assert!(session.receive_credit >= window, "{session:?}");
            assert!(session.send_queue >= session.window, "{session:?}");
            session.validate().unwrap();
        }
    }
}
