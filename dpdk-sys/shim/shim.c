/* Out-of-line wrappers for DPDK's static-inline fast-path helpers; see shim.h. */
#include "shim.h"

#include <rte_errno.h>
#include <rte_lcore.h>

uint16_t zcx_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                              uint16_t nb_pkts)
{
    return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t zcx_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                              uint16_t nb_pkts)
{
    return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *zcx_rte_pktmbuf_alloc(struct rte_mempool *mp)
{
    return rte_pktmbuf_alloc(mp);
}

int zcx_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count)
{
    return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void zcx_rte_pktmbuf_free(struct rte_mbuf *m)
{
    rte_pktmbuf_free(m);
}

void *zcx_rte_pktmbuf_mtod(struct rte_mbuf *m)
{
    return rte_pktmbuf_mtod(m, void *);
}

void *zcx_rte_pktmbuf_mtod_offset(struct rte_mbuf *m, uint32_t off)
{
    return rte_pktmbuf_mtod_offset(m, void *, off);
}

rte_iova_t zcx_rte_pktmbuf_iova(const struct rte_mbuf *m)
{
    return rte_pktmbuf_iova(m);
}

uint16_t zcx_rte_pktmbuf_headroom(const struct rte_mbuf *m)
{
    return rte_pktmbuf_headroom(m);
}

uint16_t zcx_rte_pktmbuf_tailroom(const struct rte_mbuf *m)
{
    return rte_pktmbuf_tailroom(m);
}

char *zcx_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
    return rte_pktmbuf_append(m, len);
}

char *zcx_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
    return rte_pktmbuf_prepend(m, len);
}

char *zcx_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
    return rte_pktmbuf_adj(m, len);
}

int zcx_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
    return rte_pktmbuf_trim(m, len);
}

void zcx_rte_pktmbuf_reset_headroom(struct rte_mbuf *m)
{
    rte_pktmbuf_reset_headroom(m);
}

void zcx_rte_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
                                   uint16_t buf_len, struct rte_mbuf_ext_shared_info *shinfo)
{
    rte_pktmbuf_attach_extbuf(m, buf_addr, buf_iova, buf_len, shinfo);
}

struct rte_mbuf_ext_shared_info *zcx_rte_pktmbuf_ext_shinfo_init_helper(
    void *buf_addr, uint16_t *buf_len, rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque)
{
    return rte_pktmbuf_ext_shinfo_init_helper(buf_addr, buf_len, free_cb, fcb_opaque);
}

void zcx_rte_pktmbuf_detach(struct rte_mbuf *m)
{
    rte_pktmbuf_detach(m);
}

uint16_t zcx_rte_mbuf_refcnt_read(const struct rte_mbuf *m)
{
    return rte_mbuf_refcnt_read(m);
}

void zcx_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t new_value)
{
    rte_mbuf_refcnt_set(m, new_value);
}

uint16_t zcx_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value)
{
    return rte_mbuf_refcnt_update(m, value);
}

uint16_t zcx_rte_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo)
{
    return rte_mbuf_ext_refcnt_read(shinfo);
}

unsigned int zcx_rte_lcore_id(void)
{
    return rte_lcore_id();
}

int zcx_rte_errno(void)
{
    return rte_errno;
}

void zcx_rte_set_errno(int value)
{
    rte_errno = value;
}
