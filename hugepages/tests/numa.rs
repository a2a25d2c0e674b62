//! NUMA binding with mbind: node 0 exists on every Linux machine; node 4000 does not.

mod common;

use common::MIB;
use zcx_hugepages::{Error, MapOptions, Mapping, PagePolicy, Populate};

/// The memory policy `/proc/self/numa_maps` shows for the VMA starting at `addr`, if the file exists.
fn numa_policy_at(addr: usize) -> Option<String> {
    let numa_maps = std::fs::read_to_string("/proc/self/numa_maps").ok()?;
    numa_maps.lines().find_map(|line| {
        let (start, rest) = line.split_once(' ')?;
        (usize::from_str_radix(start, 16).ok()? == addr)
            .then(|| rest.split(' ').next().unwrap_or("").to_owned())
    })
}

#[test]
fn binding_to_node_0_at_creation_succeeds_and_shows_in_numa_maps() {
    let opts = MapOptions {
        len: 4 * MIB,
        page_policy: PagePolicy::Never,
        numa_node: Some(0),
        ..MapOptions::default()
    };
    let mapping = Mapping::new(&opts).unwrap();
    match numa_policy_at(mapping.addr()) {
        Some(policy) => assert_eq!(policy, "bind:0"),
        None => {
            eprintln!("note: /proc/self/numa_maps has no entry for the mapping; policy not cross-checked")
        }
    }
}

#[test]
fn binding_an_existing_mapping_to_node_0_succeeds() {
    let opts = MapOptions { len: 4 * MIB, page_policy: PagePolicy::Never, ..MapOptions::default() };
    let mapping = Mapping::new(&opts).unwrap();
    mapping.bind_numa(0).unwrap();
    if let Some(policy) = numa_policy_at(mapping.addr()) {
        assert_eq!(policy, "bind:0");
    }
}

#[test]
fn binding_to_a_nonexistent_node_is_a_numa_node_error() {
    for populate in [Populate::Eager, Populate::Lazy] {
        let opts = MapOptions { len: 4 * MIB, numa_node: Some(4000), populate, ..MapOptions::default() };
        match Mapping::new(&opts) {
            Err(Error::NumaNode { node: 4000, errno }) => assert_eq!(errno, libc::EINVAL),
            other => panic!("expected NumaNode for node 4000, got {other:?}"),
        }
    }
    let mapping =
        Mapping::new(&MapOptions { len: MIB, page_policy: PagePolicy::Never, ..MapOptions::default() })
            .unwrap();
    for node in [4000, u32::MAX] {
        let error = mapping.bind_numa(node).unwrap_err();
        assert_eq!(error, Error::NumaNode { node, errno: libc::EINVAL });
        assert!(error.to_string().contains(&format!("NUMA node {node}")), "{error}");
    }
}
