//! Cross-crate integration tests of zcx live in `tests/tests/`: they check that the crates agree
//! with each other (what the API packs, the control plane decodes). The multi-process, network
//! namespace and VM harnesses join them as the endpoints and transports arrive.
