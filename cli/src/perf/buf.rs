//! The buffers a test sends from and receives into: registered up front (`mem_map`'d slices,
//! what a zero-copy application does) or plain heap `Vec`s (what a naive one does), chosen by
//! `--mem-prereg`.

use std::sync::Arc;

use zcx::{MemHandle, MemSlice, RecvBuf, SendBuf};

use crate::perf::args::MemMode;
use crate::perf::session::Session;

/// The largest put the put tests make implicit (`put_nbi`, the buffer free again at once, as
/// `ucx_perftest` reuses its one buffer); larger ones are zero-copy requests from registered
/// buffers, which an implicit put would copy.
pub const IMPLICIT_PUT_MAX: usize = 16 << 10;

/// A heap or a registered buffer, as one type so the tests are written once.
pub enum PerfBuf {
    /// A heap buffer.
    Heap(Vec<u8>),
    /// A slice of a `mem_map`'d region, with the region's handle: the region stays mapped (and
    /// open to the peer, as `ucx_perftest`'s buffers are) while any of its buffers is in use.
    Reg { slice: MemSlice, _region: Arc<MemHandle> },
}

impl PerfBuf {
    /// The buffer's bytes.
    pub fn bytes(&self) -> &[u8] {
        SendBuf::as_bytes(self)
    }

    /// The buffer's bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        RecvBuf::as_mut_bytes(self)
    }
}

// SAFETY: both variants satisfy the contract on their own (a Vec's heap block and a slice's
// mapping do not move with the value), and the enum only forwards to them.
unsafe impl SendBuf for PerfBuf {
    fn as_bytes(&self) -> &[u8] {
        match self {
            PerfBuf::Heap(v) => v.as_bytes(),
            PerfBuf::Reg { slice, .. } => slice.as_bytes(),
        }
    }
}

// SAFETY: as for `SendBuf` above.
unsafe impl RecvBuf for PerfBuf {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        match self {
            PerfBuf::Heap(v) => v.as_mut_bytes(),
            PerfBuf::Reg { slice, .. } => slice.as_mut_bytes(),
        }
    }
}

/// `count` buffers of `size` bytes, each filled with `fill`. Registered buffers are slices of one
/// region: `distinct` ones do not overlap (needed when each holds a different message, as with
/// `--validate`); otherwise they all share the region's first `size` bytes, like `ucx_perftest`'s
/// single buffer, so a window of 1 MiB messages does not measure a working set larger than the
/// caches.
pub fn pool(
    s: &Session,
    mode: MemMode,
    count: usize,
    size: usize,
    distinct: bool,
    fill: u8,
) -> Result<Vec<PerfBuf>, String> {
    match mode {
        MemMode::Heap => Ok((0..count).map(|_| PerfBuf::Heap(vec![fill; size])).collect()),
        MemMode::Prereg => {
            let slots = if distinct { count } else { 1 };
            let region = Arc::new(s.remote_region(slots * size)?);
            // SAFETY: the region is mapped read-write for its whole length and nobody else has
            // its key yet.
            unsafe { std::ptr::write_bytes(region.address(), fill, region.length()) };
            (0..count)
                .map(|i| {
                    let offset = if distinct { i * size } else { 0 };
                    region
                        .slice(offset, size)
                        .map(|slice| PerfBuf::Reg { slice, _region: Arc::clone(&region) })
                        .map_err(|st| format!("cannot slice the region: {st}"))
                })
                .collect()
        }
    }
}
