/*
 * ds_self_ah.so: preloaded into a program over Debian's (rdma-core 44's)
 * librdmacm so that its datagram rsockets can run on a RoCE port at all.
 *
 * rdma-core 44 gives each datagram rsocket QP an address handle for the
 * QP itself (ds_add_qp_dest: the port's LID, no GRH), used to hand itself
 * the datagrams that first arrive through the UDP socket. On RoCE (rxe) a
 * GRH is required, so the kernel refuses that AH with EINVAL and every
 * datagram rsocket fails (rconnect: ENOENT or ENOMEM) before a byte moves.
 * This wrapper of ibv_create_ah gives such an AH, on an Ethernet port
 * only, the GRH of the port's first IPv4-mapped GID: it then reaches this
 * host, where the QP is. Every other AH passes through untouched. The VM
 * cases kcm/udpong-* run Debian's side under it (see
 * ctests/vm/guest-tests.sh); the wire protocol is not changed by it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include <infiniband/verbs.h>

typedef struct ibv_ah *(*create_ah_fn)(struct ibv_pd *, struct ibv_ah_attr *);

static int v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g->raw, prefix, sizeof(prefix));
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	create_ah_fn real = (create_ah_fn)dlsym(RTLD_NEXT, "ibv_create_ah");
	struct ibv_port_attr pa;
	struct ibv_ah_attr a;
	union ibv_gid gid;

	if (!real)
		return NULL;
	if (attr->is_global || ibv_query_port(pd->context, attr->port_num, &pa) ||
	    pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		return real(pd, attr);
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid(pd->context, attr->port_num, i, &gid) || !v4_mapped(&gid))
			continue;
		a = *attr;
		a.is_global = 1;
		a.grh.dgid = gid;
		a.grh.sgid_index = i;
		a.grh.hop_limit = 64;
		return real(pd, &a);
	}
	return real(pd, attr);
}
