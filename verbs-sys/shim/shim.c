/* zcx verbs shim: see shim.h. */
#include "shim.h"

int zcx_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
    return ibv_post_send(qp, wr, bad_wr);
}

int zcx_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
    return ibv_post_recv(qp, wr, bad_wr);
}

int zcx_ibv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
    return ibv_post_srq_recv(srq, wr, bad_wr);
}

int zcx_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc) {
    return ibv_poll_cq(cq, num_entries, wc);
}

int zcx_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
    return ibv_req_notify_cq(cq, solicited_only);
}

struct ibv_mr *zcx_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, unsigned int access) {
    return ibv_reg_mr(pd, addr, length, (int)access);
}

int zcx_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr) {
    return ibv_query_port(context, port_num, port_attr);
}

int zcx_ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                         struct ibv_gid_entry *entry, uint32_t flags) {
    return ibv_query_gid_ex(context, port_num, gid_index, entry, flags);
}

size_t zcx_ibv_layout(enum zcx_ibv_layout_item item) {
    switch (item) {
    case ZCX_IBV_SIZEOF_SEND_WR: return sizeof(struct ibv_send_wr);
    case ZCX_IBV_OFFSETOF_SEND_WR_WR_ID: return offsetof(struct ibv_send_wr, wr_id);
    case ZCX_IBV_OFFSETOF_SEND_WR_NEXT: return offsetof(struct ibv_send_wr, next);
    case ZCX_IBV_OFFSETOF_SEND_WR_SG_LIST: return offsetof(struct ibv_send_wr, sg_list);
    case ZCX_IBV_OFFSETOF_SEND_WR_NUM_SGE: return offsetof(struct ibv_send_wr, num_sge);
    case ZCX_IBV_OFFSETOF_SEND_WR_OPCODE: return offsetof(struct ibv_send_wr, opcode);
    case ZCX_IBV_OFFSETOF_SEND_WR_SEND_FLAGS: return offsetof(struct ibv_send_wr, send_flags);
    case ZCX_IBV_OFFSETOF_SEND_WR_IMM_DATA: return offsetof(struct ibv_send_wr, imm_data);
    case ZCX_IBV_OFFSETOF_SEND_WR_WR: return offsetof(struct ibv_send_wr, wr);
    case ZCX_IBV_SIZEOF_RECV_WR: return sizeof(struct ibv_recv_wr);
    case ZCX_IBV_SIZEOF_SGE: return sizeof(struct ibv_sge);
    case ZCX_IBV_SIZEOF_WC: return sizeof(struct ibv_wc);
    case ZCX_IBV_OFFSETOF_WC_STATUS: return offsetof(struct ibv_wc, status);
    case ZCX_IBV_OFFSETOF_WC_OPCODE: return offsetof(struct ibv_wc, opcode);
    case ZCX_IBV_OFFSETOF_WC_BYTE_LEN: return offsetof(struct ibv_wc, byte_len);
    case ZCX_IBV_OFFSETOF_WC_QP_NUM: return offsetof(struct ibv_wc, qp_num);
    case ZCX_IBV_SIZEOF_QP_ATTR: return sizeof(struct ibv_qp_attr);
    case ZCX_IBV_OFFSETOF_QP_ATTR_AH_ATTR: return offsetof(struct ibv_qp_attr, ah_attr);
    case ZCX_IBV_OFFSETOF_QP_ATTR_DEST_QP_NUM: return offsetof(struct ibv_qp_attr, dest_qp_num);
    case ZCX_IBV_SIZEOF_PORT_ATTR: return sizeof(struct ibv_port_attr);
    case ZCX_IBV_OFFSETOF_PORT_ATTR_ACTIVE_MTU: return offsetof(struct ibv_port_attr, active_mtu);
    case ZCX_IBV_OFFSETOF_PORT_ATTR_LINK_LAYER: return offsetof(struct ibv_port_attr, link_layer);
    case ZCX_IBV_SIZEOF_DEVICE_ATTR: return sizeof(struct ibv_device_attr);
    case ZCX_IBV_OFFSETOF_DEVICE_ATTR_ATOMIC_CAP: return offsetof(struct ibv_device_attr, atomic_cap);
    case ZCX_IBV_SIZEOF_GID: return sizeof(union ibv_gid);
    case ZCX_IBV_SIZEOF_MR: return sizeof(struct ibv_mr);
    case ZCX_IBV_OFFSETOF_MR_RKEY: return offsetof(struct ibv_mr, rkey);
    case ZCX_IBV_SIZEOF_CONTEXT: return sizeof(struct ibv_context);
    case ZCX_IBV_OFFSETOF_CONTEXT_OPS: return offsetof(struct ibv_context, ops);
    case ZCX_IBV_LAYOUT_ITEMS: break;
    }
    return (size_t)-1;
}
