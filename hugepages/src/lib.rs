//! Hugepage-backed memory for zcx: anonymous and memfd mappings with explicit
//! page-size policy, placement, populate, pinning and NUMA binding; and CPU
//! pinning ([`CpuSet`], [`pin_current_thread`]) for dedicated polling cores.
//!
//! The entry point is [`Mapping::new`], configured by [`MapOptions`]:
//!
//! * [`PagePolicy`] says whether huge pages are required, preferred (falling
//!   back to base pages with transparent-hugepage advice, reported honestly by
//!   [`Mapping::page_size`] and [`Mapping::thp_advised`]) or unwanted.
//! * [`Backing::Memfd`] produces memory that same-host peers can map through
//!   `/proc/<pid>/fd/<fd>` and [`Mapping::from_memfd`].
//! * [`Placement`] places the region anywhere, near a hint, or at a fixed
//!   address without ever replacing an existing mapping.
//! * [`Populate`], `lock` and `numa_node` control when pages are faulted in,
//!   whether they are pinned, and which node they come from.
//!
//! The free functions report the environment: hugetlb [`pools`],
//! [`memlock_limit`], [`has_cap_ipc_lock`], and [`smaps_for`], which shows what
//! the kernel actually put behind an address.
//!
//! ```no_run
//! use zcx_hugepages::{Backing, MapOptions, Mapping, PagePolicy, PageSize};
//!
//! # fn main() -> Result<(), zcx_hugepages::Error> {
//! let ring = Mapping::new(&MapOptions {
//!     len: 16 << 20,
//!     page_policy: PagePolicy::Prefer(PageSize::Huge2M),
//!     backing: Backing::Memfd,
//!     name: "rx-ring",
//!     ..MapOptions::default()
//! })?;
//! println!("{} bytes at {:#x} on {} pages", ring.mapped_len(), ring.addr(), ring.page_size());
//! if let Some(vma) = zcx_hugepages::smaps_for(ring.addr()) {
//!     assert_eq!(vma.kernel_page_size, ring.page_size().bytes());
//! }
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod backing;
mod cpu;
mod error;
mod mapping;
mod memfd;
mod memlock;
mod numa;
mod options;
mod page_policy;
mod page_size;
mod placement;
mod pools;
mod populate;
mod smaps;
mod thp;
mod units;

pub use backing::Backing;
pub use cpu::{current_affinity, current_cpu, pin_current_thread, CpuError, CpuSet, MAX_CPUS};
pub use error::Error;
pub use mapping::Mapping;
pub use memlock::{has_cap_ipc_lock, memlock_limit};
pub use options::MapOptions;
pub use page_policy::PagePolicy;
pub use page_size::{base_page_size, PageSize};
pub use placement::Placement;
pub use pools::{free_pages, pool, pools, PoolInfo};
pub use populate::Populate;
pub use smaps::{smaps_for, SmapsEntry};
