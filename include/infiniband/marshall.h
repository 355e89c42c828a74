/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Converters between the kernel's uverbs/SA record layouts and the
 * libibverbs structures.  rdma-core keeps this header in its source tree
 * only; it is provided here because the functions are exported from the
 * public IBVERBS_1.0/1.1 version nodes.  The kernel structures are only
 * referenced through pointers, so forward declarations suffice; include
 * <rdma/ib_user_verbs.h> and <rdma/ib_user_sa.h> for their definitions.
 */
#ifndef INFINIBAND_MARSHALL_H
#define INFINIBAND_MARSHALL_H

#include <infiniband/verbs.h>
#include <infiniband/sa.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
struct ib_user_path_rec;

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
				 struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
			       struct ibv_sa_path_rec *src);

#ifdef __cplusplus
}
#endif

#endif /* INFINIBAND_MARSHALL_H */
