/* The DPDK 22.11 headers zcx binds, plus the zcx shim; input of regen.sh (bindgen). */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memory.h>
#include <rte_malloc.h>
#include <rte_dev.h>
#include <rte_bus_vdev.h>
#include <rte_ether.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_version.h>

#include "shim/shim.h"
