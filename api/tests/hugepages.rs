//! Allocated memory sits on 2 MiB pages when they are reserved, and the fallback says what backs it.

mod common;

use zcx::{Config, Context, ContextParams, Features, MemMapParams, PageSize, Status};

fn context_with(vars: &[(&str, &str)]) -> Context {
    let config = Config::from_vars(vars.iter().copied()).unwrap();
    Context::new(&ContextParams::new(Features::RMA), &config).unwrap()
}

#[test]
fn allocation_sits_on_2mib_pages_when_reserved() {
    let free = zcx_hugepages::free_pages(PageSize::Huge2M);
    if free < 4 {
        eprintln!("skipped: only {free} free 2 MiB hugepages (scripts/test.sh reserves them as root)");
        return;
    }
    let ctx = context_with(&[("ZCX_HUGEPAGES", "yes")]);
    let memh = ctx.mem_map(&MemMapParams::alloc(3 << 20)).expect("hugepage allocation");
    assert_eq!(memh.page_size(), Some(PageSize::Huge2M));
    assert_eq!(memh.query().page_size, Some(2 << 20));
    let smaps = zcx_hugepages::smaps_for(memh.address() as usize).expect("VMA");
    assert_eq!(smaps.kernel_page_size, 2 << 20, "smaps disagrees: {smaps:?}");
    assert!(smaps.path.contains("memfd:"), "allocation is not memfd-backed: {}", smaps.path);
    // SAFETY: 3 MiB writable bytes at the handle's address.
    unsafe { std::ptr::write_bytes(memh.address(), 0x11, 3 << 20) };
}

#[test]
fn fallback_to_base_pages_is_reported_honestly() {
    let free_1g = zcx_hugepages::free_pages(PageSize::Huge1G);
    if free_1g > 0 {
        eprintln!("skipped: {free_1g} 1 GiB hugepages are free, so the fallback path cannot be provoked");
        return;
    }
    // try: falls back, says so.
    let ctx = context_with(&[("ZCX_HUGEPAGES", "try"), ("ZCX_HUGEPAGE_SIZE", "1G")]);
    let memh = ctx.mem_map(&MemMapParams::alloc(4 << 20)).expect("fallback allocation");
    assert_eq!(memh.page_size(), Some(PageSize::Base));
    let smaps = zcx_hugepages::smaps_for(memh.address() as usize).expect("VMA");
    assert_eq!(smaps.kernel_page_size, 4096);
    // yes: refuses instead of falling back.
    let ctx = context_with(&[("ZCX_HUGEPAGES", "yes"), ("ZCX_HUGEPAGE_SIZE", "1G")]);
    assert_eq!(ctx.mem_map(&MemMapParams::alloc(4 << 20)).unwrap_err(), Status::NoMemory);
    let detail = zcx::last_error_detail().expect("an explanation");
    assert!(detail.contains("1 GiB") || detail.contains("hugepage"), "unhelpful: {detail}");
}

#[test]
fn no_hugepages_means_base_pages() {
    let ctx = context_with(&[("ZCX_HUGEPAGES", "no")]);
    let memh = ctx.mem_map(&MemMapParams::alloc(4 << 20)).unwrap();
    assert_eq!(memh.page_size(), Some(PageSize::Base));
    assert_eq!(zcx_hugepages::smaps_for(memh.address() as usize).unwrap().kernel_page_size, 4096);
}
