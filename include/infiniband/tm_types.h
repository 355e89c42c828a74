/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Wire headers used by tag-matching offload (TM SRQs).
 */
#ifndef _TM_TYPES_H
#define _TM_TYPES_H

#include <stdint.h>
#include <linux/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ibv_tmh_op {
	IBV_TMH_NO_TAG = 0,
	IBV_TMH_RNDV = 1,
	IBV_TMH_FIN = 2,
	IBV_TMH_EAGER = 3,
};

/* Tag-matching header that prefixes each tagged message. */
struct ibv_tmh {
	uint8_t opcode;		/* enum ibv_tmh_op */
	uint8_t reserved[3];	/* zero */
	__be32 app_ctx;
	__be64 tag;
};

/* Rendezvous header: where the sender's payload can be read from. */
struct ibv_rvh {
	__be64 va;
	__be32 rkey;
	__be32 len;
};

#ifdef __cplusplus
}
#endif

#endif /* _TM_TYPES_H */
