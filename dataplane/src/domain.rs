//! Memory domains: the kinds of memory registration a context keeps for each `mem_map` region.
//!
//! A transport that reaches memory by something other than a plain virtual address needs the
//! memory registered with it first: a same-host peer maps the region's memfd, DPDK wants it
//! listed as external memory before an mbuf may point into it, and a verbs NIC wants it in a
//! protection domain with a key the peer names in its RDMA requests. Each such kind is a
//! [`MemoryDomain`]. The context holds the active domains; `mem_map` registers a region once with
//! each of them (through the registration cache, so a sub-range reuses the registration), the
//! packed remote key carries each domain's entry for the peer ([`DomainRegistration::remote_entry`]),
//! unpacking a key checks each entry with its domain ([`MemoryDomain::check_remote_entry`]), and
//! unmapping drops the registrations, which deregisters.
//!
//! A domain may ask for its registration to wait for the region's first use when the caller mapped
//! with `UCP_MEM_MAP_NONBLOCK` ([`MemoryDomain::defers_nonblocking`]): registering can pin or walk
//! every page, which NONBLOCK asked not to do up front.
//!
//! Nothing here names a transport type: a transport finds its own registration again through
//! [`DomainRegistration::as_any`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// Which memory domain an entry belongs to; the same number identifies the entry in a packed
/// remote key's list of per-domain keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(pub u8);

impl DomainId {
    /// Same-host processes map the region's memfd (its entry is the shared-memory locator).
    pub const SAME_HOST: DomainId = DomainId(1);
    /// DPDK external memory: mbufs point into the region, so sends from it are not copied. Local
    /// only: it has no entry in a packed key.
    pub const DPDK: DomainId = DomainId(2);
    /// A verbs protection domain: the entry is the remote key RDMA requests name.
    pub const VERBS: DomainId = DomainId(3);
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DomainId::SAME_HOST => f.write_str("same-host"),
            DomainId::DPDK => f.write_str("dpdk"),
            DomainId::VERBS => f.write_str("verbs"),
            DomainId(other) => write!(f, "domain-{other}"),
        }
    }
}

/// The memory a region lies in when zcx mapped it itself: a domain may register the whole
/// mapping once, so that every region inside it shares the registration.
#[derive(Clone)]
pub struct Backing {
    /// First byte of the mapping.
    pub start: usize,
    /// Mapped length in bytes.
    pub len: usize,
    /// Page size of the mapping.
    pub page_size: usize,
    /// The memfd behind the mapping, when it has one (a same-host peer can map it).
    pub memfd: Option<Memfd>,
    /// Keeps the mapping (and its memfd) alive while a registration of it lives.
    pub keep: Arc<dyn Send + Sync>,
}

/// The memfd behind a mapping: its descriptor in this process and the `(st_dev, st_ino)` a peer
/// checks after opening it through `/proc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memfd {
    /// The descriptor number, open for as long as the mapping's owner lives.
    pub fd: i32,
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub inode: u64,
}

/// A region to register.
#[derive(Clone)]
pub struct RegionToRegister {
    /// First byte.
    pub start: usize,
    /// Length in bytes (never 0: the zero-length handle registers nothing).
    pub len: usize,
    /// `UCP_MEM_MAP_PROT_*` bits the region was mapped with.
    pub prot: u32,
    /// The zcx mapping that holds it, or `None` for caller memory.
    pub backing: Option<Backing>,
}

/// Why a domain did not register a region or refused a peer's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DomainError {
    /// The domain cannot take this region (unaligned caller memory, not memfd-backed, the
    /// device is not running): operations that would have used the domain fall back to a path
    /// without it (a copy, an emulated access).
    NotApplicable(String),
    /// Registering failed for a reason the caller must hear about.
    Failed(String),
    /// Registering would pass a limit of the process (pinned memory over `RLIMIT_MEMLOCK`):
    /// `UCS_ERR_EXCEEDS_LIMIT`, with what to raise.
    ExceedsLimit(String),
    /// A peer's entry for this domain is malformed.
    BadEntry(String),
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DomainError::NotApplicable(why) => write!(f, "not applicable: {why}"),
            DomainError::Failed(why) => write!(f, "registration failed: {why}"),
            DomainError::ExceedsLimit(why) => write!(f, "registration over a limit: {why}"),
            DomainError::BadEntry(why) => write!(f, "bad remote entry: {why}"),
        }
    }
}

impl std::error::Error for DomainError {}

/// One kind of memory registration (see the module docs).
pub trait MemoryDomain: Send + Sync {
    /// The domain's id.
    fn id(&self) -> DomainId;

    /// Registers `region`. The returned registration deregisters when dropped.
    fn register(&self, region: &RegionToRegister) -> Result<Arc<dyn DomainRegistration>, DomainError>;

    /// Checks a peer's entry for this domain from a packed remote key, before anything uses it.
    /// Default: the domain has no entries, so any is malformed.
    fn check_remote_entry(&self, entry: &[u8]) -> Result<(), DomainError> {
        let _ = entry;
        Err(DomainError::BadEntry(format!("the {} domain has no remote entries", self.id())))
    }

    /// True when a region mapped with `UCP_MEM_MAP_NONBLOCK` registers with this domain on its
    /// first use rather than in `mem_map`. Default: registers at once.
    fn defers_nonblocking(&self) -> bool {
        false
    }
}

/// A region registered with one domain. Dropping the last reference deregisters.
pub trait DomainRegistration: Send + Sync {
    /// The domain's entry for a packed remote key naming `[addr, addr + len)` of the region, or
    /// `None` when peers need none from this domain.
    fn remote_entry(&self, addr: usize, len: usize) -> Option<Vec<u8>>;

    /// The concrete registration, for the transport of this domain.
    fn as_any(&self) -> &dyn Any;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_their_domain() {
        assert_eq!(DomainId::SAME_HOST.to_string(), "same-host");
        assert_eq!(DomainId::DPDK.to_string(), "dpdk");
        assert_eq!(DomainId::VERBS.to_string(), "verbs");
        assert_eq!(DomainId(9).to_string(), "domain-9");
    }
}
