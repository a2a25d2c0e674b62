//! A reliable-connected queue pair: created in a protection domain on a completion queue,
//! connected to a peer's queue pair from its [`QpAddress`] (what the handshake carries), and
//! posted to with sends, receives, RDMA writes and reads, and 64-bit atomics.
//!
//! A dead peer must be reported, not retried forever: `retry_cnt` and `rnr_retry` are finite (7
//! would mean "forever" to both), and the ack timeout makes a vanished peer an
//! `IBV_WC_RETRY_EXC_ERR` completion within about a second on rxe.

use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use super::srq::SharedReceiveQueue;
use crate::transport::TlError;

/// What a peer needs to connect its queue pair to this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAddress {
    /// Queue pair number.
    pub qpn: u32,
    /// The first packet sequence number this side sends with (24 bits).
    pub psn: u32,
    /// The GID packets go to.
    pub gid: [u8; 16],
    /// The port's active MTU in bytes; the path uses the smaller of the two sides'.
    pub mtu: u32,
}

/// Sizes of a queue pair's queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Work requests the send queue holds.
    pub send_wr: u32,
    /// Work requests the receive queue holds.
    pub recv_wr: u32,
    /// Inline bytes a send may carry (the provider may lower it; see [`RcQueuePair::max_inline`]).
    pub inline: u32,
}

/// The retry policy of a connected queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Local ack timeout exponent: 4.096 µs × 2^timeout per try.
    pub timeout: u8,
    /// Transport retries before `RETRY_EXC_ERR` (at most 6: 7 is infinite on some devices).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries before `RNR_RETRY_EXC_ERR` (at most 6: 7 is infinite).
    pub rnr_retry: u8,
}

impl Default for RetryPolicy {
    /// About half a second per try on rxe; a peer killed mid-transfer is reported in seconds.
    fn default() -> Self {
        RetryPolicy { timeout: 16, retry_cnt: 6, rnr_retry: 6 }
    }
}

/// Bytes of an MTU as the `ibv_mtu` enum names it; the largest enum value not above `bytes`.
pub fn mtu_enum(bytes: u32) -> sys::ibv_mtu::Type {
    match bytes {
        4096.. => sys::ibv_mtu::IBV_MTU_4096,
        2048.. => sys::ibv_mtu::IBV_MTU_2048,
        1024.. => sys::ibv_mtu::IBV_MTU_1024,
        512.. => sys::ibv_mtu::IBV_MTU_512,
        _ => sys::ibv_mtu::IBV_MTU_256,
    }
}

/// A reliable-connected queue pair (`IBV_QPT_RC`); destroyed on drop.
pub struct RcQueuePair {
    qp: *mut sys::ibv_qp,
    local: QpAddress,
    gid_index: u8,
    max_inline: u32,
    pd: Arc<ProtectionDomain>,
    _cq: Arc<CompletionQueue>,
    _srq: Option<Arc<SharedReceiveQueue>>,
}

// SAFETY: the QP is only handed to libibverbs calls, which may come from any thread; posting is
// serialised by the owner.
unsafe impl Send for RcQueuePair {}
// SAFETY: as above.
unsafe impl Sync for RcQueuePair {}

/// One scatter-gather entry: `len` bytes at `addr` of a memory region registered with `lkey`.
#[derive(Clone, Copy, Debug)]
pub struct Local {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// Where in the peer's memory an RDMA request goes.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    /// The peer's virtual address.
    pub addr: u64,
    /// The peer's memory region key.
    pub rkey: u32,
}

/// What a send-queue work request does.
#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    /// `IBV_WR_SEND`: the bytes go to the peer's next posted receive.
    Send,
    /// `IBV_WR_RDMA_WRITE` to `Remote`.
    Write(Remote),
    /// `IBV_WR_RDMA_READ` from `Remote` into the local entry.
    Read(Remote),
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` of the value on the 8 bytes at `Remote`; the old value
    /// lands in the local entry.
    FetchAdd(Remote, u64),
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: `(compare, swap)`; the old value lands in the local entry.
    CompareSwap(Remote, u64, u64),
}

impl RcQueuePair {
    /// A queue pair in the INIT state on `pd`'s port, sending and receiving through `cq`, with
    /// remote read, write and atomic access allowed (each memory region still decides its own).
    /// With `srq`, incoming sends take their receives from it (and `caps.recv_wr` is unused).
    pub fn create(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        srq: Option<&Arc<SharedReceiveQueue>>,
        caps: QpCaps,
        gid_index: u8,
    ) -> Result<RcQueuePair, String> {
        // SAFETY: plain C struct, all-zero valid.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.raw();
        init.recv_cq = cq.raw();
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.srq = srq.map_or(std::ptr::null_mut(), |srq| srq.raw());
        init.cap = sys::ibv_qp_cap {
            max_send_wr: caps.send_wr,
            max_recv_wr: if srq.is_some() { 0 } else { caps.recv_wr },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: caps.inline,
        };
        // SAFETY: a live PD and CQ; `init` may be updated with the granted caps.
        let qp = unsafe { sys::ibv_create_qp(pd.raw_pd(), &mut init) };
        if qp.is_null() {
            return Err(format!("ibv_create_qp on {}: {}", pd.name(), std::io::Error::last_os_error()));
        }
        let max_inline = init.cap.max_inline_data;
        let mut this = RcQueuePair {
            qp,
            local: QpAddress { qpn: 0, psn: 0, gid: [0; 16], mtu: 0 },
            gid_index,
            max_inline,
            pd: Arc::clone(pd),
            _cq: Arc::clone(cq),
            _srq: srq.cloned(),
        };
        // SAFETY: a live QP.
        this.local.qpn = unsafe { (*qp).qp_num };
        this.local.psn = random_psn();
        // SAFETY: plain C struct, all-zero valid.
        let mut gid: sys::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: an open context, the port in use, a valid out-pointer.
        let rc = unsafe { sys::ibv_query_gid(pd.raw_context(), pd.port(), i32::from(gid_index), &mut gid) };
        if rc != 0 {
            return Err(format!("ibv_query_gid({}:{}, {gid_index}) failed", pd.name(), pd.port()));
        }
        // SAFETY: the raw bytes of the union.
        this.local.gid = unsafe { gid.raw };
        // SAFETY: plain C struct, all-zero valid.
        let mut port: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context, a valid port and out-pointer.
        unsafe { sys::zcx_ibv_query_port(pd.raw_context(), pd.port(), &mut port) };
        this.local.mtu = super::device::mtu_bytes(port.active_mtu);
        this.modify_init()?;
        Ok(this)
    }

    /// What the peer needs to connect to this queue pair.
    pub fn local_address(&self) -> QpAddress {
        self.local
    }

    /// The largest inline send, as the provider granted it.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, what: &str) -> Result<(), String> {
        // SAFETY: a live QP and a filled attribute struct whose `mask` fields are set.
        let rc = unsafe { sys::ibv_modify_qp(self.qp, attr, mask as i32) };
        if rc != 0 {
            return Err(format!("ibv_modify_qp to {what}: {}", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    fn modify_init(&self) -> Result<(), String> {
        use sys::ibv_qp_attr_mask::*;
        // SAFETY: plain C struct, all-zero valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = self.pd.port();
        attr.qp_access_flags = sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        self.modify(&mut attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT")
    }

    /// Connects to the peer's queue pair at `remote` (RTR, then RTS), with `retry`.
    pub fn connect(&self, remote: &QpAddress, retry: RetryPolicy) -> Result<(), String> {
        use sys::ibv_qp_attr_mask::*;
        if retry.retry_cnt > 6 || retry.rnr_retry > 6 {
            return Err("retry counts above 6 would retry forever".into());
        }
        // SAFETY: plain C struct, all-zero valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = mtu_enum(self.local.mtu.min(remote.mtu));
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn & 0x00ff_ffff;
        attr.max_dest_rd_atomic = 16;
        attr.min_rnr_timer = 12;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = self.pd.port();
        attr.ah_attr.grh.dgid = sys::ibv_gid { raw: remote.gid };
        attr.ah_attr.grh.sgid_index = self.gid_index;
        attr.ah_attr.grh.hop_limit = 64;
        self.modify(
            &mut attr,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        // SAFETY: plain C struct, all-zero valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = self.local.psn & 0x00ff_ffff;
        attr.timeout = retry.timeout;
        attr.retry_cnt = retry.retry_cnt;
        attr.rnr_retry = retry.rnr_retry;
        attr.max_rd_atomic = 16;
        self.modify(
            &mut attr,
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Posts one send-queue work request: `op` with `local` as its data (source of a send or
    /// write, destination of a read or an atomic's old value), a completion when `signaled`.
    /// Sends and writes no larger than [`RcQueuePair::max_inline`] go inline.
    ///
    /// # Safety
    /// `local` names memory registered with `lkey` that stays valid, and is not written by anyone
    /// else, until the work request completes (or, inline, until this returns). For a read or an
    /// atomic it is written by the NIC.
    pub unsafe fn post(&self, wr_id: u64, op: SendOp, local: Local, signaled: bool) -> Result<(), TlError> {
        let mut sge = sys::ibv_sge { addr: local.addr, length: local.len, lkey: local.lkey };
        // SAFETY: plain C struct, all-zero valid (null `next`: one request).
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(local.len > 0);
        let mut flags = if signaled { sys::ibv_send_flags::IBV_SEND_SIGNALED } else { 0 };
        use sys::ibv_wr_opcode::*;
        let (opcode, may_inline) = match op {
            SendOp::Send => (IBV_WR_SEND, true),
            SendOp::Write(remote) => {
                wr.wr.rdma = rdma(remote);
                (IBV_WR_RDMA_WRITE, true)
            }
            SendOp::Read(remote) => {
                wr.wr.rdma = rdma(remote);
                (IBV_WR_RDMA_READ, false)
            }
            SendOp::FetchAdd(remote, add) => {
                wr.wr.atomic = atomic(remote, add, 0);
                (IBV_WR_ATOMIC_FETCH_AND_ADD, false)
            }
            SendOp::CompareSwap(remote, compare, swap) => {
                wr.wr.atomic = atomic(remote, compare, swap);
                (IBV_WR_ATOMIC_CMP_AND_SWP, false)
            }
        };
        wr.opcode = opcode;
        // Only the bytes a send or write carries out can go inline; a read or an atomic writes
        // its local entry.
        if may_inline && local.len <= self.max_inline {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        wr.send_flags = flags;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; `wr` and `sge` live through the call (the provider copies them);
        // the memory they name is the caller's contract.
        let rc = unsafe { sys::zcx_ibv_post_send(self.qp, &mut wr, &mut bad) };
        post_result(rc)
    }

    /// Moves the queue pair to the error state: the device stops executing it, and every work
    /// request still posted completes with a flush error.
    pub fn to_error(&self) {
        // SAFETY: plain C struct, all-zero valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
        if let Err(e) = self.modify(&mut attr, sys::ibv_qp_attr_mask::IBV_QP_STATE, "ERR") {
            tracing::debug!(%e, "moving a queue pair to the error state failed");
        }
    }

    /// Posts a receive into `local`.
    ///
    /// # Safety
    /// `local` names registered memory that stays valid, and is not touched by anyone else, until
    /// the receive completes.
    pub unsafe fn post_recv(&self, wr_id: u64, local: Local) -> Result<(), TlError> {
        let mut sge = sys::ibv_sge { addr: local.addr, length: local.len, lkey: local.lkey };
        // SAFETY: plain C struct, all-zero valid.
        let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the request is copied by the provider.
        let rc = unsafe { sys::zcx_ibv_post_recv(self.qp, &mut wr, &mut bad) };
        post_result(rc)
    }
}

/// The RDMA fields of a work request aimed at `remote`.
fn rdma(remote: Remote) -> sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
    sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: remote.addr, rkey: remote.rkey }
}

/// The atomic fields of a work request on the 8 bytes at `remote`.
fn atomic(remote: Remote, compare_add: u64, swap: u64) -> sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
    sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
        remote_addr: remote.addr,
        compare_add,
        swap,
        rkey: remote.rkey,
    }
}

fn post_result(rc: i32) -> Result<(), TlError> {
    match rc {
        0 => Ok(()),
        libc::ENOMEM => Err(TlError::NoResource),
        libc::EINVAL => Err(TlError::InvalidParam),
        other => Err(TlError::Os(other)),
    }
}

/// A random 24-bit packet sequence number, so a stale packet of an earlier connection on a
/// reused QP number does not fit the new one.
fn random_psn() -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: a valid buffer of its length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != 4 {
        // Not a secret: any value works, a fixed one only loses the stale-packet protection.
        return 0x5a_5a5a;
    }
    u32::from_le_bytes(bytes) & 0x00ff_ffff
}

impl Drop for RcQueuePair {
    fn drop(&mut self) {
        // SAFETY: created in `create`, destroyed once; its CQ and PD outlive it (held here).
        let rc = unsafe { sys::ibv_destroy_qp(self.qp) };
        if rc != 0 {
            tracing::warn!(rc, qpn = self.local.qpn, "ibv_destroy_qp failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_mtus_round_down_to_an_ibv_mtu() {
        use sys::ibv_mtu::*;
        assert_eq!(mtu_enum(4096), IBV_MTU_4096);
        assert_eq!(mtu_enum(9000), IBV_MTU_4096);
        assert_eq!(mtu_enum(1500), IBV_MTU_1024);
        assert_eq!(mtu_enum(1024), IBV_MTU_1024);
        assert_eq!(mtu_enum(300), IBV_MTU_256);
        assert_eq!(mtu_enum(0), IBV_MTU_256);
    }

    #[test]
    fn the_default_retry_policy_gives_up() {
        let policy = RetryPolicy::default();
        assert!(policy.retry_cnt <= 6 && policy.rnr_retry <= 6, "7 retries forever");
        assert!(random_psn() < 1 << 24);
    }
}
