//! The kernel's hugetlb page pools, as reported under `/sys/kernel/mm/hugepages`.

use std::path::Path;

use crate::page_size::PageSize;

const SYSFS_HUGEPAGES: &str = "/sys/kernel/mm/hugepages";

/// Counters of one hugetlb pool (`/sys/kernel/mm/hugepages/hugepages-<N>kB/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// Size of the pool's pages in bytes.
    pub page_size_bytes: usize,
    /// `nr_hugepages`: pages currently in the pool.
    pub total: u64,
    /// `free_hugepages`: pages not faulted into any mapping (includes reserved ones).
    pub free: u64,
    /// `resv_hugepages`: free pages already promised to existing mappings.
    pub reserved: u64,
    /// `surplus_hugepages`: pages allocated beyond `nr_hugepages` through overcommit.
    pub surplus: u64,
}

impl PoolInfo {
    /// The pool's page size, if it is one this crate can map.
    pub fn page_size(&self) -> Option<PageSize> {
        PageSize::from_bytes(self.page_size_bytes).filter(|size| size.is_huge())
    }

    /// Free pages not yet promised to a mapping: what a new mapping can get.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

/// All hugetlb pools the kernel offers, sorted by page size; empty if sysfs is missing.
pub fn pools() -> Vec<PoolInfo> {
    read_pools(Path::new(SYSFS_HUGEPAGES))
}

/// The pool of `page`-sized hugepages, if the kernel has one.
pub fn pool(page: PageSize) -> Option<PoolInfo> {
    if !page.is_huge() {
        return None;
    }
    read_pool(&pool_dir(Path::new(SYSFS_HUGEPAGES), page.bytes()), page.bytes())
}

/// `free_hugepages` of the `page`-sized pool; 0 when there is no such pool,
/// and for [`PageSize::Base`], which is not pool-managed.
pub fn free_pages(page: PageSize) -> u64 {
    pool(page).map_or(0, |pool| pool.free)
}

fn pool_dir(root: &Path, page_size_bytes: usize) -> std::path::PathBuf {
    root.join(format!("hugepages-{}kB", page_size_bytes / 1024))
}

fn read_pools(root: &Path) -> Vec<PoolInfo> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut pools: Vec<PoolInfo> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let kib = parse_pool_dir_name(entry.file_name().to_str()?)?;
            read_pool(&entry.path(), kib.checked_mul(1024)?)
        })
        .collect();
    pools.sort_by_key(|pool| pool.page_size_bytes);
    pools
}

/// The page size in KiB encoded in a directory name like `hugepages-2048kB`.
fn parse_pool_dir_name(name: &str) -> Option<usize> {
    name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()
}

fn read_pool(dir: &Path, page_size_bytes: usize) -> Option<PoolInfo> {
    let counter =
        |file: &str| -> Option<u64> { std::fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok() };
    Some(PoolInfo {
        page_size_bytes,
        total: counter("nr_hugepages")?,
        free: counter("free_hugepages")?,
        reserved: counter("resv_hugepages")?,
        surplus: counter("surplus_hugepages")?,
    })
}

/// Explain why `pages_needed` hugepages of size `page` could not be had, with
/// the pool counters and the command that fixes it.
pub(crate) fn shortage_reason(page: PageSize, pages_needed: usize, failure: &str) -> String {
    let dir = pool_dir(Path::new(SYSFS_HUGEPAGES), page.bytes());
    let Some(pool) = pool(page) else {
        return format!("{failure}; the kernel has no {page} hugepage pool ({} is missing)", dir.display());
    };
    let knob = if page == PageSize::Huge2M {
        "/proc/sys/vm/nr_hugepages".to_owned()
    } else {
        dir.join("nr_hugepages").display().to_string()
    };
    let plural = if pages_needed == 1 { "" } else { "s" };
    format!(
        "{failure}; need {pages_needed} page{plural}, pool has {} free of {} pages ({} of the free ones reserved \
         by other mappings); reserve with echo N > {knob}",
        pool.free, pool.total, pool.reserved
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_dir_names_parse_to_kib() {
        assert_eq!(parse_pool_dir_name("hugepages-2048kB"), Some(2048));
        assert_eq!(parse_pool_dir_name("hugepages-1048576kB"), Some(1_048_576));
        assert_eq!(parse_pool_dir_name("hugepages-2048"), None);
        assert_eq!(parse_pool_dir_name("something-else"), None);
    }

    #[test]
    fn pools_are_read_and_sorted_from_a_sysfs_like_tree() {
        let root = std::env::temp_dir().join(format!("zcx-hugepages-pools-{}", std::process::id()));
        for (kib, counters) in [(1_048_576usize, [2u64, 1, 0, 0]), (2048, [64, 60, 3, 1])] {
            let dir = root.join(format!("hugepages-{kib}kB"));
            std::fs::create_dir_all(&dir).unwrap();
            for (file, value) in
                ["nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages"].iter().zip(counters)
            {
                std::fs::write(dir.join(file), format!("{value}\n")).unwrap();
            }
        }
        std::fs::create_dir_all(root.join("unrelated")).unwrap();
        let pools = read_pools(&root);
        std::fs::remove_dir_all(&root).unwrap();

        assert_eq!(pools.len(), 2);
        assert_eq!(
            pools[0],
            PoolInfo { page_size_bytes: 2 << 20, total: 64, free: 60, reserved: 3, surplus: 1 }
        );
        assert_eq!(pools[0].available(), 57);
        assert_eq!(pools[0].page_size(), Some(PageSize::Huge2M));
        assert_eq!(pools[1].page_size_bytes, 1 << 30);
        assert_eq!(pools[1].page_size(), Some(PageSize::Huge1G));
    }

    #[test]
    fn missing_sysfs_yields_no_pools() {
        assert!(read_pools(Path::new("/nonexistent/zcx-hugepages")).is_empty());
    }
}
