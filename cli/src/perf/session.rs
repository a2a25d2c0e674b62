//! A connected benchmark endpoint: busy-poll waits with a timeout, the control messages both
//! sides exchange around the tests, and remote-key exchange.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx::{
    Completion, Context, Endpoint, EpRkey, Features, MemHandle, MemMapParams, Prot, Request, RequestParams,
    TagSendParams, Worker, WorkerParams,
};

/// Control messages (test specs, `ready`, `end`, `done`).
pub const TAG_CTRL: u64 = 0x7a63_7870_0000_0001;
/// Packed remote keys.
pub const TAG_RKEY: u64 = 0x7a63_7870_0000_0002;
/// Benchmark payload.
pub const TAG_DATA: u64 = 0x7a63_7870_0000_0010;
/// "All of a bandwidth phase arrived".
pub const TAG_ACK: u64 = 0x7a63_7870_0000_0011;
/// Active message id of the client's messages.
pub const AM_PING: u16 = 0x21;
/// Active message id of the server's replies.
pub const AM_PONG: u16 = 0x22;

/// Largest control message (a packed remote key is far smaller).
const CTRL_MAX: usize = 64 << 10;
/// Polls between two looks at the clock.
const CLOCK_EVERY: u32 = 1 << 12;

/// The context every side of `zcx perf` uses.
pub fn context() -> Result<Context, String> {
    Context::with_features(
        Features::TAG | Features::RMA | Features::AM | Features::STREAM | Features::AMO32 | Features::AMO64,
    )
    .map_err(|s| match std::env::var("ZCX_TLS") {
        Ok(tls) => format!("cannot create the context with ZCX_TLS={tls:?}: {}", detailed(s)),
        Err(_) => format!("cannot create the context: {}", detailed(s)),
    })
}

/// A worker driven by busy-polling from the calling thread (no progress thread).
pub fn worker(ctx: &Context, name: &str) -> Result<Worker, String> {
    ctx.create_worker(&WorkerParams { name: Some(name.into()), ..WorkerParams::default() })
        .map_err(|s| format!("cannot create the worker: {}", detailed(s)))
}

/// A status with zcx's explanation of it, when there is one.
pub fn detailed(status: zcx::Status) -> String {
    match zcx::last_error_detail() {
        Some(detail) => format!("{status} ({detail})"),
        None => status.to_string(),
    }
}

/// One side of a benchmark connection.
pub struct Session {
    pub ctx: Context,
    pub worker: Worker,
    pub ep: Endpoint,
    /// Set by the endpoint's error handler when the peer is gone.
    pub peer_failed: Arc<AtomicBool>,
    pub timeout: Duration,
}

impl Session {
    /// Progresses until `done` holds; fails after the timeout or when the peer failed.
    pub fn poll_until(&self, what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
        let mut deadline = None;
        let mut spins = 0u32;
        while !done() {
            self.worker.progress();
            spins += 1;
            if spins == CLOCK_EVERY {
                spins = 0;
                self.check(what, &mut deadline)?;
            }
        }
        Ok(())
    }

    /// Progresses until `request` completes and returns its completion.
    // Inline, with the progress loop out of line: an operation that completed when it was issued
    // (a direct get, an atomic on mapped memory) is then taken apart where it was made, without
    // its request passing through memory.
    #[inline]
    pub fn wait<B: Send + 'static>(&self, request: Request<B>, what: &str) -> Result<Completion<B>, String> {
        match request.try_take() {
            Ok(Ok(completion)) => Ok(completion),
            Ok(Err(status)) => Err(failed(what, status)),
            Err(request) => self.wait_pending(request, what),
        }
    }

    /// [`Session::wait`] of a request still in progress.
    #[inline(never)]
    fn wait_pending<B: Send + 'static>(
        &self,
        request: Request<B>,
        what: &str,
    ) -> Result<Completion<B>, String> {
        let mut request = request;
        let mut deadline = None;
        let mut spins = 0u32;
        loop {
            request = match request.try_take() {
                Ok(result) => return result.map_err(|s| failed(what, s)),
                Err(request) => request,
            };
            self.worker.progress();
            spins += 1;
            if spins == CLOCK_EVERY {
                spins = 0;
                self.check(what, &mut deadline)?;
            }
        }
    }

    fn check(&self, what: &str, deadline: &mut Option<Instant>) -> Result<(), String> {
        if self.peer_failed.load(Ordering::Relaxed) {
            return Err(format!("the peer failed while waiting for {what}"));
        }
        let now = Instant::now();
        match *deadline {
            None => *deadline = Some(now + self.timeout),
            Some(limit) if now > limit => {
                return Err(format!("timed out after {} s waiting for {what}", self.timeout.as_secs()))
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Posts a receive of one control message (or remote key) with `tag`.
    pub fn post_ctrl(&self, tag: u64) -> Result<Request<Vec<u8>>, String> {
        self.worker
            .tag_recv(vec![0u8; CTRL_MAX], tag, u64::MAX, RequestParams::default())
            .map_err(|s| format!("cannot post a control receive: {}", detailed(s)))
    }

    /// Waits for a receive posted by [`Session::post_ctrl`] and returns the message.
    pub fn take_ctrl(&self, request: Request<Vec<u8>>, what: &str) -> Result<Vec<u8>, String> {
        let done = self.wait(request, what)?;
        let mut bytes = done.buf;
        bytes.truncate(done.info.length);
        Ok(bytes)
    }

    /// Receives one control message with `tag`.
    pub fn recv_ctrl(&self, tag: u64, what: &str) -> Result<Vec<u8>, String> {
        let request = self.post_ctrl(tag)?;
        self.take_ctrl(request, what)
    }

    /// Sends one control message and waits until it left.
    pub fn send_ctrl(&self, tag: u64, bytes: &[u8]) -> Result<(), String> {
        let request = self
            .ep
            .tag_send(bytes.to_vec(), tag, TagSendParams::default())
            .map_err(|s| format!("cannot send a control message: {}", detailed(s)))?;
        self.wait(request, "a control message to leave").map(drop)
    }

    /// Receives a control message that must be `expected`.
    pub fn expect_ctrl(&self, expected: &str) -> Result<(), String> {
        let got = self.recv_ctrl(TAG_CTRL, &format!("the peer's {expected:?}"))?;
        if got != expected.as_bytes() {
            return Err(format!(
                "expected {expected:?} from the peer, got {:?}",
                String::from_utf8_lossy(&got)
            ));
        }
        Ok(())
    }

    /// Maps `len` bytes the peer may read and write (at least 8, zeroed).
    pub fn remote_region(&self, len: usize) -> Result<MemHandle, String> {
        let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ | Prot::REMOTE_WRITE;
        let memh = self
            .ctx
            .mem_map(&MemMapParams::alloc(len.max(8)).prot(prot))
            .map_err(|s| format!("cannot map {len} bytes: {}", detailed(s)))?;
        // SAFETY: the handle's bytes are mapped read-write and nobody else has its key yet.
        unsafe { std::ptr::write_bytes(memh.address(), 0, memh.length()) };
        Ok(memh)
    }

    /// Sends the key of `memh` to the peer and unpacks the peer's: returns the peer's key and the
    /// address of its region.
    pub fn exchange_rkeys(&self, memh: &MemHandle) -> Result<(EpRkey, u64), String> {
        let theirs = self.post_ctrl(TAG_RKEY)?;
        let packed = memh.rkey_pack().map_err(|s| format!("cannot pack the remote key: {}", detailed(s)))?;
        self.send_ctrl(TAG_RKEY, packed.as_bytes())?;
        let bytes = self.take_ctrl(theirs, "the peer's remote key")?;
        let rkey = self
            .ep
            .rkey_unpack(&bytes)
            .map_err(|s| format!("cannot unpack the peer's key: {}", detailed(s)))?;
        let base = rkey.remote_key().base();
        Ok((rkey, base))
    }
}

/// The error of a failed operation `what`.
#[cold]
#[inline(never)]
fn failed(what: &str, status: zcx::Status) -> String {
    format!("{what} failed: {}", detailed(status))
}
