/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Pulls in every public header and forces each static inline helper to be
 * emitted, so that the bodies are compiled (and warned about) in C and C++.
 * The two deliberately obsolete headers (arch.h, sa-kern-abi.h) emit a
 * #warning and are checked separately by compile_headers.sh.
 */
#include <infiniband/verbs.h>
#include <infiniband/verbs_api.h>
#include <infiniband/ib_user_ioctl_verbs.h>
#include <infiniband/sa.h>
#include <infiniband/opcode.h>
#include <infiniband/tm_types.h>
#include <infiniband/rswdv.h>
#include <infiniband/ib.h>
#include <infiniband/marshall.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

/* Headers must be idempotent. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define KEEP(fn) (void *)(uintptr_t)&fn

void *const all_inline_helpers[] = {
	KEEP(ibv_wr_atomic_cmp_swp), KEEP(ibv_wr_atomic_fetch_add),
	KEEP(ibv_wr_bind_mw), KEEP(ibv_wr_local_inv), KEEP(ibv_wr_rdma_read),
	KEEP(ibv_wr_rdma_write), KEEP(ibv_wr_rdma_write_imm),
	KEEP(ibv_wr_send), KEEP(ibv_wr_send_imm), KEEP(ibv_wr_send_inv),
	KEEP(ibv_wr_send_tso), KEEP(ibv_wr_set_ud_addr),
	KEEP(ibv_wr_set_xrc_srqn), KEEP(ibv_wr_set_inline_data),
	KEEP(ibv_wr_set_inline_data_list), KEEP(ibv_wr_set_sge),
	KEEP(ibv_wr_set_sge_list), KEEP(ibv_wr_start), KEEP(ibv_wr_complete),
	KEEP(ibv_wr_abort), KEEP(ibv_wr_atomic_write),
	KEEP(ibv_cq_ex_to_cq), KEEP(ibv_start_poll), KEEP(ibv_next_poll),
	KEEP(ibv_end_poll), KEEP(ibv_wc_read_opcode),
	KEEP(ibv_wc_read_vendor_err), KEEP(ibv_wc_read_byte_len),
	KEEP(ibv_wc_read_imm_data), KEEP(ibv_wc_read_invalidated_rkey),
	KEEP(ibv_wc_read_qp_num), KEEP(ibv_wc_read_src_qp),
	KEEP(ibv_wc_read_wc_flags), KEEP(ibv_wc_read_slid),
	KEEP(ibv_wc_read_sl), KEEP(ibv_wc_read_dlid_path_bits),
	KEEP(ibv_wc_read_completion_ts),
	KEEP(ibv_wc_read_completion_wallclock_ns), KEEP(ibv_wc_read_cvlan),
	KEEP(ibv_wc_read_flow_tag), KEEP(ibv_wc_read_tm_info),
	KEEP(ibv_post_wq_recv), KEEP(verbs_get_ctx), KEEP(___ibv_query_port),
	KEEP(ibv_query_gid_ex), KEEP(ibv_query_gid_table),
	KEEP(ibv_create_flow), KEEP(ibv_destroy_flow),
	KEEP(ibv_create_flow_action_esp), KEEP(ibv_modify_flow_action_esp),
	KEEP(ibv_destroy_flow_action), KEEP(ibv_open_xrcd),
	KEEP(ibv_close_xrcd), KEEP(__ibv_reg_mr), KEEP(__ibv_reg_mr_iova),
	KEEP(ibv_alloc_mw), KEEP(ibv_dealloc_mw), KEEP(ibv_inc_rkey),
	KEEP(ibv_bind_mw), KEEP(ibv_advise_mr), KEEP(ibv_alloc_dm),
	KEEP(ibv_free_dm), KEEP(ibv_memcpy_to_dm), KEEP(ibv_memcpy_from_dm),
	KEEP(ibv_alloc_null_mr), KEEP(ibv_reg_dm_mr), KEEP(ibv_create_cq_ex),
	KEEP(ibv_poll_cq), KEEP(ibv_req_notify_cq), KEEP(ibv_modify_cq),
	KEEP(ibv_create_srq_ex), KEEP(ibv_get_srq_num),
	KEEP(ibv_post_srq_recv), KEEP(ibv_post_srq_ops),
	KEEP(ibv_create_qp_ex), KEEP(ibv_alloc_td), KEEP(ibv_dealloc_td),
	KEEP(ibv_alloc_parent_domain), KEEP(ibv_query_rt_values_ex),
	KEEP(ibv_query_device_ex), KEEP(ibv_open_qp),
	KEEP(ibv_modify_qp_rate_limit), KEEP(ibv_create_wq),
	KEEP(ibv_modify_wq), KEEP(ibv_destroy_wq),
	KEEP(ibv_create_rwq_ind_table), KEEP(ibv_destroy_rwq_ind_table),
	KEEP(ibv_post_send), KEEP(ibv_post_recv), KEEP(ibv_is_qpt_supported),
	KEEP(ibv_create_counters), KEEP(ibv_destroy_counters),
	KEEP(ibv_attach_counters_point_flow), KEEP(ibv_read_counters),
	KEEP(ibv_flow_label_to_udp_sport), KEEP(ibv_query_comp_cntr_caps),
	KEEP(ib_addr_any), KEEP(ib_addr_loopback), KEEP(ib_addr_set),
	KEEP(ib_addr_cmp), KEEP(rdma_get_local_addr),
	KEEP(rdma_get_peer_addr), KEEP(rdma_seterrno), KEEP(rdma_reg_msgs),
	KEEP(rdma_reg_read), KEEP(rdma_reg_write), KEEP(rdma_dereg_mr),
	KEEP(rdma_post_recvv), KEEP(rdma_post_sendv), KEEP(rdma_post_readv),
	KEEP(rdma_post_writev), KEEP(rdma_post_recv), KEEP(rdma_post_send),
	KEEP(rdma_post_read), KEEP(rdma_post_write), KEEP(rdma_post_ud_send),
	KEEP(rdma_get_send_comp), KEEP(rdma_get_recv_comp),
};

/* The macro forms must expand and type-check as well. */
int use_macros(struct ibv_context *ctx, struct ibv_pd *pd, void *buf,
	       unsigned int access);
int use_macros(struct ibv_context *ctx, struct ibv_pd *pd, void *buf,
	       unsigned int access)
{
	struct ibv_port_attr port_attr;
	struct ibv_mr *a = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *b = ibv_reg_mr(pd, buf, 64, access);
	struct ibv_mr *c = ibv_reg_mr_iova(pd, buf, 64, 0x1000, access);
	struct verbs_context *v = verbs_get_ctx_op(ctx, query_device_ex);

	return ibv_query_port(ctx, 1, &port_attr) + (a == b) + (b == c) +
	       (v != NULL) + vext_field_avail(struct ibv_port_attr, flags, 4);
}
