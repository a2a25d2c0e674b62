//! UCP memory routines: `ucp_mem_map`, `_unmap`, `_query`, `_advise`, `ucp_memh_pack`, `ucp_rkey_pack`.

mod handle;
mod help_sources;
mod locator;
mod map;
mod params;
mod print_info;
mod registration;

pub use handle::{MemAdvice, MemAdviseParams, MemAttr, MemHandle, MemhPackFlags, PackedBuffer};
pub use params::{MemMapFlags, MemMapParams, MemoryType, Prot};

pub(crate) use help_sources::HelpSources;
pub(crate) use locator::map_peer_memfd;
pub(crate) use registration::{Allocation, Registration};
