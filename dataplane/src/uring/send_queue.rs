//! A link's outgoing byte queue: frames waiting to be sent, and the batch the kernel is sending.
//!
//! Two batches alternate. `pending` collects frames (`send` appends here); `inflight` is frozen
//! while a send request refers to it, so appends never move bytes the kernel reads. When the
//! in-flight batch is fully sent (and, for zero-copy sends, the kernel has released its pages),
//! the batches swap and everything pending goes out in one `sendmsg` with an iovec array.
//! Buffers and arrays keep their capacity: no allocation in the steady state.

use super::framing;

/// Most iovecs passed to one `sendmsg` (`IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Copied bytes keep this much capacity between bursts; more is given back.
const KEEP_CAPACITY: usize = 4 << 20;

#[derive(Clone, Copy, Debug)]
enum Seg {
    /// `len` bytes at `off` in the batch's copy buffer.
    Copy { off: usize, len: usize },
    /// Caller memory, reported with `SendDone { token }`.
    Zcopy { ptr: *const u8, len: usize, token: u64 },
}

impl Seg {
    fn len(&self) -> usize {
        match *self {
            Seg::Copy { len, .. } | Seg::Zcopy { len, .. } => len,
        }
    }
}

#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    segs: Vec<Seg>,
    /// Largest zero-copy segment, to pick SENDMSG_ZC.
    max_zcopy: usize,
}

impl Batch {
    fn clear(&mut self) {
        // Give memory back only once traffic has calmed down: shrinking after every large batch
        // would make the next one reallocate and fault its pages in again, which costs more than
        // the copy itself when streaming.
        if self.buf.capacity() > KEEP_CAPACITY && self.buf.len() < self.buf.capacity() / 8 {
            self.buf.shrink_to(KEEP_CAPACITY);
        }
        self.buf.clear();
        self.segs.clear();
        self.max_zcopy = 0;
    }

    fn append_copy(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let off = self.buf.len();
        self.buf.extend_from_slice(bytes);
        match self.segs.last_mut() {
            Some(Seg::Copy { len, .. }) => *len += bytes.len(),
            _ => self.segs.push(Seg::Copy { off, len: bytes.len() }),
        }
    }
}

/// The outgoing queue of one link. Lives in a `Box` so the `msghdr` keeps its address while the
/// kernel may read it.
pub struct SendQueue {
    pending: Batch,
    inflight: Batch,
    /// Progress inside `inflight`: segment index and offset in it.
    cur_seg: usize,
    cur_off: usize,
    /// A send request for `inflight` is queued or running.
    pub submitted: bool,
    /// Zero-copy notifications still owed by the kernel for `inflight`.
    pub zc_notifs: u32,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
}

// SAFETY: the raw pointers (zero-copy payloads, the iovec array and msghdr pointing into this
// value) are only dereferenced by the kernel on behalf of the single owner of the transport.
unsafe impl Send for SendQueue {}

impl SendQueue {
    /// An empty queue.
    pub fn new() -> Box<SendQueue> {
        Box::new(SendQueue {
            pending: Batch::default(),
            inflight: Batch::default(),
            cur_seg: 0,
            cur_off: 0,
            submitted: false,
            zc_notifs: 0,
            iov: Vec::new(),
            // SAFETY: msghdr is plain old data; all-zero is an empty message.
            msg: unsafe { std::mem::zeroed() },
        })
    }

    /// Copied bytes held (pending and in flight), for the per-link cap.
    pub fn copied_bytes(&self) -> usize {
        self.pending.buf.len() + self.inflight.buf.len()
    }

    /// Appends one frame: length prefix, header, then the payload (copied, or referenced when
    /// `zcopy` is given).
    pub fn push(
        &mut self,
        prefix: &[u8; framing::PREFIX_LEN],
        header: &[u8],
        copy: &[u8],
        zcopy: Option<(*const u8, usize, u64)>,
    ) {
        self.pending.append_copy(prefix);
        self.pending.append_copy(header);
        self.pending.append_copy(copy);
        if let Some((ptr, len, token)) = zcopy {
            self.pending.segs.push(Seg::Zcopy { ptr, len, token });
            self.pending.max_zcopy = self.pending.max_zcopy.max(len);
        }
    }

    /// Appends what is left of a frame of which the first `sent` bytes (length prefix, header,
    /// then the payload) already went out directly. The payload is `copy`, or the memory of
    /// `zcopy`, whose rest is then referenced rather than copied.
    pub fn push_rest(
        &mut self,
        prefix: &[u8; framing::PREFIX_LEN],
        header: &[u8],
        copy: &[u8],
        zcopy: Option<(*const u8, usize, u64)>,
        mut sent: usize,
    ) {
        for part in [&prefix[..], header, copy] {
            let skip = sent.min(part.len());
            sent -= skip;
            self.pending.append_copy(&part[skip..]);
        }
        if let Some((ptr, len, token)) = zcopy {
            let skip = sent.min(len);
            // SAFETY: `skip <= len`, so the pointer stays inside (or one past) the payload.
            let ptr = unsafe { ptr.add(skip) };
            self.pending.segs.push(Seg::Zcopy { ptr, len: len - skip, token });
            self.pending.max_zcopy = self.pending.max_zcopy.max(len - skip);
        }
    }

    /// True when nothing is queued or in flight.
    pub fn is_idle(&self) -> bool {
        !self.submitted
            && self.zc_notifs == 0
            && self.inflight.segs.is_empty()
            && self.pending.segs.is_empty()
    }

    /// True when the in-flight batch has bytes left to send and no request is out for them.
    fn inflight_has_rest(&self) -> bool {
        self.cur_seg < self.inflight.segs.len()
    }

    /// True when the in-flight batch is sent and released: its tokens can be reported.
    pub fn inflight_finished(&self) -> bool {
        !self.submitted && self.zc_notifs == 0 && !self.inflight_has_rest() && !self.inflight.segs.is_empty()
    }

    /// Calls `f` with the token of every zero-copy payload of the finished in-flight batch, then
    /// empties it.
    pub fn finish_inflight(&mut self, f: &mut dyn FnMut(u64)) {
        for seg in &self.inflight.segs {
            if let Seg::Zcopy { token, .. } = *seg {
                f(token);
            }
        }
        self.inflight.clear();
        self.cur_seg = 0;
        self.cur_off = 0;
    }

    /// Calls `f` with the token of every zero-copy payload still held (in flight or pending)
    /// and drops everything: the link is gone.
    pub fn drain_tokens(&mut self, f: &mut dyn FnMut(u64)) {
        for seg in self.inflight.segs.iter().chain(self.pending.segs.iter()) {
            if let Seg::Zcopy { token, .. } = *seg {
                f(token);
            }
        }
        self.inflight.clear();
        self.pending.clear();
        self.cur_seg = 0;
        self.cur_off = 0;
    }

    /// Prepares the next send request when none is out: the rest of the in-flight batch, else
    /// the pending batch. Returns the `msghdr` to send and the largest zero-copy payload in it,
    /// or `None` when there is nothing to send now.
    pub fn next_msg(&mut self) -> Option<(*const libc::msghdr, usize)> {
        if self.submitted || self.zc_notifs > 0 {
            return None;
        }
        if !self.inflight_has_rest() {
            if !self.inflight.segs.is_empty() || self.pending.segs.is_empty() {
                // Tokens of the finished batch must be reported first, or nothing is pending.
                return None;
            }
            std::mem::swap(&mut self.inflight, &mut self.pending);
            self.cur_seg = 0;
            self.cur_off = 0;
            self.skip_empty();
            if !self.inflight_has_rest() {
                // Only empty zero-copy payloads: nothing to put on the wire.
                return None;
            }
        }
        self.iov.clear();
        for (i, seg) in self.inflight.segs[self.cur_seg..].iter().enumerate() {
            if self.iov.len() == IOV_MAX {
                break;
            }
            let skip = if i == 0 { self.cur_off } else { 0 };
            let (base, len) = match *seg {
                Seg::Copy { off, len } => {
                    // SAFETY: `off + len <= buf.len()`, so the pointer stays inside the buffer.
                    (unsafe { self.inflight.buf.as_ptr().add(off) }, len)
                }
                Seg::Zcopy { ptr, len, .. } => (ptr, len),
            };
            if len == skip {
                continue;
            }
            // SAFETY: `skip < len`, so the pointer stays inside the segment.
            let base = unsafe { base.add(skip) };
            self.iov.push(libc::iovec { iov_base: base as *mut libc::c_void, iov_len: len - skip });
        }
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.iov.len() as _;
        self.submitted = true;
        Some((&self.msg as *const libc::msghdr, self.inflight.max_zcopy))
    }

    fn skip_empty(&mut self) {
        while self.cur_seg < self.inflight.segs.len()
            && self.inflight.segs[self.cur_seg].len() == self.cur_off
        {
            self.cur_seg += 1;
            self.cur_off = 0;
        }
    }

    /// The send request completed having sent `sent` bytes.
    pub fn complete(&mut self, mut sent: usize) {
        self.submitted = false;
        while sent > 0 && self.cur_seg < self.inflight.segs.len() {
            let left = self.inflight.segs[self.cur_seg].len() - self.cur_off;
            let take = left.min(sent);
            self.cur_off += take;
            sent -= take;
            self.skip_empty();
        }
        self.skip_empty();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gather(q: &SendQueue, msg: *const libc::msghdr) -> Vec<u8> {
        let _ = q;
        let mut out = Vec::new();
        // SAFETY: the message and its iovecs live in `q`, unchanged since `next_msg`.
        unsafe {
            let msg = &*msg;
            for i in 0..msg.msg_iovlen {
                let iov = &*msg.msg_iov.add(i);
                out.extend_from_slice(std::slice::from_raw_parts(iov.iov_base as *const u8, iov.iov_len));
            }
        }
        out
    }

    #[test]
    fn batches_frames_and_resumes_short_sends() {
        let zc = vec![7u8; 10];
        let mut q = SendQueue::new();
        q.push(&framing::prefix(4), b"ab", b"cd", None);
        q.push(&framing::prefix(1 + zc.len()), b"h", &[], Some((zc.as_ptr(), zc.len(), 42)));
        let mut expect = Vec::new();
        expect.extend_from_slice(&framing::prefix(4));
        expect.extend_from_slice(b"abcd");
        expect.extend_from_slice(&framing::prefix(11));
        expect.extend_from_slice(b"h");
        expect.extend_from_slice(&zc);
        let (msg, max_zc) = q.next_msg().unwrap();
        assert_eq!(max_zc, 10);
        assert_eq!(gather(&q, msg), expect);
        assert!(q.next_msg().is_none());
        q.push(&framing::prefix(1), b"x", &[], None);
        q.complete(5);
        let (msg, _) = q.next_msg().unwrap();
        assert_eq!(gather(&q, msg), expect[5..]);
        q.complete(expect.len() - 5);
        assert!(q.inflight_finished());
        let mut tokens = Vec::new();
        q.finish_inflight(&mut |t| tokens.push(t));
        assert_eq!(tokens, [42]);
        let (msg, _) = q.next_msg().unwrap();
        assert_eq!(gather(&q, msg), [1, 0, 0, 0, b'x']);
        q.complete(5);
        q.finish_inflight(&mut |_| panic!("no token"));
        assert!(q.is_idle());
    }
}
