//! `ucp_ep_*`, `ucp_listener_*` and `ucp_conn_request_*`: a `ucp_ep_h` is a boxed [`CEp`], a
//! `ucp_listener_h` a boxed [`CListener`], a `ucp_conn_request_h` a boxed [`CConnRequest`].

use std::ffi::{c_uint, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::bindings::*;
use crate::context::copy_name;
use crate::request::{self, Immediate, Setup};
use crate::status;
use crate::worker::{worker_ref, CWorker};

/// The Rust side of a `ucp_ep_h`.
pub struct CEp {
    /// The zcx endpoint.
    pub ep: zcx::Endpoint,
    /// The worker the application created it on.
    pub worker: *const CWorker,
    /// `UCP_EP_PARAM_FIELD_USER_DATA`.
    pub user_data: *mut c_void,
}

impl CEp {
    /// The worker the endpoint was created on.
    pub fn worker(&self) -> &CWorker {
        // SAFETY: a worker outlives its endpoints (UCP's contract).
        unsafe { &*self.worker }
    }
}

/// The endpoint behind a handle.
///
/// # Safety
/// `ep` is a live handle (not null).
pub unsafe fn ep_ref<'a>(ep: ucp_ep_h) -> &'a CEp {
    // SAFETY: the caller's contract.
    unsafe { &*ep.cast::<CEp>() }
}

/// The C handle of a zcx endpoint met in a callback: the one the application created (its
/// pointer is the zcx endpoint's user data), or a handle made once for an endpoint zcx created
/// itself and owned by `cw`.
pub fn handle_of(cw: &CWorker, ep: &zcx::Endpoint) -> ucp_ep_h {
    let Ok(attr) = ep.query() else { return std::ptr::null_mut() };
    if attr.user_data != 0 {
        return attr.user_data as ucp_ep_h;
    }
    let mut foreign = cw.foreign_eps.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, handle)) = foreign.iter().find(|(name, _)| *name == attr.name) {
        return *handle as ucp_ep_h;
    }
    let handle =
        Box::into_raw(Box::new(CEp { ep: ep.clone(), worker: cw, user_data: std::ptr::null_mut() })) as usize;
    foreign.push((attr.name, handle));
    handle as ucp_ep_h
}

/// The socket address at `addr`, or `None` for a family zcx does not use.
///
/// # Safety
/// `addr` is null or valid for `len` bytes.
pub unsafe fn socket_addr(addr: *const sockaddr, len: usize) -> Option<SocketAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; the family field leads every sockaddr.
    let family = unsafe { (*addr).sa_family } as i32;
    match family {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: an AF_INET address of sufficient length.
            let sin = unsafe { &*addr.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: an AF_INET6 address of sufficient length.
            let sin6 = unsafe { &*addr.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Writes `addr` into a `sockaddr_storage`.
pub fn write_storage(dst: &mut sockaddr_storage, addr: SocketAddr) {
    // SAFETY: `sockaddr_storage` is large and aligned enough for either family, and all-zero is
    // a valid value of both.
    unsafe {
        let raw = (dst as *mut sockaddr_storage).cast::<u8>();
        std::ptr::write_bytes(raw, 0, std::mem::size_of::<sockaddr_storage>());
        match addr {
            SocketAddr::V4(v4) => {
                let sin = &mut *raw.cast::<libc::sockaddr_in>();
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = v4.port().to_be();
                sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            }
            SocketAddr::V6(v6) => {
                let sin6 = &mut *raw.cast::<libc::sockaddr_in6>();
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = v6.port().to_be();
                sin6.sin6_addr.s6_addr = v6.ip().octets();
                sin6.sin6_flowinfo = v6.flowinfo();
                sin6.sin6_scope_id = v6.scope_id();
            }
        }
    }
}

/// The pieces of a C error handler, sent to the thread that runs it.
#[derive(Clone, Copy)]
struct ErrCb {
    cb: unsafe extern "C" fn(*mut c_void, ucp_ep_h, ucs_status_t::Type),
    arg: usize,
}

/// `ucp_ep_create`. A connection request may be accepted on a worker other than its listener's.
///
/// # Safety
/// `worker` is live; `params` valid; `ep_p` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_create(
    worker: ucp_worker_h,
    params: *const ucp_ep_params_t,
    ep_p: *mut ucp_ep_h,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false, false) = (unsafe { params.as_ref() }, worker.is_null(), ep_p.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let has = |bit: u32| p.field_mask & u64::from(bit) != 0;
    let mut ep_params = zcx::EpParams::default();
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS) {
        if p.address.is_null() {
            return ucs_status_t::UCS_ERR_INVALID_PARAM;
        }
        // SAFETY: a worker address from a peer's `ucp_worker_get_address` (UCP's contract).
        let Some(bytes) = (unsafe { address_bytes(p.address) }) else {
            return ucs_status_t::UCS_ERR_INVALID_PARAM;
        };
        ep_params.remote_address = Some(bytes);
    }
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_SOCK_ADDR) {
        // SAFETY: UCP's contract for the field.
        match unsafe { socket_addr(p.sockaddr.addr, p.sockaddr.addrlen as usize) } {
            Some(addr) => ep_params.sockaddr = Some(addr),
            None => return ucs_status_t::UCS_ERR_INVALID_PARAM,
        }
        ep_params.flags |= zcx::EpFlags::CLIENT_SERVER;
    }
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR) {
        // SAFETY: UCP's contract for the field.
        ep_params.local_sockaddr =
            unsafe { socket_addr(p.local_sockaddr.addr, p.local_sockaddr.addrlen as usize) };
    }
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_CONN_REQUEST) {
        if p.conn_request.is_null() {
            return ucs_status_t::UCS_ERR_INVALID_PARAM;
        }
        // SAFETY: a request from a listener's handler, accepted once (UCP's contract).
        let request = unsafe { Box::from_raw(p.conn_request.cast::<CConnRequest>()) };
        ep_params.conn_request = Some(request.request);
    }
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_FLAGS) {
        let f = p.flags;
        if f & ucp_ep_params_flags_field::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER != 0 {
            ep_params.flags |= zcx::EpFlags::CLIENT_SERVER;
        }
        if f & ucp_ep_params_flags_field::UCP_EP_PARAMS_FLAGS_NO_LOOPBACK != 0 {
            ep_params.flags |= zcx::EpFlags::NO_LOOPBACK;
        }
        if f & ucp_ep_params_flags_field::UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID != 0 {
            ep_params.flags |= zcx::EpFlags::SEND_CLIENT_ID;
        }
    }
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_NAME) && !p.name.is_null() {
        // SAFETY: NUL-terminated (UCP's contract).
        ep_params.name = Some(unsafe { CStr::from_ptr(p.name) }.to_string_lossy().into_owned());
    }
    let err_peer = has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE)
        && p.err_mode == ucp_err_handling_mode_t::UCP_ERR_HANDLING_MODE_PEER;
    let handle_cell = Arc::new(AtomicUsize::new(0));
    if err_peer {
        ep_params.err_mode = zcx::ErrMode::Peer;
    }
    let user_data = if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_USER_DATA) {
        p.user_data
    } else {
        std::ptr::null_mut()
    };
    if has(ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLER) {
        if let Some(cb) = p.err_handler.cb {
            // As in UCX, the endpoint's user data, when given, is the handler's argument.
            let arg = if user_data.is_null() { p.err_handler.arg } else { user_data };
            let err = ErrCb { cb, arg: arg as usize };
            let cell = Arc::clone(&handle_cell);
            ep_params.err_handler = Some(Arc::new(move |_ep: &zcx::Endpoint, status: zcx::Status| {
                let handle = cell.load(Ordering::Acquire) as ucp_ep_h;
                // SAFETY: the application's handler, with its argument and the endpoint's handle.
                unsafe { (err.cb)(err.arg as *mut c_void, handle, status::ucs(status)) };
            }));
        }
    }
    // The handle exists before the endpoint so that zcx can name it from the first callback.
    let handle = Box::into_raw(Box::new(std::mem::MaybeUninit::<CEp>::uninit()));
    ep_params.user_data = handle as usize;
    handle_cell.store(handle as usize, Ordering::Release);
    match cw.worker.create_endpoint(ep_params) {
        Ok(ep) => {
            // SAFETY: `handle` is a fresh allocation for a `CEp`.
            unsafe { (*handle).write(CEp { ep, worker: cw, user_data }) };
            // SAFETY: the caller's contract.
            unsafe { ep_p.write(handle.cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => {
            // SAFETY: the allocation made above, never initialised nor handed out.
            drop(unsafe { Box::from_raw(handle) });
            status::ucs(status)
        }
    }
}

/// The bytes of the worker address at `address`, its length read from its own header.
///
/// # Safety
/// `address` is a worker address from `ucp_worker_get_address` or `ucp_worker_query` (at least
/// as many bytes as its header states).
pub(crate) unsafe fn address_bytes(address: *const ucp_address_t) -> Option<Vec<u8>> {
    // SAFETY: the caller's contract: the header is there.
    let header = unsafe { std::slice::from_raw_parts(address.cast::<u8>(), zcx::PACKED_HEADER_LEN) };
    let len = zcx::packed_len(header)?;
    // SAFETY: the caller's contract: the whole address is there.
    Some(unsafe { std::slice::from_raw_parts(address.cast::<u8>(), len) }.to_vec())
}

/// `ucp_ep_close_nbx`: `UCP_EP_CLOSE_FLAG_FORCE` closes at once, otherwise after a flush. The
/// handle is freed when the close completes.
///
/// # Safety
/// `ep` is live and not used afterwards; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nbx(
    ep: ucp_ep_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if ep.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let force = unsafe { param.as_ref() }.is_some_and(|p| {
        p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS != 0
            && p.flags & ucp_ep_close_flags_t::UCP_EP_CLOSE_FLAG_FORCE != 0
    });
    // SAFETY: made by `ucp_ep_create`, closed once (UCP's contract).
    let cep = unsafe { Box::from_raw(ep.cast::<CEp>()) };
    let cw = cep.worker();
    let mode = if force { zcx::CloseMode::Force } else { zcx::CloseMode::Flush };
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cw.requests(),
            param,
            Setup::send(param),
            Immediate::Null,
            |rp| cep.ep.close_with(mode, rp),
            |_| request::Outcome::default(),
        )
    }
}

/// `ucp_ep_close_nb` (deprecated form).
///
/// # Safety
/// As `ucp_ep_close_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nb(ep: ucp_ep_h, mode: c_uint) -> ucs_status_ptr_t {
    let param = ucp_request_param_t {
        op_attr_mask: ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS,
        flags: if mode == ucp_ep_close_mode::UCP_EP_CLOSE_MODE_FORCE {
            ucp_ep_close_flags_t::UCP_EP_CLOSE_FLAG_FORCE
        } else {
            0
        },
        // SAFETY: all-zero is a valid value of every other field.
        ..unsafe { std::mem::zeroed() }
    };
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { ucp_ep_close_nbx(ep, &param) }
}

/// `ucp_disconnect_nb` (deprecated): `ucp_ep_close_nb` in flush mode.
///
/// # Safety
/// As `ucp_ep_close_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_disconnect_nb(ep: ucp_ep_h) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { ucp_ep_close_nb(ep, ucp_ep_close_mode::UCP_EP_CLOSE_MODE_FLUSH) }
}

/// `ucp_ep_destroy` (deprecated): closes and waits.
///
/// # Safety
/// As `ucp_ep_close_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_destroy(ep: ucp_ep_h) {
    if ep.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let worker = unsafe { ep_ref(ep) }.worker;
    // SAFETY: the caller's contract.
    let ptr = unsafe { ucp_ep_close_nb(ep, ucp_ep_close_mode::UCP_EP_CLOSE_MODE_FLUSH) };
    // SAFETY: the worker outlives the endpoint; `ptr` was just returned.
    unsafe { crate::worker::wait_and_free(&*worker, ptr) };
}

/// `ucp_ep_flush_nbx`.
///
/// # Safety
/// `ep` is live; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nbx(
    ep: ucp_ep_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if ep.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            Setup::send(param),
            Immediate::Null,
            |rp| cep.ep.flush_with(rp),
            |_| request::Outcome::default(),
        )
    }
}

/// `ucp_ep_flush_nb` (deprecated form).
///
/// # Safety
/// `ep` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nb(
    ep: ucp_ep_h,
    _flags: c_uint,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    if ep.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    let setup = Setup::nb(cb);
    // SAFETY: no caller request.
    unsafe {
        request::run(
            cep.worker().requests(),
            std::ptr::null(),
            setup,
            Immediate::Null,
            |rp| cep.ep.flush_with(rp),
            |_| request::Outcome::default(),
        )
    }
}

/// `ucp_ep_flush` (deprecated, blocking).
///
/// # Safety
/// `ep` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush(ep: ucp_ep_h) -> ucs_status_t::Type {
    if ep.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let ptr = unsafe { ucp_ep_flush_nbx(ep, std::ptr::null()) };
    // SAFETY: the caller's contract; `ptr` was just returned.
    unsafe { crate::worker::wait_and_free(ep_ref(ep).worker(), ptr) }
}

/// `ucp_ep_query`: name and socket addresses.
///
/// # Safety
/// `ep` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_query(ep: ucp_ep_h, attr: *mut ucp_ep_attr_t) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, ep.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let info = match unsafe { ep_ref(ep) }.ep.query() {
        Ok(info) => info,
        Err(status) => return status::ucs(status),
    };
    let has = |bit: u32| attr.field_mask & u64::from(bit) != 0;
    if has(ucp_ep_attr_field::UCP_EP_ATTR_FIELD_NAME) {
        copy_name(&mut attr.name, info.name.as_bytes());
    }
    if has(ucp_ep_attr_field::UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR) {
        match info.local_sockaddr {
            Some(addr) => write_storage(&mut attr.local_sockaddr, addr),
            None => return ucs_status_t::UCS_ERR_NOT_CONNECTED,
        }
    }
    if has(ucp_ep_attr_field::UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) {
        match info.remote_sockaddr {
            Some(addr) => write_storage(&mut attr.remote_sockaddr, addr),
            None => return ucs_status_t::UCS_ERR_NOT_CONNECTED,
        }
    }
    ucs_status_t::UCS_OK
}

/// `ucp_ep_print_info`.
///
/// # Safety
/// `ep` is live; `stream` a valid `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_print_info(ep: ucp_ep_h, stream: *mut libc::FILE) {
    if ep.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let text = match unsafe { ep_ref(ep) }.ep.query() {
        Ok(info) => format!(
            "#\n# UCP endpoint '{}' (zcx)\n#   transports: {}\n#\n",
            info.name,
            info.transports.join(",")
        ),
        Err(status) => format!("# UCP endpoint: {status:?}\n"),
    };
    // SAFETY: the caller's contract.
    unsafe { crate::context::write_stream(stream.cast(), &text) };
}

/// The Rust side of a `ucp_conn_request_h`.
pub struct CConnRequest {
    /// The request.
    pub request: zcx::ConnRequest,
}

/// The Rust side of a `ucp_listener_h`.
pub struct CListener {
    /// The listener.
    pub listener: zcx::Listener,
}

/// `ucp_listener_create`: listens on the sockaddr; each client reaches the connection handler
/// (as a `ucp_conn_request_h`) or the accept handler (as a new endpoint).
///
/// # Safety
/// `worker` is live; `params` valid; `listener_p` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_create(
    worker: ucp_worker_h,
    params: *const ucp_listener_params_t,
    listener_p: *mut ucp_listener_h,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false, false) = (unsafe { params.as_ref() }, worker.is_null(), listener_p.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let has = |bit: u32| p.field_mask & u64::from(bit) != 0;
    let mut lp = zcx::ListenerParams::default();
    if has(ucp_listener_params_field::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR) {
        // SAFETY: UCP's contract for the field.
        lp.sockaddr = unsafe { socket_addr(p.sockaddr.addr, p.sockaddr.addrlen as usize) };
    }
    if lp.sockaddr.is_none() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    if has(ucp_listener_params_field::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER) {
        let Some(cb) = p.conn_handler.cb else { return ucs_status_t::UCS_ERR_INVALID_PARAM };
        let arg = p.conn_handler.arg as usize;
        lp.conn_handler = Some(Box::new(move |request: zcx::ConnRequest| {
            let boxed = Box::new(CConnRequest { request });
            // SAFETY: the application's handler with its argument; it answers the request by
            // `ucp_ep_create` or `ucp_listener_reject`, which take the box back.
            unsafe { cb(Box::into_raw(boxed).cast(), arg as *mut c_void) };
        }));
    } else if has(ucp_listener_params_field::UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER) {
        let Some(cb) = p.accept_handler.cb else { return ucs_status_t::UCS_ERR_INVALID_PARAM };
        let arg = p.accept_handler.arg as usize;
        let cw_addr = cw as *const CWorker as usize;
        lp.accept_handler = Some(Box::new(move |ep: zcx::Endpoint| {
            // SAFETY: the listener's worker outlives the listener, which runs this.
            let cw = unsafe { &*(cw_addr as *const CWorker) };
            let handle = Box::into_raw(Box::new(CEp { ep, worker: cw, user_data: std::ptr::null_mut() }));
            // SAFETY: the application's handler with its argument and the new endpoint.
            unsafe { cb(handle.cast(), arg as *mut c_void) };
        }));
    } else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    match cw.worker.listen(lp) {
        Ok(listener) => {
            // SAFETY: the caller's contract.
            unsafe { listener_p.write(Box::into_raw(Box::new(CListener { listener })).cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// `ucp_listener_destroy`.
///
/// # Safety
/// `listener` is live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_destroy(listener: ucp_listener_h) {
    if !listener.is_null() {
        // SAFETY: made by `Box::into_raw` in `ucp_listener_create`, freed once.
        drop(unsafe { Box::from_raw(listener.cast::<CListener>()) });
    }
}

/// `ucp_listener_query`: the address listened on (with the port chosen for port 0).
///
/// # Safety
/// `listener` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_query(
    listener: ucp_listener_h,
    attr: *mut ucp_listener_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, listener.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let listener = unsafe { &*listener.cast::<CListener>() };
    if attr.field_mask & u64::from(ucp_listener_attr_field::UCP_LISTENER_ATTR_FIELD_SOCKADDR) != 0 {
        write_storage(&mut attr.sockaddr, listener.listener.sockaddr());
    }
    ucs_status_t::UCS_OK
}

/// `ucp_listener_reject`.
///
/// # Safety
/// `listener` is live; `conn_request` an unanswered request of it, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_reject(
    listener: ucp_listener_h,
    conn_request: ucp_conn_request_h,
) -> ucs_status_t::Type {
    if listener.is_null() || conn_request.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let listener = unsafe { &*listener.cast::<CListener>() };
    // SAFETY: made by the listener's handler, answered once.
    let request = unsafe { Box::from_raw(conn_request.cast::<CConnRequest>()) };
    listener.listener.reject(request.request);
    ucs_status_t::UCS_OK
}

/// `ucp_conn_request_query`: the client's address and id.
///
/// # Safety
/// `conn_request` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_conn_request_query(
    conn_request: ucp_conn_request_h,
    attr: *mut ucp_conn_request_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, conn_request.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let request = unsafe { &*conn_request.cast::<CConnRequest>() };
    let has = |bit: u32| attr.field_mask & u64::from(bit) != 0;
    if has(ucp_conn_request_attr_field::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR) {
        let addr =
            request.request.client_addr().unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
        write_storage(&mut attr.client_address, addr);
    }
    if has(ucp_conn_request_attr_field::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID) {
        attr.client_id = request.request.client_id();
    }
    ucs_status_t::UCS_OK
}

/// `ucp_ep_evaluate_perf`: not provided; zcx chooses protocols itself and has no cost model to
/// report.
///
/// # Safety
/// Any arguments.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_evaluate_perf(
    _ep: ucp_ep_h,
    _param: *const ucp_ep_evaluate_perf_param_t,
    _attr: *mut ucp_ep_evaluate_perf_attr_t,
) -> ucs_status_t::Type {
    tracing::warn!("ucp_ep_evaluate_perf is not supported by zcx");
    ucs_status_t::UCS_ERR_UNSUPPORTED
}

/// `ucp_ep_modify_nb` (deprecated): not provided; an endpoint's parameters are fixed at creation.
///
/// # Safety
/// Any arguments.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_modify_nb(
    _ep: ucp_ep_h,
    _params: *const ucp_ep_params_t,
) -> ucs_status_ptr_t {
    tracing::warn!("ucp_ep_modify_nb is not supported by zcx");
    request::status_ptr(ucs_status_t::UCS_ERR_UNSUPPORTED)
}
