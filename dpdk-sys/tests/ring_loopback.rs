//! Smoke test over a real DPDK port: EAL without hugepages, a `net_ring` virtual device (which
//! loops what it transmits back to its receive queue), one rx and one tx queue; bursts of
//! patterned mbufs go out and come back byte for byte, stats count them, and the shim's mbuf
//! helpers, external buffers and external memory registration work. One test: EAL can be
//! initialised only once per process.

mod common;

#[cfg(zcx_dpdk_missing)]
#[test]
fn net_ring_loopback_and_mbuf_helpers() {
    common::skip(&format!(
        "zcx-dpdk-sys was built without DPDK: {}",
        zcx_dpdk_sys::DPDK_MISSING.unwrap_or("")
    ));
}

#[cfg(not(zcx_dpdk_missing))]
#[test]
fn net_ring_loopback_and_mbuf_helpers() {
    use common::*;
    use zcx_dpdk_sys as sys;

    let Some(eal) = init_eal("ring", &["--vdev=net_ring0".to_owned()]) else { return };
    assert_eq!(sys::Eal::init(["--no-huge"]).unwrap_err(), sys::EalError::AlreadyInitialised);
    // SAFETY: EAL is initialised; these read its static configuration.
    unsafe {
        assert_eq!(sys::rte_lcore_count(), 1);
        assert_eq!(sys::zcx_rte_lcore_id(), sys::rte_get_main_lcore());
    }
    // SAFETY: reading the lcore id of a thread EAL does not know is allowed.
    let other = std::thread::spawn(|| unsafe { sys::zcx_rte_lcore_id() }).join().unwrap();
    assert_eq!(other, sys::LCORE_ID_ANY);
    errno_roundtrip();

    // SAFETY: EAL is initialised.
    assert_eq!(unsafe { sys::rte_eth_dev_count_avail() }, 1, "exactly the net_ring0 port");
    let port = port_by_name("net_ring0");
    // SAFETY: iteration from port 0 over the ports EAL created.
    assert_eq!(unsafe { sys::rte_eth_find_next(0) }, port);
    let (info, driver) = dev_info(port);
    assert_eq!(driver, "net_ring");
    assert!(info.max_rx_queues >= 1 && info.max_tx_queues >= 1);

    let pool = Pool::new("zcx_ring_pool", POOL_MBUFS);
    assert_eq!(pool.available(), POOL_MBUFS);
    mbuf_helpers(&pool);
    assert_eq!(pool.available(), POOL_MBUFS, "the helpers returned every mbuf");

    start_port(port, &pool, 512);
    assert!(link_up(port), "net_ring's link is up once started");
    let mut mac = sys::rte_ether_addr { addr_bytes: [0; 6] };
    // SAFETY: mac is a writable rte_ether_addr.
    ok(unsafe { sys::rte_eth_macaddr_get(port, &mut mac) }, "rte_eth_macaddr_get");
    assert_eq!(mac.addr_bytes[0] & 1, 0, "unicast MAC {:02x?}", mac.addr_bytes);

    let mut total = 0;
    for round in 0..4u32 {
        total += loopback_burst(port, &pool, round * 100, 32);
    }
    let st = stats(port);
    assert_eq!((st.ipackets, st.opackets), (128, 128), "stats count every frame: {total} bytes");
    assert_eq!(st.q_ipackets[0], 128);
    assert_eq!(st.q_opackets[0], 128);
    assert_eq!((st.ierrors, st.oerrors, st.rx_nombuf), (0, 0, 0));
    // SAFETY: valid started port.
    ok(unsafe { sys::rte_eth_stats_reset(port) }, "rte_eth_stats_reset");
    assert_eq!(stats(port).opackets, 0);

    external_buffer(port, &pool);
    external_memory(info.device);

    stop_and_close(port);
    assert_eq!(pool.available(), POOL_MBUFS, "every mbuf came back to the pool");
    drop(pool);
    drop(eal);
    assert_eq!(sys::Eal::init(["--no-huge"]).unwrap_err(), sys::EalError::CleanedUp);
}

/// rte_errno is the calling thread's, and rte_strerror knows libc's codes.
#[cfg(not(zcx_dpdk_missing))]
fn errno_roundtrip() {
    use zcx_dpdk_sys as sys;
    // SAFETY: sets the calling thread's rte_errno.
    unsafe { sys::zcx_rte_set_errno(libc::ENOTSUP) };
    assert_eq!(sys::errno(), libc::ENOTSUP);
    assert!(!sys::strerror(libc::ENOTSUP).is_empty());
    // SAFETY: as above.
    unsafe { sys::zcx_rte_set_errno(0) };
}

/// The shim's mbuf helpers: headroom, tailroom, append, prepend, adj, trim and reference counts.
#[cfg(not(zcx_dpdk_missing))]
fn mbuf_helpers(pool: &common::Pool) {
    use zcx_dpdk_sys as sys;
    // SAFETY: every pointer is the mbuf just allocated (checked non-null), owned by this function
    // until the last free; lengths stay within its 2048-byte data room except where a failure is
    // the expected outcome.
    unsafe {
        let m = sys::zcx_rte_pktmbuf_alloc(pool.as_ptr());
        assert!(!m.is_null());
        assert_eq!(sys::zcx_rte_pktmbuf_headroom(m) as u32, sys::RTE_PKTMBUF_HEADROOM);
        assert_eq!(sys::zcx_rte_pktmbuf_tailroom(m) as u32, sys::RTE_MBUF_DEFAULT_DATAROOM);
        assert_eq!(((*m).data_len, (*m).pkt_len, (*m).nb_segs), (0, 0, 1));

        let tail = sys::zcx_rte_pktmbuf_append(m, 100);
        assert_eq!(tail as *mut u8, sys::zcx_rte_pktmbuf_mtod(m) as *mut u8);
        assert_eq!(((*m).data_len, (*m).pkt_len), (100, 100));
        let head = sys::zcx_rte_pktmbuf_prepend(m, 14);
        assert_eq!(head as *mut u8, (tail as *mut u8).sub(14));
        assert_eq!(sys::zcx_rte_pktmbuf_mtod(m) as *mut u8, head as *mut u8);
        assert_eq!(sys::zcx_rte_pktmbuf_mtod_offset(m, 14) as *mut u8, tail as *mut u8);
        assert_eq!((*m).data_len, 114);
        assert_eq!(sys::zcx_rte_pktmbuf_headroom(m) as u32, sys::RTE_PKTMBUF_HEADROOM - 14);
        assert_eq!(
            sys::zcx_rte_pktmbuf_iova(m),
            (*m).buf_iova + (*m).data_off as u64,
            "the data's IO address is the buffer's plus the data offset"
        );

        assert_eq!(sys::zcx_rte_pktmbuf_adj(m, 14) as *mut u8, tail as *mut u8);
        assert_eq!(sys::zcx_rte_pktmbuf_trim(m, 50), 0);
        assert_eq!(((*m).data_len, (*m).pkt_len), (50, 50));
        assert_eq!(sys::zcx_rte_pktmbuf_trim(m, 51), -1, "cannot trim more than the data");
        assert!(sys::zcx_rte_pktmbuf_adj(m, 51).is_null(), "cannot cut more than the data");
        assert!(sys::zcx_rte_pktmbuf_append(m, 4000).is_null(), "no room for 4000 more bytes");
        assert!(sys::zcx_rte_pktmbuf_prepend(m, 1000).is_null(), "no headroom for 1000 bytes");
        assert_eq!((*m).data_len, 50, "failed calls change nothing");

        assert_eq!(sys::zcx_rte_mbuf_refcnt_read(m), 1);
        assert_eq!(sys::zcx_rte_mbuf_refcnt_update(m, 1), 2);
        let before = pool.available();
        sys::zcx_rte_pktmbuf_free(m);
        assert_eq!(sys::zcx_rte_mbuf_refcnt_read(m), 1, "the first free only dropped a reference");
        assert_eq!(pool.available(), before);
        sys::zcx_rte_pktmbuf_free(m);
        assert_eq!(pool.available(), before + 1);

        let mut bulk = [std::ptr::null_mut(); 8];
        assert_eq!(sys::zcx_rte_pktmbuf_alloc_bulk(pool.as_ptr(), bulk.as_mut_ptr(), 8), 0);
        for m in bulk {
            assert!(!m.is_null());
            sys::zcx_rte_pktmbuf_free(m);
        }
        sys::zcx_rte_pktmbuf_free(std::ptr::null_mut());
    }
}

/// Sends `n` frames numbered from `first` in one burst and receives them back (net_ring loops tx
/// to rx), in order and byte for byte. Returns the bytes sent.
#[cfg(not(zcx_dpdk_missing))]
fn loopback_burst(port: u16, pool: &common::Pool, first: u32, n: usize) -> usize {
    use common::*;
    use std::time::{Duration, Instant};
    use zcx_dpdk_sys as sys;

    let mut tx: Vec<*mut sys::rte_mbuf> = (0..n as u32).map(|i| frame_mbuf(pool, first + i)).collect();
    let bytes = (0..n as u32).map(|i| frame_len(first + i)).sum();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sent < n {
        // SAFETY: tx[sent..] are mbufs this function owns; the driver takes the ones it accepts.
        sent += unsafe { sys::zcx_rte_eth_tx_burst(port, 0, tx.as_mut_ptr().add(sent), (n - sent) as u16) }
            as usize;
        if Instant::now() > deadline {
            // SAFETY: the mbufs the driver did not take are still this function's.
            tx[sent..].iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
            panic!("tx accepted only {sent} of {n} frames");
        }
    }

    let mut got = Vec::with_capacity(n);
    let mut rx = [std::ptr::null_mut(); 64];
    while got.len() < n && Instant::now() < deadline {
        // SAFETY: rx has room for the 64 mbufs requested; the ones returned are now ours.
        let k = unsafe { sys::zcx_rte_eth_rx_burst(port, 0, rx.as_mut_ptr(), rx.len() as u16) } as usize;
        got.extend_from_slice(&rx[..k]);
        if k == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let result = (|| {
        if got.len() != n {
            return Err(format!("received {} of {n} frames", got.len()));
        }
        for (i, &m) in got.iter().enumerate() {
            let seq = first + i as u32;
            // SAFETY: m was returned by rx_burst and is owned here until freed below.
            let (nb_segs, pkt_len, payload) = unsafe { ((*m).nb_segs, (*m).pkt_len, data(m)) };
            if nb_segs != 1 || pkt_len as usize != frame_len(seq) {
                return Err(format!("frame {seq}: {nb_segs} segments, {pkt_len} bytes"));
            }
            check(payload, seq)?;
        }
        Ok(())
    })();
    // SAFETY: every received mbuf is owned here and not used after this.
    got.iter().for_each(|&m| unsafe { sys::zcx_rte_pktmbuf_free(m) });
    result.unwrap();
    bytes
}

/// Number of times [`count_free`] ran, and the buffer it was last given.
#[cfg(not(zcx_dpdk_missing))]
struct FreeLog {
    calls: std::sync::atomic::AtomicUsize,
    addr: std::sync::atomic::AtomicUsize,
}

/// The external buffer's free callback: DPDK calls it when the last mbuf attached to it is freed.
#[cfg(not(zcx_dpdk_missing))]
unsafe extern "C" fn count_free(addr: *mut std::ffi::c_void, opaque: *mut std::ffi::c_void) {
    use std::sync::atomic::Ordering;
    // SAFETY: opaque is the &FreeLog given to ext_shinfo_init_helper, which outlives the mbuf.
    let log = unsafe { &*(opaque as *const FreeLog) };
    log.addr.store(addr as usize, Ordering::SeqCst);
    log.calls.fetch_add(1, Ordering::SeqCst);
}

/// Zero copy from memory the caller owns: an mbuf attached to an external buffer goes through the
/// port and back still pointing into that buffer, and freeing it calls the buffer's free callback.
#[cfg(not(zcx_dpdk_missing))]
fn external_buffer(port: u16, pool: &common::Pool) {
    use common::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    use zcx_dpdk_sys as sys;

    let mut buf = vec![0u8; 4096];
    let base = buf.as_mut_ptr();
    let log = FreeLog { calls: AtomicUsize::new(0), addr: AtomicUsize::new(0) };
    let seq = 7777;
    let len = frame_len(seq);
    // SAFETY: buf (4096 bytes) outlives the mbuf: the free callback, checked below, runs before it
    // is dropped. The shared info is carved from its end by the helper; the IO address of a buffer
    // in IOVA-as-VA mode (what --no-huge selects) is its virtual address.
    let m = unsafe {
        let mut buf_len: u16 = 4096;
        let shinfo = sys::zcx_rte_pktmbuf_ext_shinfo_init_helper(
            base.cast(),
            &mut buf_len,
            Some(count_free),
            &log as *const FreeLog as *mut _,
        );
        assert!(!shinfo.is_null());
        assert!(buf_len < 4096 && buf_len as usize >= len + sys::RTE_PKTMBUF_HEADROOM as usize);
        assert_eq!(sys::zcx_rte_mbuf_ext_refcnt_read(shinfo), 1);
        let m = sys::zcx_rte_pktmbuf_alloc(pool.as_ptr());
        assert!(!m.is_null());
        sys::zcx_rte_pktmbuf_attach_extbuf(m, base.cast(), base as u64, buf_len, shinfo);
        sys::zcx_rte_pktmbuf_reset_headroom(m);
        assert_ne!((*m).ol_flags & sys::RTE_MBUF_F_EXTERNAL, 0);
        let p = sys::zcx_rte_pktmbuf_append(m, len as u16) as *mut u8;
        assert_eq!(p, base.add(sys::RTE_PKTMBUF_HEADROOM as usize), "data lies in the external buffer");
        fill(std::slice::from_raw_parts_mut(p, len), seq);
        m
    };
    let mut one = [m];
    // SAFETY: m is owned here; the driver takes it if it returns 1.
    assert_eq!(unsafe { sys::zcx_rte_eth_tx_burst(port, 0, one.as_mut_ptr(), 1) }, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rx = [std::ptr::null_mut(); 4];
    let mut k = 0;
    while k == 0 && Instant::now() < deadline {
        // SAFETY: rx has room for 4 mbufs; the returned ones are ours.
        k = unsafe { sys::zcx_rte_eth_rx_burst(port, 0, rx.as_mut_ptr(), 4) };
    }
    assert_eq!(k, 1, "the frame came back");
    let m = rx[0];
    // SAFETY: m was returned by rx_burst and is owned here until freed.
    unsafe {
        assert_eq!(sys::zcx_rte_pktmbuf_mtod(m) as *mut u8, base.add(sys::RTE_PKTMBUF_HEADROOM as usize));
        check(data(m), seq).unwrap();
        assert_eq!(log.calls.load(Ordering::SeqCst), 0, "still attached");
        sys::zcx_rte_pktmbuf_free(m);
    }
    assert_eq!(log.calls.load(Ordering::SeqCst), 1, "freeing the mbuf released the external buffer");
    assert_eq!(log.addr.load(Ordering::SeqCst), base as usize);
    drop(buf);
}

/// External memory: a page-aligned region the process allocated is registered with EAL (so DPDK
/// can translate its addresses), offered to the device for DMA, and unregistered. A virtual device
/// without DMA answers ENOTSUP, which is fine: the call reached it.
#[cfg(not(zcx_dpdk_missing))]
fn external_memory(device: *mut zcx_dpdk_sys::rte_device) {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use zcx_dpdk_sys as sys;

    const PAGE: usize = 4096;
    const LEN: usize = 64 * PAGE;
    let layout = Layout::from_size_align(LEN, PAGE).unwrap();
    // SAFETY: a non-zero size layout.
    let va = unsafe { alloc_zeroed(layout) };
    assert!(!va.is_null());
    // SAFETY: va..va+LEN is a page-aligned region owned here, registered without IO addresses
    // (NULL: DPDK marks them unknown), unregistered before it is freed.
    unsafe {
        let rc = sys::rte_extmem_register(va.cast(), LEN, std::ptr::null_mut(), 0, PAGE);
        assert_eq!(rc, 0, "rte_extmem_register: {}", sys::strerror(sys::errno()));
        let rc = sys::rte_extmem_register(va.cast(), LEN, std::ptr::null_mut(), 0, PAGE);
        assert_eq!((rc, sys::errno()), (-1, libc::EEXIST), "registering twice is refused");
        let rc = sys::rte_dev_dma_map(device, va.cast(), va as u64, LEN);
        if rc == 0 {
            assert_eq!(sys::rte_dev_dma_unmap(device, va.cast(), va as u64, LEN), 0);
        } else {
            assert_eq!(sys::errno(), libc::ENOTSUP, "dma_map: {}", sys::strerror(sys::errno()));
        }
        let rc = sys::rte_extmem_unregister(va.cast(), LEN);
        assert_eq!(rc, 0, "rte_extmem_unregister: {}", sys::strerror(sys::errno()));
        dealloc(va, layout);
    }
}
