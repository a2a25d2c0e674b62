//! The Unix side of an shm link: abstract `SOCK_SEQPACKET` sockets, the hello message and the
//! segment descriptor passed with `SCM_RIGHTS`.
//!
//! The socket stays open for the life of the link: its end-of-file is how each side learns that
//! the other closed the link or died, and a byte on it wakes a peer that sleeps on its event fd.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::ring::valid_capacity;
use super::segment::{segment_len, SEGMENT_MAGIC, SEGMENT_VERSION};

/// Bytes of an encoded [`Hello`].
pub const HELLO_LEN: usize = 32;

/// What the connector sends with the segment descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Capacity of each ring.
    pub capacity: u64,
    /// Length of the segment (its memfd's size).
    pub segment_len: u64,
    /// Largest frame the connector sends.
    pub max_frame: u32,
}

/// Why a hello was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// Not exactly [`HELLO_LEN`] bytes.
    Length,
    /// Wrong magic or version.
    Magic,
    /// Sizes out of range or inconsistent.
    Sizes,
}

impl Hello {
    /// The wire form: magic u64, version u32, max_frame u32, capacity u64, segment length u64
    /// (little endian).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.max_frame.to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..32].copy_from_slice(&self.segment_len.to_le_bytes());
        b
    }

    /// Decodes and checks a hello from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Hello, HelloError> {
        let b: &[u8; HELLO_LEN] = bytes.try_into().map_err(|_| HelloError::Length)?;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        if u64_at(0) != SEGMENT_MAGIC || u32_at(8) != SEGMENT_VERSION {
            return Err(HelloError::Magic);
        }
        let hello = Hello { max_frame: u32_at(12), capacity: u64_at(16), segment_len: u64_at(24) };
        let cap = usize::try_from(hello.capacity).map_err(|_| HelloError::Sizes)?;
        if !valid_capacity(cap) || hello.segment_len < segment_len(cap) as u64 {
            return Err(HelloError::Sizes);
        }
        Ok(hello)
    }
}

use crate::os_error::last_errno as errno;

/// An abstract socket address for `name` (no leading NUL in `name`).
fn abstract_addr(name: &[u8]) -> Result<(libc::sockaddr_un, libc::socklen_t), i32> {
    // SAFETY: sockaddr_un is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if name.is_empty() || name.len() + 1 > addr.sun_path.len() {
        return Err(libc::EINVAL);
    }
    for (i, &b) in name.iter().enumerate() {
        addr.sun_path[i + 1] = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((addr, len as libc::socklen_t))
}

fn seqpacket() -> Result<OwnedFd, i32> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0)
    };
    if raw < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds and listens on the abstract socket `name`.
pub fn listen(name: &[u8]) -> Result<OwnedFd, i32> {
    let fd = seqpacket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } != 0 {
        return Err(errno());
    }
    // SAFETY: listen on our socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        return Err(errno());
    }
    Ok(fd)
}

/// Connects to the abstract socket `name` (a Unix connect completes at once or fails).
pub fn connect(name: &[u8]) -> Result<OwnedFd, i32> {
    let fd = seqpacket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } != 0 {
        return Err(errno());
    }
    Ok(fd)
}

/// Accepts one connection; `Ok(None)` when none is waiting.
pub fn accept(listener: RawFd) -> Result<Option<OwnedFd>, i32> {
    // SAFETY: accept4 without a peer address; the result is checked.
    let raw = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if raw < 0 {
        let e = errno();
        return if e == libc::EAGAIN || e == libc::EINTR { Ok(None) } else { Err(e) };
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// The pid of the process at the other end (`SO_PEERCRED`, vouched for by the kernel).
pub fn peer_pid(fd: RawFd) -> Option<libc::pid_t> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred we own, with its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0 && cred.pid > 0).then_some(cred.pid)
}

/// Room for the control message of up to four descriptors (more is refused by truncation).
const CMSG_SPACE: usize = 64;

#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// Sends `bytes` with `fd` attached (`SCM_RIGHTS`), as one packet.
pub fn send_with_fd(sock: RawFd, bytes: &[u8], fd: RawFd) -> Result<(), i32> {
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: `msg` points at our control buffer, large and aligned enough for one descriptor;
    // CMSG_FIRSTHDR returns its start, and the data write stays inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
    }
    // SAFETY: `msg` and everything it points at live across the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(errno());
    }
    if n as usize != bytes.len() {
        return Err(libc::EMSGSIZE);
    }
    Ok(())
}

/// What one `recvmsg` of a hello brought.
#[derive(Debug)]
pub enum Received {
    /// Nothing yet.
    Nothing,
    /// The peer closed.
    Eof,
    /// A packet (truncated to the buffer) and the descriptors that came with it.
    Packet {
        /// Bytes received.
        len: usize,
        /// True when the packet was longer than the buffer.
        truncated: bool,
        /// Descriptors received (all owned now, so none leaks).
        fds: Vec<OwnedFd>,
        /// True when the kernel dropped descriptors that did not fit.
        fds_truncated: bool,
    },
}

/// Receives one packet into `buf`, taking ownership of every descriptor attached.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> Result<Received, i32> {
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: `msg` points at our buffers, which live across the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = errno();
        return if e == libc::EAGAIN || e == libc::EINTR { Ok(Received::Nothing) } else { Err(e) };
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of our control buffer; the CMSG macros walk
    // only inside it, and each SCM_RIGHTS payload holds whole descriptors we now own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(Received::Eof);
    }
    Ok(Received::Packet {
        len: n as usize,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        fds,
        fds_truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// Writes one wakeup byte to a link socket; a full socket already holds wakeups, so errors are
/// ignored (a dead peer is found by its own end-of-file check).
pub fn wake(sock: RawFd) {
    let byte = 1u8;
    // SAFETY: a non-blocking send of one byte from a live local.
    unsafe { libc::send(sock, (&byte as *const u8).cast(), 1, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
}

/// The state of a link socket after draining it without blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketState {
    /// Open; nothing (more) to read.
    Open,
    /// Wakeup bytes were read and dropped.
    Woken,
    /// The peer closed or died.
    Closed,
}

/// Reads and drops whatever waits on a link socket; says whether the peer is gone.
pub fn drain(sock: RawFd) -> SocketState {
    let mut state = SocketState::Open;
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: a non-blocking recv into a buffer we own.
        let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n > 0 {
            state = SocketState::Woken;
            continue;
        }
        if n == 0 {
            return SocketState::Closed;
        }
        let e = errno();
        return match e {
            libc::EAGAIN | libc::EINTR => state,
            _ => SocketState::Closed,
        };
    }
}
