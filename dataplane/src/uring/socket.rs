//! Thin wrappers over the socket calls the io_uring transport makes outside the ring.

use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::transport::TlError;

pub(crate) use crate::os_error::last_errno;

/// A `sockaddr_storage` and its length, for calls that take a C socket address.
#[derive(Clone, Copy)]
pub struct RawAddr {
    /// The address bytes.
    pub storage: libc::sockaddr_storage,
    /// How many bytes of `storage` are meaningful.
    pub len: libc::socklen_t,
}

impl RawAddr {
    /// An empty address, as an out parameter.
    pub fn zeroed() -> RawAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
        RawAddr { storage: unsafe { mem::zeroed() }, len: mem::size_of::<libc::sockaddr_storage>() as _ }
    }

    /// Encodes a Rust socket address.
    pub fn from_socket_addr(addr: &SocketAddr) -> RawAddr {
        let mut raw = RawAddr::zeroed();
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as _,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(raw.storage).cast(), sin) };
                raw.len = mem::size_of::<libc::sockaddr_in>() as _;
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as _,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(raw.storage).cast(), sin6) };
                raw.len = mem::size_of::<libc::sockaddr_in6>() as _;
            }
        }
        raw
    }

    /// Decodes to a Rust socket address (IPv4 or IPv6 only).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self.storage.ss_family as i32 {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let sin: libc::sockaddr_in =
                    unsafe { std::ptr::read(std::ptr::addr_of!(self.storage).cast()) };
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let sin6: libc::sockaddr_in6 =
                    unsafe { std::ptr::read(std::ptr::addr_of!(self.storage).cast()) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    /// Pointer for calls that read the address.
    pub fn as_ptr(&self) -> *const libc::sockaddr {
        std::ptr::addr_of!(self.storage).cast()
    }
}

/// A non-blocking, close-on-exec TCP socket of `addr`'s family.
pub fn tcp_socket(addr: &SocketAddr) -> Result<OwnedFd, TlError> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(TlError::from_errno(last_errno()));
    }
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_int_opt(fd: RawFd, level: i32, name: i32, value: i32) -> Result<(), TlError> {
    // SAFETY: the option value points at a live i32 of the length passed.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, std::ptr::addr_of!(value).cast(), mem::size_of::<i32>() as _)
    };
    if rc < 0 {
        return Err(TlError::from_errno(last_errno()));
    }
    Ok(())
}

/// Disables Nagle's algorithm: frames are latency-sensitive.
pub fn set_nodelay(fd: RawFd) -> Result<(), TlError> {
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// Binds `fd` to `addr`.
pub fn bind(fd: RawFd, addr: &SocketAddr) -> Result<(), TlError> {
    let raw = RawAddr::from_socket_addr(addr);
    // SAFETY: `raw` holds a valid sockaddr of `raw.len` bytes.
    if unsafe { libc::bind(fd, raw.as_ptr(), raw.len) } < 0 {
        return Err(TlError::from_errno(last_errno()));
    }
    Ok(())
}

/// A listening socket bound to `addr` (IPv6 sockets are IPv6-only, so `[::]` and `0.0.0.0` can
/// share a port number). SO_REUSEADDR is set so restarted servers rebind at once; a port
/// someone listens on still fails with `Busy`.
pub fn listener(addr: &SocketAddr) -> Result<OwnedFd, TlError> {
    let fd = tcp_socket(addr)?;
    set_int_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if addr.is_ipv6() {
        set_int_opt(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
    }
    bind(fd.as_raw_fd(), addr)?;
    // SAFETY: listen(2) on a socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 1024) } < 0 {
        return Err(TlError::from_errno(last_errno()));
    }
    Ok(fd)
}

/// The local address of a socket.
pub fn local_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut raw = RawAddr::zeroed();
    // SAFETY: storage and length describe a writable sockaddr_storage.
    let rc = unsafe { libc::getsockname(fd, std::ptr::addr_of_mut!(raw.storage).cast(), &mut raw.len) };
    if rc < 0 {
        return None;
    }
    raw.socket_addr()
}

/// The peer address of a connected socket.
pub fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut raw = RawAddr::zeroed();
    // SAFETY: storage and length describe a writable sockaddr_storage.
    let rc = unsafe { libc::getpeername(fd, std::ptr::addr_of_mut!(raw.storage).cast(), &mut raw.len) };
    if rc < 0 {
        return None;
    }
    raw.socket_addr()
}

/// Frames up to this long are gathered into one buffer and sent with `send(2)`.
const SMALL_FRAME: usize = 512;

/// Sends the length prefix, `header` and `payload` of one frame with a single non-blocking
/// `sendmsg(2)`; returns the bytes the kernel took (0 when the socket is full or failed: the
/// queued path then sends the rest and reports any error).
pub fn send_frame_now(fd: RawFd, prefix: &[u8], header: &[u8], payload: &[u8]) -> usize {
    let total = prefix.len() + header.len() + payload.len();
    if total <= SMALL_FRAME {
        // Gathered on the stack: send(2) skips the msghdr and iovec import of sendmsg(2). Not
        // zeroed first: only the `total` bytes written below are ever read.
        let mut buf = mem::MaybeUninit::<[u8; SMALL_FRAME]>::uninit();
        let base = buf.as_mut_ptr().cast::<u8>();
        let mut at = 0;
        for part in [prefix, header, payload] {
            // SAFETY: `at + part.len() <= total <= SMALL_FRAME`, so the copy stays inside `buf`;
            // a live slice never overlaps our stack buffer.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(at), part.len()) };
            at += part.len();
        }
        // SAFETY: `buf[..total]` was written above and is readable; the call is non-blocking.
        let rc = unsafe { libc::send(fd, base.cast(), total, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        return rc.max(0) as usize;
    }
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 3];
    let mut n = 0;
    for part in [prefix, header, payload] {
        if !part.is_empty() {
            iov[n] = libc::iovec { iov_base: part.as_ptr() as *mut libc::c_void, iov_len: part.len() };
            n += 1;
        }
    }
    // SAFETY: msghdr is plain old data; all-zero is an empty message.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: the message points at `n` iovecs describing live, readable slices; the call is
    // non-blocking and the kernel only reads them during it.
    let rc = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    rc.max(0) as usize
}

/// `shutdown(2)`, ignoring errors (the socket may not be connected yet).
pub fn shutdown(fd: RawFd, how: i32) {
    // SAFETY: shutdown(2) on a descriptor we own; failure is harmless.
    unsafe { libc::shutdown(fd, how) };
}

/// The first IPv4 address of an interface that is up and not loopback, else 127.0.0.1.
pub fn default_advertise_ip() -> IpAddr {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not freed yet.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let flags = ifa.ifa_flags;
        if ifa.ifa_addr.is_null()
            || flags & libc::IFF_UP as u32 == 0
            || flags & libc::IFF_LOOPBACK as u32 != 0
        {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points at a sockaddr whose family we check first.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: the family is AF_INET, so it is a sockaddr_in.
            let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
            found = Some(IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())));
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_addr_round_trips() {
        for a in ["127.0.0.1:80", "[::1]:443", "[fe80::1%3]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(RawAddr::from_socket_addr(&a).socket_addr(), Some(a));
        }
    }
}
