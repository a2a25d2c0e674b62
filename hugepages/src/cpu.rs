//! CPU sets and pinning: dedicated cores for polling threads (a worker's busy-poll thread, the
//! two sides of `zcx perf`).

use std::fmt;

/// Highest CPU number a [`CpuSet`] can hold (the size of the kernel's default `cpu_set_t`).
pub const MAX_CPUS: usize = 1024;

/// A set of CPU numbers, like `cpu_set_t`, written and read as a list such as `0-3,8,10-11`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct CpuSet {
    words: [u64; MAX_CPUS / 64],
}

/// Why a CPU list could not be parsed or a thread could not be pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    /// The text is not a CPU list (`0-3,8`).
    #[error("bad CPU list {0:?}: expected numbers and ranges like 0-3,8")]
    BadList(String),
    /// A CPU number is at or above [`MAX_CPUS`].
    #[error("CPU {0} is out of range (at most {max})", max = MAX_CPUS - 1)]
    OutOfRange(usize),
    /// The set is empty.
    #[error("empty CPU set")]
    Empty,
    /// `sched_setaffinity` / `sched_getaffinity` failed (e.g. EINVAL: no CPU of the set is online
    /// or allowed for this process).
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Os {
        /// The call that failed.
        op: &'static str,
        /// Its errno.
        errno: i32,
    },
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> CpuSet {
        CpuSet::default()
    }

    /// The set holding just `cpu`.
    pub fn single(cpu: usize) -> Result<CpuSet, CpuError> {
        let mut set = CpuSet::new();
        set.insert(cpu)?;
        Ok(set)
    }

    /// Parses a list such as `0-3,8,10-11` (the format of `taskset -c` and /sys cpulists).
    pub fn parse(list: &str) -> Result<CpuSet, CpuError> {
        let bad = || CpuError::BadList(list.to_owned());
        let mut set = CpuSet::new();
        for part in list.trim().split(',').map(str::trim) {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo.trim(), hi.trim()),
                None => (part, part),
            };
            let lo: usize = lo.parse().map_err(|_| bad())?;
            let hi: usize = hi.parse().map_err(|_| bad())?;
            if lo > hi {
                return Err(bad());
            }
            if hi >= MAX_CPUS {
                return Err(CpuError::OutOfRange(hi));
            }
            for cpu in lo..=hi {
                set.insert(cpu)?;
            }
        }
        Ok(set)
    }

    /// Adds `cpu`.
    pub fn insert(&mut self, cpu: usize) -> Result<(), CpuError> {
        if cpu >= MAX_CPUS {
            return Err(CpuError::OutOfRange(cpu));
        }
        self.words[cpu / 64] |= 1 << (cpu % 64);
        Ok(())
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// The CPUs in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_CPUS).filter(|&cpu| self.contains(cpu))
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True for the empty set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    fn to_libc(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
        let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in self.iter() {
            // SAFETY: cpu < MAX_CPUS == CPU_SETSIZE, so CPU_SET stays inside `raw`.
            unsafe { libc::CPU_SET(cpu, &mut raw) };
        }
        raw
    }
}

impl fmt::Display for CpuSet {
    /// The list form, e.g. `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.iter().peekable();
        let mut first = true;
        while let Some(lo) = cpus.next() {
            let mut hi = lo;
            while cpus.peek() == Some(&(hi + 1)) {
                hi = cpus.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// Pins the calling thread to `cpus` (`sched_setaffinity(0, ..)`).
pub fn pin_current_thread(cpus: &CpuSet) -> Result<(), CpuError> {
    if cpus.is_empty() {
        return Err(CpuError::Empty);
    }
    let raw = cpus.to_libc();
    // SAFETY: `raw` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw) };
    if rc != 0 {
        return Err(CpuError::Os { op: "sched_setaffinity", errno: last_errno() });
    }
    Ok(())
}

/// The CPUs the calling thread may run on (`sched_getaffinity(0, ..)`).
pub fn current_affinity() -> Result<CpuSet, CpuError> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid value for the kernel to overwrite.
    let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `raw` is a writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut raw) };
    if rc != 0 {
        return Err(CpuError::Os { op: "sched_getaffinity", errno: last_errno() });
    }
    let mut set = CpuSet::new();
    for cpu in 0..MAX_CPUS {
        // SAFETY: cpu < CPU_SETSIZE, so CPU_ISSET reads inside `raw`.
        if unsafe { libc::CPU_ISSET(cpu, &raw) } {
            set.insert(cpu)?;
        }
    }
    Ok(set)
}

/// The CPU the calling thread runs on right now (`sched_getcpu`), if the kernel says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for list in ["0", "0-3", "0-3,8,10-11", "1,3,5", "1023"] {
            assert_eq!(CpuSet::parse(list).unwrap().to_string(), list);
        }
        assert_eq!(CpuSet::parse(" 2 , 0-1 ").unwrap().to_string(), "0-2");
        assert_eq!(CpuSet::parse("0-3").unwrap().len(), 4);
    }

    #[test]
    fn bad_lists_are_refused() {
        for bad in ["", "a", "3-1", "1-", "-1", "1,,2", "0x1"] {
            assert!(matches!(CpuSet::parse(bad), Err(CpuError::BadList(_))), "{bad:?}");
        }
        assert_eq!(CpuSet::parse("1024"), Err(CpuError::OutOfRange(1024)));
        assert_eq!(CpuSet::single(5000), Err(CpuError::OutOfRange(5000)));
        assert_eq!(pin_current_thread(&CpuSet::new()), Err(CpuError::Empty));
    }
}
