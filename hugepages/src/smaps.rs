//! What `/proc/self/smaps` says about the memory behind an address.

use std::fs::File;
use std::io::{BufRead, BufReader};

/// One VMA of `/proc/self/smaps`, reduced to what matters for page backing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmapsEntry {
    /// First address of the VMA.
    pub start: usize,
    /// One past the last address of the VMA.
    pub end: usize,
    /// `KernelPageSize` in bytes: 2 MiB or 1 GiB for hugetlb VMAs, the base page size otherwise.
    pub kernel_page_size: usize,
    /// `Rss` in bytes. The kernel does not count hugetlb pages here; see `hugetlb_bytes`.
    pub rss: usize,
    /// Transparent hugepages mapped, in bytes: `AnonHugePages + ShmemPmdMapped + FilePmdMapped`.
    pub thp_bytes: usize,
    /// `Locked` in bytes (hugetlb pages never show here: `mlock` does not mark hugetlb VMAs).
    pub locked: usize,
    /// The mapped file, `/memfd:<name> (deleted)` style names, `[heap]`, or empty for anonymous memory.
    pub path: String,
    /// Hugetlb pages mapped, in bytes: `Shared_Hugetlb + Private_Hugetlb`.
    pub hugetlb_bytes: usize,
    /// `THPeligible`: whether the VMA may be backed by transparent hugepages.
    pub thp_eligible: bool,
    /// The two-letter `VmFlags` mnemonics (e.g. `hg` for `MADV_HUGEPAGE`, `lo` for locked, `ht` for hugetlb).
    pub vm_flags: Vec<String>,
}

impl SmapsEntry {
    /// Whether `VmFlags` contains `flag` (e.g. `"hg"`).
    pub fn has_vm_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|present| present == flag)
    }

    /// Bytes resident, counting hugetlb pages (which `Rss` leaves out).
    pub fn resident_bytes(&self) -> usize {
        self.rss + self.hugetlb_bytes
    }
}

/// The `/proc/self/smaps` entry of the VMA containing `addr`, or `None` if no
/// VMA contains it (or smaps cannot be read).
pub fn smaps_for(addr: usize) -> Option<SmapsEntry> {
    let file = File::open("/proc/self/smaps").ok()?;
    find_entry(BufReader::new(file), addr)
}

/// Scan smaps text for the VMA containing `addr`. Reading stops right after
/// that VMA: the kernel generates smaps lazily and walking page tables of the
/// remaining VMAs would be wasted work.
fn find_entry(reader: impl BufRead, addr: usize) -> Option<SmapsEntry> {
    let mut entry: Option<SmapsEntry> = None;
    for line in reader.lines() {
        let line = line.ok()?;
        if let Some((start, end, path)) = parse_header(&line) {
            if entry.is_some() {
                break;
            }
            if (start..end).contains(&addr) {
                entry = Some(SmapsEntry {
                    start,
                    end,
                    kernel_page_size: 0,
                    rss: 0,
                    thp_bytes: 0,
                    locked: 0,
                    path,
                    hugetlb_bytes: 0,
                    thp_eligible: false,
                    vm_flags: Vec::new(),
                });
            }
            continue;
        }
        let Some(entry) = entry.as_mut() else { continue };
        let Some((key, value)) = line.split_once(':') else { continue };
        match key {
            "KernelPageSize" => entry.kernel_page_size = kib_value(value),
            "Rss" => entry.rss = kib_value(value),
            "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped" => entry.thp_bytes += kib_value(value),
            "Shared_Hugetlb" | "Private_Hugetlb" => entry.hugetlb_bytes += kib_value(value),
            "Locked" => entry.locked = kib_value(value),
            "THPeligible" => entry.thp_eligible = value.trim() == "1",
            "VmFlags" => entry.vm_flags = value.split_whitespace().map(str::to_owned).collect(),
            _ => {}
        }
    }
    entry
}

/// Parse a VMA header line (`start-end perms offset dev inode [path]`).
fn parse_header(line: &str) -> Option<(usize, usize, String)> {
    let (range, mut rest) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    // Skip perms, offset, dev and inode; what remains (after padding) is the path,
    // which may itself contain spaces.
    for _ in 0..4 {
        rest = rest.trim_start();
        rest = &rest[rest.find(' ').unwrap_or(rest.len())..];
    }
    Some((start, end, rest.trim().to_owned()))
}

/// A `"   123 kB"` smaps value in bytes (0 if malformed).
fn kib_value(value: &str) -> usize {
    let kib: usize = value.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
    kib.saturating_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                   8 kB
Locked:                0 kB
THPeligible:    0
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000800000 rw-s 00000000 00:01 4242                       /memfd:rx ring (deleted)
Size:               8192 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                8192 kB
AnonHugePages:         0 kB
ShmemPmdMapped:     2048 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Locked:             8192 kB
THPeligible:    1
VmFlags: rd wr sh mr mw me ms lo sd hg
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0 
KernelPageSize:     2048 kB
Rss:                   0 kB
Private_Hugetlb:    4096 kB
VmFlags: rd wr mr mw me de ht sd
";

    #[test]
    fn finds_the_vma_containing_an_address_and_its_fields() {
        let entry = find_entry(SAMPLE.as_bytes(), 0x7f00_0000_1234).unwrap();
        assert_eq!(entry.start, 0x7f00_0000_0000);
        assert_eq!(entry.end, 0x7f00_0080_0000);
        assert_eq!(entry.kernel_page_size, 4096);
        assert_eq!(entry.rss, 8 << 20);
        assert_eq!(entry.thp_bytes, 2 << 20);
        assert_eq!(entry.locked, 8 << 20);
        assert_eq!(entry.path, "/memfd:rx ring (deleted)");
        assert!(entry.thp_eligible);
        assert!(entry.has_vm_flag("hg"));
        assert!(entry.has_vm_flag("lo"));
        assert!(!entry.has_vm_flag("ht"));
    }

    #[test]
    fn hugetlb_vma_reports_hugetlb_bytes_separately_from_rss() {
        let entry = find_entry(SAMPLE.as_bytes(), 0x7f00_0080_0000).unwrap();
        assert_eq!(entry.kernel_page_size, 2 << 20);
        assert_eq!(entry.rss, 0);
        assert_eq!(entry.hugetlb_bytes, 4 << 20);
        assert_eq!(entry.resident_bytes(), 4 << 20);
        assert_eq!(entry.path, "");
        assert!(entry.has_vm_flag("ht"));
    }

    #[test]
    fn end_address_is_exclusive_and_gaps_give_none() {
        assert!(find_entry(SAMPLE.as_bytes(), 0x7f00_0000_0000 - 1).is_none());
        assert_eq!(find_entry(SAMPLE.as_bytes(), 0x55d0_c002_0fff).unwrap().path, "[heap]");
        assert!(find_entry(SAMPLE.as_bytes(), 0x55d0_c002_1000).is_none());
        assert!(find_entry(SAMPLE.as_bytes(), 0x7f00_00c0_0000).is_none());
    }

    #[test]
    fn live_smaps_describes_a_stack_variable() {
        let local = 0u64;
        let entry = smaps_for(std::ptr::addr_of!(local) as usize).expect("stack address must be mapped");
        assert!(entry.kernel_page_size > 0);
        assert!(entry.rss > 0);
    }
}
