//! Remote keys: pack/unpack, rkey_ptr (same process and a second process), compare, bad input.

mod common;

use std::cmp::Ordering;

use common::{answer, from_hex, pattern_byte, read_stdin, run_child, to_hex, Rng};
use zcx::{Context, Features, MemMapParams, MemhPackFlags, RkeyCompareParams, Status};

fn context() -> Context {
    Context::with_features(Features::RMA | Features::EXPORTED_MEMH).unwrap()
}

#[test]
fn rkey_ptr_in_the_same_process_sees_the_same_bytes() {
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(64 << 10)).unwrap();
    let rkey = ctx.rkey_unpack(&memh.pack(MemhPackFlags::empty()).unwrap()).unwrap();
    let base = memh.address() as u64;
    let p = rkey.ptr(base + 100).unwrap();
    // SAFETY: both pointers are inside live mappings of the same 64 KiB memfd region.
    unsafe {
        p.write(0x42);
        assert_eq!(memh.address().add(100).read(), 0x42);
    }
    assert_eq!(rkey.ptr(base - 1).unwrap_err(), Status::InvalidAddr);
    assert_eq!(rkey.ptr(base + (64 << 10)).unwrap_err(), Status::InvalidAddr);
    assert!(rkey.ptr(base + (64 << 10) - 1).is_ok());
}

#[test]
fn rkey_ptr_of_caller_memory_is_unreachable() {
    let ctx = context();
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` outlives the handle.
    let memh =
        ctx.mem_map(&unsafe { MemMapParams::new().address(buf.as_mut_ptr()) }.length(buf.len())).unwrap();
    let rkey = ctx.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
    assert!(!rkey.is_shareable());
    assert_eq!(rkey.ptr(buf.as_ptr() as u64).unwrap_err(), Status::Unreachable);
    drop(memh);
}

#[test]
fn rkey_compare_is_a_total_order_equal_for_the_same_region() {
    let ctx = context();
    let handles: Vec<_> =
        (0..8).map(|i| ctx.mem_map(&MemMapParams::alloc(4096 * (i + 1))).unwrap()).collect();
    let packed: Vec<_> = handles.iter().map(|h| h.rkey_pack().unwrap()).collect();
    let mut keys: Vec<_> = packed.iter().map(|p| ctx.rkey_unpack(p).unwrap()).collect();
    let again = ctx.rkey_unpack(&packed[3]).unwrap();
    let params = RkeyCompareParams::default();
    assert_eq!(ctx.rkey_compare(&keys[3], &again, &params), Ok(Ordering::Equal));
    // Packing the same handle twice gives keys that compare equal too.
    let repacked = ctx.rkey_unpack(&handles[3].rkey_pack().unwrap()).unwrap();
    assert_eq!(ctx.rkey_compare(&keys[3], &repacked, &params), Ok(Ordering::Equal));
    for a in &keys {
        for b in &keys {
            let ab = ctx.rkey_compare(a, b, &params).unwrap();
            let ba = ctx.rkey_compare(b, a, &params).unwrap();
            assert_eq!(ab, ba.reverse(), "not antisymmetric");
            assert_eq!(ab == Ordering::Equal, std::ptr::eq(a, b), "distinct regions compared equal");
        }
    }
    keys.sort_by(|a, b| ctx.rkey_compare(a, b, &params).unwrap());
    assert!(keys.windows(2).all(|w| ctx.rkey_compare(&w[0], &w[1], &params) == Ok(Ordering::Less)));
    // UCX's rules: a non-zero field mask, or keys of another context (worker).
    let bad = RkeyCompareParams { field_mask: 1 };
    assert_eq!(ctx.rkey_compare(&keys[0], &keys[1], &bad), Err(Status::InvalidParam));
    let other = context();
    let foreign = other.rkey_unpack(&packed[0]).unwrap();
    assert_eq!(ctx.rkey_compare(&keys[0], &foreign, &params), Err(Status::InvalidParam));
}

#[test]
fn garbage_and_mutated_keys_are_invalid_param() {
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
    let packed = memh.rkey_pack().unwrap().into_vec();
    let exported = memh.pack(MemhPackFlags::EXPORT).unwrap().into_vec();
    assert_eq!(ctx.rkey_unpack(&[]).unwrap_err(), Status::InvalidParam);
    assert_eq!(ctx.rkey_unpack(&packed[..packed.len() - 1]).unwrap_err(), Status::InvalidParam);
    // An exported handle is not a remote key, and vice versa.
    assert_eq!(ctx.rkey_unpack(&exported).unwrap_err(), Status::InvalidParam);
    assert_eq!(
        ctx.mem_map(&MemMapParams::new().exported_memh_buffer(&packed)).unwrap_err(),
        Status::InvalidParam
    );
    let mut rng = Rng(0x5EED);
    for _ in 0..5000 {
        let mut mutated = packed.clone();
        let at = rng.below(mutated.len() as u64) as usize;
        mutated[at] ^= 1 + rng.below(255) as u8;
        assert_eq!(ctx.rkey_unpack(&mutated).unwrap_err(), Status::InvalidParam);
        let mut mutated = exported.clone();
        let at = rng.below(mutated.len() as u64) as usize;
        mutated[at] ^= 1 + rng.below(255) as u8;
        let p = MemMapParams::new().exported_memh_buffer(&mutated);
        assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
    }
}

#[test]
fn export_needs_the_feature_and_allocated_memory() {
    let plain = Context::with_features(Features::RMA).unwrap();
    let memh = plain.mem_map(&MemMapParams::alloc(4096)).unwrap();
    assert_eq!(memh.pack(MemhPackFlags::EXPORT).unwrap_err(), Status::InvalidParam);
    let ctx = context();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` outlives the handle.
    let memh = ctx.mem_map(&unsafe { MemMapParams::new().address(buf.as_mut_ptr()) }.length(4096)).unwrap();
    assert_eq!(memh.pack(MemhPackFlags::EXPORT).unwrap_err(), Status::Unsupported);
    drop(memh);
}

/// UCX's pattern: 100 random sizes in [0, 1 MiB) allocated, packed, unpacked and rkey_ptr'd from a
/// second process, compared byte for byte; the child also writes back and the parent checks it.
#[test]
fn hundred_random_sizes_through_rkey_ptr_of_a_second_process() {
    const NAME: &str = "hundred_random_sizes_through_rkey_ptr_of_a_second_process";
    if common::child_role().as_deref() == Some("reader") {
        let ctx = context();
        for line in read_stdin().lines() {
            let (seed, hex) = line.split_once(' ').expect("seed and key");
            let seed: u64 = seed.parse().unwrap();
            let rkey = ctx.rkey_unpack(&from_hex(hex)).expect("unpack in the child");
            let len = rkey.length() as usize;
            if len == 0 {
                assert_eq!(rkey.ptr(rkey.base()).unwrap_err(), Status::Unreachable);
                answer(&format!("{seed} empty"));
                continue;
            }
            let p = rkey.ptr(rkey.base()).expect("rkey_ptr in the child");
            // SAFETY: `p` points at `len` bytes of the parent's live region, mapped by `rkey`.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, len) };
            let mismatch = bytes.iter().enumerate().position(|(i, b)| *b != pattern_byte(seed, i));
            assert_eq!(mismatch, None, "region {seed}: first differing byte");
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = !pattern_byte(seed, i);
            }
            answer(&format!("{seed} ok"));
        }
        return;
    }
    let ctx = context();
    let mut rng = Rng(0xC0FFEE);
    let mut handles = Vec::new();
    let mut input = String::new();
    for seed in 0..100u64 {
        let len = rng.below(1 << 20) as usize;
        let memh = ctx.mem_map(&MemMapParams::alloc(len)).unwrap();
        if len > 0 {
            // SAFETY: the handle maps `len` writable bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(memh.address(), len) };
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = pattern_byte(seed, i);
            }
        }
        input.push_str(&format!("{seed} {}\n", to_hex(&memh.pack(MemhPackFlags::empty()).unwrap())));
        handles.push((seed, memh));
    }
    let answers = run_child(NAME, "reader", &input);
    assert_eq!(answers.lines().count(), 100, "child answered: {answers}");
    for (seed, memh) in &handles {
        let len = memh.length();
        // SAFETY: the handle maps `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(memh.address(), len) };
        let mismatch = bytes.iter().enumerate().position(|(i, b)| *b != !pattern_byte(*seed, i));
        assert_eq!(mismatch, None, "region {seed} ({len} bytes): the child's write is not visible");
    }
}

/// Process A maps and exports; process B imports with mem_map(exported_memh_buffer) and writes
/// through its mapping; A sees the bytes. B also writes through rkey_ptr of a packed key.
#[test]
fn exported_handle_imported_by_a_second_process() {
    const NAME: &str = "exported_handle_imported_by_a_second_process";
    if common::child_role().as_deref() == Some("importer") {
        let ctx = context();
        let input = read_stdin();
        let mut lines = input.lines();
        let exported = from_hex(lines.next().unwrap());
        let packed = from_hex(lines.next().unwrap());
        let imported = ctx.mem_map(&MemMapParams::new().exported_memh_buffer(&exported)).expect("import");
        assert_eq!(imported.length(), 3 << 20);
        // SAFETY: the imported handle maps the peer's 3 MiB region here.
        let bytes = unsafe { std::slice::from_raw_parts_mut(imported.address(), imported.length()) };
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == pattern_byte(1, i)), "import shows other bytes");
        bytes[..4096].fill(0xEE);
        let rkey = ctx.rkey_unpack(&packed).unwrap();
        // SAFETY: one byte inside the peer's region, mapped by `rkey`.
        unsafe { rkey.ptr(rkey.base() + (3 << 20) - 1).unwrap().write(0x77) };
        answer("done");
        return;
    }
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(3 << 20)).unwrap();
    // SAFETY: 3 MiB writable bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(memh.address(), 3 << 20) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = pattern_byte(1, i);
    }
    let input = format!(
        "{}\n{}\n",
        to_hex(&memh.pack(MemhPackFlags::EXPORT).unwrap()),
        to_hex(&memh.pack(MemhPackFlags::empty()).unwrap())
    );
    assert_eq!(run_child(NAME, "importer", &input), "done");
    // SAFETY: as above; the child has exited.
    let bytes = unsafe { std::slice::from_raw_parts(memh.address(), 3 << 20) };
    assert!(bytes[..4096].iter().all(|&b| b == 0xEE));
    assert_eq!(bytes[4096], pattern_byte(1, 4096));
    assert_eq!(bytes[(3 << 20) - 1], 0x77);
}

/// A key whose owner has exited cannot be mapped: UNREACHABLE, not a crash or a stale mapping.
#[test]
fn rkey_ptr_after_the_owner_exited_is_unreachable() {
    const NAME: &str = "rkey_ptr_after_the_owner_exited_is_unreachable";
    if common::child_role().as_deref() == Some("owner") {
        let ctx = context();
        let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
        answer(&to_hex(&memh.rkey_pack().unwrap()));
        return;
    }
    let packed = from_hex(&run_child(NAME, "owner", ""));
    let ctx = context();
    let rkey = ctx.rkey_unpack(&packed).unwrap();
    assert_eq!(rkey.ptr(rkey.base()).unwrap_err(), Status::Unreachable);
}

/// A forged key whose locator names a file that is not a sealed zcx memfd (here: a regular file this
/// process holds open) is refused: mapping it could SIGBUS us if the file were truncated.
#[test]
fn rkey_ptr_refuses_a_locator_naming_a_foreign_file() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
    let mut wire = ctx.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap().wire().clone();
    let path = std::env::temp_dir().join(format!("zcx-foreign-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(4096).unwrap();
    let meta = file.metadata().unwrap();
    let shm = wire.shm.as_mut().unwrap();
    shm.fd = file.as_raw_fd();
    shm.dev = meta.dev();
    shm.inode = meta.ino();
    let forged = ctx.rkey_unpack(&wire.encode()).unwrap();
    assert_eq!(forged.ptr(forged.base()).unwrap_err(), Status::Unreachable);
    std::fs::remove_file(&path).unwrap();
}

/// A locator whose inode does not match the fd it names (a recycled fd number) is refused.
#[test]
fn rkey_ptr_refuses_a_mismatched_inode() {
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
    let mut wire = ctx.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap().wire().clone();
    wire.shm.as_mut().unwrap().inode ^= 1;
    let forged = ctx.rkey_unpack(&wire.encode()).unwrap();
    assert_eq!(forged.ptr(forged.base()).unwrap_err(), Status::Unreachable);
}
