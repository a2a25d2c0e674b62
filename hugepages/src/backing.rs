//! What kind of object backs a mapping.

/// The object behind a mapping's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// Private anonymous memory (`MAP_PRIVATE | MAP_ANONYMOUS`), visible only to this process.
    Anonymous,
    /// A `memfd_create` file mapped `MAP_SHARED`, so processes on the same host
    /// can map the same pages through `/proc/<pid>/fd/<fd>` (see
    /// [`Mapping::from_memfd`](crate::Mapping::from_memfd)).
    Memfd,
}
