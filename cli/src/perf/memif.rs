//! `zcx perf --tls dpdk` on one host without `ZCX_DPDK_EAL_ARGS`: the launcher connects its server
//! child and itself by a `net_memif` pair (DPDK's shared-memory virtual NIC), so the run needs no
//! NIC and no set-up.
//!
//! Each side gets its own EAL: its own `--file-prefix` (`zcx-perf-server-<pid>`,
//! `zcx-perf-client-<pid>`, the launcher's pid), its main lcore on its own CPU (`--server-cpu`,
//! `--client-cpu`; every allowed CPU with `--no-pin`), and a `net_memif0` port whose socket lives
//! in a temporary directory: the server's port is the memif server, the client's the memif client.
//! `ZCX_TLS` gets `tcp` added when it names none, so the sockaddr handshake runs over TCP and the
//! endpoints then move to their DPDK lane. Frames are jumbo (MTU 9000, memif buffers that hold
//! one) unless `ZCX_DPDK_MTU` is set. The temporary directory and the EAL runtime
//! directories (empty with `--no-shconf`) are removed when the pair is dropped.
//!
//! When `ZCX_DPDK_EAL_ARGS` is set the user drives EAL and nothing here is used.

use std::path::PathBuf;

/// The port both sides open.
const PORT: &str = "net_memif0";

/// The MTU of the pair unless `ZCX_DPDK_MTU` says otherwise: a memif link has no wire, so its
/// frames can be jumbo ones, six times fewer per byte than at 1500 (the per-frame work, not the
/// bytes, is what limits the transport's bandwidth).
const PAIR_MTU: &str = "9000";

/// memif's buffer size: a jumbo frame in one buffer (its default of 2048 chains five per frame,
/// far slower).
const PAIR_BSIZE: usize = 9216;

/// A memif pair's settings and its temporary directory.
pub struct MemifPair {
    dir: PathBuf,
    server_eal: String,
    client_eal: String,
    tls: String,
    prefixes: [String; 2],
}

impl MemifPair {
    /// Makes the temporary directory and both sides' EAL arguments; `tls` is the `--tls` list.
    pub fn new(tls: &str, server_cpu: Option<usize>, client_cpu: Option<usize>) -> Result<MemifPair, String> {
        if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
            return Err(format!("--tls dpdk: this zcx was built without DPDK ({why})"));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("zcx-perf-memif-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let socket = dir.join("memif.sock");
        let eal = |role: &str, cpu: Option<usize>| {
            let vdev = format!(
                "--vdev={PORT},role={role},id=0,bsize={PAIR_BSIZE},socket={},socket-abstract=no",
                socket.display()
            );
            let cpus = cpu.map_or_else(zcx_dataplane::dpdk::allowed_cpus, |c| c.to_string());
            zcx_dataplane::dpdk::vdev_eal_args_on(&format!("perf-{role}"), &cpus, &[vdev]).join(" ")
        };
        let has_tcp = tls.split(',').map(str::trim).any(|t| matches!(t, "tcp" | "uring" | "all"));
        let pid = std::process::id();
        Ok(MemifPair {
            server_eal: eal("server", server_cpu),
            client_eal: eal("client", client_cpu),
            tls: if has_tcp { tls.to_owned() } else { format!("{tls},tcp") },
            prefixes: [format!("zcx-perf-server-{pid}"), format!("zcx-perf-client-{pid}")],
            dir,
        })
    }

    /// The `ZCX_*` variables of the server child.
    pub fn server_env(&self) -> Vec<(&'static str, String)> {
        self.env(&self.server_eal)
    }

    /// The `ZCX_*` variables of the client (this process).
    pub fn client_env(&self) -> Vec<(&'static str, String)> {
        self.env(&self.client_eal)
    }

    fn env(&self, eal: &str) -> Vec<(&'static str, String)> {
        // The port is the one the EAL arguments create, whatever ZCX_DPDK_PORT said.
        let mut env = vec![
            ("ZCX_TLS", self.tls.clone()),
            ("ZCX_DPDK_EAL_ARGS", eal.to_owned()),
            ("ZCX_DPDK_PORT", PORT.to_owned()),
        ];
        if std::env::var_os("ZCX_DPDK_MTU").is_none() {
            env.push(("ZCX_DPDK_MTU", PAIR_MTU.to_owned()));
        }
        env
    }
}

impl Drop for MemifPair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        // EAL is never cleaned up in a zcx process; with --no-shconf its runtime directory is
        // empty, and it is removed here only if it is.
        let runtime =
            std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        for prefix in &self.prefixes {
            for base in [PathBuf::from("/var/run/dpdk"), runtime.join("dpdk")] {
                let _ = std::fs::remove_dir(base.join(prefix));
            }
        }
    }
}
