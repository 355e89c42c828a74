/*
 * devlist: lists the verbs devices, opens each one and queries it.
 *
 * Prints one "device" line per device plus its ports, then "devices: N".
 * Exits 0 when every call behaved (an empty list is fine: that is what a
 * machine without driver files must see), non-zero with a message on the
 * first misbehaving call. Also checks the argument validation the library
 * promises: NULL objects fail with EINVAL instead of crashing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "devlist: FAIL %s:%d: ", __FILE__,     \
				__LINE__);                                     \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			failures++;                                            \
		}                                                              \
	} while (0)

static void print_gid(const union ibv_gid *gid)
{
	for (int i = 0; i < 16; i += 2)
		printf("%s%02x%02x", i ? ":" : "", gid->raw[i], gid->raw[i + 1]);
}

static void query_one(struct ibv_device *dev)
{
	struct ibv_device_attr attr;
	struct ibv_context *ctx;

	printf("device %s guid 0x%016" PRIx64 " index %d node %s\n",
	       ibv_get_device_name(dev), (uint64_t)ibv_get_device_guid(dev),
	       ibv_get_device_index(dev), ibv_node_type_str(dev->node_type));

	ctx = ibv_open_device(dev);
	CHECK(ctx, "ibv_open_device(%s): %s", ibv_get_device_name(dev),
	      strerror(errno));
	if (!ctx)
		return;
	CHECK(ctx->device == dev, "context does not point at its device");

	memset(&attr, 0, sizeof(attr));
	CHECK(ibv_query_device(ctx, &attr) == 0, "ibv_query_device failed");
	printf("  fw_ver %s ports %u max_qp %d max_cq %d max_mr %d\n",
	       attr.fw_ver, attr.phys_port_cnt, attr.max_qp, attr.max_cq,
	       attr.max_mr);
	CHECK(attr.phys_port_cnt >= 1, "device reports no port");

	for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
		struct ibv_port_attr pattr;
		union ibv_gid gid;
		int rc;

		rc = ibv_query_port(ctx, port, &pattr);
		CHECK(rc == 0, "ibv_query_port(%u) = %d", port, rc);
		if (rc)
			continue;
		printf("  port %u state %s mtu %d gid_tbl_len %d link_layer %u\n",
		       port, ibv_port_state_str(pattr.state), pattr.active_mtu,
		       pattr.gid_tbl_len, pattr.link_layer);

		rc = ibv_query_gid(ctx, port, 0, &gid);
		CHECK(rc == 0, "ibv_query_gid(%u, 0) = %d", port, rc);
		if (!rc) {
			printf("  gid[0] ");
			print_gid(&gid);
			printf("\n");
		}
	}

	/* Port 0 does not exist. */
	{
		struct ibv_port_attr pattr;

		CHECK(ibv_query_port(ctx, 0, &pattr) != 0,
		      "ibv_query_port(0) succeeded");
	}

	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device failed");
}

int main(void)
{
	struct ibv_device **list;
	int num = -1;

	/* Argument validation: failures with EINVAL, no crash. */
	errno = 0;
	CHECK(ibv_open_device(NULL) == NULL && errno == EINVAL,
	      "ibv_open_device(NULL): errno %d", errno);
	CHECK(ibv_close_device(NULL) == EINVAL, "ibv_close_device(NULL)");
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "ibv_alloc_pd(NULL)");
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "ibv_dealloc_pd(NULL)");
	CHECK(ibv_destroy_qp(NULL) == EINVAL, "ibv_destroy_qp(NULL)");
	CHECK(ibv_get_device_index(NULL) == -1, "ibv_get_device_index(NULL)");
	ibv_free_device_list(NULL);

	/*
	 * A device the program built itself (a mock device list in a test):
	 * its name is read from it, as rdma-core reads it; it has no sysfs
	 * record, so no index and no GUID (0, EINVAL).
	 */
	{
		static struct ibv_device mock;

		snprintf(mock.name, sizeof(mock.name), "mock0");
		CHECK(ibv_get_device_name(&mock) == mock.name,
		      "ibv_get_device_name(mock) is not its name field");
		CHECK(ibv_get_device_index(&mock) == -1,
		      "ibv_get_device_index(mock) = %d",
		      ibv_get_device_index(&mock));
		errno = 0;
		CHECK(ibv_get_device_guid(&mock) == 0 && errno == EINVAL,
		      "ibv_get_device_guid(mock): errno %d", errno);
	}

	list = ibv_get_device_list(&num);
	CHECK(list != NULL, "ibv_get_device_list: %s", strerror(errno));
	if (!list)
		return 1;
	CHECK(num >= 0, "num_devices = %d", num);
	for (int i = 0; i < num; i++) {
		CHECK(list[i] != NULL, "list[%d] is NULL", i);
		if (list[i])
			query_one(list[i]);
	}
	CHECK(list[num > 0 ? num : 0] == NULL, "list is not NULL-terminated");

	/* A second list has the same device objects, and num may be NULL. */
	{
		struct ibv_device **again = ibv_get_device_list(NULL);

		CHECK(again != NULL, "second ibv_get_device_list");
		for (int i = 0; again && i < num; i++)
			CHECK(again[i] == list[i], "device %d changed address", i);
		ibv_free_device_list(again);
	}
	ibv_free_device_list(list);

	printf("devices: %d\n", num);
	if (failures) {
		fprintf(stderr, "devlist: %d failure(s)\n", failures);
		return 1;
	}
	return 0;
}
