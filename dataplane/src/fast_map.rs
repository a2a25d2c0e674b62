//! Hash maps for the dataplane's hot lookups (operation ids, links, tags).
//!
//! The standard `RandomState` (SipHash-1-3) costs more per `u64` lookup than the rest of a tag
//! match; these maps use foldhash, which is several times cheaper and still seeded per process,
//! so keys a peer chooses (tags) cannot be aimed at one bucket without knowing the seed.

/// A `HashMap` with the fast seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with the fast seeded hasher.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
