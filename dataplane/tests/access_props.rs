//! Whatever a peer asks, an accepted access lies inside its region and was allowed by key and prot.

use proptest::prelude::*;
use zcx_dataplane::access::{
    check_region, AccessError, RegionEntry, RemoteAccess, PROT_REMOTE_READ, PROT_REMOTE_WRITE,
};

fn access() -> impl Strategy<Value = RemoteAccess> {
    prop_oneof![
        Just(RemoteAccess::Read),
        Just(RemoteAccess::Write),
        any::<u8>().prop_map(|size| RemoteAccess::Atomic { size }),
        Just(RemoteAccess::Atomic { size: 8 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn accepted_accesses_are_inside_and_allowed(
        base in any::<u64>(),
        length in 0u64..1 << 40,
        prot in 0u32..0x400,
        key in any::<[u8; 16]>(),
        presented in any::<[u8; 16]>(),
        use_real_key in any::<bool>(),
        addr_delta in -4096i64..(1 << 20),
        near_base in any::<bool>(),
        raw_addr in any::<u64>(),
        len in prop_oneof![0u64..64, any::<u64>()],
        access in access(),
    ) {
        let region = RegionEntry { base, length, prot, access_key: key, shm: None };
        let presented = if use_real_key { key } else { presented };
        let addr = if near_base { base.wrapping_add_signed(addr_delta) } else { raw_addr };
        match check_region(&region, &presented, addr, len, access) {
            Ok(offset) => {
                prop_assert_eq!(presented, key);
                prop_assert_eq!(Some(offset), addr.checked_sub(base));
                prop_assert!(offset.checked_add(len).is_some_and(|end| end <= length));
                let needed = match access {
                    RemoteAccess::Read => PROT_REMOTE_READ,
                    RemoteAccess::Write => PROT_REMOTE_WRITE,
                    RemoteAccess::Atomic { size } => {
                        prop_assert!(size == 4 || size == 8);
                        prop_assert_eq!(addr % u64::from(size), 0);
                        PROT_REMOTE_READ | PROT_REMOTE_WRITE
                    }
                };
                prop_assert_eq!(prot & needed, needed);
            }
            Err(AccessError::BadKey) => prop_assert_ne!(presented, key),
            Err(_) => {}
        }
    }
}
