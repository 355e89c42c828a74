/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Historical byte-order helpers.  New code should call htobe64()/be64toh()
 * from <endian.h> directly; these remain for old programs only.
 */
#ifndef INFINIBAND_ARCH_H
#define INFINIBAND_ARCH_H

#include <stdint.h>
#include <endian.h>

#warning "This header is obsolete."

#ifndef ntohll
#undef htonll
static inline __attribute__((deprecated)) uint64_t htonll(uint64_t x)
{
	return htobe64(x);
}

static inline __attribute__((deprecated)) uint64_t ntohll(uint64_t x)
{
	return be64toh(x);
}
/* Self-referencing macros let callers test for them with #ifdef. */
#define htonll htonll
#define ntohll ntohll
#endif

#endif /* INFINIBAND_ARCH_H */
