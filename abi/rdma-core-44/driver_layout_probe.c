/*
 * Prints the layouts of rdma-core 44's internal provider-facing structs
 * (libibverbs/driver.h, cmd_ioctl.h, ibverbs.h) and the constants that go
 * with them, in the format of layout.txt / enums.txt.
 *
 * Build it against rdma-core 44's *source* tree, not an installed
 * libibverbs-dev (which ships no driver.h); see ../regenerate.sh, which
 * sets up the include directories and a minimal config.h.
 *
 * Bitfields have no offsetof: the probe sets each one in a zeroed struct
 * and reports the byte and bit that changed and how many bits it holds.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/driver.h>
#include "ibverbs.h"

/* init.c's private list entry for a registered provider (not in a header). */
struct ibv_driver {
	struct list_node entry;
	const struct verbs_device_ops *ops;
};

#define HEAD(K, S)                                                             \
	printf("\n" K " %s: sizeof=%zu alignof=%zu\n", #S, sizeof(struct S),   \
	       _Alignof(struct S))
#define F(S, P, T)                                                             \
	printf("  %-44s off=%4zu size=%4zu  %s\n", #P, offsetof(struct S, P),   \
	       sizeof(((struct S *)0)->P), T)
/* a flexible array member: sizeof does not apply */
#define FLEX(S, P, T)                                                          \
	printf("  %-44s off=%4zu size=%4d  %s\n", #P, offsetof(struct S, P), 0, \
	       T)
#define A(T) printf("  -- anonymous %s\n", T)
#define BITFIELD(S, P, T)                                                      \
	do {                                                                   \
		struct S z;                                                    \
		memset(&z, 0, sizeof(z));                                      \
		z.P = -1;                                                      \
		bitfield_line(#P, (const unsigned char *)&z, sizeof(z), T);    \
	} while (0)
#define C(X)                                                                   \
	printf("  %-40s = %lld (0x%llx)\n", #X, (long long)(X),                \
	       (unsigned long long)(X))

static void bitfield_line(const char *name, const unsigned char *p, size_t n,
			  const char *type)
{
	size_t byte = 0, first = 0, width = 0, i;
	int found = 0;

	for (i = 0; i < n * 8; i++) {
		if (!(p[i / 8] & (1u << (i % 8))))
			continue;
		if (!found) {
			found = 1;
			byte = i / 8;
			first = i % 8;
		}
		width++;
	}
	printf("  %-44s (bitfield) byte=%4zu bit=%zu width=%zu  %s\n", name,
	       byte, first, width, type);
}

int main(void)
{
	printf("# layout of rdma-core 44's internal provider structs (driver.h, cmd_ioctl.h,\n"
	       "# ibverbs.h), x86_64, compiled with gcc against rdma-core 44's source tree\n");

	HEAD("struct", list_node);
	F(list_node, next, "struct list_node *");
	F(list_node, prev, "struct list_node *");

	HEAD("struct", list_head);
	F(list_head, n, "struct list_node");
	F(list_head, n.next, "struct list_node *");
	F(list_head, n.prev, "struct list_node *");

	HEAD("struct", verbs_match_ent);
	F(verbs_match_ent, driver_data, "void *");
	F(verbs_match_ent, u, "union <anon>");
	F(verbs_match_ent, u.modalias, "const char *");
	F(verbs_match_ent, u.driver_id, "uint64_t");
	F(verbs_match_ent, vendor, "uint16_t");
	F(verbs_match_ent, device, "uint16_t");
	F(verbs_match_ent, kind, "uint8_t");

	HEAD("struct", verbs_sysfs_dev);
	F(verbs_sysfs_dev, entry, "struct list_node");
	F(verbs_sysfs_dev, entry.next, "struct list_node *");
	F(verbs_sysfs_dev, entry.prev, "struct list_node *");
	F(verbs_sysfs_dev, provider_data, "void *");
	F(verbs_sysfs_dev, match, "const struct verbs_match_ent *");
	F(verbs_sysfs_dev, flags, "unsigned int");
	F(verbs_sysfs_dev, sysfs_name, "char[64]");
	F(verbs_sysfs_dev, sysfs_cdev, "dev_t");
	F(verbs_sysfs_dev, ibdev_name, "char[64]");
	F(verbs_sysfs_dev, ibdev_path, "char[256]");
	F(verbs_sysfs_dev, modalias, "char[512]");
	F(verbs_sysfs_dev, node_guid, "uint64_t");
	F(verbs_sysfs_dev, driver_id, "uint32_t");
	F(verbs_sysfs_dev, node_type, "enum ibv_node_type");
	F(verbs_sysfs_dev, ibdev_idx, "int");
	F(verbs_sysfs_dev, num_ports, "uint32_t");
	F(verbs_sysfs_dev, abi_ver, "uint32_t");
	F(verbs_sysfs_dev, time_created, "struct timespec");
	F(verbs_sysfs_dev, time_created.tv_sec, "__time_t");
	F(verbs_sysfs_dev, time_created.tv_nsec, "__syscall_slong_t");

	HEAD("struct", verbs_device_ops);
	F(verbs_device_ops, name, "const char *");
	F(verbs_device_ops, match_min_abi_version, "uint32_t");
	F(verbs_device_ops, match_max_abi_version, "uint32_t");
	F(verbs_device_ops, match_table, "const struct verbs_match_ent *");
	F(verbs_device_ops, static_providers, "const struct verbs_device_ops **");
	F(verbs_device_ops, match_device, "fnptr");
	F(verbs_device_ops, alloc_context, "fnptr");
	F(verbs_device_ops, import_context, "fnptr");
	F(verbs_device_ops, alloc_device, "fnptr");
	F(verbs_device_ops, uninit_device, "fnptr");

	HEAD("struct", verbs_device);
	F(verbs_device, device, "struct ibv_device");
	F(verbs_device, ops, "const struct verbs_device_ops *");
	F(verbs_device, refcount, "atomic_int");
	F(verbs_device, entry, "struct list_node");
	F(verbs_device, entry.next, "struct list_node *");
	F(verbs_device, entry.prev, "struct list_node *");
	F(verbs_device, sysfs, "struct verbs_sysfs_dev *");
	F(verbs_device, core_support, "uint64_t");

	HEAD("struct", ibv_driver);
	F(ibv_driver, entry, "struct list_node");
	F(ibv_driver, entry.next, "struct list_node *");
	F(ibv_driver, entry.prev, "struct list_node *");
	F(ibv_driver, ops, "const struct verbs_device_ops *");

	HEAD("struct", verbs_context_ops);
#define OP(P) F(verbs_context_ops, P, "fnptr")
	OP(advise_mr);
	OP(alloc_dm);
	OP(alloc_mw);
	OP(alloc_null_mr);
	OP(alloc_parent_domain);
	OP(alloc_pd);
	OP(alloc_td);
	OP(async_event);
	OP(attach_counters_point_flow);
	OP(attach_mcast);
	OP(bind_mw);
	OP(close_xrcd);
	OP(cq_event);
	OP(create_ah);
	OP(create_counters);
	OP(create_cq);
	OP(create_cq_ex);
	OP(create_flow);
	OP(create_flow_action_esp);
	OP(create_qp);
	OP(create_qp_ex);
	OP(create_rwq_ind_table);
	OP(create_srq);
	OP(create_srq_ex);
	OP(create_wq);
	OP(dealloc_mw);
	OP(dealloc_pd);
	OP(dealloc_td);
	OP(dereg_mr);
	OP(destroy_ah);
	OP(destroy_counters);
	OP(destroy_cq);
	OP(destroy_flow);
	OP(destroy_flow_action);
	OP(destroy_qp);
	OP(destroy_rwq_ind_table);
	OP(destroy_srq);
	OP(destroy_wq);
	OP(detach_mcast);
	OP(free_context);
	OP(free_dm);
	OP(get_srq_num);
	OP(import_dm);
	OP(import_mr);
	OP(import_pd);
	OP(modify_cq);
	OP(modify_flow_action_esp);
	OP(modify_qp);
	OP(modify_qp_rate_limit);
	OP(modify_srq);
	OP(modify_wq);
	OP(open_qp);
	OP(open_xrcd);
	OP(poll_cq);
	OP(post_recv);
	OP(post_send);
	OP(post_srq_ops);
	OP(post_srq_recv);
	OP(query_device_ex);
	OP(query_ece);
	OP(query_port);
	OP(query_qp);
	OP(query_qp_data_in_order);
	OP(query_rt_values);
	OP(query_srq);
	OP(read_counters);
	OP(reg_dm_mr);
	OP(reg_dmabuf_mr);
	OP(reg_mr);
	OP(req_notify_cq);
	OP(rereg_mr);
	OP(resize_cq);
	OP(set_ece);
	OP(unimport_dm);
	OP(unimport_mr);
	OP(unimport_pd);
#undef OP

	HEAD("struct", verbs_xrcd);
	F(verbs_xrcd, xrcd, "struct ibv_xrcd");
	F(verbs_xrcd, comp_mask, "uint32_t");
	F(verbs_xrcd, handle, "uint32_t");

	HEAD("struct", verbs_srq);
	F(verbs_srq, srq, "struct ibv_srq");
	F(verbs_srq, srq_type, "enum ibv_srq_type");
	F(verbs_srq, xrcd, "struct verbs_xrcd *");
	F(verbs_srq, cq, "struct ibv_cq *");
	F(verbs_srq, srq_num, "uint32_t");

	HEAD("struct", verbs_mr);
	F(verbs_mr, ibv_mr, "struct ibv_mr");
	F(verbs_mr, mr_type, "enum ibv_mr_type");
	F(verbs_mr, access, "int");

	HEAD("struct", verbs_qp);
	A("union <anon> in (top)");
	F(verbs_qp, qp, "struct ibv_qp");
	F(verbs_qp, qp_ex, "struct ibv_qp_ex");
	F(verbs_qp, comp_mask, "uint32_t");
	F(verbs_qp, xrcd, "struct verbs_xrcd *");

	HEAD("struct", verbs_cq);
	A("union <anon> in (top)");
	F(verbs_cq, cq, "struct ibv_cq");
	F(verbs_cq, cq_ex, "struct ibv_cq_ex");

	HEAD("struct", verbs_flow_action);
	F(verbs_flow_action, action, "struct ibv_flow_action");
	F(verbs_flow_action, handle, "uint32_t");
	F(verbs_flow_action, type, "enum ibv_flow_action_type");

	HEAD("struct", verbs_dm);
	F(verbs_dm, dm, "struct ibv_dm");
	F(verbs_dm, handle, "uint32_t");

	HEAD("struct", verbs_counters);
	F(verbs_counters, counters, "struct ibv_counters");
	F(verbs_counters, handle, "uint32_t");

	HEAD("struct", ib_uverbs_attr);
	F(ib_uverbs_attr, attr_id, "__u16");
	F(ib_uverbs_attr, len, "__u16");
	F(ib_uverbs_attr, flags, "__u16");
	F(ib_uverbs_attr, attr_data, "union <anon>");
	F(ib_uverbs_attr, attr_data.enum_data, "struct <anon>");
	F(ib_uverbs_attr, attr_data.enum_data.elem_id, "__u8");
	F(ib_uverbs_attr, attr_data.enum_data.reserved, "__u8");
	F(ib_uverbs_attr, attr_data.reserved, "__u16");
	A("union <anon> in (top)");
	F(ib_uverbs_attr, data, "__aligned_u64");
	F(ib_uverbs_attr, data_s64, "__s64");

	HEAD("struct", ib_uverbs_ioctl_hdr);
	F(ib_uverbs_ioctl_hdr, length, "__u16");
	F(ib_uverbs_ioctl_hdr, object_id, "__u16");
	F(ib_uverbs_ioctl_hdr, method_id, "__u16");
	F(ib_uverbs_ioctl_hdr, num_attrs, "__u16");
	F(ib_uverbs_ioctl_hdr, reserved1, "__aligned_u64");
	F(ib_uverbs_ioctl_hdr, driver_id, "__u32");
	F(ib_uverbs_ioctl_hdr, reserved2, "__u32");
	FLEX(ib_uverbs_ioctl_hdr, attrs, "struct ib_uverbs_attr[]");

	HEAD("struct", ibv_command_buffer);
	F(ibv_command_buffer, next, "struct ibv_command_buffer *");
	F(ibv_command_buffer, next_attr, "struct ib_uverbs_attr *");
	F(ibv_command_buffer, last_attr, "struct ib_uverbs_attr *");
	F(ibv_command_buffer, uhw_in_idx, "uint8_t");
	F(ibv_command_buffer, uhw_out_idx, "uint8_t");
	F(ibv_command_buffer, uhw_in_headroom_dwords, "uint8_t");
	F(ibv_command_buffer, uhw_out_headroom_dwords, "uint8_t");
	BITFIELD(ibv_command_buffer, buffer_error, "uint8_t :1");
	BITFIELD(ibv_command_buffer, fallback_require_ex, "uint8_t :1");
	BITFIELD(ibv_command_buffer, fallback_ioctl_only, "uint8_t :1");
	F(ibv_command_buffer, hdr, "struct ib_uverbs_ioctl_hdr");

	printf("\n# libibverbs-private (ibverbs.h), not provider ABI: providers only carry\n"
	       "# the pointer verbs_context.priv\n");
	HEAD("struct", verbs_ex_private);
	F(verbs_ex_private, unsupported_ioctls, "unsigned long[2]");
	F(verbs_ex_private, driver_id, "uint32_t");
	F(verbs_ex_private, use_ioctl_write, "bool");
	F(verbs_ex_private, ops, "struct verbs_context_ops");
	F(verbs_ex_private, imported, "bool");

	printf("\n# constants\n");
	C(IBVERBS_PABI_VERSION);
	C(VERBS_OPS_NUM);
	C(IBV_SYSFS_NAME_MAX);
	C(IBV_SYSFS_PATH_MAX);
	C(VERBS_LOG_LEVEL_NONE);
	C(VERBS_LOG_ERR);
	C(VERBS_LOG_WARN);
	C(VERBS_LOG_INFO);
	C(VERBS_LOG_DEBUG);
	C(VERBS_XRCD_HANDLE);
	C(VERBS_XRCD_RESERVED);
	C(CREATE_CQ_CMD_FLAGS_TS_IGNORED_EX);
	C(VERBS_QP_XRCD);
	C(VERBS_QP_EX);
	C(IBV_GID_TYPE_SYSFS_IB_ROCE_V1);
	C(IBV_GID_TYPE_SYSFS_ROCE_V2);
	C(VERBS_QUERY_GID_ATTR_GID);
	C(VERBS_QUERY_GID_ATTR_TYPE);
	C(VERBS_QUERY_GID_ATTR_NDEV_IFINDEX);
	C(IBV_MR_TYPE_MR);
	C(IBV_MR_TYPE_NULL_MR);
	C(IBV_MR_TYPE_IMPORTED_MR);
	C(IBV_MR_TYPE_DMABUF_MR);
	C(IBV_FLOW_ACTION_UNSPECIFIED);
	C(IBV_FLOW_ACTION_ESP);
	C(VERBS_MATCH_SENTINEL);
	C(VERBS_MATCH_PCI);
	C(VERBS_MATCH_MODALIAS);
	C(VERBS_MATCH_DRIVER_ID);
	C(VSYSFS_READ_MODALIAS);
	C(VSYSFS_READ_NODE_GUID);
	C(_UHW_NO_INDEX);
	return 0;
}
