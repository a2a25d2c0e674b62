//! What the transport does when the submission queue has no free entry for a request.
//!
//! A request is never dropped: either it is queued, or the caller gets an error and fails what
//! the request was for (a link, a listener's accept). A full queue is normal (a poll may have more
//! requests than the queue holds): submitting frees its entries. Submitting can fail with
//! `EBUSY` while the completion queue is full (the kernel has nowhere to post), so between
//! attempts the completions are moved out of the kernel's queue into the transport's backlog,
//! which the next poll handles first. `EAGAIN` (the kernel is short of memory for now) and `EINTR`
//! are retried the same way. Any other error, or no room after [`SQ_FULL_ATTEMPTS`] rounds, is
//! returned.

use crate::transport::TlError;

/// Submit-and-reap rounds before a request that still finds no room is refused. Without a
/// kernel submission thread one successful submit empties the queue, so one or two rounds
/// suffice; the rest are for `EBUSY`, `EAGAIN` and a submission thread that is slow to catch up.
pub(super) const SQ_FULL_ATTEMPTS: u32 = 64;

/// The ring operations the retry needs, apart so that tests can script the kernel's answers.
pub(super) trait SubmissionRoom {
    /// Tries to queue the request; false while the queue is full.
    fn try_push(&mut self) -> bool;
    /// Hands the queued requests to the kernel (`io_uring_enter`).
    fn submit(&mut self) -> std::io::Result<usize>;
    /// Moves every posted completion out of the kernel's queue, to be handled later, so the
    /// kernel can post more (and stops answering `EBUSY`).
    fn reap(&mut self);
    /// Waits a little for room when a round freed none (a submission thread still consuming).
    fn wait_for_room(&mut self);
}

/// Queues a request that did not fit at the first try: submits, reaps and retries, at most
/// [`SQ_FULL_ATTEMPTS`] rounds. `Err` when the kernel refused the submission with an error other
/// than `EBUSY`, `EAGAIN` or `EINTR` (that error), or when no room was found
/// ([`TlError::NoResource`]); the request is then not queued.
#[cold]
pub(super) fn push_when_full(ring: &mut impl SubmissionRoom) -> Result<(), TlError> {
    for _ in 0..SQ_FULL_ATTEMPTS {
        let submitted = match ring.submit() {
            Ok(_) => true,
            Err(err) => match err.raw_os_error() {
                Some(libc::EBUSY | libc::EAGAIN | libc::EINTR) => false,
                errno => return Err(TlError::from_errno(errno.unwrap_or(libc::EIO))),
            },
        };
        ring.reap();
        if ring.try_push() {
            return Ok(());
        }
        if submitted {
            ring.wait_for_room();
        }
    }
    Err(TlError::NoResource)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted ring: `submit` answers from `answers` (then `Ok`), and the queue has room once
    /// a submit succeeded after the completion queue was reaped (`busy_until_reaped`) or at all.
    #[derive(Default)]
    struct Script {
        answers: Vec<i32>,
        busy_until_reaped: bool,
        reaped: bool,
        room: bool,
        submits: u32,
        reaps: u32,
        pushes: u32,
    }

    impl SubmissionRoom for Script {
        fn try_push(&mut self) -> bool {
            self.pushes += 1;
            self.room
        }
        fn submit(&mut self) -> std::io::Result<usize> {
            self.submits += 1;
            if !self.answers.is_empty() {
                return Err(std::io::Error::from_raw_os_error(self.answers.remove(0)));
            }
            if self.busy_until_reaped && !self.reaped {
                return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
            }
            self.room = true;
            Ok(8)
        }
        fn reap(&mut self) {
            self.reaps += 1;
            self.reaped = true;
        }
        fn wait_for_room(&mut self) {}
    }

    #[test]
    fn a_full_queue_is_submitted_then_the_request_queued() {
        let mut ring = Script::default();
        assert_eq!(push_when_full(&mut ring), Ok(()));
        assert_eq!((ring.submits, ring.pushes), (1, 1));
    }

    #[test]
    fn ebusy_reaps_completions_before_retrying() {
        let mut ring = Script { busy_until_reaped: true, ..Script::default() };
        assert_eq!(push_when_full(&mut ring), Ok(()));
        // The first submit was refused; the reap after it made the second one succeed.
        assert_eq!(ring.submits, 2);
        assert!(ring.reaps >= 1);
    }

    #[test]
    fn eagain_and_eintr_are_retried() {
        let mut ring = Script { answers: vec![libc::EAGAIN, libc::EINTR, libc::EBUSY], ..Script::default() };
        assert_eq!(push_when_full(&mut ring), Ok(()));
        assert_eq!(ring.submits, 4);
    }

    #[test]
    fn other_submit_errors_are_returned_not_swallowed() {
        let mut ring = Script { answers: vec![libc::EBADF], ..Script::default() };
        assert_eq!(push_when_full(&mut ring), Err(TlError::Os(libc::EBADF)));
        assert_eq!(ring.pushes, 0, "nothing is queued after a refused submit");
    }

    #[test]
    fn a_kernel_that_stays_busy_is_given_up_on() {
        let mut ring = Script { answers: vec![libc::EBUSY; 1000], ..Script::default() };
        assert_eq!(push_when_full(&mut ring), Err(TlError::NoResource));
        assert_eq!(ring.submits, SQ_FULL_ATTEMPTS);
        assert_eq!(ring.reaps, SQ_FULL_ATTEMPTS, "every refused round drains the completions");
    }
}
