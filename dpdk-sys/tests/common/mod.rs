//! Helpers shared by the DPDK smoke tests: EAL arguments for a machine without hugepages or PCI,
//! skipping with a reason, mbuf pools, port bring-up and a byte pattern to check payloads with.
#![allow(dead_code)] // each test binary uses its own subset

/// Prints why a test cannot run here, or fails it when `ZCX_REQUIRE_DPDK=1` says DPDK must work
/// (as CI sets once it installs DPDK), so an environment problem never passes unnoticed.
pub fn skip(reason: &str) {
    if std::env::var("ZCX_REQUIRE_DPDK").is_ok_and(|v| v == "1") {
        panic!("ZCX_REQUIRE_DPDK=1 but the DPDK test cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// EAL arguments for a test process (see [`zcx_dpdk_sys::vdev_eal_args`]).
pub fn eal_args(name: &str, extra: &[String]) -> Vec<String> {
    zcx_dpdk_sys::vdev_eal_args(name, extra)
}

/// Number of mbufs in a test pool: with `--no-huge -m 512` DPDK's default pool does not fit, and
/// 2^n - 1 is the size a ring-backed mempool uses best.
pub const POOL_MBUFS: u32 = 2047;

/// Length of test frame `seq`: a spread of sizes from 60 to 1500 bytes.
pub fn frame_len(seq: u32) -> usize {
    60 + (seq as usize * 397) % 1441
}

/// Fills `buf` with frame `seq`'s pattern: the sequence number (little endian), the length, then
/// bytes that depend on both the position and `seq`.
pub fn fill(buf: &mut [u8], seq: u32) {
    let len = buf.len() as u32;
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(seq, len, i);
    }
}

/// Checks that `buf` is frame `seq` of its length, byte for byte; `Err` names the first wrong byte.
pub fn check(buf: &[u8], seq: u32) -> Result<(), String> {
    let len = buf.len() as u32;
    for (i, &b) in buf.iter().enumerate() {
        let want = pattern_byte(seq, len, i);
        if b != want {
            return Err(format!("frame {seq} ({len} bytes): byte {i} is {b:#04x}, expected {want:#04x}"));
        }
    }
    Ok(())
}

/// Byte `i` of frame `seq` of `len` bytes.
fn pattern_byte(seq: u32, len: u32, i: usize) -> u8 {
    let header = [seq.to_le_bytes(), len.to_le_bytes()].concat();
    match header.get(i) {
        Some(&b) => b,
        None => (i as u32).wrapping_mul(31).wrapping_add(seq.wrapping_mul(7)) as u8 ^ 0x5a,
    }
}

/// The sequence number at the start of a received frame.
pub fn seq_of(buf: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(..4)?.try_into().ok()?))
}

#[cfg(not(zcx_dpdk_missing))]
pub use with_dpdk::*;

#[cfg(not(zcx_dpdk_missing))]
mod with_dpdk {
    use std::ffi::{CStr, CString};
    use std::mem::MaybeUninit;
    use std::ptr::NonNull;

    use zcx_dpdk_sys as sys;

    /// Initialises EAL with [`super::eal_args`] plus `extra`, or prints why it cannot (and returns
    /// `None`) when the failure is the environment's: EAL refusing to start here is not a bug of
    /// the crate, but it must be seen.
    pub fn init_eal(name: &str, extra: &[String]) -> Option<sys::Eal> {
        let args = super::eal_args(name, extra);
        match sys::Eal::init(&args) {
            Ok(eal) => {
                assert!(
                    eal.unloaded_drivers().is_empty(),
                    "drivers not loaded: {:?}",
                    eal.unloaded_drivers()
                );
                Some(eal)
            }
            Err(e @ sys::EalError::Init { .. }) => {
                super::skip(&format!("EAL did not initialise here with {args:?}: {e}"));
                None
            }
            Err(e) => panic!("EAL init: {e}"),
        }
    }

    /// Panics with DPDK's message unless `rc` (a DPDK return code: negative errno) is 0.
    pub fn ok(rc: i32, what: &str) {
        assert!(rc == 0, "{what} failed: {} ({rc})", sys::strerror(-rc));
    }

    /// An mbuf pool, freed on drop (after every mbuf came back).
    pub struct Pool(pub NonNull<sys::rte_mempool>);

    impl Pool {
        /// A pool of `n` default-sized mbufs (2048 bytes of data room and the default headroom).
        pub fn new(name: &str, n: u32) -> Pool {
            let cname = CString::new(name).unwrap();
            // SAFETY: EAL is initialised (callers hold the Eal); cname is a valid C string that DPDK
            // copies into the mempool's name.
            let mp = unsafe {
                sys::rte_pktmbuf_pool_create(
                    cname.as_ptr(),
                    n,
                    32,
                    0,
                    sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
                    sys::rte_socket_id() as i32,
                )
            };
            match NonNull::new(mp) {
                Some(mp) => Pool(mp),
                None => panic!("rte_pktmbuf_pool_create({name}, {n}): {}", sys::strerror(sys::errno())),
            }
        }

        /// The raw mempool pointer.
        pub fn as_ptr(&self) -> *mut sys::rte_mempool {
            self.0.as_ptr()
        }

        /// Mbufs currently in the pool (per-lcore caches included).
        pub fn available(&self) -> u32 {
            // SAFETY: the pool is live until drop.
            unsafe { sys::rte_mempool_avail_count(self.as_ptr()) }
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            // SAFETY: the pool is live and no port uses it any more (ports are closed first).
            unsafe { sys::rte_mempool_free(self.as_ptr()) }
        }
    }

    /// The port id of the ethdev named `name` (for a vdev, its `--vdev` name).
    pub fn port_by_name(name: &str) -> u16 {
        let cname = CString::new(name).unwrap();
        let mut port = 0u16;
        // SAFETY: cname is a valid C string and port a valid out-pointer.
        let rc = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port) };
        ok(rc, &format!("rte_eth_dev_get_port_by_name({name})"));
        port
    }

    /// `rte_eth_dev_info_get` of `port`, and its driver name.
    pub fn dev_info(port: u16) -> (sys::rte_eth_dev_info, String) {
        let mut info = MaybeUninit::<sys::rte_eth_dev_info>::zeroed();
        // SAFETY: info is a writable rte_eth_dev_info; DPDK fills it.
        let rc = unsafe { sys::rte_eth_dev_info_get(port, info.as_mut_ptr()) };
        ok(rc, "rte_eth_dev_info_get");
        // SAFETY: the call succeeded, so DPDK initialised the struct (and it was zeroed before).
        let info = unsafe { info.assume_init() };
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points to the driver's static NUL-terminated name.
            unsafe { CStr::from_ptr(info.driver_name) }.to_string_lossy().into_owned()
        };
        (info, driver)
    }

    /// Configures `port` with one rx and one tx queue of up to `desc` descriptors (rx buffers from
    /// `pool`) and the default configuration, and starts it.
    pub fn start_port(port: u16, pool: &Pool, desc: u16) {
        // SAFETY: an all-zero rte_eth_conf is DPDK's default configuration (no multi-queue mode, no
        // offloads, link speed auto-negotiated).
        let conf: sys::rte_eth_conf = unsafe { std::mem::zeroed() };
        // SAFETY: port is a valid port id and conf outlives the call.
        ok(unsafe { sys::rte_eth_dev_configure(port, 1, 1, &conf) }, "rte_eth_dev_configure");
        let (mut nb_rx, mut nb_tx) = (desc, desc);
        // SAFETY: valid port; the counts are read and written in place.
        let rc = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut nb_rx, &mut nb_tx) };
        ok(rc, "rte_eth_dev_adjust_nb_rx_tx_desc");
        // SAFETY: EAL is initialised; a port's socket id may be SOCKET_ID_ANY (-1), which is what
        // the queue setup calls take for "any" once cast to unsigned.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port) } as u32;
        // SAFETY: configured port, queue 0 exists; NULL conf means the driver's defaults; the pool
        // outlives the port (closed before the pool drops).
        let rc =
            unsafe { sys::rte_eth_rx_queue_setup(port, 0, nb_rx, socket, std::ptr::null(), pool.as_ptr()) };
        ok(rc, "rte_eth_rx_queue_setup");
        // SAFETY: as above, for tx queue 0.
        let rc = unsafe { sys::rte_eth_tx_queue_setup(port, 0, nb_tx, socket, std::ptr::null()) };
        ok(rc, "rte_eth_tx_queue_setup");
        // SAFETY: the port is configured with all its queues set up.
        ok(unsafe { sys::rte_eth_dev_start(port) }, "rte_eth_dev_start");
    }

    /// `rte_eth_stats_get` of `port`.
    pub fn stats(port: u16) -> sys::rte_eth_stats {
        let mut st = MaybeUninit::<sys::rte_eth_stats>::zeroed();
        // SAFETY: st is a writable rte_eth_stats.
        ok(unsafe { sys::rte_eth_stats_get(port, st.as_mut_ptr()) }, "rte_eth_stats_get");
        // SAFETY: zeroed, then filled by DPDK; all fields are integers.
        unsafe { st.assume_init() }
    }

    /// `rte_eth_link_get_nowait(port).link_status == UP`.
    pub fn link_up(port: u16) -> bool {
        let mut link = MaybeUninit::<sys::rte_eth_link>::zeroed();
        // SAFETY: link is a writable rte_eth_link.
        ok(unsafe { sys::rte_eth_link_get_nowait(port, link.as_mut_ptr()) }, "rte_eth_link_get_nowait");
        // SAFETY: zeroed, then filled by DPDK; all fields are integers and bitfields.
        let link = unsafe { link.assume_init() };
        link.link_status() as u32 == sys::RTE_ETH_LINK_UP
    }

    /// Stops and closes `port`.
    pub fn stop_and_close(port: u16) {
        // SAFETY: the port was started; nothing polls it any more.
        ok(unsafe { sys::rte_eth_dev_stop(port) }, "rte_eth_dev_stop");
        // SAFETY: the port is stopped; its id is not used after this.
        ok(unsafe { sys::rte_eth_dev_close(port) }, "rte_eth_dev_close");
    }

    /// The data of `m`'s first segment.
    ///
    /// # Safety
    /// `m` is a valid single-segment mbuf that the caller owns, and stays so while the slice lives.
    pub unsafe fn data<'a>(m: *mut sys::rte_mbuf) -> &'a [u8] {
        // SAFETY: per the contract, m is valid; mtod points at data_len initialised bytes.
        unsafe {
            std::slice::from_raw_parts(sys::zcx_rte_pktmbuf_mtod(m) as *const u8, (*m).data_len as usize)
        }
    }

    /// Allocates an mbuf from `pool` holding frame `seq` (of [`super::frame_len`] bytes).
    pub fn frame_mbuf(pool: &Pool, seq: u32) -> *mut sys::rte_mbuf {
        let len = super::frame_len(seq);
        // SAFETY: the pool is live.
        let m = unsafe { sys::zcx_rte_pktmbuf_alloc(pool.as_ptr()) };
        assert!(!m.is_null(), "mbuf pool exhausted");
        // SAFETY: m is a fresh mbuf with 2048 bytes of data room, more than any frame_len.
        let p = unsafe { sys::zcx_rte_pktmbuf_append(m, len as u16) };
        assert!(!p.is_null(), "append {len} bytes");
        // SAFETY: append returned the start of len writable bytes inside m's buffer.
        super::fill(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) }, seq);
        m
    }
}
