//! DPDK's EAL for a whole process, for callers that make transports on demand (the api's
//! workers): initialised once, by the first caller, and never cleaned up.
//!
//! EAL can be initialised once per process, and every port must be closed before it is cleaned
//! up. A worker may be created and dropped on any thread at any time, so no worker can own the
//! [`Eal`] guard: it lives in a process-wide static instead, which is never dropped. EAL's
//! memory, its runtime directory (`/var/run/dpdk/<file-prefix>`, empty with `--no-shconf`) and
//! its threads therefore stay until the process exits; the transports themselves close their
//! ports and free their pools when dropped. A process that needs EAL cleaned up makes its own
//! [`Eal`] and [`DpdkTransport::new`] instead.
//!
//! Each port is used by at most one transport at a time ([`open_with_process_eal`] refuses a
//! port that is in use).

use std::sync::{Mutex, OnceLock};

use zcx_dpdk_sys::Eal;

use super::transport::{DpdkConfig, DpdkTransport};

/// Why DPDK cannot be used in this build (`zcx-dpdk-sys` found no DPDK 22.11), or `None`.
pub fn dpdk_missing() -> Option<&'static str> {
    zcx_dpdk_sys::DPDK_MISSING
}

/// The process's EAL guard, kept in a static.
struct ProcessEal(#[allow(dead_code)] Eal);

// SAFETY: `Eal` is `!Send`/`!Sync` only so that its `Drop` (`rte_eal_cleanup`) runs on EAL's main
// lcore thread. This static is never dropped, so that never runs; the guard is only ever borrowed
// as the proof `DpdkTransport::new` asks for, and it has no method that touches thread state.
unsafe impl Send for ProcessEal {}
// SAFETY: as for `Send`: shared references only prove that EAL is initialised.
unsafe impl Sync for ProcessEal {}

static EAL: OnceLock<Result<ProcessEal, String>> = OnceLock::new();

/// Ports some transport of [`open_with_process_eal`] uses now.
static PORTS_IN_USE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A port in use by one transport; released when the transport drops.
#[derive(Debug)]
pub(crate) struct PortClaim(String);

impl Drop for PortClaim {
    fn drop(&mut self) {
        let mut ports = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        ports.retain(|p| *p != self.0);
    }
}

#[cfg(not(zcx_dpdk_missing))]
fn init(eal_args: &[String]) -> Result<ProcessEal, String> {
    tracing::debug!(args = ?eal_args, "initialising DPDK's EAL for this process");
    Eal::init(eal_args).map(ProcessEal).map_err(|e| format!("EAL init with {eal_args:?}: {e}"))
}

/// Without DPDK nothing may call into it (it would not link).
#[cfg(zcx_dpdk_missing)]
fn init(_eal_args: &[String]) -> Result<ProcessEal, String> {
    Err(format!("DPDK is not available in this build: {}", dpdk_missing().unwrap_or("")))
}

/// Initialises EAL with `eal_args` unless this process already did (later calls' arguments are
/// ignored, and a failed first init stays failed), then opens a [`DpdkTransport`] on
/// `config.port_name`. Errors say what went wrong, for the caller's status message.
pub fn open_with_process_eal(eal_args: &[String], config: DpdkConfig) -> Result<DpdkTransport, String> {
    if let Some(why) = dpdk_missing() {
        return Err(format!("DPDK is not available in this build: {why}"));
    }
    let eal = EAL.get_or_init(|| init(eal_args));
    let eal = match eal {
        Ok(ProcessEal(eal)) => eal,
        Err(why) => return Err(why.clone()),
    };
    let claim = {
        let mut ports = PORTS_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if ports.contains(&config.port_name) {
            return Err(format!("DPDK port {} is already used by another worker", config.port_name));
        }
        ports.push(config.port_name.clone());
        PortClaim(config.port_name.clone())
    };
    let port = config.port_name.clone();
    // SAFETY: EAL is initialised and its guard lives in a static that is never dropped, so it
    // outlives the transport.
    let mut transport =
        unsafe { DpdkTransport::new(eal, config) }.map_err(|e| format!("DPDK port {port}: {e}"))?;
    transport.claim = Some(claim);
    Ok(transport)
}

/// A DPDK port as `zcx info` lists it (`ucx_info -d` lists devices the same way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The ethdev port id.
    pub id: u16,
    /// The device name (`net_memif0`, `0000:00:03.0`).
    pub name: String,
    /// The driver's name (`net_memif`, `net_virtio`).
    pub driver: String,
    /// The port's MAC address.
    pub mac: [u8; 6],
}

/// The ports EAL found, after initialising it with `eal_args` unless this process already did
/// (as [`open_with_process_eal`] does).
pub fn ports_with_process_eal(eal_args: &[String]) -> Result<Vec<PortInfo>, String> {
    if let Some(why) = dpdk_missing() {
        return Err(format!("DPDK is not available in this build: {why}"));
    }
    if let Err(why) = EAL.get_or_init(|| init(eal_args)) {
        return Err(why.clone());
    }
    Ok(list_ports())
}

#[cfg(not(zcx_dpdk_missing))]
fn list_ports() -> Vec<PortInfo> {
    use std::ffi::CStr;
    use zcx_dpdk_sys as sys;

    let mut ports = Vec::new();
    // SAFETY: EAL is initialised (the caller checked the process EAL). These calls only read the
    // ethdev table; each writes into the zeroed buffer or struct it is given, which is large
    // enough (RTE_ETH_NAME_MAX_LEN for a name) and valid when all zero (plain C data).
    unsafe {
        let mut id = sys::rte_eth_find_next(0);
        while u32::from(id) < sys::RTE_MAX_ETHPORTS {
            let mut name = [0 as std::ffi::c_char; sys::RTE_ETH_NAME_MAX_LEN as usize];
            let name = if sys::rte_eth_dev_get_name_by_port(id, name.as_mut_ptr()) == 0 {
                CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()
            } else {
                String::new()
            };
            let mut info: sys::rte_eth_dev_info = std::mem::zeroed();
            let driver = if sys::rte_eth_dev_info_get(id, &mut info) == 0 && !info.driver_name.is_null() {
                CStr::from_ptr(info.driver_name).to_string_lossy().into_owned()
            } else {
                String::new()
            };
            let mut mac: sys::rte_ether_addr = std::mem::zeroed();
            let mac = if sys::rte_eth_macaddr_get(id, &mut mac) == 0 { mac.addr_bytes } else { [0; 6] };
            ports.push(PortInfo { id, name, driver, mac });
            id = sys::rte_eth_find_next(id + 1);
        }
    }
    ports
}

/// Without DPDK there are no ports (and nothing may call into it).
#[cfg(zcx_dpdk_missing)]
fn list_ports() -> Vec<PortInfo> {
    Vec::new()
}
