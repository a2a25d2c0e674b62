//! The worker's event fd: one epoll set over its signal eventfd and its transports' notifiers, so
//! the application waits on a single descriptor (as UCP's worker efd is an epoll set too).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::status::{fail_with, Result, Status};

/// An epoll set over `fds` and the transports' notifiers.
pub(super) fn epoll_set(fds: &[BorrowedFd<'_>], transports: &[BorrowedFd<'_>]) -> Result<OwnedFd> {
    // SAFETY: epoll_create1 has no memory effects; the result is checked.
    let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if raw < 0 {
        return Err(fail_with(
            Status::IoError,
            format!("epoll_create1: {}", std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
    for fd in fds.iter().chain(transports) {
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd.as_raw_fd() as u64 };
        // SAFETY: both descriptors are open; `event` is a valid epoll_event for the call.
        let rc =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) };
        if rc != 0 {
            return Err(fail_with(
                Status::IoError,
                format!("epoll_ctl: {}", std::io::Error::last_os_error()),
            ));
        }
    }
    Ok(epoll)
}

/// Blocks until `fd` is readable or `timeout` passes. EINTR counts as a wakeup.
pub(super) fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<()> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
        return Err(fail_with(Status::IoError, format!("poll: {}", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// Consumes a pending count on an eventfd without ever blocking, so a level-triggered epoll set
/// stops reporting it once the events behind it were processed.
pub(super) fn drain_eventfd(fd: BorrowedFd<'_>) {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
    if ready == 1 && pfd.revents & libc::POLLIN != 0 {
        let mut count = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64; the fd was just reported readable, so an
        // eventfd read returns at once.
        unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}
