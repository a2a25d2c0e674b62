//! Raw FFI bindings to Debian's DPDK 22.11 (ABI 23) for zcx's DPDK transport, plus a small C shim for
//! the fast-path helpers DPDK only ships as `static inline` functions or macros.
//!
//! # What is here
//!
//! - [`bindings`] (re-exported at the crate root): generated once by bindgen from the DPDK headers
//!   and committed (`src/bindings.rs`); `regen.sh` regenerates it. Only what zcx uses is allow-listed:
//!   EAL init/cleanup and lcores, the ethdev control path (configure, queue setup, start/stop/close,
//!   info, stats, MAC address, link, port iteration), mbuf pools and the mbuf layout, mempool basics,
//!   external memory (`rte_extmem_*`, `rte_dev_dma_map`/`unmap`, `rte_pktmbuf_pool_create_extbuf`),
//!   vdev hot-plug, `rte_strerror` and `rte_malloc`. The build never runs bindgen.
//! - The shim (`shim/shim.c`, declared in `shim/shim.h` and bound in the same generated file): one
//!   `zcx_rte_*` function per inline helper: `zcx_rte_eth_rx_burst`/`tx_burst`, mbuf alloc/free,
//!   data pointer (`mtod`), append/prepend/adj/trim, external buffers (`attach_extbuf`,
//!   `ext_shinfo_init_helper`), reference counts, `rte_lcore_id` and `rte_errno`.
//! - [`Eal`]: a guard that loads the virtual-device drivers, initialises DPDK's environment
//!   abstraction layer once per process and cleans it up on drop; [`errno`] and [`strerror`].
//!
//! # System packages
//!
//! Debian 12: `apt-get install libdpdk-dev dpdk pkg-config` (`scripts/test.sh` does it as root).
//! `libdpdk-dev` pulls in every `librte-*23` runtime package, the drivers included; `dpdk` adds the
//! tools (`dpdk-devbind.py`, `dpdk-testpmd`). Regenerating the bindings also needs `libclang-dev`.
//!
//! Without a DPDK 22.11 found by pkg-config the crate still builds, with the cfg `zcx_dpdk_missing`
//! set and [`DPDK_MISSING`] saying why: nothing may then call into DPDK (it would not link), and the
//! tests print `skipped: <reason>`. `ZCX_REQUIRE_DPDK=1` turns a missing DPDK into a build error.
//!
//! # How the poll-mode drivers get loaded
//!
//! DPDK 22.11 as Debian ships it is a shared build: each driver (bus, mempool handler, NIC) is its own
//! `librte_*.so` that registers itself from an ELF constructor, and exports no symbol zcx would call
//! (`librte_net_memif`, `librte_net_af_packet`, `librte_net_null` and `librte_mempool_ring` export
//! none at all). Linking them therefore needs `-Wl,--no-as-needed` around them, which only a final
//! binary's own build script can ask for on stable Rust (the `-as-needed` modifier of
//! `rustc-link-lib`, which would travel to downstream links, is nightly-only). So they are loaded at
//! run time instead, twice over:
//!
//! 1. [`Eal::init`] `dlopen`s [`VDEV_DRIVERS`] by soname (`librte_net_ring.so.23`, ...; found through
//!    the normal library path, where `librte-*23` packages put them) before it calls `rte_eal_init`,
//!    so their constructors have registered them when EAL scans its `--vdev` arguments. This works
//!    from any binary that depends on this crate, with no link flags.
//! 2. When EAL sees it is a shared build it `dlopen`s every driver in its plugin directory
//!    (`/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0`, compiled in as `RTE_EAL_PMD_PATH`), which covers
//!    every other driver Debian installed (about 130; init takes ~0.3 s here). The sonames loaded in
//!    step 1 are symlinks to the same files, and glibc returns an already loaded object for the same
//!    file, so no driver registers twice. `-d <path/to/librte_net_xxx.so>` loads one from elsewhere.
//!
//! # EAL arguments that work on a machine without hugepages or PCI access
//!
//! `--no-huge -m 512 --no-pci --no-shconf --no-telemetry --file-prefix <unique> --vdev net_ring0`.
//! `--no-huge` implies legacy memory mode, which DPDK refuses to combine with `--in-memory`
//! ("Option --legacy-mem is not compatible with --in-memory"); `--no-shconf` is its share of
//! `--in-memory` that still applies, and no hugepage files exist to leave behind. With `--no-huge
//! -m 512` size mbuf pools explicitly (a few thousand mbufs). With reserved hugepages use
//! `--in-memory` instead of `--no-huge -m 512`. Give every process its own `--file-prefix`, and map
//! its lcore to a set of CPUs (`--lcores 0@(0-1)`) rather than pinning, on a shared machine.
//!
//! `net_ring0` created by `--vdev` uses one ring for both directions, so what a port transmits it
//! receives back: a loopback NIC for tests. `net_memif` connects two processes over a UNIX socket
//! (`role=server|client,socket=/path,socket-abstract=no`) and shared memory it creates with memfd,
//! so it works with `--no-huge` too; with `--no-shconf` it logs "Failed to register mp action
//! callback: Operation not supported", which only means no secondary process can share the port.
//!
//! # Shutting down
//!
//! Stop and close every port and free every mempool, then drop the [`Eal`]. `rte_eal_cleanup`
//! unmaps DPDK's memory without stopping EAL's interrupt thread, to which drivers hand deferred
//! work: a closed `net_memif` port (or one whose peer hung up) leaves the unregistration of its
//! control channel's handler queued there, on memory in DPDK's heap. Cleaning up before the thread
//! ran it crashed a few memif runs in a hundred here (SIGSEGV in `rte_intr_fd_get`), so the guard
//! first waits until the thread is asleep in `epoll_wait` (it wakes at once when work is queued).
//! A memif client's queue counters are reset when its peer hangs up: read stats before.
//!
//! # Tests
//!
//! `cargo test -p zcx-dpdk-sys -- --nocapture` (`ZCX_REQUIRE_DPDK=1` to fail rather than skip when
//! DPDK is missing or EAL cannot start): `ring_loopback` over `net_ring0` in one process, and
//! `memif_two_processes`, which runs its own binary as a memif server and a memif client. Each test
//! binary initialises EAL once, which is all a process may do.

use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Bindgen's output for the DPDK 22.11 headers and the zcx shim; see the crate documentation.
// Generated code is not edited by hand (regen.sh would overwrite it), so its unsafe blocks (bindgen's
// bitfield accessors) cannot carry SAFETY comments; `clippy::all` does not cover this restriction lint.
#[allow(
    clippy::undocumented_unsafe_blocks,
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
pub mod bindings;

pub use bindings::*;

/// Why the crate was built without DPDK (no pkg-config `libdpdk` 22.11 was found, or the shim did
/// not compile), or `None` when DPDK is linked and may be called.
pub const DPDK_MISSING: Option<&str> =
    if cfg!(zcx_dpdk_missing) { Some(env!("ZCX_DPDK_MISSING")) } else { None };

/// The CPUs this process may run on, in the kernel's list syntax (`0-1`), which is also EAL's
/// `--lcores` group syntax.
pub fn allowed_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".to_owned())
}

/// EAL arguments for virtual devices on a machine without reserved hugepages: 512 MiB of ordinary
/// memory, no PCI scan, no shared config or telemetry socket, the file prefix `zcx-<name>-<pid>`,
/// and lcore 0 allowed on every CPU this process may use rather than pinned to one (the cores may
/// be shared); then `extra` (the `--vdev` of the port, say). `--in-memory` cannot be combined with
/// `--no-huge`; `--no-shconf` is the part of it that applies.
pub fn vdev_eal_args(name: &str, extra: &[String]) -> Vec<String> {
    vdev_eal_args_on(name, &allowed_cpus(), extra)
}

/// [`vdev_eal_args`] with lcore 0 on `cpus` (EAL's `--lcores` group syntax: `1`, `0-1`, `0,2`)
/// instead of on every allowed CPU: a process that pins its polling thread to one CPU passes that
/// CPU, since EAL sets the affinity of the thread that initialises it to its main lcore's CPUs.
pub fn vdev_eal_args_on(name: &str, cpus: &str, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--no-huge",
        "-m",
        "512",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level",
        "lib.eal:warning",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("--file-prefix=zcx-{name}-{}", std::process::id()));
    args.push(format!("--lcores=0@({cpus})"));
    args.extend(extra.iter().cloned());
    args
}

/// Whether EAL is initialised and running in this process (by an [`Eal`] guard, wherever it is
/// kept): DPDK may then be called.
pub fn eal_is_live() -> bool {
    EAL_STATE.load(Ordering::Acquire) == EAL_LIVE
}

/// The calling thread's `rte_errno`: the error code of the last failed DPDK call on this thread.
pub fn errno() -> i32 {
    // SAFETY: the shim only reads DPDK's thread-local errno of the calling thread.
    unsafe { zcx_rte_errno() }
}

/// DPDK's message for an error code (`rte_strerror`), which knows DPDK's own codes besides libc's.
pub fn strerror(errnum: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string in a static or thread-local
    // buffer, valid until the next call on this thread; it is copied out at once.
    unsafe {
        let msg = rte_strerror(errnum);
        if msg.is_null() {
            return format!("error {errnum}");
        }
        CStr::from_ptr(msg).to_string_lossy().into_owned()
    }
}

/// Sonames of the drivers [`Eal::init`] loads before initialising EAL: the vdev bus, the default
/// mempool handler (`ring_mp_mc`), and the virtual NICs zcx runs over (`net_ring`, `net_memif`,
/// `net_af_packet`, `net_null`).
pub const VDEV_DRIVERS: &[&str] = &[
    "librte_bus_vdev.so.23",
    "librte_mempool_ring.so.23",
    "librte_net_ring.so.23",
    "librte_net_memif.so.23",
    "librte_net_af_packet.so.23",
    "librte_net_null.so.23",
];

/// Loads a DPDK driver library by soname or path with `dlopen`, which runs the constructor that
/// registers it with EAL; call before [`Eal::init`] (which does this for [`VDEV_DRIVERS`]). Loading an
/// already loaded library again does nothing. The library stays loaded for the life of the process.
pub fn load_driver(name: &str) -> Result<(), String> {
    let cname = CString::new(name).map_err(|_| format!("driver name {name:?} contains a NUL byte"))?;
    // SAFETY: cname is a valid NUL-terminated string. The handle is deliberately never closed: DPDK
    // keeps pointers to the driver's static data once its constructor has registered it.
    let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
        // this thread; it is copied out at once.
        let why = unsafe {
            let msg = libc::dlerror();
            if msg.is_null() {
                "unknown error".to_owned()
            } else {
                CStr::from_ptr(msg).to_string_lossy().into_owned()
            }
        };
        return Err(format!("dlopen {name}: {why}"));
    }
    Ok(())
}

/// EAL state of the process: never initialised, initialising, running, or cleaned up for good.
static EAL_STATE: AtomicU8 = AtomicU8::new(EAL_NONE);
const EAL_NONE: u8 = 0;
const EAL_BUSY: u8 = 1;
const EAL_LIVE: u8 = 2;
const EAL_DONE: u8 = 3;

/// Why [`Eal::init`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EalError {
    /// The crate was built without DPDK; the reason is [`DPDK_MISSING`]'s.
    Unavailable(&'static str),
    /// EAL is running, or being initialised, in this process already.
    AlreadyInitialised,
    /// EAL was cleaned up in this process; DPDK cannot initialise it again.
    CleanedUp,
    /// An argument contains a NUL byte.
    BadArgument(String),
    /// `rte_eal_init` failed with this `rte_errno`.
    Init {
        /// `rte_errno` after the failed call.
        errno: i32,
        /// [`strerror`] of it.
        message: String,
    },
}

impl fmt::Display for EalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EalError::Unavailable(why) => write!(f, "DPDK is not available: {why}"),
            EalError::AlreadyInitialised => f.write_str("DPDK's EAL is already initialised in this process"),
            EalError::CleanedUp => f.write_str("DPDK's EAL was cleaned up and cannot be initialised again"),
            EalError::BadArgument(arg) => write!(f, "EAL argument {arg:?} contains a NUL byte"),
            EalError::Init { errno, message } => {
                write!(f, "rte_eal_init failed: {message} (rte_errno {errno})")
            }
        }
    }
}

impl std::error::Error for EalError {}

/// DPDK's environment abstraction layer, initialised for this process; [`Drop`] runs
/// `rte_eal_cleanup`.
///
/// EAL can be initialised once per process and never again after cleanup, so at most one `Eal` ever
/// exists. The thread that called [`Eal::init`] becomes EAL's main lcore (DPDK sets its CPU
/// affinity from `-l`/`--lcores`); the guard is neither `Send` nor `Sync`, so it is dropped on that
/// thread. Ports, queues and mempools must be released before the guard is dropped.
pub struct Eal {
    unloaded: Vec<String>,
    _main_lcore_thread: PhantomData<*mut ()>,
}

impl Eal {
    /// Loads [`VDEV_DRIVERS`] (best effort: EAL's plugin directory may still provide a driver that
    /// failed to load; see [`Eal::unloaded_drivers`]), then runs `rte_eal_init` with `args` (EAL
    /// options, without the program name, which is added).
    ///
    /// The argument strings are leaked on purpose: EAL may keep pointers into its `argv` for the
    /// life of the process. A failed init can be retried only if DPDK allows it (it refuses with
    /// `EALREADY` once it got far).
    pub fn init<I, S>(args: I) -> Result<Eal, EalError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if let Some(why) = DPDK_MISSING {
            return Err(EalError::Unavailable(why));
        }
        let mut owned = vec![CString::new("zcx").expect("no NUL in a literal")];
        for arg in args {
            let arg = arg.as_ref();
            owned.push(CString::new(arg).map_err(|_| EalError::BadArgument(arg.to_owned()))?);
        }
        match EAL_STATE.compare_exchange(EAL_NONE, EAL_BUSY, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            Err(EAL_DONE) => return Err(EalError::CleanedUp),
            Err(_) => return Err(EalError::AlreadyInitialised),
        }
        let unloaded: Vec<String> = VDEV_DRIVERS.iter().filter_map(|name| load_driver(name).err()).collect();
        let argv: Vec<*mut c_char> = owned.into_iter().map(CString::into_raw).collect();
        let argc = argv.len() as c_int;
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        // SAFETY: argv holds argc valid NUL-terminated strings that are never freed (EAL may permute
        // the array and keep pointers into it); EAL_STATE guarantees no other init runs concurrently.
        let rc = unsafe { rte_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            let errno = errno();
            remove_runtime_dir_if_empty();
            EAL_STATE.store(EAL_NONE, Ordering::Release);
            let mut message = strerror(errno);
            if !unloaded.is_empty() {
                message = format!("{message}; drivers not loaded: {}", unloaded.join("; "));
            }
            return Err(EalError::Init { errno, message });
        }
        EAL_STATE.store(EAL_LIVE, Ordering::Release);
        Ok(Eal { unloaded, _main_lcore_thread: PhantomData })
    }

    /// The [`VDEV_DRIVERS`] that could not be loaded before init, each with `dlerror`'s reason.
    pub fn unloaded_drivers(&self) -> &[String] {
        &self.unloaded
    }
}

impl Drop for Eal {
    /// Waits (at most a second) for EAL's interrupt thread to finish deferred driver work,
    /// cleans EAL up, then removes its runtime directory if EAL left it empty; see "Shutting
    /// down" in the crate documentation.
    fn drop(&mut self) {
        settle_interrupt_thread();
        // SAFETY: EAL was initialised by this guard, which is the only one and is dropped once, on
        // the main lcore thread (the guard is !Send).
        unsafe {
            rte_eal_cleanup();
        }
        EAL_STATE.store(EAL_DONE, Ordering::Release);
        remove_runtime_dir_if_empty();
    }
}

/// Waits, at most a second, until EAL's interrupt thread (`eal-intr-thread`) is idle in
/// `epoll_wait` in three samples 2 ms apart.
///
/// `rte_eal_cleanup` unmaps DPDK's memory without stopping that thread, and drivers hand it
/// deferred work: closing a `net_memif` port, or its peer hanging up, queues the unregistration of
/// the control channel's interrupt handler, which the thread carries out later on memory in DPDK's
/// heap. If cleanup unmaps the heap first, the thread faults (seen here: SIGSEGV in
/// `rte_intr_fd_get` on the interrupt thread, a few runs in a hundred of the memif test). Work
/// queued for the thread wakes it (it becomes runnable at once), so seeing it asleep in
/// `epoll_wait` after the ports were closed means that work is done.
fn settle_interrupt_thread() {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut idle = 0;
    while idle < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        idle = if interrupt_thread_idle() { idle + 1 } else { 0 };
    }
}

/// Whether every thread of this process named `eal-intr-thread` is asleep (state `S`) in
/// `epoll_wait` (when the kernel shows the wait channel); true if there is none.
fn interrupt_thread_idle() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return true };
    tasks.flatten().all(|task| {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != "eal-intr-thread" {
            return true;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name, which may itself contain spaces.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        let wchan = std::fs::read_to_string(path.join("wchan")).unwrap_or_default();
        state == Some("S") && (wchan.contains("epoll") || wchan.is_empty() || wchan == "0")
    })
}

/// Removes EAL's runtime directory (`/var/run/dpdk/<file-prefix>` for root) if it is empty, as
/// EAL leaves it with `--no-shconf --no-telemetry`: neither `rte_eal_cleanup` nor a failed
/// `rte_eal_init` removes it, so every process would leave one behind. A directory with files in
/// it (another process's, or a shared config) stays.
fn remove_runtime_dir_if_empty() {
    // SAFETY: rte_eal_get_runtime_dir returns EAL's static path buffer (empty until EAL set it),
    // valid at any time; it is copied out at once.
    let dir = unsafe {
        let dir = rte_eal_get_runtime_dir();
        if dir.is_null() {
            return;
        }
        CStr::from_ptr(dir).to_string_lossy().into_owned()
    };
    if !dir.is_empty() {
        // remove_dir fails on a non-empty directory, which is what is wanted.
        let _ = std::fs::remove_dir(dir);
    }
}

impl fmt::Debug for Eal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Eal")
    }
}
