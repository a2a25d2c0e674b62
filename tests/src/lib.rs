//! Cross-crate integration tests of zcx live in `tests/tests/`: they check that the crates agree
//! with each other (what the API packs, the control plane decodes), and run zcx between processes
//! on two "hosts" — two network namespaces joined by a veth pair ([`netns`]). The VM harness joins
//! them as the transports arrive.

pub mod netns;
pub mod soak;
