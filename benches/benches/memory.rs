//! Micro-costs of the memory API: mem_map + unmap from 4 KiB to 1 GiB on hugepages and base pages,
//! populated and NONBLOCK; registration-cache hits; rkey pack and unpack.
//!
//! Run: `cargo bench -p zcx-benches --bench memory` (reserve hugepages first, as root:
//! `echo 1100 > /proc/sys/vm/nr_hugepages`). Set `ZCX_BENCH_MAX_SIZE` (bytes) to shorten the sweep.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zcx::{Config, Context, ContextParams, Features, MemMapFlags, MemMapParams, MemhPackFlags, PageSize};

fn context(hugepages: &str, rcache: &str) -> Context {
    let config = Config::from_vars([("ZCX_HUGEPAGES", hugepages), ("ZCX_RCACHE_ENABLE", rcache)]).unwrap();
    Context::new(&ContextParams::new(Features::RMA | Features::EXPORTED_MEMH), &config).unwrap()
}

fn max_size() -> usize {
    std::env::var("ZCX_BENCH_MAX_SIZE").ok().and_then(|s| s.parse().ok()).unwrap_or(1 << 30)
}

fn mem_map_unmap(c: &mut Criterion) {
    let huge_free = zcx_hugepages::free_pages(PageSize::Huge2M) as usize * (2 << 20);
    let sizes: Vec<usize> = [4 << 10, 64 << 10, 2 << 20, 16 << 20, 128 << 20, 1 << 30]
        .into_iter()
        .filter(|&s| s <= max_size())
        .collect();
    let mut group = c.benchmark_group("mem_map_unmap");
    group.sample_size(10);
    for (pages, hugepages) in [("huge2m", "yes"), ("base4k", "no")] {
        if hugepages == "yes" && huge_free == 0 {
            eprintln!("skipped huge2m: no free 2 MiB hugepages (echo 1100 > /proc/sys/vm/nr_hugepages)");
            continue;
        }
        let ctx = context(hugepages, "y");
        for &size in &sizes {
            if hugepages == "yes" && size > huge_free {
                eprintln!("skipped huge2m/{size}: only {huge_free} bytes of free hugepages");
                continue;
            }
            for (populate, flags) in [
                ("populate", MemMapFlags::ALLOCATE),
                ("nonblock", MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK),
            ] {
                group.throughput(Throughput::Bytes(size as u64));
                group.bench_with_input(
                    BenchmarkId::new(format!("{pages}/{populate}"), size),
                    &size,
                    |b, &size| {
                        b.iter(|| {
                            ctx.mem_map(&MemMapParams::alloc(size).flags(flags)).unwrap().unmap().unwrap()
                        })
                    },
                );
            }
        }
    }
    group.finish();
}

fn rcache(c: &mut Criterion) {
    let mut group = c.benchmark_group("register_sub_range");
    for rcache in ["y", "n"] {
        let ctx = context("try", rcache);
        let parent = ctx.mem_map(&MemMapParams::alloc(64 << 20)).unwrap();
        let name = if rcache == "y" { "rcache_hit" } else { "rcache_off" };
        group.bench_function(name, |b| {
            b.iter(|| {
                // SAFETY: a sub-range of `parent`, which outlives the handle.
                let p = unsafe { MemMapParams::new().address(parent.address().add(1 << 20)) }.length(1 << 20);
                ctx.mem_map(&p).unwrap()
            })
        });
    }
    group.finish();
}

fn rkey(c: &mut Criterion) {
    let ctx = context("try", "y");
    let memh = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    let packed = memh.pack(MemhPackFlags::empty()).unwrap();
    let mut group = c.benchmark_group("rkey");
    group.bench_function("pack", |b| b.iter(|| memh.pack(MemhPackFlags::empty()).unwrap()));
    group.bench_function("unpack", |b| b.iter(|| ctx.rkey_unpack(&packed).unwrap()));
    let rkey = ctx.rkey_unpack(&packed).unwrap();
    rkey.ptr(rkey.base()).unwrap();
    group.bench_function("ptr_mapped", |b| b.iter(|| rkey.ptr(rkey.base() + 4096).unwrap()));
    group.finish();
}

criterion_group!(benches, mem_map_unmap, rcache, rkey);
criterion_main!(benches);
