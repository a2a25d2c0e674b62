//! zcx — a kernel-bypass userspace transport with UCX's UCP API shape.
//!
//! This crate is the public API. Its names follow UCP so a UCX user finds each call where they
//! expect it:
//!
//! | UCP | zcx |
//! |---|---|
//! | `ucp_config_read`, `ucp_config_modify`, `ucp_config_print` | [`Config::from_env`], [`Config::modify`], [`Config::print`] |
//! | `ucp_init`, `ucp_cleanup` | [`Context::new`], `Drop` |
//! | `ucp_mem_map`, `ucp_mem_unmap` | [`Context::mem_map`] with [`MemMapParams`], [`MemHandle::unmap`] or `Drop` |
//! | `ucp_mem_query`, `ucp_mem_advise` | [`MemHandle::query`], [`MemHandle::advise`] |
//! | `ucp_memh_pack` (+`EXPORT`), `ucp_memh_buffer_release` | [`MemHandle::pack`], `Drop` of [`PackedBuffer`] |
//! | `ucp_rkey_pack`, `ucp_rkey_buffer_release` | [`MemHandle::rkey_pack`], `Drop` |
//! | `ucp_ep_rkey_unpack`, `ucp_rkey_ptr`, `ucp_rkey_compare`, `ucp_rkey_destroy` | [`Endpoint::rkey_unpack`] (or [`Context::rkey_unpack`]), [`RemoteKey::ptr`], [`Context::rkey_compare`], `Drop` |
//! | `ucp_worker_create` / `_destroy` / `_progress` | [`Context::create_worker`], `Drop`, [`Worker::progress`] |
//! | `ucp_worker_get_efd` / `_arm` / `_wait` / `_signal` | [`Worker::event_fd`], [`Worker::arm`], [`Worker::wait`], [`Worker::signal`] |
//! | `ucp_worker_query(ADDRESS)`, `_flush_nbx`, `_fence` | [`Worker::address`], [`Worker::flush`], [`Worker::fence`] |
//! | `ucp_listener_create` / `_query` / `_reject`, `ucp_conn_request_query` | [`Worker::listen`], [`Listener::sockaddr`], [`Listener::reject`], [`ConnRequest::client_addr`] / [`ConnRequest::client_id`] |
//! | `ucp_ep_create`, `ucp_ep_close_nbx`, `ucp_ep_query`, `ucp_ep_flush_nbx` | [`Worker::create_endpoint`] with [`EpParams`], [`Endpoint::close`], [`Endpoint::query`], [`Endpoint::flush`] |
//! | `ucp_tag_send_nbx` (+sync), `ucp_tag_recv_nbx`, `ucp_tag_probe_nb`, `ucp_tag_msg_recv_nbx` | [`Endpoint::tag_send`], [`Worker::tag_recv`], [`Worker::tag_probe`] / [`Worker::tag_probe_remove`], [`TagMessage::recv`] |
//! | `ucp_stream_send_nbx`, `ucp_stream_recv_nbx` | [`Endpoint::stream_send`], [`Endpoint::stream_recv`] |
//! | `ucp_worker_set_am_recv_handler`, `ucp_am_send_nbx`, `ucp_am_recv_data_nbx` | [`Worker::set_am_handler`], [`Endpoint::am_send`], [`Worker::am_recv_data`] / [`AmMessage::recv_data`] |
//! | `ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx` | [`Endpoint::put`], [`Endpoint::get`], [`Endpoint::atomic`] |
//! | `ucp_request_check_status` / `_cancel` / `_free` | [`Request::status`], [`Request::cancel`], `Drop`; a [`Request`] is also a `Future` |
//! | `ucs_status_t`, `ucs_status_string` | [`Status`], [`status_string`] |
//! | `photon_register_buffer` & co, `photon_get_buffer_remote` | [`photon`] |
//!
//! Operations own their buffers ([`SendBuf`], [`RecvBuf`]: `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>`,
//! [`MemSlice`] of registered memory) and hand them back in the [`Completion`], so safe code cannot
//! free or reuse a buffer while the transport uses it.
//!
//! ```no_run
//! use zcx::{Context, Features, MemMapParams, MemhPackFlags};
//! let ctx = Context::with_features(Features::RMA)?;
//! let memh = ctx.mem_map(&MemMapParams::alloc(1 << 20))?;
//! let packed = memh.pack(MemhPackFlags::empty())?; // send these bytes to a peer
//! let rkey = ctx.rkey_unpack(&packed)?;            // ... which unpacks them
//! let local = rkey.ptr(memh.address() as u64)?;    // same host: a direct pointer
//! # let _ = local;
//! # Ok::<(), zcx::Status>(())
//! ```

#![warn(missing_docs)]

pub mod buffer;
pub mod config;
mod context;
mod endpoint;
pub mod iov;
mod listener;
mod mem;
mod packed;
pub mod photon;
mod request;
mod rkey;
pub mod status;
mod worker;

pub use buffer::{MemSlice, RecvBuf, SendBuf};
pub use config::{Config, HugepageMode};
pub use context::{Context, ContextParams, Features};
pub use endpoint::{
    AmProto, AmSendParams, AtomicOp, AtomicSize, CloseMode, Endpoint, EpAttr, EpFlags, EpParams, EpRkey,
    ErrHandler, ErrMode, ServerEpParams, TagInfo, TagMessage, TagSendParams,
};
pub use iov::{IovRecv, IovSend};
pub use listener::{AcceptHandler, ConnHandler, ConnRequest, Listener, ListenerParams};
pub use mem::{
    MemAdvice, MemAdviseParams, MemAttr, MemHandle, MemMapFlags, MemMapParams, MemhPackFlags, MemoryType,
    PackedBuffer, Prot,
};
pub use packed::{packed_len, worker_address_uid, PACKED_HEADER_LEN};
pub use request::{Callback, Completion, ErasedRequest, OpInfo, Request, RequestParams};
pub use rkey::{RemoteKey, RkeyCompareParams};
pub use status::{last_error_detail, status_string, Result, Status};
pub use worker::{
    AmDesc, AmHandler, AmMessage, ProgressThread, ThreadMode, WakeupEvents, Worker, WorkerParams,
};
pub use zcx_dataplane::{DomainId, RcacheStats};
pub use zcx_hugepages::CpuSet;
pub use zcx_hugepages::PageSize;
