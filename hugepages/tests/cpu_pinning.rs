//! Pinning a thread really moves it: after pinning to each allowed CPU, the thread runs there.

use zcx_hugepages::{current_affinity, current_cpu, pin_current_thread, CpuError, CpuSet};

#[test]
fn pinned_thread_runs_on_its_cpu() {
    let allowed = current_affinity().expect("affinity");
    assert!(!allowed.is_empty());
    for cpu in allowed.iter() {
        let seen = std::thread::spawn(move || {
            pin_current_thread(&CpuSet::single(cpu).unwrap()).expect("pin");
            std::thread::yield_now();
            let affinity = current_affinity().unwrap();
            (current_cpu(), affinity)
        })
        .join()
        .unwrap();
        assert_eq!(seen.0, Some(cpu), "thread pinned to CPU {cpu} ran elsewhere");
        assert_eq!(seen.1, CpuSet::single(cpu).unwrap());
    }
}

#[test]
fn pinning_to_no_usable_cpu_fails_cleanly() {
    let allowed = current_affinity().unwrap();
    let beyond = (0..zcx_hugepages::MAX_CPUS).find(|c| !allowed.contains(*c)).expect("a CPU outside the set");
    let result =
        std::thread::spawn(move || pin_current_thread(&CpuSet::single(beyond).unwrap())).join().unwrap();
    assert!(
        matches!(result, Err(CpuError::Os { op: "sched_setaffinity", errno }) if errno == libc::EINVAL),
        "{result:?}"
    );
}
