//! Verbs devices as libibverbs reports them: each device's limits, each port's state, link
//! layer, MTU and message size, and its GIDs with their RoCE version; the largest inline send a
//! reliable-connected queue pair of the device accepts, read back from one created for the
//! purpose (the device attributes do not say).
//!
//! What a port reports is the owner's own hardware, not a peer's bytes: the values are copied out
//! as they are, and only the ones the transport relies on are interpreted.

use std::ffi::CStr;

use zcx_verbs_sys as sys;

/// One verbs device (`ibv_device`, `ibv_device_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Node GUID, as the kernel's sysfs prints it (`0011:2233:4455:6677`).
    pub node_guid: String,
    /// Firmware version, empty when the device has none (Soft-RoCE).
    pub fw_ver: String,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Whether the NIC does 64-bit fetch-add and compare-swap itself (`IBV_ATOMIC_HCA` or
    /// `_GLOB`): atomic against other RDMA atomics of the device, not against the CPU.
    pub atomics: bool,
    /// Outstanding RDMA reads and atomics a queue pair may have as target (`max_qp_rd_atom`).
    pub max_qp_rd_atom: i32,
    /// Scatter-gather entries a work request may carry.
    pub max_sge: i32,
    /// Entries a completion queue may have.
    pub max_cqe: i32,
    /// The largest inline send of a reliable-connected queue pair, in bytes; `None` when no
    /// queue pair could be created to find out.
    pub max_inline: Option<u32>,
    /// Its ports, numbered from 1.
    pub ports: Vec<PortInfo>,
}

/// One port of a device (`ibv_port_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub num: u8,
    /// `ACTIVE`, `DOWN`, ... (`ibv_port_state_str`).
    pub state: String,
    /// True when the port is `ACTIVE` (or `ACTIVE_DEFER`): it carries traffic.
    pub active: bool,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: &'static str,
    /// The active path MTU, in bytes (256 to 4096).
    pub active_mtu: u32,
    /// The largest message one work request may carry, in bytes.
    pub max_msg_sz: u32,
    /// Its valid GIDs, RoCE v2 first, then by index.
    pub gids: Vec<GidInfo>,
}

/// What kind of address a GID is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GidKind {
    /// RoCE v2: routable over UDP/IP. Preferred.
    RoceV2,
    /// RoCE v1: Ethernet only.
    RoceV1,
    /// An InfiniBand GID.
    Ib,
}

/// One entry of a port's GID table (`ibv_gid_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidInfo {
    /// Its index in the table (`UCX_IB_GID_INDEX`, `ZCX_VERBS_GID_INDEX`).
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// RoCE v2, v1 or InfiniBand.
    pub kind: GidKind,
    /// The network interface it belongs to (0 for InfiniBand).
    pub ifindex: u32,
}

impl GidInfo {
    /// The GID as an IPv6 address (RoCE GIDs are one; an IPv4 address appears mapped).
    pub fn as_ipv6(&self) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.gid)
    }
}

impl std::fmt::Display for GidKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GidKind::RoceV2 => "RoCE v2",
            GidKind::RoceV1 => "RoCE v1",
            GidKind::Ib => "IB",
        })
    }
}

/// Puts GIDs in the order the transport tries them: RoCE v2 first (routable), then v1, then
/// InfiniBand; by index within a kind.
pub fn order_gids(gids: &mut [GidInfo]) {
    gids.sort_by_key(|g| (g.kind, g.index));
}

/// Bytes of an `ibv_mtu` value (`IBV_MTU_256` = 1 ... `IBV_MTU_4096` = 5); 0 for another value.
pub fn mtu_bytes(mtu: sys::ibv_mtu::Type) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

/// Every verbs device of this host with its ports and GIDs, or why they cannot be listed. No
/// device (this host, without an RDMA NIC) is an empty list.
pub fn devices() -> Result<Vec<DeviceInfo>, String> {
    if let Some(why) = super::verbs_missing() {
        return Err(format!("built without libibverbs: {why}"));
    }
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; the list is freed by `DeviceList`'s drop.
    let list = unsafe { sys::ibv_get_device_list(&mut count) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        // ENOSYS: the kernel has no verbs support at all; that is no device, not a failure.
        if err.raw_os_error() == Some(libc::ENOSYS) {
            return Ok(Vec::new());
        }
        return Err(format!("ibv_get_device_list: {err}"));
    }
    let list = DeviceList(list);
    let mut out = Vec::new();
    for i in 0..usize::try_from(count).unwrap_or(0) {
        // SAFETY: the list holds `count` device pointers, and is alive.
        let device = unsafe { *list.0.add(i) };
        out.push(device_info(device)?);
    }
    Ok(out)
}

/// The device and port the transport and memory domain use: `wanted` as `ZCX_VERBS_DEVICE`
/// says it (`rxe0:1`, or `rxe0` for port 1), checked to exist with that port active; without
/// it, the first device with an active port. `Ok(None)`: no device here.
pub fn choose(wanted: Option<&str>) -> Result<Option<(String, u8)>, String> {
    let devices = devices()?;
    let Some(wanted) = wanted else {
        return Ok(devices
            .iter()
            .find_map(|d| d.ports.iter().find(|p| p.active).map(|p| (d.name.clone(), p.num))));
    };
    let (name, port) = match wanted.split_once(':') {
        Some((name, port)) => {
            let port =
                port.parse::<u8>().map_err(|_| format!("ZCX_VERBS_DEVICE={wanted}: port is not a number"))?;
            (name, port)
        }
        None => (wanted, 1),
    };
    let device = devices.iter().find(|d| d.name == name).ok_or_else(|| {
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        format!("ZCX_VERBS_DEVICE={wanted}: no device {name} (devices: {names:?})")
    })?;
    let found = device
        .ports
        .iter()
        .find(|p| p.num == port)
        .ok_or_else(|| format!("ZCX_VERBS_DEVICE={wanted}: {name} has no port {port}"))?;
    if !found.active {
        return Err(format!("ZCX_VERBS_DEVICE={wanted}: port {port} of {name} is {}", found.state));
    }
    Ok(Some((name.to_owned(), port)))
}

/// Whether a child of `fork()` is safe from this process's registered memory
/// (`ibv_is_fork_initialized`). zcx never calls `ibv_fork_init`: on kernels that copy pinned
/// pages for the child (5.13 and later) it is unneeded, and before them it slows every
/// registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkSafety {
    /// The kernel keeps registered pages of the parent intact across a fork: forking is safe.
    Unneeded,
    /// `ibv_fork_init` was called (by someone else in the process): forking is safe.
    Enabled,
    /// Neither: a child that touches a registered page can corrupt the parent's RDMA.
    Unsafe,
}

/// The process's fork safety, or `None` when libibverbs is not linked.
pub fn fork_safety() -> Option<ForkSafety> {
    if super::verbs_missing().is_some() {
        return None;
    }
    // SAFETY: reads libibverbs' process-wide state; no arguments.
    Some(match unsafe { sys::ibv_is_fork_initialized() } {
        sys::ibv_fork_status::IBV_FORK_UNNEEDED => ForkSafety::Unneeded,
        sys::ibv_fork_status::IBV_FORK_ENABLED => ForkSafety::Enabled,
        _ => ForkSafety::Unsafe,
    })
}

/// The GID a queue pair on `port` uses: `wanted` (`ZCX_VERBS_GID_INDEX`, as
/// `UCX_IB_GID_INDEX`) when the port has it, else the first in transport order (RoCE v2 first,
/// see [`order_gids`]).
pub fn choose_gid(port: &PortInfo, wanted: Option<u32>) -> Result<GidInfo, String> {
    match wanted {
        Some(index) => port.gids.iter().find(|g| g.index == index).copied().ok_or_else(|| {
            let valid: Vec<u32> = port.gids.iter().map(|g| g.index).collect();
            format!("ZCX_VERBS_GID_INDEX={index}: port {} has no such GID (valid: {valid:?})", port.num)
        }),
        None => port.gids.first().copied().ok_or_else(|| format!("port {} has no GID", port.num)),
    }
}

/// Frees a device list once.
struct DeviceList(*mut *mut sys::ibv_device);

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `ibv_get_device_list` and is freed only here.
        unsafe { sys::ibv_free_device_list(self.0) };
    }
}

/// Closes an opened device once.
struct Opened(*mut sys::ibv_context);

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: opened by `ibv_open_device`, closed only here, after everything made on it.
        unsafe { sys::ibv_close_device(self.0) };
    }
}

fn c_str(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn device_info(device: *mut sys::ibv_device) -> Result<DeviceInfo, String> {
    // SAFETY: a device of a live device list.
    let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(device)) }.to_string_lossy().into_owned();
    // SAFETY: as above; the context is closed by `Opened`.
    let ctx = unsafe { sys::ibv_open_device(device) };
    if ctx.is_null() {
        return Err(format!("ibv_open_device({name}): {}", std::io::Error::last_os_error()));
    }
    let ctx = Opened(ctx);
    // SAFETY: plain C struct; all-zero is a valid value for `ibv_query_device` to overwrite.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: an open context and a valid out-pointer.
    let rc = unsafe { sys::ibv_query_device(ctx.0, &mut attr) };
    if rc != 0 {
        return Err(format!("ibv_query_device({name}): {}", std::io::Error::from_raw_os_error(rc)));
    }
    let guid = u64::from_be(attr.node_guid);
    let node_guid = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    );
    let mut ports = Vec::new();
    for num in 1..=attr.phys_port_cnt {
        ports.push(port_info(&ctx, &name, num)?);
    }
    Ok(DeviceInfo {
        node_guid,
        fw_ver: c_str(&attr.fw_ver),
        max_mr_size: attr.max_mr_size,
        atomics: matches!(
            attr.atomic_cap,
            sys::ibv_atomic_cap::IBV_ATOMIC_HCA | sys::ibv_atomic_cap::IBV_ATOMIC_GLOB
        ),
        max_qp_rd_atom: attr.max_qp_rd_atom,
        max_sge: attr.max_sge,
        max_cqe: attr.max_cqe,
        max_inline: max_inline(&ctx),
        ports,
        name,
    })
}

fn port_info(ctx: &Opened, name: &str, num: u8) -> Result<PortInfo, String> {
    // SAFETY: plain C struct; all-zero is valid for the query to overwrite.
    let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: an open context, a port number the device reported, a valid out-pointer.
    let rc = unsafe { sys::zcx_ibv_query_port(ctx.0, num, &mut attr) };
    if rc != 0 {
        return Err(format!("ibv_query_port({name}:{num}): {}", std::io::Error::from_raw_os_error(rc)));
    }
    // SAFETY: returns a static string for any value.
    let state = unsafe { CStr::from_ptr(sys::ibv_port_state_str(attr.state)) }.to_string_lossy().into_owned();
    let link_layer = match u32::from(attr.link_layer) {
        sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
        sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        _ => "unspecified",
    };
    let mut gids = Vec::new();
    for index in 0..u32::try_from(attr.gid_tbl_len).unwrap_or(0) {
        // SAFETY: plain C struct, all-zero valid.
        let mut entry: sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: an open context, a port and index within its table, a valid out-pointer.
        let rc = unsafe { sys::zcx_ibv_query_gid_ex(ctx.0, u32::from(num), index, &mut entry, 0) };
        // An empty slot of the table reports ENODATA; only the valid entries are listed.
        if rc != 0 {
            continue;
        }
        let kind = match entry.gid_type {
            sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V2 => GidKind::RoceV2,
            sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V1 => GidKind::RoceV1,
            _ => GidKind::Ib,
        };
        // SAFETY: reading the raw bytes of the GID union.
        let gid = unsafe { entry.gid.raw };
        gids.push(GidInfo { index, gid, kind, ifindex: entry.ndev_ifindex });
    }
    order_gids(&mut gids);
    Ok(PortInfo {
        num,
        active: matches!(
            attr.state,
            sys::ibv_port_state::IBV_PORT_ACTIVE | sys::ibv_port_state::IBV_PORT_ACTIVE_DEFER
        ),
        state,
        link_layer,
        active_mtu: mtu_bytes(attr.active_mtu),
        max_msg_sz: attr.max_msg_sz,
        gids,
    })
}

/// The inline limit of an RC queue pair on `ctx`: one is created asking for `ASK` bytes, and
/// the value the provider wrote back is its limit (a provider lowers it, or refuses and is asked
/// again for less).
fn max_inline(ctx: &Opened) -> Option<u32> {
    const ASKS: [u32; 5] = [1024, 512, 256, 128, 64];
    // SAFETY: an open context; the PD and CQ are freed below, before the context.
    let pd = unsafe { sys::ibv_alloc_pd(ctx.0) };
    if pd.is_null() {
        return None;
    }
    // SAFETY: as above; no channel, no context pointer.
    let cq = unsafe { sys::ibv_create_cq(ctx.0, 4, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
    let mut found = None;
    if !cq.is_null() {
        for ask in ASKS {
            // SAFETY: plain C struct, all-zero valid (null pointers, zero counts).
            let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            init.send_cq = cq;
            init.recv_cq = cq;
            init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            init.cap = sys::ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: ask,
            };
            // SAFETY: a live PD and CQ, a filled init struct the call may update.
            let qp = unsafe { sys::ibv_create_qp(pd, &mut init) };
            if !qp.is_null() {
                found = Some(init.cap.max_inline_data);
                // SAFETY: created just above, destroyed once.
                unsafe { sys::ibv_destroy_qp(qp) };
                break;
            }
        }
        // SAFETY: created above; its only QP is destroyed.
        unsafe { sys::ibv_destroy_cq(cq) };
    }
    // SAFETY: allocated above; everything made on it is destroyed.
    unsafe { sys::ibv_dealloc_pd(pd) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_enums_are_bytes() {
        assert_eq!(
            [1, 2, 3, 4, 5].map(mtu_bytes),
            [256, 512, 1024, 2048, 4096],
            "IBV_MTU_256 .. IBV_MTU_4096"
        );
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_bytes(6), 0);
    }

    #[test]
    fn the_gid_is_the_one_asked_for_or_the_first_roce_v2() {
        let gid = |index, kind| GidInfo { index, gid: [index as u8; 16], kind, ifindex: 2 };
        let mut gids = vec![gid(0, GidKind::RoceV1), gid(1, GidKind::RoceV2), gid(3, GidKind::RoceV2)];
        order_gids(&mut gids);
        let port = PortInfo {
            num: 1,
            state: "active".into(),
            active: true,
            link_layer: "Ethernet",
            active_mtu: 1024,
            max_msg_sz: 1 << 23,
            gids,
        };
        assert_eq!(choose_gid(&port, None).map(|g| g.index), Ok(1));
        assert_eq!(choose_gid(&port, Some(0)).map(|g| g.index), Ok(0));
        assert_eq!(choose_gid(&port, Some(3)).map(|g| g.index), Ok(3));
        let missing = choose_gid(&port, Some(2)).expect_err("index 2 is not in the table");
        assert!(missing.contains("ZCX_VERBS_GID_INDEX=2") && missing.contains("[1, 3, 0]"), "{missing}");
        let empty = PortInfo { gids: Vec::new(), ..port };
        assert!(choose_gid(&empty, None).is_err());
    }

    #[test]
    fn roce_v2_gids_sort_first() {
        let gid = |index, kind| GidInfo { index, gid: [0; 16], kind, ifindex: 2 };
        let mut gids =
            [gid(2, GidKind::RoceV1), gid(0, GidKind::RoceV1), gid(3, GidKind::Ib), gid(1, GidKind::RoceV2)];
        order_gids(&mut gids);
        assert_eq!(gids.map(|g| g.index), [1, 0, 2, 3]);
    }

    /// Here: no verbs device (an empty list, not an error). In the Soft-RoCE guest the VM test
    /// checks the devices themselves.
    #[test]
    fn devices_are_listed_or_there_are_none() {
        if let Some(why) = super::super::verbs_missing() {
            println!("skipped: {why}");
            return;
        }
        let devices = devices().expect("listing devices never fails for want of a device");
        for device in &devices {
            assert!(!device.name.is_empty());
            assert!(!device.ports.is_empty(), "{device:?}");
        }
    }
}
