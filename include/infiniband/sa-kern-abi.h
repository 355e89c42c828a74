/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Obsolete: old names for the kernel's path record layout.  Use
 * <rdma/ib_user_sa.h> (from the kernel UAPI headers) directly.
 */
#ifndef INFINIBAND_SA_KERN_ABI_H
#define INFINIBAND_SA_KERN_ABI_H

#warning "This header is obsolete, use rdma/ib_user_sa.h instead"

#include <rdma/ib_user_sa.h>

#define ib_kern_path_rec ib_user_path_rec
#define ibv_kern_path_rec ib_user_path_rec

#endif /* INFINIBAND_SA_KERN_ABI_H */
