//! `zcx info`: what this host offers zcx, like `ucx_info -v -d -c`.

use std::fmt::Write as _;

use clap::Args;
use zcx::{Config, Context, ContextParams, Features, MemMapParams, MemhPackFlags};

/// Options of `zcx info`; with none, every section is printed.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Print the version (`ucx_info -v`).
    #[arg(short = 'v', long)]
    version: bool,
    /// Print memory: hugepage pools and the memlock limit.
    #[arg(short = 'm', long)]
    memory: bool,
    /// Print transports: compiled in, and usable on this host (`ucx_info -d`).
    #[arg(short = 'd', long)]
    devices: bool,
    /// Print the configuration (`ucx_info -c`).
    #[arg(short = 'c', long)]
    config: bool,
    /// Map memory as `<size>[,<type>]` (e.g. `1m`) and describe it (`ucp_mem_print_info`).
    #[arg(long, value_name = "SPEC")]
    mem: Option<String>,
}

pub fn run(args: &InfoArgs) -> Result<(), String> {
    let all = !(args.version || args.memory || args.devices || args.config || args.mem.is_some());
    let config = Config::from_env().map_err(|s| format!("bad ZCX_* configuration: {s}"))?;
    let mut out = String::new();
    if all || args.version {
        let _ = writeln!(out, "# zcx version {}", env!("CARGO_PKG_VERSION"));
    }
    if all || args.memory {
        memory_section(&mut out);
    }
    if all || args.devices {
        transport_section(&mut out, &config);
    }
    if all || args.config {
        out.push_str(&config.print());
    }
    if let Some(spec) = &args.mem {
        let ctx = Context::new(&ContextParams::new(Features::RMA), &config).map_err(|s| s.to_string())?;
        let info = ctx.mem_print_info(spec).map_err(|s| {
            format!(
                "cannot map {spec:?}: {s}{}",
                zcx::last_error_detail().map(|d| format!(" ({d})")).unwrap_or_default()
            )
        })?;
        out.push_str(&info);
    }
    print!("{out}");
    Ok(())
}

fn memory_section(out: &mut String) {
    let _ = writeln!(out, "#\n# Memory\n#");
    let pools = zcx_hugepages::pools();
    if pools.is_empty() {
        let _ = writeln!(out, "#   hugepage pools: none (no /sys/kernel/mm/hugepages)");
    }
    for pool in pools {
        let _ = writeln!(
            out,
            "#   hugepages {:>9}: {} free of {} (reserved {}, surplus {})",
            human_bytes(pool.page_size_bytes as u64),
            pool.free,
            pool.total,
            pool.reserved,
            pool.surplus
        );
    }
    let (soft, hard) = zcx_hugepages::memlock_limit();
    let cap = if zcx_hugepages::has_cap_ipc_lock() { "yes (limit bypassed)" } else { "no" };
    let _ =
        writeln!(out, "#   RLIMIT_MEMLOCK: {} soft, {} hard; CAP_IPC_LOCK: {cap}", limit(soft), limit(hard));
    let _ = writeln!(out, "#   base page size: {}", human_bytes(zcx_hugepages::base_page_size() as u64));
}

fn transport_section(out: &mut String, config: &Config) {
    let _ = writeln!(out, "#\n# Transports (ZCX_TLS={})\n#", config.transports().join(","));
    let _ = writeln!(out, "#   shm    compiled  {}", shm_usable(config));
    let uring = zcx_dataplane::probe_uring();
    let uring_state = if uring.available {
        format!(
            "usable (send_zc: {}, fixed buffers: {}, recv: {})",
            yes_no(uring.send_zc),
            yes_no(uring.fixed_buffers),
            yes_no(uring.recv)
        )
    } else {
        "unusable: io_uring_setup failed".to_owned()
    };
    let _ = writeln!(out, "#   uring  compiled  {uring_state}");
    dpdk_lines(out, config);
    verbs_lines(out);
}

/// The verbs devices: limits, ports, GIDs (RoCE v2 first), MTU, inline limit, atomics.
#[cfg(feature = "verbs")]
fn verbs_lines(out: &mut String) {
    if let Some(why) = zcx_dataplane::verbs::verbs_missing() {
        let _ = writeln!(out, "#   verbs  compiled without libibverbs: {why}");
        return;
    }
    let devices = match zcx_dataplane::verbs::devices() {
        Ok(devices) => devices,
        Err(why) => {
            let _ = writeln!(out, "#   verbs  compiled  devices could not be listed: {why}");
            return;
        }
    };
    let fork = match zcx_dataplane::verbs::fork_safety() {
        Some(zcx_dataplane::verbs::ForkSafety::Unneeded) => "fork safe (the kernel copies pinned pages)",
        Some(zcx_dataplane::verbs::ForkSafety::Enabled) => "fork safe (ibv_fork_init was called)",
        _ => "NOT fork safe: a child must not touch registered memory",
    };
    let _ = writeln!(out, "#   verbs  compiled  {} device(s), {fork}", devices.len());
    for device in devices {
        let inline = device.max_inline.map_or("unknown".to_owned(), |n| format!("{n} B"));
        let max_mr = if device.max_mr_size == u64::MAX {
            "unlimited".to_owned()
        } else {
            human_bytes(device.max_mr_size)
        };
        let _ = writeln!(
            out,
            "#            {} guid {} fw '{}': atomics {}, inline {inline}, max_mr {max_mr}, rd_atom {}, sge {}, cqe {}",
            device.name,
            device.node_guid,
            device.fw_ver,
            if device.atomics { "64-bit by the NIC" } else { "none" },
            device.max_qp_rd_atom,
            device.max_sge,
            device.max_cqe
        );
        for port in device.ports {
            let _ = writeln!(
                out,
                "#              port {} {} {} mtu {} max_msg {}",
                port.num,
                port.state,
                port.link_layer,
                port.active_mtu,
                human_bytes(u64::from(port.max_msg_sz))
            );
            for gid in port.gids {
                let _ = writeln!(
                    out,
                    "#                gid {} {} {} ifindex {}",
                    gid.index,
                    gid.kind,
                    gid.as_ipv6(),
                    gid.ifindex
                );
            }
        }
    }
}

#[cfg(not(feature = "verbs"))]
fn verbs_lines(out: &mut String) {
    let _ = writeln!(out, "#   verbs  not compiled (cargo feature `verbs`)");
}

/// The DPDK transport's state and, when EAL arguments are configured, the ports EAL finds.
#[cfg(feature = "dpdk")]
fn dpdk_lines(out: &mut String, config: &Config) {
    if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
        let _ = writeln!(out, "#   dpdk   compiled without DPDK: {why}");
        return;
    }
    let args = config.dpdk_eal_args();
    if args.is_empty() {
        let _ = writeln!(out, "#   dpdk   compiled  (set ZCX_DPDK_EAL_ARGS to start EAL and list its ports)");
        return;
    }
    match zcx_dataplane::dpdk::ports_with_process_eal(&args) {
        Err(why) => {
            let _ = writeln!(out, "#   dpdk   compiled  EAL did not start: {why}");
        }
        Ok(ports) => {
            let chosen = config.dpdk_port().map_or(String::new(), |p| format!(", ZCX_DPDK_PORT={p}"));
            let _ = writeln!(out, "#   dpdk   compiled  {} port(s){chosen}", ports.len());
            for port in ports {
                let mac = port.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
                let _ = writeln!(
                    out,
                    "#            port {} {} driver {} mac {mac}",
                    port.id, port.name, port.driver
                );
            }
        }
    }
}

#[cfg(not(feature = "dpdk"))]
fn dpdk_lines(out: &mut String, _config: &Config) {
    let _ = writeln!(out, "#   dpdk   not compiled (cargo feature `dpdk`)");
}

/// shm is usable when this process can allocate memfd-backed memory and make a shareable key of it.
fn shm_usable(config: &Config) -> String {
    let probe = || -> zcx::Result<bool> {
        let ctx = Context::new(&ContextParams::new(Features::RMA), config)?;
        let memh = ctx.mem_map(&MemMapParams::alloc(4096))?;
        let rkey = ctx.rkey_unpack(&memh.pack(MemhPackFlags::empty())?)?;
        Ok(rkey.is_shareable())
    };
    match probe() {
        Ok(true) => "usable (memfd, same-host rkey_ptr)".to_owned(),
        Ok(false) => "unusable: memory is not shareable (no boot id?)".to_owned(),
        Err(status) => format!("unusable: {status}"),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn limit(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".to_owned()
    } else {
        human_bytes(bytes)
    }
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if bytes >= size && bytes % size == 0 {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} B")
}
