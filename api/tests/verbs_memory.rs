//! `mem_map` with a verbs device: regions register in the device's protection domain, and the
//! packed key carries the rkey. Runs inside the Soft-RoCE guest (`scripts/vm/verbs-test.sh`,
//! which sets `ZCX_VERBS_EXPECT`); elsewhere it prints `skipped:` (this host has no RDMA device).
#![cfg(feature = "verbs")]

use zcx::{Config, Context, ContextParams, DomainId, Features, MemMapFlags, MemMapParams, Status};

fn verbs_context() -> Option<Context> {
    if let Some(why) = zcx_dataplane::verbs::verbs_missing() {
        println!("skipped: {why}");
        return None;
    }
    if std::env::var_os("ZCX_VERBS_EXPECT").is_none() {
        println!("skipped: no verbs device here (the VM test sets ZCX_VERBS_EXPECT)");
        return None;
    }
    let params = ContextParams::new(Features::RMA | Features::AMO64);
    Some(Context::new(&params, &Config::from_env().expect("the configuration")).expect("a context"))
}

fn verbs_entry(ctx: &Context, memh: &zcx::MemHandle) -> Vec<u8> {
    let packed = memh.rkey_pack().expect("packs");
    let rkey = ctx.rkey_unpack(&packed).expect("unpacks");
    rkey.domain_entry(DomainId::VERBS).expect("the key carries a verbs entry").to_vec()
}

#[test]
fn mapped_memory_is_registered_with_the_device_and_its_key_carries_the_rkey() {
    let Some(ctx) = verbs_context() else { return };
    let a = ctx.mem_map(&MemMapParams::alloc(1 << 20)).expect("maps");
    assert!(a.registered_domains().contains(&DomainId::VERBS), "{:?}", a.registered_domains());
    let a_entry = verbs_entry(&ctx, &a);
    assert_eq!(a_entry.len(), 4, "the entry is the rkey");

    // A handle inside the allocation is a memory region of its own, bounded by the NIC to its
    // own bytes: its key names another rkey.
    // SAFETY: the range lies inside `a`, which outlives `inner`.
    let inner =
        ctx.mem_map(&unsafe { MemMapParams::new().length(4096).address(a.address().add(8192)) }).unwrap();
    assert_ne!(verbs_entry(&ctx, &inner), a_entry);

    // Another allocation is another memory region.
    let b = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    assert_ne!(verbs_entry(&ctx, &b), a_entry);

    // Caller memory registers too.
    let mut caller = vec![0u8; 64 << 10];
    // SAFETY: `caller` outlives the handle, which is unmapped below.
    let c = ctx
        .mem_map(&unsafe { MemMapParams::new().length(caller.len()).address(caller.as_mut_ptr()) })
        .unwrap();
    assert!(c.registered_domains().contains(&DomainId::VERBS));
    assert_eq!(verbs_entry(&ctx, &c).len(), 4);
    for memh in [inner, c, b, a] {
        memh.unmap().unwrap();
    }
}

#[test]
fn a_nonblocking_map_registers_with_the_device_only_when_used() {
    let Some(ctx) = verbs_context() else { return };
    let memh = ctx
        .mem_map(&MemMapParams::alloc(1 << 20).flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK))
        .expect("maps");
    assert!(!memh.registered_domains().contains(&DomainId::VERBS), "registered (pinned) at map time");
    // Packing a key is a use: peers need the rkey.
    assert_eq!(verbs_entry(&ctx, &memh).len(), 4);
    assert!(memh.registered_domains().contains(&DomainId::VERBS));
    memh.unmap().unwrap();
}

/// Run by the VM test as an unprivileged user with a 64 KiB memory-lock limit (it sets
/// `ZCX_VERBS_MEMLOCK_TEST`): registering pins, so a large region is refused with
/// EXCEEDS_LIMIT and a detail that names the limit, not with a generic error.
#[test]
fn registering_past_the_memlock_limit_is_exceeds_limit() {
    if std::env::var_os("ZCX_VERBS_MEMLOCK_TEST").is_none() {
        println!(
            "skipped: needs an unprivileged process with a small RLIMIT_MEMLOCK (the VM test runs it so)"
        );
        return;
    }
    let Some(ctx) = verbs_context() else { return };
    let err =
        ctx.mem_map(&MemMapParams::alloc(8 << 20)).map(|_| ()).expect_err("8 MiB pinned past a 64 KiB limit");
    assert_eq!(err, Status::ExceedsLimit);
    let detail = zcx::last_error_detail().unwrap_or_default();
    assert!(
        detail.contains("ibv_reg_mr") && detail.contains("RLIMIT_MEMLOCK"),
        "the registration was refused, and the detail names the limit: {detail}"
    );
}
