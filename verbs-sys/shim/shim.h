/*
 * zcx verbs shim: out-of-line wrappers for the libibverbs (rdma-core 44) calls that exist only as
 * `static inline` functions or macros in <infiniband/verbs.h>, so Rust (which cannot call them)
 * can, plus a layout probe that lets a test compare the generated bindings with the header.
 *
 * Every wrapper is named after the call it wraps with a `zcx_` prefix, takes the same arguments
 * and has the same semantics; the libibverbs documentation of the wrapped call applies unchanged.
 */
#ifndef ZCX_VERBS_SHIM_H
#define ZCX_VERBS_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* Posts a chain of send work requests (ibv_post_send): 0, or an errno with *bad_wr at the first
 * request not posted. */
int zcx_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

/* Posts a chain of receive work requests to a queue pair (ibv_post_recv). */
int zcx_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/* Posts a chain of receive work requests to a shared receive queue (ibv_post_srq_recv). */
int zcx_ibv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/* Polls up to num_entries completions (ibv_poll_cq): how many were written to wc, or < 0. */
int zcx_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);

/* Asks for a completion event on the CQ's channel (ibv_req_notify_cq): 0, or an errno. */
int zcx_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* Registers a memory region (the ibv_reg_mr macro, which also handles IBV_ACCESS_OPTIONAL_*). */
struct ibv_mr *zcx_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, unsigned int access);

/* Queries a port (the ibv_query_port macro, which fills the extended attributes too). */
int zcx_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);

/* Reads one GID table entry with its type (RoCE v1 or v2) and netdev (ibv_query_gid_ex). */
int zcx_ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                         struct ibv_gid_entry *entry, uint32_t flags);

/* What zcx_ibv_layout reports: the C compiler's size or field offset of a bound struct. */
enum zcx_ibv_layout_item {
    ZCX_IBV_SIZEOF_SEND_WR,
    ZCX_IBV_OFFSETOF_SEND_WR_WR_ID,
    ZCX_IBV_OFFSETOF_SEND_WR_NEXT,
    ZCX_IBV_OFFSETOF_SEND_WR_SG_LIST,
    ZCX_IBV_OFFSETOF_SEND_WR_NUM_SGE,
    ZCX_IBV_OFFSETOF_SEND_WR_OPCODE,
    ZCX_IBV_OFFSETOF_SEND_WR_SEND_FLAGS,
    ZCX_IBV_OFFSETOF_SEND_WR_IMM_DATA,
    ZCX_IBV_OFFSETOF_SEND_WR_WR,
    ZCX_IBV_SIZEOF_RECV_WR,
    ZCX_IBV_SIZEOF_SGE,
    ZCX_IBV_SIZEOF_WC,
    ZCX_IBV_OFFSETOF_WC_STATUS,
    ZCX_IBV_OFFSETOF_WC_OPCODE,
    ZCX_IBV_OFFSETOF_WC_BYTE_LEN,
    ZCX_IBV_OFFSETOF_WC_QP_NUM,
    ZCX_IBV_SIZEOF_QP_ATTR,
    ZCX_IBV_OFFSETOF_QP_ATTR_AH_ATTR,
    ZCX_IBV_OFFSETOF_QP_ATTR_DEST_QP_NUM,
    ZCX_IBV_SIZEOF_PORT_ATTR,
    ZCX_IBV_OFFSETOF_PORT_ATTR_ACTIVE_MTU,
    ZCX_IBV_OFFSETOF_PORT_ATTR_LINK_LAYER,
    ZCX_IBV_SIZEOF_DEVICE_ATTR,
    ZCX_IBV_OFFSETOF_DEVICE_ATTR_ATOMIC_CAP,
    ZCX_IBV_SIZEOF_GID,
    ZCX_IBV_SIZEOF_MR,
    ZCX_IBV_OFFSETOF_MR_RKEY,
    ZCX_IBV_SIZEOF_CONTEXT,
    ZCX_IBV_OFFSETOF_CONTEXT_OPS,
    ZCX_IBV_LAYOUT_ITEMS
};

/* The size or offset named by item, as this C compiler lays the header out; (size_t)-1 for an
 * item out of range. */
size_t zcx_ibv_layout(enum zcx_ibv_layout_item item);

#endif
