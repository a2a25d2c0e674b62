//! How a process on the same host finds and maps the memfd behind a region.
//!
//! A locator names the exporter's file descriptor (`/proc/<pid>/fd/<fd>`) and carries enough
//! identity to notice when that name no longer means the same file: the boot id rules out another
//! host or a reboot, the process start time rules out a recycled pid, and the inode and device
//! rule out a reused descriptor number.

use crate::cursor::{Reader, Writer};
use crate::error::WireError;
use crate::tag;

/// The 4 KiB base page size.
pub const PAGE_SIZE_4K: u64 = 4096;
/// The 2 MiB huge page size.
pub const PAGE_SIZE_2M: u64 = 2 << 20;
/// The 1 GiB huge page size.
pub const PAGE_SIZE_1G: u64 = 1 << 30;

/// Where a same-host peer finds a memfd-backed region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShmLocator {
    /// The exporting host's boot id (`/proc/sys/kernel/random/boot_id`) as the UUID's 16 bytes.
    pub boot_id: [u8; 16],
    /// The exporting process.
    pub pid: u32,
    /// Start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub pid_start_time: u64,
    /// The memfd's descriptor number in the exporting process.
    pub fd: i32,
    /// The memfd's inode number.
    pub inode: u64,
    /// The device of the memfd's filesystem.
    pub dev: u64,
    /// Offset of the region's first byte within the memfd; need not be page aligned.
    pub map_offset: u64,
    /// Length of the memfd mapping; a non-zero multiple of `page_size`.
    pub map_len: u64,
    /// Page size backing the memfd: [`PAGE_SIZE_4K`], [`PAGE_SIZE_2M`] or [`PAGE_SIZE_1G`].
    pub page_size: u64,
}

impl ShmLocator {
    /// Size of the encoded locator. Every field is stored at its natural width except
    /// `page_size`, which is stored as a `u32` since all allowed sizes fit.
    pub const WIRE_LEN: usize = 68;

    /// Checks the rules every locator must follow.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.fd < 0 {
            return Err(WireError::Invalid("shm locator has a negative file descriptor"));
        }
        if ![PAGE_SIZE_4K, PAGE_SIZE_2M, PAGE_SIZE_1G].contains(&self.page_size) {
            return Err(WireError::Invalid("shm locator page size is not 4 KiB, 2 MiB or 1 GiB"));
        }
        if self.map_offset >= self.map_len {
            return Err(WireError::Invalid("shm locator offset is outside the mapping"));
        }
        if self.map_len % self.page_size != 0 {
            return Err(WireError::Invalid("shm locator mapping length is not a multiple of its page size"));
        }
        Ok(())
    }

    /// The encoded locator ([`ShmLocator::WIRE_LEN`] bytes), as a packed key's same-host entry
    /// and as the shm transport takes it for a one-sided operation. Meant for validated locators, whose
    /// page size fits a `u32`.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut w = Writer::with_capacity(Self::WIRE_LEN);
        w.bytes(&self.boot_id);
        w.u32(self.pid);
        w.u64(self.pid_start_time);
        w.bytes(&self.fd.to_le_bytes());
        w.u64(self.inode);
        w.u64(self.dev);
        w.u64(self.map_offset);
        w.u64(self.map_len);
        w.u32(u32::try_from(self.page_size).unwrap_or(u32::MAX));
        w.into_inner()
    }

    /// Decodes and validates an encoded locator (the value of a [`tag::SHM_LOCATOR`] field).
    pub fn from_bytes(value: &[u8]) -> Result<ShmLocator, WireError> {
        if value.len() != Self::WIRE_LEN {
            return Err(WireError::BadFieldLength { field: tag::SHM_LOCATOR, len: value.len() });
        }
        let mut r = Reader::new(value);
        let locator = ShmLocator {
            boot_id: r.array()?,
            pid: r.u32()?,
            pid_start_time: r.u64()?,
            fd: i32::from_le_bytes(r.array()?),
            inode: r.u64()?,
            dev: r.u64()?,
            map_offset: r.u64()?,
            map_len: r.u64()?,
            page_size: u64::from(r.u32()?),
        };
        locator.validate()?;
        Ok(locator)
    }
}

/// This host's boot id, the 16 bytes of `/proc/sys/kernel/random/boot_id`; `None` where that file
/// is missing or malformed (not Linux, or `/proc` not mounted).
pub fn local_boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    parse_uuid(text.trim())
}

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`); `None`
/// if the process does not exist or the file cannot be parsed.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Parses a hyphenated UUID (`8-4-4-4-12` hex digits) into its 16 bytes, in text order.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    const HYPHENS: [usize; 4] = [8, 13, 18, 23];
    if text.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut nibbles = 0usize;
    for (i, c) in text.chars().enumerate() {
        if HYPHENS.contains(&i) {
            if c != '-' {
                return None;
            }
            continue;
        }
        let digit = u8::try_from(c.to_digit(16)?).ok()?;
        let byte = out.get_mut(nibbles / 2)?;
        *byte = (*byte << 4) | digit;
        nibbles += 1;
    }
    (nibbles == 32).then_some(out)
}

/// Extracts field 22 (`starttime`) from the contents of `/proc/<pid>/stat`.
fn parse_start_time(stat: &str) -> Option<u64> {
    // Field 2 is the command name in parentheses, and the name itself may contain spaces and
    // parentheses; the kernel prints nothing after it that contains ')', so the last ')' ends it.
    let (_, after_comm) = stat.rsplit_once(')')?;
    // Fields after the name start at field 3 (`state`), so field 22 is the 20th of them.
    after_comm.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::sample_locator as sample;

    #[test]
    fn round_trips_in_68_bytes() {
        for page_size in [PAGE_SIZE_4K, PAGE_SIZE_2M, PAGE_SIZE_1G] {
            let locator = ShmLocator { page_size, map_len: 2 * page_size, ..sample() };
            let bytes = locator.to_bytes();
            assert_eq!(bytes.len(), ShmLocator::WIRE_LEN);
            assert_eq!(ShmLocator::from_bytes(&bytes), Ok(locator));
        }
    }

    #[test]
    fn rejects_wrong_length() {
        let bytes = sample().to_bytes();
        let short = bytes.get(..67).unwrap();
        assert_eq!(
            ShmLocator::from_bytes(short),
            Err(WireError::BadFieldLength { field: tag::SHM_LOCATOR, len: 67 })
        );
    }

    #[test]
    fn rejects_negative_fd() {
        let locator = ShmLocator { fd: -1, ..sample() };
        assert!(matches!(locator.validate(), Err(WireError::Invalid(_))));
        assert!(matches!(ShmLocator::from_bytes(&locator.to_bytes()), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_unsupported_page_size() {
        for page_size in [0, 1, 8192, (1 << 21) + 1, 1 << 40] {
            let locator = ShmLocator { page_size, map_len: 4 << 30, ..sample() };
            assert!(matches!(locator.validate(), Err(WireError::Invalid(_))), "{page_size}");
        }
        // A page size that does not fit the wire's u32 must not be accepted by decoding either.
        let mut bytes = sample().to_bytes();
        if let Some(page) = bytes.get_mut(64..68) {
            page.copy_from_slice(&8192u32.to_le_bytes());
        }
        assert!(matches!(ShmLocator::from_bytes(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_offset_outside_mapping() {
        let at_end = ShmLocator { map_offset: sample().map_len, ..sample() };
        assert!(matches!(at_end.validate(), Err(WireError::Invalid(_))));
        let empty = ShmLocator { map_offset: 0, map_len: 0, ..sample() };
        assert!(matches!(empty.validate(), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_mapping_not_a_page_multiple() {
        let locator = ShmLocator { map_len: PAGE_SIZE_2M + PAGE_SIZE_4K, ..sample() };
        assert!(matches!(locator.validate(), Err(WireError::Invalid(_))));
    }

    #[test]
    fn unaligned_offset_is_allowed() {
        let locator = ShmLocator { map_offset: 12_345, ..sample() };
        assert_eq!(locator.validate(), Ok(()));
    }

    #[test]
    fn parses_uuid_text() {
        assert_eq!(
            parse_uuid("00112233-4455-6677-8899-aabbccddeeff"),
            Some([
                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE,
                0xFF
            ])
        );
        assert_eq!(parse_uuid("00112233-4455-6677-8899-AABBCCDDEEFF").map(|b| b[15]), Some(0xFF));
        for bad in [
            "",
            "00112233-4455-6677-8899-aabbccddeef",
            "00112233-4455-6677-8899-aabbccddeeff0",
            "00112233x4455-6677-8899-aabbccddeeff",
            "0011223-34455-6677-8899-aabbccddeeff",
            "00112233-4455-6677-8899-aabbccddeefg",
            "00112233-4455-6677-8899-aabbccddeé",
            "+0112233-4455-6677-8899-aabbccddeeff",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_start_time_despite_awkward_command_names() {
        let tail = "S 1 1 1 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10 18446744073709551615";
        assert_eq!(parse_start_time(&format!("42 (bash) {tail}")), Some(123_456));
        assert_eq!(parse_start_time(&format!("42 (a) b) (c d) {tail}")), Some(123_456));
        assert_eq!(parse_start_time(&format!("42 ()) {tail}")), Some(123_456));
        assert_eq!(parse_start_time("42 (bash) S 1 1"), None);
        assert_eq!(parse_start_time("42 bash S 1"), None);
        assert_eq!(parse_start_time(&format!("42 (x) {}", tail.replace("123456", "-5"))), None);
    }

    #[test]
    fn current_process_start_time_is_stable() {
        let first = process_start_time(std::process::id());
        assert!(first.is_some());
        assert_eq!(process_start_time(std::process::id()), first);
    }

    #[test]
    fn missing_process_has_no_start_time() {
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn boot_id_is_readable_on_linux() {
        let id = local_boot_id();
        assert!(id.is_some());
        assert_eq!(local_boot_id(), id);
    }
}
