//! Verbs devices as the transport sees them, on real (Soft-RoCE) devices: run by
//! `scripts/vm/verbs-test.sh` inside the guest, where `ZCX_VERBS_EXPECT` names the devices it
//! created (`rxe0,rxe1`). Elsewhere it prints `skipped:` (this host has no RDMA device).
#![cfg(feature = "verbs")]

use zcx_dataplane::verbs::{self, GidKind};

#[test]
fn the_expected_devices_are_active_roce_ports_with_gids() {
    if let Some(why) = verbs::verbs_missing() {
        println!("skipped: {why}");
        return;
    }
    let Ok(expect) = std::env::var("ZCX_VERBS_EXPECT") else {
        println!("skipped: no verbs device here (ZCX_VERBS_EXPECT names the devices inside the VM test)");
        return;
    };
    // The guest's 6.1 kernel copies pinned pages for a child, and zcx never calls ibv_fork_init.
    assert_eq!(verbs::fork_safety(), Some(verbs::ForkSafety::Unneeded));
    let devices = verbs::devices().expect("the devices are listed");
    for name in expect.split(',') {
        let device = devices
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("device {name} is not listed: {devices:#?}"));
        println!("{device:#?}");
        assert!(device.max_mr_size > 0, "{name}: max_mr_size");
        assert!(device.max_sge > 0 && device.max_cqe > 0, "{name}: limits");
        assert!(
            device.max_inline.is_some_and(|n| n > 0),
            "{name}: an RC QP can be created, with some inline"
        );
        let port = device.ports.first().unwrap_or_else(|| panic!("{name} has no port"));
        assert_eq!(port.num, 1);
        assert!(port.active, "{name}:1 is {}", port.state);
        assert_eq!(port.link_layer, "Ethernet", "{name}:1 is RoCE");
        assert!([256, 512, 1024, 2048, 4096].contains(&port.active_mtu), "{name}:1 mtu {}", port.active_mtu);
        assert!(port.max_msg_sz >= 1 << 20, "{name}:1 max_msg_sz {}", port.max_msg_sz);
        assert!(!port.gids.is_empty(), "{name}:1 has no GID");
        // RoCE v2 first: the order the transport will try them in.
        let kinds: Vec<GidKind> = port.gids.iter().map(|g| g.kind).collect();
        let mut sorted = kinds.clone();
        sorted.sort();
        assert_eq!(kinds, sorted, "{name}:1 GIDs are listed RoCE v2 first");
        // With no index asked for, a queue pair takes the first GID in that order.
        assert_eq!(verbs::choose_gid(port, None), Ok(port.gids[0]));
        // An IPv6 link-local GID exists on every RoCE port with an up interface (fe80::/10).
        assert!(
            port.gids.iter().any(|g| g.gid[0] == 0xfe && g.gid[1] & 0xc0 == 0x80),
            "{name}:1 has no link-local GID: {:?}",
            port.gids
        );
    }
}
