/*
 * zcx DPDK shim: out-of-line wrappers for the DPDK 22.11 fast-path helpers that exist only as
 * `static inline` functions or macros in the headers, so Rust (which cannot call them) can.
 *
 * Every wrapper is named after the call it wraps with a `zcx_` prefix, takes the same arguments and
 * has the same semantics; the DPDK documentation of the wrapped call applies unchanged.
 */
#ifndef ZCX_DPDK_SHIM_H
#define ZCX_DPDK_SHIM_H

#include <stdint.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* Receives up to nb_pkts packets from rx queue queue_id of port_id (rte_eth_rx_burst). */
uint16_t zcx_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                              uint16_t nb_pkts);

/* Queues up to nb_pkts packets on tx queue queue_id of port_id (rte_eth_tx_burst). The driver owns
 * the mbufs it accepted; the caller still owns the rest. */
uint16_t zcx_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                              uint16_t nb_pkts);

/* Allocates and resets one packet mbuf from mp, or returns NULL (rte_pktmbuf_alloc). */
struct rte_mbuf *zcx_rte_pktmbuf_alloc(struct rte_mempool *mp);

/* Allocates count packet mbufs at once: 0 on success, a negative errno and none allocated otherwise
 * (rte_pktmbuf_alloc_bulk). */
int zcx_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);

/* Frees a packet mbuf and every segment chained to it; NULL is a no-op (rte_pktmbuf_free). */
void zcx_rte_pktmbuf_free(struct rte_mbuf *m);

/* The address of the first data byte of m's first segment (rte_pktmbuf_mtod). */
void *zcx_rte_pktmbuf_mtod(struct rte_mbuf *m);

/* The address of data byte off of m's first segment (rte_pktmbuf_mtod_offset). */
void *zcx_rte_pktmbuf_mtod_offset(struct rte_mbuf *m, uint32_t off);

/* The IO address of the first data byte of m's first segment (rte_pktmbuf_iova). */
rte_iova_t zcx_rte_pktmbuf_iova(const struct rte_mbuf *m);

/* Bytes free before the data of m's first segment (rte_pktmbuf_headroom). */
uint16_t zcx_rte_pktmbuf_headroom(const struct rte_mbuf *m);

/* Bytes free after the data of m's last segment (rte_pktmbuf_tailroom). */
uint16_t zcx_rte_pktmbuf_tailroom(const struct rte_mbuf *m);

/* Grows the packet at its end by len bytes and returns the start of them, or NULL if the last
 * segment has no room (rte_pktmbuf_append). */
char *zcx_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);

/* Grows the packet at its front by len bytes and returns the new data start, or NULL if the
 * headroom is too small (rte_pktmbuf_prepend). */
char *zcx_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);

/* Removes len bytes from the front of the packet and returns the new data start, or NULL if the
 * first segment is shorter (rte_pktmbuf_adj). */
char *zcx_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);

/* Removes len bytes from the end of the packet: 0, or -1 if the last segment is shorter
 * (rte_pktmbuf_trim). */
int zcx_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);

/* Resets m's headroom to the default (rte_pktmbuf_reset_headroom). */
void zcx_rte_pktmbuf_reset_headroom(struct rte_mbuf *m);

/* Attaches an external buffer to a direct mbuf with refcnt 1 (rte_pktmbuf_attach_extbuf). */
void zcx_rte_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
                                   uint16_t buf_len, struct rte_mbuf_ext_shared_info *shinfo);

/* Carves the shared info from the end of an external buffer, shrinking *buf_len, and initialises it
 * with free_cb, fcb_opaque and refcnt 1; NULL if the buffer is too small
 * (rte_pktmbuf_ext_shinfo_init_helper). */
struct rte_mbuf_ext_shared_info *zcx_rte_pktmbuf_ext_shinfo_init_helper(
    void *buf_addr, uint16_t *buf_len, rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque);

/* Detaches an indirect or external buffer from m, restoring its own (rte_pktmbuf_detach). */
void zcx_rte_pktmbuf_detach(struct rte_mbuf *m);

/* m's reference count (rte_mbuf_refcnt_read). */
uint16_t zcx_rte_mbuf_refcnt_read(const struct rte_mbuf *m);

/* Sets m's reference count (rte_mbuf_refcnt_set). */
void zcx_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t new_value);

/* Adds value to m's reference count and returns the new count (rte_mbuf_refcnt_update). */
uint16_t zcx_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value);

/* The reference count of an external buffer's shared info (rte_mbuf_ext_refcnt_read). */
uint16_t zcx_rte_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo);

/* The calling thread's lcore id, or LCORE_ID_ANY for a thread EAL does not know (rte_lcore_id). */
unsigned int zcx_rte_lcore_id(void);

/* The calling thread's rte_errno. */
int zcx_rte_errno(void);

/* Sets the calling thread's rte_errno. */
void zcx_rte_set_errno(int value);

#endif /* ZCX_DPDK_SHIM_H */
