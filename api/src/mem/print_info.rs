//! `ucp_mem_print_info`: map memory as described by a spec string and describe the handle.

use std::fmt::Write as _;

use crate::context::Context;
use crate::mem::{MemMapParams, MemoryType};
use crate::status::{fail_with, Result, Status};

impl Context {
    /// `ucp_mem_print_info`: maps `"<size>[,<type>]"` (size with an optional k/m/g suffix, type
    /// `host`) and returns a description of the handle: length, page size, backing, shareability.
    /// A malformed spec → `INVALID_PARAM`; a type other than host → `UNSUPPORTED`.
    pub fn mem_print_info(&self, mem_spec: &str) -> Result<String> {
        let (size, mem_type) = parse_mem_spec(mem_spec)?;
        let memh = self.mem_map(&MemMapParams::alloc(size).memory_type(mem_type))?;
        let attr = memh.query();
        let mut out = String::new();
        let _ = writeln!(out, "#\n# UCP memory allocation (zcx)\n#");
        let _ = writeln!(
            out,
            "#  allocated {} bytes at {:p} of type {:?}",
            attr.length, attr.address, attr.mem_type
        );
        let page = memh.page_size().map_or_else(|| "n/a".to_owned(), |p| p.to_string());
        let _ = writeln!(out, "#  allocation method: memfd, page size {page}");
        let _ = writeln!(out, "#  same-host peers can map it (rkey_ptr, export): {}", memh.is_shareable());
        let _ = writeln!(out, "#  registration id: {:?}", memh.registration_id());
        let domains: Vec<String> = memh.registered_domains().iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "#  memory domains: {}", domains.join(", "));
        let _ = writeln!(out, "#  packed rkey: {} bytes", memh.rkey_pack()?.len());
        Ok(out)
    }
}

/// Parses `"<size>[,<type>]"`, e.g. `32768`, `1m`, `2g,host`.
fn parse_mem_spec(spec: &str) -> Result<(usize, MemoryType)> {
    let invalid =
        || fail_with(Status::InvalidParam, format!("bad memory spec {spec:?}: want <size>[,<type>]"));
    let (size, mem_type) = match spec.split_once(',') {
        Some((size, ty)) => (size.trim(), Some(ty.trim())),
        None => (spec.trim(), None),
    };
    let (digits, shift) = match size.char_indices().last() {
        Some((i, 'k' | 'K')) => (&size[..i], 10),
        Some((i, 'm' | 'M')) => (&size[..i], 20),
        Some((i, 'g' | 'G')) => (&size[..i], 30),
        _ => (size, 0),
    };
    let value: usize = digits.parse().map_err(|_| invalid())?;
    let size = value.checked_mul(1usize << shift).ok_or_else(invalid)?;
    let mem_type = match mem_type {
        None | Some("host") => MemoryType::Host,
        Some("cuda") => MemoryType::Cuda,
        Some("cuda-managed") => MemoryType::CudaManaged,
        Some("rocm") => MemoryType::Rocm,
        Some("rocm-managed") => MemoryType::RocmManaged,
        Some(_) => return Err(invalid()),
    };
    Ok((size, mem_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_specs() {
        assert_eq!(parse_mem_spec("32768"), Ok((32768, MemoryType::Host)));
        assert_eq!(parse_mem_spec("1m"), Ok((1 << 20, MemoryType::Host)));
        assert_eq!(parse_mem_spec("2G,host"), Ok((2 << 30, MemoryType::Host)));
        assert_eq!(parse_mem_spec("1m,cuda"), Ok((1 << 20, MemoryType::Cuda)));
        for bad in ["", "m", "1x", "-1", "1m,floppy", "99999999999999999999g"] {
            assert_eq!(parse_mem_spec(bad), Err(Status::InvalidParam), "{bad}");
        }
    }
}
