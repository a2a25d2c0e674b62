//! One DPDK ethdev port with one rx and one tx queue, its own mbuf pool, and burst wrappers that
//! own every mbuf they hold: received mbufs are lent as byte slices and freed, transmitted ones
//! are filled in place and handed to the driver, and whatever is left is freed on drop.
//!
//! The port must be started after EAL ([`zcx_dpdk_sys::Eal`]) and dropped before it. Built
//! without DPDK (cfg `zcx_dpdk_missing`), [`Port::open`] says why and no port can exist.

use std::fmt;

use super::frame::Mac;

/// Mbufs taken from or given to the driver at once.
pub const BURST: usize = 32;

/// Queued bytes at which a transmit hands the queue to the driver without waiting for a full
/// burst: about four jumbo frames, or two thirds of a burst of standard ones.
pub const TX_FLUSH_BYTES: usize = 32 << 10;

/// How a [`Port`] is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// The ethdev name (for a virtual device, its `--vdev` name, like `net_memif0`).
    pub name: String,
    /// Mbufs in the port's pool (2^n − 1 suits a ring-backed pool best).
    pub pool_mbufs: u32,
    /// Descriptors of the rx and the tx ring (the driver may adjust them).
    pub ring_desc: u16,
    /// Longest frame sent or received, Ethernet header included; at most [`MAX_FRAME_LEN`].
    pub max_frame_len: usize,
}

/// The longest frame a port takes: a 9000-byte jumbo payload and its Ethernet header, rounded
/// up. The pool's mbufs get data room for the port's own `max_frame_len`, so every frame it sends
/// or receives fits one segment.
pub const MAX_FRAME_LEN: usize = 9216;

/// Why a port could not be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortError {
    /// This build has no DPDK: the reason zcx-dpdk-sys gives.
    Unavailable(&'static str),
    /// A bad [`PortConfig`]; says what.
    Config(String),
    /// A DPDK call failed.
    Dpdk {
        /// The call.
        what: &'static str,
        /// Its error code (a positive errno or DPDK code).
        errno: i32,
        /// DPDK's message for it.
        message: String,
    },
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Unavailable(why) => write!(f, "DPDK is not available: {why}"),
            PortError::Config(what) => write!(f, "bad DPDK port config: {what}"),
            PortError::Dpdk { what, errno, message } => write!(f, "{what} failed: {message} ({errno})"),
        }
    }
}

impl std::error::Error for PortError {}

#[cfg(not(zcx_dpdk_missing))]
pub use with_dpdk::{ExtSegment, Port};

#[cfg(zcx_dpdk_missing)]
pub use without_dpdk::{ExtSegment, Port};

#[cfg(not(zcx_dpdk_missing))]
mod with_dpdk {
    use std::ffi::CString;
    use std::mem::MaybeUninit;
    use std::ptr::{null_mut, NonNull};
    use std::sync::atomic::{AtomicU32, Ordering};

    use zcx_dpdk_sys as sys;

    use super::{Mac, PortConfig, PortError, BURST, MAX_FRAME_LEN, TX_FLUSH_BYTES};

    /// Largest per-lcore mbuf cache of a port's pool (a pool of `n` mbufs gets at most `n / 8`).
    const POOL_CACHE: u32 = 256;

    /// The frame every port takes: a 1500-byte MTU and the Ethernet header and CRC.
    const STANDARD_FRAME_LEN: usize = 1518;

    /// Whether the port's driver moves a frame of any length: memif splits one into chained
    /// descriptors of its buffer size and joins them on the other side.
    fn driver_chains_any_length(info: &sys::rte_eth_dev_info) -> bool {
        if info.driver_name.is_null() {
            return false;
        }
        // SAFETY: DPDK's driver name is a NUL-terminated static string.
        let name = unsafe { std::ffi::CStr::from_ptr(info.driver_name) };
        name.to_bytes() == b"net_memif"
    }

    /// Makes pool names unique within the process (DPDK refuses a name twice).
    static POOLS: AtomicU32 = AtomicU32::new(0);

    /// The pool's mbuf size (headroom and data room) for frames up to `max_frame_len`: DPDK's
    /// default for standard frames, more for jumbo ones, so a frame never needs a chain.
    fn data_room(max_frame_len: usize) -> u16 {
        let needed = sys::RTE_PKTMBUF_HEADROOM as usize + max_frame_len;
        // MAX_FRAME_LEN bounds max_frame_len (checked before the pool is made), so this fits.
        needed.max(sys::RTE_MBUF_DEFAULT_BUF_SIZE as usize) as u16
    }

    fn check(rc: i32, what: &'static str) -> Result<(), PortError> {
        if rc >= 0 {
            return Ok(());
        }
        Err(PortError::Dpdk { what, errno: -rc, message: sys::strerror(-rc) })
    }

    /// An open, started port; see the [module documentation](super).
    pub struct Port {
        id: u16,
        pool: NonNull<sys::rte_mempool>,
        mac: Mac,
        max_frame_len: usize,
        /// Filled frames not yet taken by the driver, oldest first.
        tx: [*mut sys::rte_mbuf; BURST],
        tx_len: usize,
        /// Bytes of the frames queued since the last flush, which hands them over once they reach
        /// [`TX_FLUSH_BYTES`].
        tx_bytes: usize,
        /// An allocated mbuf a fill did not use, kept for the next one.
        spare: *mut sys::rte_mbuf,
        /// Received frames that were not a single segment (not expected with the pool's mbufs).
        multi_segment: u64,
        /// An allocated mbuf for an external segment a split fill did not use.
        spare_ext: *mut sys::rte_mbuf,
        /// The driver sends chained (multi-segment) mbufs: `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`.
        multi_seg_tx: bool,
        /// The port's `rte_device`, for DMA mappings of external memory.
        device: *mut sys::rte_device,
        /// Stopped and closed ([`Port::stop`]); only the pool is left to free.
        stopped: bool,
    }

    /// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` (a macro bindgen does not see): the driver transmits
    /// chained mbufs.
    const TX_OFFLOAD_MULTI_SEGS: u64 = 1 << 15;

    /// One external segment of a frame: bytes sent from where they are, chained after the
    /// frame's first mbuf by [`Port::transmit_split`].
    #[derive(Clone, Copy, Debug)]
    pub struct ExtSegment {
        /// The first byte.
        pub addr: *mut u8,
        /// Its IO address.
        pub iova: u64,
        /// Length in bytes.
        pub len: u16,
        /// The shared info whose reference count counts the mbufs attached to the memory (plus
        /// one held by the owner, so DPDK never calls its free callback).
        pub shinfo: *mut sys::rte_mbuf_ext_shared_info,
    }

    // SAFETY: the port owns its pool and every mbuf it points to; queue 0 and the mbufs are only
    // touched through `&mut self`, so moving the port to another thread moves all of it, and no
    // two threads ever use the queues at once. DPDK allows bursts and mbuf alloc/free from a
    // thread that is not an EAL lcore (the pool's per-lcore cache is then bypassed).
    unsafe impl Send for Port {}

    impl Port {
        /// Finds the port by name, creates its pool, configures one rx and one tx queue and
        /// starts it. Link state is not awaited: frames sent before the link is up wait in the
        /// tx batch.
        ///
        /// # Safety
        /// EAL is initialised ([`zcx_dpdk_sys::Eal::init`] succeeded) and stays so until the port
        /// is dropped.
        pub unsafe fn open(config: &PortConfig) -> Result<Port, PortError> {
            if config.max_frame_len > MAX_FRAME_LEN || config.max_frame_len < 64 {
                return Err(PortError::Config(format!(
                    "max_frame_len {} is not within 64..={MAX_FRAME_LEN}",
                    config.max_frame_len
                )));
            }
            let name = CString::new(config.name.as_str())
                .map_err(|_| PortError::Config(format!("port name {:?} contains a NUL", config.name)))?;
            let mut id = 0u16;
            check(
                // SAFETY: name is a valid C string and id a valid out-pointer.
                unsafe { sys::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut id) },
                "rte_eth_dev_get_port_by_name",
            )?;

            let pool_name = CString::new(format!("zcx_tl{}_{}", id, POOLS.fetch_add(1, Ordering::Relaxed)))
                .expect("no NUL in a formatted number");
            // A per-lcore cache: without one every alloc and free goes through the pool's ring,
            // which hands mbufs out in FIFO order, so a large pool cycles through all of its
            // memory (16 MiB for the default 8191) and every frame touches cold cache lines. The
            // cache (LIFO) keeps reusing a few hot ones. DPDK wants the pool at least 1.5 times
            // the cache; at most 1.5 × `cache` mbufs wait in the cache of the lcore that freed
            // them (threads that are not EAL lcores bypass it).
            let cache = (config.pool_mbufs / 8).min(POOL_CACHE);
            // SAFETY: EAL is initialised (caller's contract); pool_name is a valid C string that
            // DPDK copies.
            let pool = unsafe {
                sys::rte_pktmbuf_pool_create(
                    pool_name.as_ptr(),
                    config.pool_mbufs,
                    cache,
                    0,
                    data_room(config.max_frame_len),
                    sys::rte_socket_id() as i32,
                )
            };
            let Some(pool) = NonNull::new(pool) else {
                let errno = sys::errno();
                return Err(PortError::Dpdk {
                    what: "rte_pktmbuf_pool_create",
                    errno,
                    message: sys::strerror(errno),
                });
            };
            // From here on, Drop of `port` stops, closes and frees whatever was set up.
            let mut port = Port {
                id,
                pool,
                mac: [0; 6],
                max_frame_len: config.max_frame_len,
                tx: [null_mut(); BURST],
                tx_bytes: 0,
                tx_len: 0,
                spare: null_mut(),
                multi_segment: 0,
                spare_ext: null_mut(),
                multi_seg_tx: false,
                device: null_mut(),
                stopped: false,
            };
            // SAFETY: EAL is initialised and `id` is a valid port.
            unsafe { port.configure(config.ring_desc) }?;
            Ok(port)
        }

        /// # Safety
        /// EAL is initialised and `self.id` names a port that is not started.
        unsafe fn configure(&mut self, desc: u16) -> Result<(), PortError> {
            let id = self.id;
            // SAFETY: an all-zero rte_eth_conf is DPDK's default configuration (no multi-queue
            // mode, no offloads).
            let mut conf: sys::rte_eth_conf = unsafe { std::mem::zeroed() };
            // SAFETY: all-zero is a valid rte_eth_dev_info (plain C data), filled by DPDK.
            let mut info: sys::rte_eth_dev_info = unsafe { std::mem::zeroed() };
            // SAFETY: valid port id; info is writable.
            check(unsafe { sys::rte_eth_dev_info_get(id, &mut info) }, "rte_eth_dev_info_get")?;
            self.device = info.device;
            self.multi_seg_tx = info.tx_offload_capa & TX_OFFLOAD_MULTI_SEGS != 0;
            if self.multi_seg_tx {
                conf.txmode.offloads |= TX_OFFLOAD_MULTI_SEGS;
            }
            // Frames longer than the port says it takes: only a memif port carries them (its
            // descriptors chain, whatever the MTU it reports); any other would drop them.
            let frame_max = info.max_rx_pktlen as usize;
            if self.max_frame_len > frame_max.max(STANDARD_FRAME_LEN) && !driver_chains_any_length(&info) {
                return Err(PortError::Config(format!(
                    "frames of {} bytes are longer than the port takes ({frame_max})",
                    self.max_frame_len
                )));
            }
            // SAFETY: valid port id; conf outlives the call.
            check(unsafe { sys::rte_eth_dev_configure(id, 1, 1, &conf) }, "rte_eth_dev_configure")?;
            let (mut nb_rx, mut nb_tx) = (desc, desc);
            check(
                // SAFETY: valid port; the counts are read and written in place.
                unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nb_rx, &mut nb_tx) },
                "rte_eth_dev_adjust_nb_rx_tx_desc",
            )?;
            // SAFETY: valid port; SOCKET_ID_ANY (-1) cast to unsigned is DPDK's "any socket".
            let socket = unsafe { sys::rte_eth_dev_socket_id(id) } as u32;
            check(
                // SAFETY: configured port, queue 0 exists, NULL conf means the driver's defaults;
                // the pool outlives the port (Drop closes the port before freeing it).
                unsafe {
                    sys::rte_eth_rx_queue_setup(id, 0, nb_rx, socket, std::ptr::null(), self.pool.as_ptr())
                },
                "rte_eth_rx_queue_setup",
            )?;
            check(
                // SAFETY: as above, for tx queue 0.
                unsafe { sys::rte_eth_tx_queue_setup(id, 0, nb_tx, socket, std::ptr::null()) },
                "rte_eth_tx_queue_setup",
            )?;
            // SAFETY: configured with all its queues set up.
            check(unsafe { sys::rte_eth_dev_start(id) }, "rte_eth_dev_start")?;
            let mut mac = MaybeUninit::<sys::rte_ether_addr>::zeroed();
            // SAFETY: mac is a writable rte_ether_addr.
            check(unsafe { sys::rte_eth_macaddr_get(id, mac.as_mut_ptr()) }, "rte_eth_macaddr_get")?;
            // SAFETY: zeroed, then filled by DPDK; six bytes.
            self.mac = unsafe { mac.assume_init() }.addr_bytes;
            Ok(())
        }

        /// The port's MAC address.
        pub fn mac(&self) -> Mac {
            self.mac
        }

        /// Received frames dropped because they spanned several mbufs.
        pub fn multi_segment_drops(&self) -> u64 {
            self.multi_segment
        }

        /// Whether the link is up (`rte_eth_link_get_nowait`).
        pub fn link_up(&self) -> bool {
            let mut link = MaybeUninit::<sys::rte_eth_link>::zeroed();
            // SAFETY: link is a writable rte_eth_link; the port is open.
            if unsafe { sys::rte_eth_link_get_nowait(self.id, link.as_mut_ptr()) } != 0 {
                return false;
            }
            // SAFETY: zeroed, then filled by DPDK; integers and bitfields only.
            let link = unsafe { link.assume_init() };
            link.link_status() as u32 == sys::RTE_ETH_LINK_UP
        }

        /// Receives one burst and lends each frame's bytes to `each`, with the port itself (to
        /// transmit from between two frames) and the number of frames of the burst after this
        /// one, then frees the mbufs; returns how many frames came.
        pub fn rx_burst(&mut self, mut each: impl FnMut(&mut Port, &[u8], usize)) -> usize {
            let mut rx = [null_mut::<sys::rte_mbuf>(); BURST];
            // SAFETY: rx has room for BURST mbufs; the ones returned belong to this port now.
            let n = unsafe { sys::zcx_rte_eth_rx_burst(self.id, 0, rx.as_mut_ptr(), BURST as u16) } as usize;
            for (i, &m) in rx[..n].iter().enumerate() {
                // SAFETY: m was just received, is valid and owned here until freed below.
                let (segs, data_len) = unsafe { ((*m).nb_segs, usize::from((*m).data_len)) };
                if segs == 1 {
                    // SAFETY: mtod points at data_len initialised bytes of m's single segment,
                    // which stays valid until the free below; the slice does not outlive `each`.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(sys::zcx_rte_pktmbuf_mtod(m) as *const u8, data_len)
                    };
                    each(self, bytes, n - 1 - i);
                } else {
                    self.multi_segment += 1;
                }
                // SAFETY: owned here, not used again.
                unsafe { sys::zcx_rte_pktmbuf_free(m) };
            }
            n
        }

        /// Builds one frame in place: lends `fill` a buffer of the port's `max_frame_len`
        /// bytes; `Some(len)` queues its first `len` bytes for transmission, `None` sends
        /// nothing. Returns `None` without calling `fill` when no frame can be queued now (pool
        /// empty, or the tx batch full and the driver taking nothing), else what `fill` returned.
        pub fn transmit(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> Option<usize> {
            let len = self.queue(fill)?;
            self.queued_bytes(len);
            Some(len)
        }

        /// Counts `len` more bytes queued, and hands the queue to the driver once it holds
        /// [`TX_FLUSH_BYTES`]: the peer starts reading the first jumbo frames while the next are
        /// being built, rather than after a whole burst of them.
        fn queued_bytes(&mut self, len: usize) {
            self.tx_bytes += len;
            if self.tx_bytes >= TX_FLUSH_BYTES {
                self.flush();
            }
        }

        /// [`Port::transmit`] without the flush by bytes (a split frame is counted once its
        /// segment is chained).
        fn queue(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> Option<usize> {
            if self.tx_len == BURST {
                self.flush();
                if self.tx_len == BURST {
                    return None;
                }
            }
            if self.spare.is_null() {
                // SAFETY: the pool is live.
                let m = unsafe { sys::zcx_rte_pktmbuf_alloc(self.pool.as_ptr()) };
                if m.is_null() {
                    return None;
                }
                // SAFETY: m is a fresh mbuf with MAX_FRAME_LEN >= max_frame_len bytes of room.
                if unsafe { sys::zcx_rte_pktmbuf_append(m, self.max_frame_len as u16) }.is_null() {
                    // SAFETY: owned here, not used again.
                    unsafe { sys::zcx_rte_pktmbuf_free(m) };
                    return None;
                }
                self.spare = m;
            }
            let m = self.spare;
            // SAFETY: m is owned here with max_frame_len appended (so writable) data bytes at
            // mtod; the slice does not outlive `fill`.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(sys::zcx_rte_pktmbuf_mtod(m) as *mut u8, self.max_frame_len)
            };
            let len = fill(buf)?.min(self.max_frame_len);
            // SAFETY: m is owned and has max_frame_len data bytes, of which the tail is cut.
            unsafe { sys::zcx_rte_pktmbuf_trim(m, (self.max_frame_len - len) as u16) };
            self.spare = null_mut();
            self.tx[self.tx_len] = m;
            self.tx_len += 1;
            Some(len)
        }

        /// Hands the queued frames to the driver, oldest first; what it does not take stays
        /// queued for the next call.
        pub fn flush(&mut self) {
            if self.tx_len == 0 {
                return;
            }
            // SAFETY: tx[..tx_len] are owned, filled mbufs; the driver takes the first `sent`.
            let sent =
                unsafe { sys::zcx_rte_eth_tx_burst(self.id, 0, self.tx.as_mut_ptr(), self.tx_len as u16) }
                    as usize;
            self.tx.copy_within(sent..self.tx_len, 0);
            self.tx_len -= sent;
            if self.tx_len == 0 {
                self.tx_bytes = 0;
            }
        }

        /// Frames queued and not yet taken by the driver.
        pub fn queued(&self) -> usize {
            self.tx_len
        }

        /// The ethdev port id.
        pub fn id(&self) -> u16 {
            self.id
        }

        /// Whether the driver transmits chained mbufs (`RTE_ETH_TX_OFFLOAD_MULTI_SEGS`), which
        /// sending from external buffers needs.
        pub fn multi_seg_tx(&self) -> bool {
            self.multi_seg_tx
        }

        /// The port's `rte_device` (never removed from the process by zcx).
        pub fn device(&self) -> *mut sys::rte_device {
            self.device
        }

        /// [`Port::transmit`] for frames whose tail may stay in external memory: `fill` writes the
        /// first bytes and may return an [`ExtSegment`] to chain after them, attached as an
        /// external buffer (no copy). Both mbufs are allocated before `fill` runs, so a frame
        /// `fill` built is always queued.
        ///
        /// # Safety
        /// A returned segment's memory stays readable and unchanged, and its shared info valid,
        /// until the segment's reference (added here) is dropped again by DPDK freeing the mbuf,
        /// which the owner observes as the shared info's count falling back.
        pub unsafe fn transmit_split(
            &mut self,
            fill: impl FnOnce(&mut [u8]) -> Option<(usize, Option<ExtSegment>)>,
        ) -> Option<usize> {
            if self.spare_ext.is_null() {
                // SAFETY: the pool is live.
                self.spare_ext = unsafe { sys::zcx_rte_pktmbuf_alloc(self.pool.as_ptr()) };
                if self.spare_ext.is_null() {
                    return None;
                }
            }
            let mut segment = None;
            let len = self.queue(|buf| {
                let (len, ext) = fill(buf)?;
                segment = ext;
                Some(len)
            })?;
            if let Some(ext) = segment {
                let head = self.tx[self.tx_len - 1];
                let m = std::mem::replace(&mut self.spare_ext, null_mut());
                // SAFETY: `shinfo` is valid (contract) and only touched atomically here and by
                // DPDK; the count is above zero (the owner's reference), so DPDK's non-atomic
                // fast path for a count of 1 is only taken by the owner, on this thread.
                unsafe {
                    std::sync::atomic::AtomicU16::from_ptr(&raw mut (*ext.shinfo).refcnt)
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                // SAFETY: m is a fresh direct mbuf owned here with refcnt 1; the segment's memory
                // and shared info outlive it (contract). `head` is the frame just queued, owned
                // here until the next flush; chaining m makes it freed with the frame.
                unsafe {
                    sys::zcx_rte_pktmbuf_attach_extbuf(m, ext.addr.cast(), ext.iova, ext.len, ext.shinfo);
                    (*m).data_len = ext.len;
                    (*m).pkt_len = u32::from(ext.len);
                    (*head).next = m;
                    (*head).nb_segs = 2;
                    (*head).pkt_len += u32::from(ext.len);
                }
                let total = len + usize::from(ext.len);
                self.queued_bytes(total);
                return Some(total);
            }
            self.queued_bytes(len);
            Some(len)
        }
    }

    impl Port {
        /// Frees the frames not yet handed to the driver, then stops and closes the port, which
        /// makes the driver free every mbuf it still holds. Nothing may be sent or received
        /// after; the pool is freed on drop. Idempotent.
        pub fn stop(&mut self) {
            if self.stopped {
                return;
            }
            self.stopped = true;
            // SAFETY: these mbufs are owned here and never used again.
            unsafe {
                for &m in &self.tx[..self.tx_len] {
                    sys::zcx_rte_pktmbuf_free(m);
                }
                sys::zcx_rte_pktmbuf_free(self.spare);
                sys::zcx_rte_pktmbuf_free(self.spare_ext);
            }
            self.tx_len = 0;
            self.tx_bytes = 0;
            self.spare = null_mut();
            self.spare_ext = null_mut();
            // SAFETY: the port was configured by `open` (stop and close of a port that failed to
            // start only return errors); nothing polls it any more, and its id is not used after.
            unsafe {
                sys::rte_eth_dev_stop(self.id);
                sys::rte_eth_dev_close(self.id);
            }
        }
    }

    impl Drop for Port {
        fn drop(&mut self) {
            self.stop();
            // SAFETY: the port using the pool is closed and every mbuf held here was freed; the
            // pool is not used after this.
            unsafe { sys::rte_mempool_free(self.pool.as_ptr()) };
        }
    }

    impl std::fmt::Debug for Port {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Port").field("id", &self.id).field("mac", &self.mac).finish()
        }
    }
}

#[cfg(zcx_dpdk_missing)]
mod without_dpdk {
    use super::{Mac, PortConfig, PortError};

    /// No port exists in a build without DPDK: the type is empty and [`Port::open`] fails.
    #[derive(Debug)]
    pub enum Port {}

    impl Port {
        /// Fails: this build has no DPDK.
        ///
        /// # Safety
        /// None needed; kept `unsafe` to match the DPDK build.
        pub unsafe fn open(_config: &PortConfig) -> Result<Port, PortError> {
            Err(PortError::Unavailable(zcx_dpdk_sys::DPDK_MISSING.unwrap_or("built without DPDK")))
        }

        /// Never called: no port exists.
        pub fn mac(&self) -> Mac {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn multi_segment_drops(&self) -> u64 {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn link_up(&self) -> bool {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn rx_burst(&mut self, _each: impl FnMut(&mut Port, &[u8], usize)) -> usize {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn transmit(&mut self, _fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> Option<usize> {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn flush(&mut self) {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn queued(&self) -> usize {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn stop(&mut self) {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn id(&self) -> u16 {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn multi_seg_tx(&self) -> bool {
            match *self {}
        }

        /// Never called: no port exists.
        pub fn device(&self) -> *mut zcx_dpdk_sys::rte_device {
            match *self {}
        }

        /// Never called: no port exists.
        ///
        /// # Safety
        /// None needed; kept `unsafe` to match the DPDK build.
        pub unsafe fn transmit_split(
            &mut self,
            _fill: impl FnOnce(&mut [u8]) -> Option<(usize, Option<ExtSegment>)>,
        ) -> Option<usize> {
            match *self {}
        }
    }

    /// An external segment; no port exists to send one in this build.
    #[derive(Clone, Copy, Debug)]
    pub struct ExtSegment {
        /// The first byte.
        pub addr: *mut u8,
        /// Its IO address.
        pub iova: u64,
        /// Length in bytes.
        pub len: u16,
        /// The shared info counting the mbufs attached to the memory.
        pub shinfo: *mut zcx_dpdk_sys::rte_mbuf_ext_shared_info,
    }
}
