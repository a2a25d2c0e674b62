//! The shared-memory ring's own costs, one thread, no transport around it: publishing one record
//! and taking it back (`shm::ring::Producer::push`, `Consumer::next_record`, `release`) at 8 B,
//! 56 B (the largest record that is one cache line) and 4 KiB, and a burst of 64 8-byte records
//! pushed before any is read (batched release).
//!
//! Run: `cargo bench -p zcx-benches --bench ring`. One thread does both ends, so the figures are
//! instruction costs with warm caches: a cross-core message adds the cache-line transfer on top
//! (`zcx perf -t tag_lat` measures that end to end).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zcx_dataplane::shm::ring::{Consumer, Producer, RingArea, KIND_FRAME};

const CAPACITY: usize = 1 << 20;

fn ends(area: &mut RingArea) -> (Producer, Consumer) {
    let base = area.base();
    // SAFETY: the area is 64-aligned, holds the whole ring, outlives both ends (each bench keeps
    // it alive for its whole body), and each end is the only one of its kind.
    unsafe { (Producer::new(base, CAPACITY), Consumer::new(base, CAPACITY, usize::MAX)) }
}

fn push_and_take(c: &mut Criterion) {
    let mut group = c.benchmark_group("shm/ring");
    for size in [8usize, 56, 4096] {
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new("push_take_release", format!("{size}B")), |b| {
            let mut area = RingArea::new(CAPACITY);
            let (mut producer, mut consumer) = ends(&mut area);
            let payload = vec![0x5Au8; size];
            b.iter(|| {
                assert!(producer.push(KIND_FRAME, &[black_box(&payload)]).unwrap());
                let (_, bytes) = consumer.next_record().unwrap().expect("the record just pushed");
                black_box(bytes);
                consumer.release();
            })
        });
    }
    group.throughput(Throughput::Elements(64));
    group.bench_function("burst_64x8B", |b| {
        let mut area = RingArea::new(CAPACITY);
        let (mut producer, mut consumer) = ends(&mut area);
        let payload = [0xA5u8; 8];
        b.iter(|| {
            for _ in 0..64 {
                assert!(producer.push(KIND_FRAME, &[black_box(&payload)]).unwrap());
            }
            while let Some((_, bytes)) = consumer.next_record().unwrap() {
                black_box(bytes);
            }
            consumer.release();
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = push_and_take
}
criterion_main!(benches);
