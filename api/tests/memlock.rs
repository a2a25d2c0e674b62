//! LOCK pins pages; a process held to the 8 MiB RLIMIT_MEMLOCK gets a status and an explanation.

mod common;

use std::os::unix::process::CommandExt;

use zcx::{Context, Features, MemMapFlags, MemMapParams, Status};

/// Held while forking a child and while reading smaps' Locked: between fork and exec the child
/// shares our locked pages copy-on-write, which halves their proportional Locked count.
static FORK_GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn lock_pins_the_pages() {
    let _no_fork = FORK_GUARD.lock().unwrap_or_else(|p| p.into_inner());
    let ctx = Context::with_features(Features::RMA).unwrap();
    let (soft, _) = zcx_hugepages::memlock_limit();
    let len = 16 << 20;
    if !zcx_hugepages::has_cap_ipc_lock() && soft < len as u64 {
        eprintln!(
            "skipped: RLIMIT_MEMLOCK is {soft} bytes and no CAP_IPC_LOCK; the next test covers this case"
        );
        return;
    }
    let memh =
        ctx.mem_map(&MemMapParams::alloc(len).flags(MemMapFlags::ALLOCATE | MemMapFlags::LOCK)).unwrap();
    let smaps = zcx_hugepages::smaps_for(memh.address() as usize).unwrap();
    // hugetlb pages are always resident and never counted as Locked; base pages must be.
    if smaps.kernel_page_size == 4096 {
        assert_eq!(smaps.locked, len);
    }
}

#[test]
fn lock_beyond_rlimit_memlock_explains_itself() {
    let _no_fork = FORK_GUARD.lock().unwrap_or_else(|p| p.into_inner());
    const NAME: &str = "lock_beyond_rlimit_memlock_explains_itself";
    if common::child_role().as_deref() == Some("unprivileged") {
        let ctx = Context::with_features(Features::RMA).unwrap();
        let config = zcx::Config::from_vars([("ZCX_HUGEPAGES", "no")]).unwrap();
        let ctx2 = Context::new(&zcx::ContextParams::new(Features::RMA), &config).unwrap();
        drop(ctx);
        let err =
            ctx2.mem_map(&MemMapParams::alloc(16 << 20).flags(MemMapFlags::ALLOCATE | MemMapFlags::LOCK));
        let detail = zcx::last_error_detail().unwrap_or_default();
        common::answer(&format!("{:?}|{detail}", err.map(|_| ())));
        return;
    }
    if !common::is_root() {
        eprintln!("skipped: needs root to run a child as an unprivileged user");
        return;
    }
    let answer = common::run_child_with(NAME, "unprivileged", "", |cmd| {
        // SAFETY: only async-signal-safe calls (setgroups/setgid/setuid) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let (status, detail) = answer.split_once('|').expect("status|detail");
    assert_eq!(status, format!("{:?}", Err::<(), _>(Status::ExceedsLimit)));
    assert!(detail.contains("RLIMIT_MEMLOCK"), "the error does not name RLIMIT_MEMLOCK: {detail}");
}
