//! `ucp_put_*`, `ucp_get_*` and `ucp_atomic_*`: one-sided operations with a peer's key.

use std::ffi::c_void;

use crate::bindings::*;
use crate::dt;
use crate::endpoint::{ep_ref, CEp};
use crate::mem::{rkey_ref, CRkey};
use crate::request::{self, Finish, Immediate, Outcome, Setup};
use crate::status;

/// The size of an atomic's operand: UCP requires the datatype (`ucp_dt_make_contig(4)` or `(8)`)
/// and one element.
///
/// # Safety
/// `param` null or valid.
unsafe fn atomic_operand(
    count: usize,
    param: *const ucp_request_param_t,
) -> Result<zcx::AtomicSize, ucs_status_t::Type> {
    // SAFETY: the caller's contract.
    let Some(p) = (unsafe { param.as_ref() }) else { return Err(ucs_status_t::UCS_ERR_INVALID_PARAM) };
    if p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_DATATYPE == 0 || count != 1 {
        return Err(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    match dt::decode(p.datatype) {
        Ok(dt::Dt::Contig(elem)) => atomic_size(elem).ok_or(ucs_status_t::UCS_ERR_INVALID_PARAM),
        Ok(_) => Err(ucs_status_t::UCS_ERR_INVALID_PARAM),
        Err(s) => Err(status::ucs(s)),
    }
}

/// Whether an operation with `param` that completes at once may skip its request: UCP then
/// returns `UCS_OK` and runs no callback. Not when the caller asked for the request anyway
/// (`UCP_OP_ATTR_FLAG_NO_IMM_CMPL`) or gave its own memory for it (`UCP_OP_ATTR_FIELD_REQUEST`),
/// whose status it may read afterwards.
///
/// # Safety
/// `param` null or valid.
#[inline(always)]
unsafe fn may_skip_request(param: *const ucp_request_param_t) -> bool {
    // SAFETY: the caller's contract.
    let mask = unsafe { request::attr_mask(param) };
    mask & (ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL | ucp_op_attr_t::UCP_OP_ATTR_FIELD_REQUEST) == 0
}

/// The bytes at `ptr`, empty for a zero length (when `ptr` may be null).
///
/// # Safety
/// Otherwise `ptr` is valid for reads of `len` bytes during the borrow.
#[inline(always)]
unsafe fn bytes_at<'a>(ptr: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}

/// `ucp_put_nbx`.
///
/// # Safety
/// `ep` and `rkey` are live; the buffer valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { put(ep, buffer, count, remote_addr, rkey, param, || Setup::send(param)) }
}

/// A put with `setup`.
///
/// # Safety
/// As `ucp_put_nbx`.
#[inline(always)]
unsafe fn put(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    param: *const ucp_request_param_t,
    setup: impl FnOnce() -> Setup,
) -> ucs_status_ptr_t {
    if ep.is_null() || rkey.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // UCX 1.13 supports only bytes (`ucp_dt_make_contig(1)`) for RMA, and its library takes
    // `count` bytes at `buffer` whatever datatype the parameters name; programs rely on that
    // (`ucx_perftest -D iov` puts from its IOV array itself), so this does the same.
    // SAFETY: the caller's contract.
    let (cep, key) = unsafe { (ep_ref(ep), rkey_ref(rkey)) };
    // A put done at once over shared memory needs no request (nor its allocation and pool).
    // SAFETY: the caller's contract.
    if unsafe { may_skip_request(param) } {
        // SAFETY: the caller's contract: the buffer is valid for `count` bytes.
        let bytes = unsafe { bytes_at(buffer, count) };
        if let Some(result) = cep.ep.put_direct(bytes, remote_addr, &key.rkey) {
            return request::status_ptr(status::of(result));
        }
    }
    // SAFETY: the caller's contract.
    unsafe { put_with_request(cep, key, (buffer, count), remote_addr, param, setup()) }
}

/// [`put`] with a request: one that goes to the target, or whose caller wants the request.
/// Out of line, so that the direct path inlined into `ucp_put_nbx` stays small.
///
/// # Safety
/// As `ucp_put_nbx`.
#[inline(never)]
unsafe fn put_with_request(
    cep: &CEp,
    key: &CRkey,
    (buffer, count): (*const c_void, usize),
    remote_addr: u64,
    param: *const ucp_request_param_t,
    setup: Setup,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let data = match unsafe { dt::gather(buffer, count, dt::BYTES) } {
        Ok(data) => data,
        Err(s) => return request::status_ptr(status::ucs(s)),
    };
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cep.ep.put(data, remote_addr, &key.rkey, rp),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// A get with `setup`.
///
/// # Safety
/// As `ucp_get_nbx`.
#[inline(always)]
unsafe fn get(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    param: *const ucp_request_param_t,
    setup: impl FnOnce() -> Setup,
) -> ucs_status_ptr_t {
    if ep.is_null() || rkey.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // Bytes whatever the datatype, as for a put.
    // SAFETY: the caller's contract.
    let (cep, key) = unsafe { (ep_ref(ep), rkey_ref(rkey)) };
    // As in `put`: a get done at once needs no request.
    // SAFETY: the caller's contract.
    if unsafe { may_skip_request(param) } {
        let dst: &mut [u8] = if count == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract: the buffer is valid for writes of `count` bytes.
            unsafe { std::slice::from_raw_parts_mut(buffer.cast(), count) }
        };
        if let Some(result) = cep.ep.get_direct(dst, remote_addr, &key.rkey) {
            return request::status_ptr(status::of(result));
        }
    }
    // SAFETY: the caller's contract.
    unsafe { get_with_request(cep, key, (buffer, count), remote_addr, param, setup()) }
}

/// [`get`] with a request (see [`put_with_request`]).
///
/// # Safety
/// As `ucp_get_nbx`.
#[inline(never)]
unsafe fn get_with_request(
    cep: &CEp,
    key: &CRkey,
    (buffer, count): (*mut c_void, usize),
    remote_addr: u64,
    param: *const ucp_request_param_t,
    mut setup: Setup,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let target = match unsafe { dt::scatter(buffer, count, dt::BYTES) } {
        Ok(target) => target,
        Err(s) => return request::status_ptr(status::ucs(s)),
    };
    setup.finish = target.finish;
    let buf = target.buf;
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cep.ep.get(buf, remote_addr, &key.rkey, rp),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// `ucp_get_nbx`.
///
/// # Safety
/// `ep` and `rkey` are live; the buffer valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { get(ep, buffer, count, remote_addr, rkey, param, || Setup::send(param)) }
}

/// What an implicit (`nbi`) operation returns: `UCS_OK` when done, `UCS_INPROGRESS` while a
/// flush has yet to complete it. The request, if one was made, is released at once.
fn implicit(ptr: ucs_status_ptr_t) -> ucs_status_t::Type {
    if let Some(status) = request::ptr_status(ptr) {
        return status;
    }
    // SAFETY: a request this library just returned.
    unsafe { request::Req::from_user(ptr) }.release(false);
    ucs_status_t::UCS_INPROGRESS
}

/// `ucp_put_nbi`.
///
/// # Safety
/// As `ucp_put_nbx`; the buffer may be reused when this returns.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: ucp_ep_h,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
) -> ucs_status_t::Type {
    if ep.is_null() || rkey.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let (cep, key) = unsafe { (ep_ref(ep), rkey_ref(rkey)) };
    let bytes = if length == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), length) }
    };
    match cep.ep.put_nbi(bytes, remote_addr, &key.rkey) {
        Ok(()) => ucs_status_t::UCS_INPROGRESS,
        Err(s) => status::ucs(s),
    }
}

/// `ucp_get_nbi`: the buffer is filled once a flush completes, which reports a refused get.
///
/// # Safety
/// As `ucp_get_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
) -> ucs_status_t::Type {
    if ep.is_null() || rkey.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let (cep, key) = unsafe { (ep_ref(ep), rkey_ref(rkey)) };
    // SAFETY: the caller's contract: the buffer is valid for writes until a flush completes.
    let buf = unsafe { dt::RawBuf::new(buffer, length) };
    match cep.ep.get_nbi(buf, remote_addr, &key.rkey) {
        Ok(true) => ucs_status_t::UCS_OK,
        Ok(false) => ucs_status_t::UCS_INPROGRESS,
        Err(s) => status::ucs(s),
    }
}

/// `ucp_put_nb` (deprecated form).
///
/// # Safety
/// As `ucp_put_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nb(
    ep: ucp_ep_h,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { put(ep, buffer, length, remote_addr, rkey, std::ptr::null(), || Setup::nb(cb)) }
}

/// `ucp_get_nb` (deprecated form).
///
/// # Safety
/// As `ucp_get_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nb(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { get(ep, buffer, length, remote_addr, rkey, std::ptr::null(), || Setup::nb(cb)) }
}

/// Runs an atomic: `op` with `value` (and, for CSWAP, `compare`) on the `size`-byte word at
/// `remote_addr`; with `reply`, the previous value is written there at completion.
///
/// # Safety
/// `ep` and `rkey` live; `reply` null or valid for a `size`-byte write until completion.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn atomic(
    ep: ucp_ep_h,
    op: zcx::AtomicOp,
    size: zcx::AtomicSize,
    value: u64,
    compare: u64,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    reply: *mut c_void,
    param: *const ucp_request_param_t,
    setup: impl FnOnce() -> Setup,
) -> ucs_status_ptr_t {
    if ep.is_null() || rkey.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let (cep, key) = unsafe { (ep_ref(ep), rkey_ref(rkey)) };
    // As in `put`: an atomic done at once needs no request; the previous value goes straight to
    // the reply buffer.
    // SAFETY: the caller's contract.
    if unsafe { may_skip_request(param) } {
        if let Some(result) = cep.ep.atomic_direct(op, size, value, compare, remote_addr, &key.rkey) {
            return request::status_ptr(match result {
                Ok(old) => {
                    // SAFETY: the caller's contract: null or valid for a write of the operand size.
                    unsafe { write_reply(reply, size, old) };
                    ucs_status_t::UCS_OK
                }
                Err(s) => status::ucs(s),
            });
        }
    }
    let operation = (op, size, value, compare);
    // SAFETY: the caller's contract.
    unsafe { atomic_with_request(cep, key, operation, remote_addr, reply, param, setup()) }
}

/// [`atomic`] with a request (see [`put_with_request`]).
///
/// # Safety
/// As [`atomic`].
#[inline(never)]
unsafe fn atomic_with_request(
    cep: &CEp,
    key: &CRkey,
    (op, size, value, compare): (zcx::AtomicOp, zcx::AtomicSize, u64, u64),
    remote_addr: u64,
    reply: *mut c_void,
    param: *const ucp_request_param_t,
    mut setup: Setup,
) -> ucs_status_ptr_t {
    if !reply.is_null() {
        let reply = reply as usize;
        let finish: Finish = Box::new(move |status, outcome: &Outcome| {
            if status == ucs_status_t::UCS_OK {
                // SAFETY: the caller's contract: valid for a write of the operand size.
                unsafe { write_reply(reply as *mut c_void, size, outcome.value) };
            }
            status
        });
        setup.finish = Some(finish);
    }
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cep.ep.atomic(op, size, value, compare, remote_addr, &key.rkey, rp),
            |c| Outcome { value: c.info.value, ..Outcome::default() },
        )
    }
}

/// Writes an atomic's previous value, `size` bytes, to `reply` unless it is null.
///
/// # Safety
/// `reply` null or valid for a write of the operand size.
#[inline(always)]
unsafe fn write_reply(reply: *mut c_void, size: zcx::AtomicSize, old: u64) {
    if reply.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        match size {
            zcx::AtomicSize::U32 => reply.cast::<u32>().write_unaligned(old as u32),
            zcx::AtomicSize::U64 => reply.cast::<u64>().write_unaligned(old),
        }
    }
}

/// The operand size of an atomic's datatype.
fn atomic_size(bytes: usize) -> Option<zcx::AtomicSize> {
    match bytes {
        4 => Some(zcx::AtomicSize::U32),
        8 => Some(zcx::AtomicSize::U64),
        _ => None,
    }
}

/// Reads a `size`-byte operand.
///
/// # Safety
/// `ptr` is valid for a read of the size.
unsafe fn read_operand(ptr: *const c_void, size: zcx::AtomicSize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        match size {
            zcx::AtomicSize::U32 => u64::from(ptr.cast::<u32>().read_unaligned()),
            zcx::AtomicSize::U64 => ptr.cast::<u64>().read_unaligned(),
        }
    }
}

/// `ucp_atomic_op_nbx`: the operand is at `buffer` (4 or 8 bytes, from the datatype); with
/// `UCP_OP_ATTR_FIELD_REPLY_BUFFER` the previous value lands in the reply buffer. CSWAP compares
/// with the operand and stores what the reply buffer held.
///
/// # Safety
/// `ep` and `rkey` live; `buffer` valid for the operand; the reply buffer valid until
/// completion; `param` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: ucp_ep_h,
    opcode: ucp_atomic_op_t::Type,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let Some(p) = (unsafe { param.as_ref() }) else {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    };
    // SAFETY: the caller's contract.
    let size = match unsafe { atomic_operand(count, param) } {
        Ok(size) => size,
        Err(s) => return request::status_ptr(s),
    };
    if buffer.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    let Some(op) = u8::try_from(opcode).ok().and_then(zcx::AtomicOp::from_u8) else {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    };
    let reply = if p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_REPLY_BUFFER != 0 {
        p.reply_buffer
    } else {
        std::ptr::null_mut()
    };
    if op == zcx::AtomicOp::Cswap && reply.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let operand = unsafe { read_operand(buffer, size) };
    // CSWAP compares with the buffer's value and stores the reply buffer's (UCP's table:
    // "if (X == Y) then Y = Z", X the buffer, Z the reply buffer).
    let (value, compare) = if op == zcx::AtomicOp::Cswap {
        // SAFETY: the caller's contract (checked non-null above).
        (unsafe { read_operand(reply, size) }, operand)
    } else {
        (operand, 0)
    };
    // SAFETY: the caller's contract.
    unsafe { atomic(ep, op, size, value, compare, remote_addr, rkey, reply, param, || Setup::send(param)) }
}

/// `ucp_atomic_post` (deprecated): a non-fetching atomic, complete once flushed.
///
/// # Safety
/// `ep` and `rkey` live.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_post(
    ep: ucp_ep_h,
    opcode: ucp_atomic_post_op_t::Type,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
) -> ucs_status_t::Type {
    let op = match opcode {
        ucp_atomic_post_op_t::UCP_ATOMIC_POST_OP_ADD => zcx::AtomicOp::Add,
        ucp_atomic_post_op_t::UCP_ATOMIC_POST_OP_AND => zcx::AtomicOp::And,
        ucp_atomic_post_op_t::UCP_ATOMIC_POST_OP_OR => zcx::AtomicOp::Or,
        ucp_atomic_post_op_t::UCP_ATOMIC_POST_OP_XOR => zcx::AtomicOp::Xor,
        _ => return ucs_status_t::UCS_ERR_INVALID_PARAM,
    };
    let Some(size) = atomic_size(op_size) else { return ucs_status_t::UCS_ERR_INVALID_PARAM };
    // SAFETY: the caller's contract; no reply.
    implicit(unsafe {
        atomic(ep, op, size, value, 0, remote_addr, rkey, std::ptr::null_mut(), std::ptr::null(), Setup::none)
    })
}

/// `ucp_atomic_fetch_nb` (deprecated): a fetching atomic; the previous value lands in `result`.
/// CSWAP compares with `value` and stores what `result` held.
///
/// # Safety
/// `ep` and `rkey` live; `result` valid for the operand until completion.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: ucp_ep_h,
    opcode: ucp_atomic_fetch_op_t::Type,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    let op = match opcode {
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_FADD => zcx::AtomicOp::Add,
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_SWAP => zcx::AtomicOp::Swap,
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_CSWAP => zcx::AtomicOp::Cswap,
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_FAND => zcx::AtomicOp::And,
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_FOR => zcx::AtomicOp::Or,
        ucp_atomic_fetch_op_t::UCP_ATOMIC_FETCH_OP_FXOR => zcx::AtomicOp::Xor,
        _ => return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM),
    };
    let (Some(size), false) = (atomic_size(op_size), result.is_null()) else {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    };
    // CSWAP compares with `value` and stores what `result` held.
    let (value, compare) = if op == zcx::AtomicOp::Cswap {
        // SAFETY: the caller's contract.
        (unsafe { read_operand(result, size) }, value)
    } else {
        (value, 0)
    };
    // SAFETY: the caller's contract.
    unsafe {
        atomic(ep, op, size, value, compare, remote_addr, rkey, result, std::ptr::null(), || Setup::nb(cb))
    }
}

/// Blocking forms kept by `ucp_compat.h`'s users: the put and get they name, waited for.
///
/// # Safety
/// As `ucp_put_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_put(
    ep: ucp_ep_h,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
) -> ucs_status_t::Type {
    if ep.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let ptr = unsafe { put(ep, buffer, length, remote_addr, rkey, std::ptr::null(), Setup::none) };
    // SAFETY: the caller's contract; `ptr` was just returned.
    unsafe { crate::worker::wait_and_free(ep_ref(ep).worker(), ptr) }
}

/// Blocking `ucp_get`.
///
/// # Safety
/// As `ucp_get_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_get(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: ucp_rkey_h,
) -> ucs_status_t::Type {
    if ep.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let ptr = unsafe { get(ep, buffer, length, remote_addr, rkey, std::ptr::null(), Setup::none) };
    // SAFETY: the caller's contract; `ptr` was just returned.
    unsafe { crate::worker::wait_and_free(ep_ref(ep).worker(), ptr) }
}

/// Waits for an atomic this library issued and releases it.
///
/// # Safety
/// `ep` is live.
unsafe fn wait_atomic(ep: ucp_ep_h, ptr: ucs_status_ptr_t) -> ucs_status_t::Type {
    // SAFETY: the caller's contract; `ptr` was just returned.
    unsafe { crate::worker::wait_and_free(ep_ref(ep).worker(), ptr) }
}

macro_rules! blocking_post {
    ($name:ident, $ty:ty, $bytes:expr) => {
        /// The blocking post of `ucp_compat.h` (deprecated): an atomic add, waited for.
        ///
        /// # Safety
        /// `ep` and `rkey` live.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: ucp_ep_h,
            add: $ty,
            remote_addr: u64,
            rkey: ucp_rkey_h,
        ) -> ucs_status_t::Type {
            if ep.is_null() {
                return ucs_status_t::UCS_ERR_INVALID_PARAM;
            }
            let size = atomic_size($bytes).expect("4 or 8");
            // SAFETY: the caller's contract.
            unsafe {
                let ptr = atomic(
                    ep,
                    zcx::AtomicOp::Add,
                    size,
                    u64::from(add),
                    0,
                    remote_addr,
                    rkey,
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    Setup::none,
                );
                wait_atomic(ep, ptr)
            }
        }
    };
}

macro_rules! blocking_fetch {
    ($name:ident, $op:expr, $ty:ty, $bytes:expr) => {
        /// The blocking fetching atomic of `ucp_compat.h` (deprecated), waited for; the previous
        /// value lands in `result`.
        ///
        /// # Safety
        /// `ep` and `rkey` live; `result` valid for a write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: ucp_ep_h,
            value: $ty,
            remote_addr: u64,
            rkey: ucp_rkey_h,
            result: *mut $ty,
        ) -> ucs_status_t::Type {
            if ep.is_null() || result.is_null() {
                return ucs_status_t::UCS_ERR_INVALID_PARAM;
            }
            let size = atomic_size($bytes).expect("4 or 8");
            // SAFETY: the caller's contract.
            unsafe {
                let ptr = atomic(
                    ep,
                    $op,
                    size,
                    u64::from(value),
                    0,
                    remote_addr,
                    rkey,
                    result.cast(),
                    std::ptr::null(),
                    Setup::none,
                );
                wait_atomic(ep, ptr)
            }
        }
    };
}

macro_rules! blocking_cswap {
    ($name:ident, $ty:ty, $bytes:expr) => {
        /// The blocking compare-and-swap of `ucp_compat.h` (deprecated), waited for: `swap` is
        /// stored if the remote value equals `compare`; the previous value lands in `result`.
        ///
        /// # Safety
        /// `ep` and `rkey` live; `result` valid for a write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: ucp_ep_h,
            compare: $ty,
            swap: $ty,
            remote_addr: u64,
            rkey: ucp_rkey_h,
            result: *mut $ty,
        ) -> ucs_status_t::Type {
            if ep.is_null() || result.is_null() {
                return ucs_status_t::UCS_ERR_INVALID_PARAM;
            }
            let size = atomic_size($bytes).expect("4 or 8");
            // SAFETY: the caller's contract.
            unsafe {
                let ptr = atomic(
                    ep,
                    zcx::AtomicOp::Cswap,
                    size,
                    u64::from(swap),
                    u64::from(compare),
                    remote_addr,
                    rkey,
                    result.cast(),
                    std::ptr::null(),
                    Setup::none,
                );
                wait_atomic(ep, ptr)
            }
        }
    };
}

blocking_post!(ucp_atomic_add32, u32, 4);
blocking_post!(ucp_atomic_add64, u64, 8);
blocking_fetch!(ucp_atomic_fadd32, zcx::AtomicOp::Add, u32, 4);
blocking_fetch!(ucp_atomic_fadd64, zcx::AtomicOp::Add, u64, 8);
blocking_fetch!(ucp_atomic_swap32, zcx::AtomicOp::Swap, u32, 4);
blocking_fetch!(ucp_atomic_swap64, zcx::AtomicOp::Swap, u64, 8);
blocking_cswap!(ucp_atomic_cswap32, u32, 4);
blocking_cswap!(ucp_atomic_cswap64, u64, 8);
