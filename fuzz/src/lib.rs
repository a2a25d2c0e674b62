//! Helpers shared by the fuzz targets in `fuzz_targets/` and the seed generator in `examples/`.
//!
//! - [`frame`]: an independent reading of the zcx-control frame layout (so the targets check the
//!   library against the documented format, not against itself), its canonical form, and the
//!   fix-ups that let the fuzzer get past length fields and checksums.
//! - [`gen`]: structured control messages built from fuzzer bytes, biased towards valid ones.

pub mod control;
pub mod frame;
pub mod gen;

/// Runs `f` over a [`arbitrary::Unstructured`] of `data`, ignoring running out of bytes (the
/// fuzzer then simply tries longer inputs).
pub fn with_unstructured(
    data: &[u8],
    f: impl FnOnce(&mut arbitrary::Unstructured<'_>) -> arbitrary::Result<()>,
) {
    let mut u = arbitrary::Unstructured::new(data);
    let _ = f(&mut u);
}
