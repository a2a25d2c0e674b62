//! The target side's remote-access table: may this peer touch these bytes?
//!
//! Every memory handle with remote protection is entered here under its region id with its bounds,
//! protection and unguessable access key. A transport without native RMA (uring, dpdk) executes a
//! peer's put/get/atomic only after [`RemoteAccessTable::check`] accepts it, and then touches exactly
//! the range it returned; a forged key, an unknown region, bytes outside the region, a missing
//! REMOTE_READ/REMOTE_WRITE protection or a misaligned atomic are refused before any byte is read
//! or written.
//!
//! A peer that would access a region directly (a same-host peer mapping its memfd) asks the owner
//! to vouch for its key first ([`RemoteAccessTable::vouch`]): the owner says yes only when every
//! claim of the key equals its own entry, so the bounds and protection the peer then enforces are
//! the owner's, not whatever the key's bytes were edited to say.

use std::collections::HashMap;
use std::sync::RwLock;

use zcx_control::{RkeyWire, ShmLocator};

/// `UCP_MEM_MAP_PROT_REMOTE_READ`.
pub const PROT_REMOTE_READ: u32 = 1 << 8;
/// `UCP_MEM_MAP_PROT_REMOTE_WRITE`.
pub const PROT_REMOTE_WRITE: u32 = 1 << 9;

/// What a peer wants to do to the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAccess {
    /// `get`: needs REMOTE_READ.
    Read,
    /// `put`: needs REMOTE_WRITE.
    Write,
    /// An atomic of 4 or 8 bytes: needs both, and natural alignment.
    Atomic {
        /// Operand size in bytes (4 or 8).
        size: u8,
    },
}

/// Why an access was refused. The transport maps it to a `ucs_status_t` for the initiator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No live region with this id, or the key does not match. The two are one error on purpose,
    /// so a peer cannot probe which region ids exist.
    BadKey,
    /// `[addr, addr + len)` is not inside the region: `INVALID_ADDR`.
    OutOfBounds,
    /// The region lacks the protection the access needs; the access is not performed.
    Protection,
    /// An atomic of a size other than 4 or 8, or not naturally aligned: `INVALID_PARAM`.
    BadAtomic,
}

/// One registered region as the table knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionEntry {
    /// Address of the region's first byte in this process.
    pub base: u64,
    /// Length in bytes.
    pub length: u64,
    /// `UCP_MEM_MAP_PROT_*` bits.
    pub prot: u32,
    /// The capability a peer must present.
    pub access_key: [u8; 16],
    /// How a same-host peer maps the region, exactly as the owner's packed keys say it; `None`
    /// when the region cannot be mapped by a peer.
    pub shm: Option<ShmLocator>,
}

/// Regions peers may access, by region id. Reads (checks) run concurrently; inserts and removals
/// happen at `mem_map`/`unmap` time.
#[derive(Debug, Default)]
pub struct RemoteAccessTable {
    regions: RwLock<HashMap<u64, RegionEntry>>,
}

impl RemoteAccessTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enters `region` under `id` (replacing nothing: ids are unique per context).
    ///
    /// # Safety
    /// `[region.base, region.base + region.length)` must be memory of this process that stays
    /// mapped, readable and (with REMOTE_WRITE) writable until [`RemoteAccessTable::remove`]
    /// returns for `id`: peers' puts, gets and atomics are executed on it after the check alone.
    pub unsafe fn insert(&self, id: u64, region: RegionEntry) {
        self.write().insert(id, region);
    }

    /// Removes region `id`; from now on every access to it is refused.
    pub fn remove(&self, id: u64) {
        self.write().remove(&id);
    }

    /// Number of regions peers may access.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when no region is accessible.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks an access of `len` bytes at remote address `addr` of region `id` with `key`.
    /// On success returns the byte offset of `addr` in the region; `[offset, offset + len)` lies
    /// inside it.
    pub fn check(
        &self,
        id: u64,
        key: &[u8; 16],
        addr: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<u64, AccessError> {
        let region = *self.read().get(&id).ok_or(AccessError::BadKey)?;
        check_region(&region, key, addr, len, access)
    }

    /// Checks an access exactly like [`RemoteAccessTable::check`], then calls `f` with the
    /// address of the first byte (`addr` itself: regions are entered at their real addresses)
    /// while still holding the table's read lock, so a concurrent [`RemoteAccessTable::remove`],
    /// which `unmap` calls before it frees the memory, waits until `f` returned. `f` is called for
    /// `len == 0` too, and must then touch no byte.
    ///
    /// `f` gets a raw pointer: dereferencing it is the caller's `unsafe`, sound for
    /// `[addr, addr + len)` because every entry describes live memory until it is removed. `f`
    /// must not call back into this table's `insert` or `remove` (that would deadlock).
    pub fn with_access<T>(
        &self,
        id: u64,
        key: &[u8; 16],
        addr: u64,
        len: u64,
        access: RemoteAccess,
        f: impl FnOnce(*mut u8) -> T,
    ) -> Result<T, AccessError> {
        let regions = self.read();
        let region = regions.get(&id).ok_or(AccessError::BadKey)?;
        check_region(region, key, addr, len, access)?;
        // The region was entered from a pointer cast to an integer, which exposed its provenance.
        let ptr = std::ptr::with_exposed_provenance_mut::<u8>(addr as usize);
        let result = f(ptr);
        drop(regions);
        Ok(result)
    }

    /// Does the owner vouch for `claim`, a packed key of one of its regions as a peer holds it?
    /// Yes only when the region is live, the access key matches, and the key's base, length,
    /// protection and shared-memory locator are exactly those of the region's entry: a key edited
    /// in any of them is [`AccessError::BadKey`], whatever accesses it would allow.
    pub fn vouch(&self, claim: &RkeyWire) -> Result<(), AccessError> {
        let regions = self.read();
        let region = regions.get(&claim.region_id).ok_or(AccessError::BadKey)?;
        let same = keys_equal(&region.access_key, &claim.access_key)
            && region.base == claim.base
            && region.length == claim.length
            && region.prot == claim.prot
            && region.shm == claim.shm;
        if same {
            Ok(())
        } else {
            Err(AccessError::BadKey)
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, RegionEntry>> {
        // Mutations are single map operations: a poisoned table is still consistent.
        self.regions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, RegionEntry>> {
        self.regions.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The check itself, for one region: key, protection, atomic shape, then bounds.
pub fn check_region(
    region: &RegionEntry,
    key: &[u8; 16],
    addr: u64,
    len: u64,
    access: RemoteAccess,
) -> Result<u64, AccessError> {
    if !keys_equal(&region.access_key, key) {
        return Err(AccessError::BadKey);
    }
    let needed = match access {
        RemoteAccess::Read => PROT_REMOTE_READ,
        RemoteAccess::Write => PROT_REMOTE_WRITE,
        RemoteAccess::Atomic { .. } => PROT_REMOTE_READ | PROT_REMOTE_WRITE,
    };
    if region.prot & needed != needed {
        return Err(AccessError::Protection);
    }
    if let RemoteAccess::Atomic { size } = access {
        if !matches!(size, 4 | 8) || len != u64::from(size) || addr % u64::from(size) != 0 {
            return Err(AccessError::BadAtomic);
        }
    }
    let offset = addr.checked_sub(region.base).ok_or(AccessError::OutOfBounds)?;
    let end = offset.checked_add(len).ok_or(AccessError::OutOfBounds)?;
    if end > region.length {
        return Err(AccessError::OutOfBounds);
    }
    Ok(offset)
}

/// Compares keys in time independent of where they differ, so response timing does not leak how
/// much of a guessed key was right.
fn keys_equal(a: &[u8; 16], b: &[u8; 16]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = [7; 16];

    fn region(prot: u32) -> RegionEntry {
        RegionEntry { base: 0x1000, length: 0x100, prot, access_key: KEY, shm: None }
    }

    const RW: u32 = PROT_REMOTE_READ | PROT_REMOTE_WRITE;

    #[test]
    fn accepts_accesses_inside_with_the_key_and_prot() {
        let r = region(RW);
        assert_eq!(check_region(&r, &KEY, 0x1000, 0x100, RemoteAccess::Read), Ok(0));
        assert_eq!(check_region(&r, &KEY, 0x10f8, 8, RemoteAccess::Write), Ok(0xf8));
        assert_eq!(check_region(&r, &KEY, 0x1100, 0, RemoteAccess::Write), Ok(0x100));
        assert_eq!(check_region(&r, &KEY, 0x1010, 8, RemoteAccess::Atomic { size: 8 }), Ok(0x10));
        assert_eq!(check_region(&r, &KEY, 0x1014, 4, RemoteAccess::Atomic { size: 4 }), Ok(0x14));
    }

    #[test]
    fn refuses_forged_keys_bounds_prot_and_bad_atomics() {
        let r = region(RW);
        let mut forged = KEY;
        forged[15] ^= 1;
        assert_eq!(check_region(&r, &forged, 0x1000, 1, RemoteAccess::Read), Err(AccessError::BadKey));
        assert_eq!(check_region(&r, &KEY, 0x0fff, 1, RemoteAccess::Read), Err(AccessError::OutOfBounds));
        assert_eq!(check_region(&r, &KEY, 0x10f9, 8, RemoteAccess::Write), Err(AccessError::OutOfBounds));
        assert_eq!(check_region(&r, &KEY, u64::MAX, 2, RemoteAccess::Write), Err(AccessError::OutOfBounds));
        let read_only = region(PROT_REMOTE_READ);
        assert_eq!(
            check_region(&read_only, &KEY, 0x1000, 1, RemoteAccess::Write),
            Err(AccessError::Protection)
        );
        assert_eq!(
            check_region(&read_only, &KEY, 0x1000, 8, RemoteAccess::Atomic { size: 8 }),
            Err(AccessError::Protection)
        );
        let local_only = region(0x3);
        assert_eq!(
            check_region(&local_only, &KEY, 0x1000, 1, RemoteAccess::Read),
            Err(AccessError::Protection)
        );
        assert_eq!(
            check_region(&r, &KEY, 0x1004, 8, RemoteAccess::Atomic { size: 8 }),
            Err(AccessError::BadAtomic)
        );
        assert_eq!(
            check_region(&r, &KEY, 0x1000, 4, RemoteAccess::Atomic { size: 8 }),
            Err(AccessError::BadAtomic)
        );
        assert_eq!(
            check_region(&r, &KEY, 0x1000, 2, RemoteAccess::Atomic { size: 2 }),
            Err(AccessError::BadAtomic)
        );
    }

    /// The packed key the owner of `region(PROT_REMOTE_READ)` under id 3 hands out.
    fn honest_claim() -> RkeyWire {
        RkeyWire {
            context_id: [1; 16],
            region_id: 3,
            base: 0x1000,
            length: 0x100,
            prot: PROT_REMOTE_READ,
            mem_type: 0,
            access_key: KEY,
            symmetric: false,
            shm: None,
            domain_keys: Vec::new(),
        }
    }

    #[test]
    fn vouches_only_for_a_key_equal_to_its_record() {
        let table = RemoteAccessTable::new();
        let locator = ShmLocator {
            boot_id: [2; 16],
            pid: 10,
            pid_start_time: 11,
            fd: 12,
            inode: 13,
            dev: 14,
            map_offset: 0x1000,
            map_len: 0x2000,
            page_size: 0x1000,
        };
        // SAFETY: only vouching is exercised; no access is executed on the region.
        unsafe { table.insert(3, RegionEntry { shm: Some(locator), ..region(PROT_REMOTE_READ) }) };
        let honest = RkeyWire { shm: Some(locator), ..honest_claim() };
        assert_eq!(table.vouch(&honest), Ok(()));
        type Edit = fn(&mut RkeyWire);
        let edits: [(&str, Edit); 8] = [
            ("longer", |w| w.length += 1),
            ("shorter", |w| w.length -= 1),
            ("base moved", |w| w.base += 0x10),
            ("write added", |w| w.prot |= PROT_REMOTE_WRITE),
            ("read removed", |w| w.prot = 0),
            ("access key", |w| w.access_key[15] ^= 1),
            ("other region", |w| w.region_id = 4),
            ("locator moved", |w| w.shm.as_mut().unwrap().map_offset += 0x10),
        ];
        for (name, edit) in edits {
            let mut forged = honest.clone();
            edit(&mut forged);
            assert_eq!(table.vouch(&forged), Err(AccessError::BadKey), "{name}");
        }
        let mut other_fd = honest.clone();
        other_fd.shm.as_mut().unwrap().fd = 99;
        assert_eq!(table.vouch(&other_fd), Err(AccessError::BadKey), "another memfd");
        let mut no_locator = honest.clone();
        no_locator.shm = None;
        assert_eq!(table.vouch(&no_locator), Err(AccessError::BadKey), "locator dropped");
        table.remove(3);
        assert_eq!(table.vouch(&honest), Err(AccessError::BadKey), "unmapped");
    }

    #[test]
    fn table_lookup_and_removal() {
        let table = RemoteAccessTable::new();
        // SAFETY: the check is all this test exercises; no access is executed on the region.
        unsafe { table.insert(3, region(RW)) };
        assert_eq!(table.check(3, &KEY, 0x1000, 4, RemoteAccess::Read), Ok(0));
        assert_eq!(table.check(4, &KEY, 0x1000, 4, RemoteAccess::Read), Err(AccessError::BadKey));
        table.remove(3);
        assert_eq!(table.check(3, &KEY, 0x1000, 4, RemoteAccess::Read), Err(AccessError::BadKey));
        assert!(table.is_empty());
    }
}
