/*
 * rsw-sysfs CLASSDIR DEVDIR
 *
 * Writes the kernel's view of the RDMA devices libibverbs lists, laid out as
 * drivers/infiniband/core (sysfs.c, uverbs_main.c) lays it out for a device
 * it owns:
 *
 *   CLASSDIR/infiniband/<dev>/{node_type,node_guid,sys_image_guid,fw_ver,
 *                              node_desc,device}
 *   CLASSDIR/infiniband/<dev>/ports/<n>/{state,lid,lid_mask_count,sm_lid,
 *                              sm_sl,cap_mask,rate,phys_state,link_layer}
 *   CLASSDIR/infiniband/<dev>/ports/<n>/{gids,pkeys}/<i>
 *   CLASSDIR/infiniband/<dev>/ports/<n>/gid_attrs/{types,ndevs}/<i>
 *   CLASSDIR/infiniband_verbs/abi_version
 *   CLASSDIR/infiniband_verbs/uverbsN/{ibdev,abi_version,dev,device}
 *   DEVDIR/infiniband/{uverbsN,rdma_cm}   empty files, for the caller to
 *                                         bind a character device onto
 *
 * Every value comes from libibverbs (ibv_query_device, ibv_query_port,
 * ibv_query_gid, ibv_query_gid_ex, ibv_query_pkey) and is printed in the
 * kernel's format, so a program reading these files sees what a program
 * asking libibverbs sees. rsw-run mounts the result over /sys/class and /dev
 * in a private mount namespace; this program only writes below the two
 * directories it is given.
 *
 * `device` is what the kernel links there for a NIC: the network
 * interface's parent device (e.g. the PCI function, whose net/<ifname>
 * exists), or, for an interface without one (lo, veth, bridges), a directory
 * holding net/<ifname> -> the interface's sysfs directory.
 *
 * Attributes that only some kernel drivers add (hca_type, hw_rev, board_id)
 * are left out, as the kernel's software drivers (rxe, siw) leave them out.
 * Exits non-zero if a file cannot be written or a device cannot be queried.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* The uverbs ABI the kernel reports in infiniband_verbs/abi_version
 * (IB_USER_VERBS_ABI_VERSION; rdma-core 44 accepts 3..6). */
#define UVERBS_CLASS_ABI 6
/* Per device, the kernel reports its driver's uverbs ABI; rsw has no kernel
 * driver, and 1 is the first version of a driver ABI. */
#define UVERBS_DEVICE_ABI 1

static const char *prog = "rsw-sysfs";

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Formats a path into a PATH_MAX buffer; a path that does not fit is fatal. */
static void pathf(char *buf, const char *fmt, ...)
{
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(buf, PATH_MAX, fmt, ap);
	va_end(ap);
	if (len < 0 || len >= PATH_MAX)
		die("path too long: %s...", buf);
}

static void mkdirs(const char *path)
{
	char buf[PATH_MAX];
	size_t i, n = strlen(path);

	if (n >= sizeof(buf))
		die("path too long: %s", path);
	memcpy(buf, path, n + 1);
	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			die("mkdir %s: %s", buf, strerror(errno));
		buf[i] = path[i];
	}
}

/* Writes one attribute file: the formatted text, with the mode sysfs gives it. */
static void attr(mode_t mode, const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX], text[256];
	va_list ap;
	int fd, len;

	pathf(path, "%s/%s", dir, name);
	va_start(ap, fmt);
	len = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (len < 0 || len >= (int)sizeof(text))
		die("value of %s too long", path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		die("create %s: %s", path, strerror(errno));
	if (write(fd, text, len) != len)
		die("write %s: %s", path, strerror(errno));
	if (fchmod(fd, mode) || close(fd))
		die("close %s: %s", path, strerror(errno));
}

static void symlink_to(const char *target, const char *dir, const char *name)
{
	char path[PATH_MAX];

	pathf(path, "%s/%s", dir, name);
	if (symlink(target, path))
		die("symlink %s -> %s: %s", path, target, strerror(errno));
}

/* drivers/infiniband/core/sysfs.c: node_type_string(). */
static const char *node_type_str(enum ibv_node_type t)
{
	switch ((int)t) {
	case IBV_NODE_CA: return "CA";
	case IBV_NODE_SWITCH: return "switch";
	case IBV_NODE_ROUTER: return "router";
	case IBV_NODE_RNIC: return "RNIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	}
	return "<unknown>";
}

/* The kernel prints a __be64 GUID as four big-endian 16-bit groups. */
static void guid_attr(const char *dir, const char *name, __be64 guid)
{
	const uint8_t *b = (const uint8_t *)&guid;

	attr(0444, dir, name, "%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
	     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
}

/* state_show(): "%d: %s" with the IB port state names. */
static const char *port_state_str(enum ibv_port_state s)
{
	static const char *names[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
				       "ACTIVE_DEFER" };

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "UNKNOWN";
}

/* phys_state_to_str(). */
static const char *phys_state_str(unsigned s)
{
	static const char *names[] = { "<unknown>", "Sleep", "Polling", "Disabled",
				       "PortConfigurationTraining", "LinkUp",
				       "LinkErrorRecovery", "Phy Test" };

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "<unknown>";
}

/* ib_width_enum_to_int(). */
static int width_int(unsigned w)
{
	switch (w) {
	case 1: return 1;
	case 2: return 4;
	case 4: return 8;
	case 8: return 12;
	case 16: return 2;
	}
	return -1;
}

/* rate_show(): the rate in Gb/s from the active speed and width. */
static void rate_attr(const char *dir, const struct ibv_port_attr *pa)
{
	const char *speed;
	int rate, width = width_int(pa->active_width);

	switch (pa->active_speed) {
	case 2: speed = " DDR"; rate = 50; break;
	case 4: speed = " QDR"; rate = 100; break;
	case 8: speed = " FDR10"; rate = 100; break;
	case 16: speed = " FDR"; rate = 140; break;
	case 32: speed = " EDR"; rate = 250; break;
	case 64: speed = " HDR"; rate = 500; break;
	case 128: speed = " NDR"; rate = 1000; break;
	default: speed = " SDR"; rate = 25; break; /* SDR, and the kernel's default */
	}
	rate *= width;
	if (rate < 0)
		return; /* the kernel fails the read (EINVAL): no file */
	attr(0444, dir, "rate", "%d%s Gb/sec (%dX%s)\n", rate / 10,
	     rate % 10 ? ".5" : "", width, speed);
}

/* %pI6: eight groups of four hex digits. */
static void gid_text(char *out, size_t n, const union ibv_gid *g)
{
	const uint8_t *r = g->raw;

	snprintf(out, n, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n",
		 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
		 r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* ib_cache_gid_type_str(): the kernel knows IB/RoCE v1 and RoCE v2. */
static const char *gid_type_str(enum ibv_gid_type t)
{
	return t == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
}

/*
 * One port. Returns the interface index behind GID 0 (its netdev), 0 if none.
 */
static unsigned write_port(struct ibv_context *ctx, const char *devdir, uint8_t port)
{
	char dir[PATH_MAX], sub[PATH_MAX], name[16], text[64];
	struct ibv_port_attr pa;
	unsigned ndev0 = 0;
	int i, ret;

	ret = ibv_query_port(ctx, port, &pa);
	if (ret)
		die("%s: ibv_query_port(%u): %s", ibv_get_device_name(ctx->device), port,
		    strerror(ret));
	pathf(dir, "%s/ports/%u", devdir, port);
	mkdirs(dir);
	attr(0444, dir, "state", "%d: %s\n", pa.state, port_state_str(pa.state));
	attr(0444, dir, "lid", "0x%x\n", pa.lid);
	attr(0444, dir, "lid_mask_count", "%u\n", pa.lmc);
	attr(0444, dir, "sm_lid", "0x%x\n", pa.sm_lid);
	attr(0444, dir, "sm_sl", "%u\n", pa.sm_sl);
	attr(0444, dir, "cap_mask", "0x%08x\n", pa.port_cap_flags);
	rate_attr(dir, &pa);
	attr(0444, dir, "phys_state", "%u: %s\n", pa.phys_state, phys_state_str(pa.phys_state));
	attr(0444, dir, "link_layer", "%s\n",
	     pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" :
	     pa.link_layer == IBV_LINK_LAYER_INFINIBAND ||
	     pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED ? "InfiniBand" : "Unknown");

	pathf(sub, "%s/gids", dir);
	mkdirs(sub);
	pathf(sub, "%s/gid_attrs/types", dir);
	mkdirs(sub);
	pathf(sub, "%s/gid_attrs/ndevs", dir);
	mkdirs(sub);
	for (i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		union ibv_gid gid;

		snprintf(name, sizeof(name), "%d", i);
		/* An entry that cannot be read shows as the zero GID, and its
		 * attributes fail to read (no file here), as in the kernel. */
		if (ibv_query_gid(ctx, port, i, &gid))
			memset(&gid, 0, sizeof(gid));
		pathf(sub, "%s/gids", dir);
		gid_text(text, sizeof(text), &gid);
		attr(0444, sub, name, "%s", text);
		if (ibv_query_gid_ex(ctx, port, i, &e, 0))
			continue;
		pathf(sub, "%s/gid_attrs/types", dir);
		attr(0444, sub, name, "%s\n", gid_type_str(e.gid_type));
		if (e.ndev_ifindex) {
			char ifname[IF_NAMESIZE];

			if (if_indextoname(e.ndev_ifindex, ifname)) {
				pathf(sub, "%s/gid_attrs/ndevs", dir);
				attr(0444, sub, name, "%s\n", ifname);
			}
			if (!ndev0)
				ndev0 = e.ndev_ifindex;
		}
	}

	if (pa.pkey_tbl_len) {
		pathf(sub, "%s/pkeys", dir);
		mkdirs(sub);
		for (i = 0; i < pa.pkey_tbl_len; i++) {
			__be16 pkey;

			if (ibv_query_pkey(ctx, port, i, &pkey))
				continue;
			snprintf(name, sizeof(name), "%d", i);
			attr(0444, sub, name, "0x%04x\n", be16toh(pkey));
		}
	}
	return ndev0;
}

/*
 * CLASSDIR/infiniband/<dev>/device: the interface's parent device if it has
 * one (its net/<ifname> is there already), else a directory with
 * net/<ifname>. Puts in `out` what uverbsN/device should link to (relative
 * to uverbsN, so the tree can be written anywhere), "" if nothing.
 */
static void write_device_link(const char *devdir, const char *name, unsigned ifindex,
			      char *out, size_t n)
{
	char ifname[IF_NAMESIZE], path[PATH_MAX], netdir[PATH_MAX], *real;

	out[0] = '\0';
	if (!ifindex || !if_indextoname(ifindex, ifname))
		return;
	pathf(path, "/sys/class/net/%s/device", ifname);
	real = realpath(path, NULL);
	if (real) {
		symlink_to(real, devdir, "device");
		snprintf(out, n, "%s", real);
		free(real);
		return;
	}
	pathf(path, "%s/device/net", devdir);
	mkdirs(path);
	pathf(netdir, "/sys/class/net/%s", ifname);
	real = realpath(netdir, NULL);
	symlink_to(real ? real : netdir, path, ifname);
	free(real);
	snprintf(out, n, "../../infiniband/%s/device", name);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	char classdir[PATH_MAX], devdir[PATH_MAX], ib[PATH_MAX], uv[PATH_MAX];
	char host[HOST_NAME_MAX + 1] = "";
	struct stat null_st;
	int n, i;

	if (argc != 3 || argv[1][0] != '/' || argv[2][0] != '/') {
		fprintf(stderr, "usage: %s CLASSDIR DEVDIR   (absolute paths)\n", prog);
		return 2;
	}
	pathf(classdir, "%s", argv[1]);
	pathf(devdir, "%s/infiniband", argv[2]);
	pathf(ib, "%s/infiniband", classdir);
	pathf(uv, "%s/infiniband_verbs", classdir);
	mkdirs(ib);
	mkdirs(uv);
	mkdirs(devdir);
	attr(0444, uv, "abi_version", "%d\n", UVERBS_CLASS_ABI);
	/* The caller binds /dev/null onto the device files (see rsw-run), so
	 * uverbsN/dev names that node: the tree agrees with itself. */
	if (stat("/dev/null", &null_st))
		die("stat /dev/null: %s", strerror(errno));
	gethostname(host, sizeof(host) - 1);

	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; i < n; i++) {
		struct ibv_device *dev = list[i];
		const char *name = ibv_get_device_name(dev);
		char d[PATH_MAX], u[PATH_MAX], link[PATH_MAX];
		struct ibv_device_attr da;
		struct ibv_context *ctx;
		unsigned ifindex = 0;
		int ret, p;

		ctx = ibv_open_device(dev);
		if (!ctx)
			die("%s: ibv_open_device: %s", name, strerror(errno));
		ret = ibv_query_device(ctx, &da);
		if (ret)
			die("%s: ibv_query_device: %s", name, strerror(ret));

		pathf(d, "%s/%s", ib, name);
		mkdirs(d);
		attr(0444, d, "node_type", "%u: %s\n", dev->node_type, node_type_str(dev->node_type));
		guid_attr(d, "node_guid", ibv_get_device_guid(dev));
		guid_attr(d, "sys_image_guid", da.sys_image_guid);
		attr(0444, d, "fw_ver", "%s\n", da.fw_ver);
		/* rdma-ndd's default node description, "%h %d". */
		attr(0644, d, "node_desc", "%.64s%s%s\n", host, host[0] ? " " : "", name);
		for (p = 1; p <= da.phys_port_cnt; p++) {
			unsigned idx = write_port(ctx, d, p);

			if (!ifindex)
				ifindex = idx;
		}
		write_device_link(d, name, ifindex, link, sizeof(link));

		pathf(u, "%s/%s", uv, dev->dev_name);
		mkdirs(u);
		attr(0444, u, "ibdev", "%s\n", name);
		attr(0444, u, "abi_version", "%d\n", UVERBS_DEVICE_ABI);
		attr(0444, u, "dev", "%u:%u\n", major(null_st.st_rdev), minor(null_st.st_rdev));
		if (link[0])
			symlink_to(link, u, "device");
		attr(0666, devdir, dev->dev_name, "%s", "");
		ibv_close_device(ctx);
	}
	attr(0666, devdir, "rdma_cm", "%s", "");
	ibv_free_device_list(list);
	printf("%d\n", n);
	return 0;
}
