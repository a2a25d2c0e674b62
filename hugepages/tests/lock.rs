//! mlock: privileged processes lock beyond RLIMIT_MEMLOCK; unprivileged ones
//! get an error that names the limit.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;

use common::{is_root, skip, MIB};
use zcx_hugepages::{has_cap_ipc_lock, memlock_limit, smaps_for, Backing, MapOptions, Mapping, PagePolicy};

/// Environment variable that turns a re-executed test binary into the unprivileged child.
const CHILD_ROLE: &str = "ZCX_HUGEPAGES_MEMLOCK_CHILD";
/// uid/gid of `nobody`.
const NOBODY: u32 = 65534;

fn locked_opts(backing: Backing) -> MapOptions<'static> {
    MapOptions { len: 16 * MIB, page_policy: PagePolicy::Never, backing, lock: true, ..MapOptions::default() }
}

/// Held while forking a child and while reading smaps' Locked: between fork and exec the child
/// shares our locked pages copy-on-write, which halves their proportional Locked count.
static FORK_GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn privileged_lock_beyond_the_limit_locks_everything() {
    let _no_fork = FORK_GUARD.lock().unwrap_or_else(|p| p.into_inner());
    if !has_cap_ipc_lock() {
        return skip("needs CAP_IPC_LOCK to lock more than RLIMIT_MEMLOCK");
    }
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let mut mapping = Mapping::new(&locked_opts(backing)).unwrap();
        assert!(mapping.is_locked());
        let vma = smaps_for(mapping.addr()).unwrap();
        assert_eq!((vma.start, vma.end), (mapping.addr(), mapping.addr() + mapping.mapped_len()), "{vma:?}");
        assert_eq!(vma.locked, mapping.mapped_len(), "{backing:?}: {vma:?}");
        assert!(vma.has_vm_flag("lo"), "{vma:?}");

        mapping.unlock().unwrap();
        assert!(!mapping.is_locked());
        assert_eq!(smaps_for(mapping.addr()).unwrap().locked, 0, "{backing:?}");

        mapping.lock().unwrap();
        assert!(mapping.is_locked());
        assert_eq!(smaps_for(mapping.addr()).unwrap().locked, mapping.mapped_len(), "{backing:?}");
    }
}

/// As root, re-runs this very test as `nobody` (no capabilities, held to
/// RLIMIT_MEMLOCK) and checks the child's error names the limit. In the child
/// role it performs the 16 MiB locked mapping and prints the outcome.
#[test]
fn unprivileged_lock_beyond_the_limit_names_rlimit_memlock() {
    let _no_fork = FORK_GUARD.lock().unwrap_or_else(|p| p.into_inner());
    if std::env::var_os(CHILD_ROLE).is_some() {
        return run_unprivileged_child();
    }
    if !is_root() {
        return skip("needs root to start a child as nobody");
    }
    let (soft, _hard) = memlock_limit();
    if soft >= (16 * MIB) as u64 {
        return skip(&format!("RLIMIT_MEMLOCK soft limit {soft} does not bind a 16 MiB lock"));
    }
    let exe = common::PortableExe::new();
    let output = Command::new(&exe.0)
        .args(["--exact", "unprivileged_lock_beyond_the_limit_names_rlimit_memlock", "--nocapture"])
        .env(CHILD_ROLE, "1")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run the test binary as nobody");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(stdout.contains("child: has_cap_ipc_lock=false"), "{stdout}\n{stderr}");
    let error_lines: Vec<&str> = stdout.lines().filter(|line| line.starts_with("child error: ")).collect();
    assert_eq!(error_lines.len(), 2, "both backings must fail to lock: {stdout}\n{stderr}");
    for line in error_lines {
        assert!(line.contains("RLIMIT_MEMLOCK"), "{line}");
        assert!(line.contains("mlock of 16 MiB failed"), "{line}");
        eprintln!("{line}");
    }
}

fn run_unprivileged_child() {
    println!("child: has_cap_ipc_lock={}", has_cap_ipc_lock());
    for backing in [Backing::Anonymous, Backing::Memfd] {
        match Mapping::new(&locked_opts(backing)) {
            Ok(mapping) => println!("child unexpectedly locked {} bytes ({backing:?})", mapping.mapped_len()),
            Err(error) => {
                assert!(matches!(error, zcx_hugepages::Error::MemlockLimit { .. }), "{error:?}");
                println!("child error: {error}");
            }
        }
    }
}
