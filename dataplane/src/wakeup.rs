//! The wakeup file descriptor behind `ucp_worker_get_efd` / `_arm` / `_wait` / `_signal`.
//!
//! One non-blocking eventfd per worker. `signal` (from any thread) adds to its counter, so any
//! number of signals before the next drain coalesce into one wakeup; transports that can notify
//! (an io_uring completion eventfd, a socket) are polled beside it by the worker. `drain` consumes
//! pending signals and says whether there were any — what `arm` needs to return `BUSY`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A worker's wakeup eventfd.
#[derive(Debug)]
pub struct Wakeup {
    efd: OwnedFd,
}

impl Wakeup {
    /// A new, unsignalled wakeup fd (`EFD_NONBLOCK | EFD_CLOEXEC`).
    pub fn new() -> io::Result<Wakeup> {
        // SAFETY: eventfd has no memory effects; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        Ok(Wakeup { efd: unsafe { OwnedFd::from_raw_fd(raw) } })
    }

    /// `ucp_worker_signal`: wakes a waiter, now or at its next wait. Safe from any thread;
    /// signals coalesce until drained.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        let n = unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        // EAGAIN means the counter is saturated: a wakeup is already pending, which is all a
        // signal promises.
        debug_assert!(n == 8 || io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock);
    }

    /// Consumes every pending signal; true if there was at least one.
    pub fn drain(&self) -> bool {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        let n = unsafe { libc::read(self.efd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        n == 8 && count > 0
    }

    /// Blocks until the fd is readable (a signal is pending) or `timeout` passes; true if
    /// signalled. Does not consume the signal.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfd = libc::pollfd { fd: self.efd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let timeout_ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        loop {
            // SAFETY: `pfd` is one valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if rc >= 0 {
                return Ok(rc > 0 && pfd.revents & libc::POLLIN != 0);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

impl AsFd for Wakeup {
    /// `ucp_worker_get_efd`: the fd to add to an epoll set or poll.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.efd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn unsignalled_wait_times_out_and_drain_finds_nothing() {
        let w = Wakeup::new().unwrap();
        assert!(!w.drain());
        assert!(!w.wait(Some(Duration::from_millis(20))).unwrap());
    }

    #[test]
    fn signals_coalesce_and_drain_consumes_them() {
        let w = Wakeup::new().unwrap();
        w.signal();
        w.signal();
        assert!(w.wait(Some(Duration::ZERO)).unwrap());
        assert!(w.drain(), "two signals, one wakeup");
        assert!(!w.drain(), "both were consumed by one drain");
        assert!(!w.wait(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn signal_from_another_thread_wakes_a_blocked_waiter() {
        let w = Arc::new(Wakeup::new().unwrap());
        let signaller = Arc::clone(&w);
        let start = Instant::now();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            signaller.signal();
        });
        assert!(w.wait(Some(Duration::from_secs(10))).unwrap());
        assert!(start.elapsed() < Duration::from_secs(10));
        t.join().unwrap();
        assert!(w.drain());
    }

    #[test]
    fn the_fd_is_pollable_by_the_caller() {
        let w = Wakeup::new().unwrap();
        w.signal();
        let mut pfd = libc::pollfd { fd: w.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
    }
}
