//! Run-time detection of the io_uring features the network transport relies on.

/// What this kernel's io_uring offers (the `io_uring_probe` of a throwaway ring).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringSupport {
    /// `io_uring_setup` works (not disabled by `kernel.io_uring_disabled` or a seccomp filter).
    pub available: bool,
    /// `IORING_OP_SEND_ZC`.
    pub send_zc: bool,
    /// `IORING_OP_RECV` (multishot receive needs it plus provided buffers).
    pub recv: bool,
    /// `IORING_OP_READ_FIXED` / `WRITE_FIXED` (registered buffers).
    pub fixed_buffers: bool,
}

/// Probes io_uring with an 8-entry ring; never fails, reports `available: false` instead.
pub fn probe_uring() -> UringSupport {
    let ring = match io_uring::IoUring::new(8) {
        Ok(ring) => ring,
        Err(err) => {
            tracing::debug!(%err, "io_uring unavailable");
            return UringSupport::default();
        }
    };
    let mut probe = io_uring::Probe::new();
    if let Err(err) = ring.submitter().register_probe(&mut probe) {
        tracing::debug!(%err, "io_uring probe failed");
        return UringSupport { available: true, ..UringSupport::default() };
    }
    UringSupport {
        available: true,
        send_zc: probe.is_supported(io_uring::opcode::SendZc::CODE),
        recv: probe.is_supported(io_uring::opcode::Recv::CODE),
        fixed_buffers: probe.is_supported(io_uring::opcode::ReadFixed::CODE)
            && probe.is_supported(io_uring::opcode::WriteFixed::CODE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reports_consistently() {
        let support = probe_uring();
        if !support.available {
            eprintln!("skipped: io_uring is not available on this kernel");
            return;
        }
        // Every kernel with io_uring has plain RECV since 5.6 and fixed buffers since 5.1.
        assert!(support.recv);
        assert!(support.fixed_buffers);
    }
}
