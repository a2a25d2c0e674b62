/* The libibverbs (rdma-core 44) header zcx binds, plus the zcx shim; input of regen.sh (bindgen). */
#include <infiniband/verbs.h>

#include "shim/shim.h"
