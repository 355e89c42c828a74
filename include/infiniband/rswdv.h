/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Definitions specific to the rsw software provider.
 *
 * Parent-domain allocators (ibv_alloc_parent_domain(3),
 * IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS): rsw asks alloc() for the rings
 * of the QPs, CQs and SRQs made on the parent domain (a CQ names it with
 * IBV_CQ_INIT_ATTR_MASK_PD), one call per array of a ring, and hands each
 * buffer back with free() when the object is destroyed, when
 * ibv_resize_cq()/ibv_modify_srq(IBV_SRQ_MAX_WR) replaces the ring, or
 * when creation fails after it. The resource_type it passes is one of the
 * codes below: the low 32 bits are mlx5dv's resource codes (QP 1, RWQ 2,
 * DBR 3, SRQ 4, CQ 5), so an allocator written for mlx5 that looks at the
 * code sees the same kinds of buffers; the high 32 bits, which name the
 * kernel driver (enum rdma_driver_id), are RDMA_DRIVER_UNKNOWN (0): rsw is
 * no kernel driver, and its rings are not mlx5 WQE or CQE buffers, so a
 * comparison with the full MLX5DV_RES_TYPE_* values does not match.
 *
 * rsw has no doorbell records and no WQ objects: it never passes
 * RSW_RES_TYPE_DBR or RSW_RES_TYPE_RWQ (defined for the numbering).
 * A receive ring that lives in rsw's same-host mailbox (an RC or UC QP's
 * own receive queue, a basic SRQ's, while the same-host path is on) is in
 * memory the peer processes map, so it is not asked of alloc().
 */
#ifndef RSWDV_H
#define RSWDV_H

#include <stdint.h>

#define RSW_RES_TYPE_QP ((uint64_t)1)
#define RSW_RES_TYPE_RWQ ((uint64_t)2)
#define RSW_RES_TYPE_DBR ((uint64_t)3)
#define RSW_RES_TYPE_SRQ ((uint64_t)4)
#define RSW_RES_TYPE_CQ ((uint64_t)5)

#endif /* RSWDV_H */
