//! Property tests at the API: whatever bytes a peer sends as a packed rkey or an exported handle,
//! `rkey_unpack` and `mem_map(exported_memh_buffer)` answer `INVALID_PARAM` and never panic.

use proptest::prelude::*;
use zcx::{Context, Features, MemMapParams, MemhPackFlags, Status};

fn context() -> Context {
    Context::with_features(Features::RMA | Features::EXPORTED_MEMH).unwrap()
}

/// A valid packed rkey and exported handle of a live region, kept alive for the whole test.
fn samples(ctx: &Context) -> (zcx::MemHandle, Vec<u8>, Vec<u8>) {
    let memh = ctx.mem_map(&MemMapParams::alloc(64 << 10)).unwrap();
    let rkey = memh.pack(MemhPackFlags::empty()).unwrap().into_vec();
    let exported = memh.pack(MemhPackFlags::EXPORT).unwrap().into_vec();
    (memh, rkey, exported)
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, value: u8 },
    Truncate { len: usize },
    Append { bytes: Vec<u8> },
    Insert { at: usize, value: u8 },
    Remove { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set { at, value }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Mutation::Append { bytes }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Insert { at, value }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
    ]
}

/// Applies `m`; returns None when it would leave the bytes unchanged (setting a byte to its value).
fn apply(valid: &[u8], m: &Mutation) -> Option<Vec<u8>> {
    let mut v = valid.to_vec();
    match m {
        Mutation::Flip { at, bit } => v[at % valid.len()] ^= 1 << bit,
        Mutation::Set { at, value } => {
            let at = at % valid.len();
            if v[at] == *value {
                return None;
            }
            v[at] = *value;
        }
        Mutation::Truncate { len } => v.truncate(len % valid.len()),
        Mutation::Append { bytes } => v.extend_from_slice(bytes),
        Mutation::Insert { at, value } => v.insert(at % (valid.len() + 1), *value),
        Mutation::Remove { at } => {
            v.remove(at % valid.len());
        }
    }
    Some(v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_invalid_param(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let ctx = context();
        prop_assert_eq!(ctx.rkey_unpack(&bytes).unwrap_err(), Status::InvalidParam);
        let p = MemMapParams::new().exported_memh_buffer(&bytes);
        prop_assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
    }

    #[test]
    fn mutated_keys_and_handles_are_invalid_param(m in mutation()) {
        let ctx = context();
        let (_memh, rkey, exported) = samples(&ctx);
        if let Some(bad) = apply(&rkey, &m) {
            prop_assert_eq!(ctx.rkey_unpack(&bad).unwrap_err(), Status::InvalidParam);
        }
        if let Some(bad) = apply(&exported, &m) {
            let p = MemMapParams::new().exported_memh_buffer(&bad);
            prop_assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
        }
    }
}
