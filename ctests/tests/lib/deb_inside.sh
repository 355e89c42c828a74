#!/bin/bash
# Run by ../deb_packages.sh under `unshare --mount --pid --net --fork`: the
# mounts made here and every process started here end with this script,
# and the only network is a loopback interface of our own (apt works from
# the package cache the root was made with).
#   deb_inside.sh ROOT   (ROOT/tmp/debs holds the .debs of `make deb`)
set -euo pipefail

root=$1
ma=x86_64-linux-gnu
ours=(libibverbs1-rs librdmacm1-rs ibverbs-provider-rsw ibverbs-providers-rs rsw-tools libibverbs-rs-dev librdmacm-rs-dev)
theirs=(libibverbs1 librdmacm1 libibverbs-dev librdmacm-dev)
# Installed before, and must stay installed (their dependencies on
# libibverbs1/librdmacm1 are met by our versioned Provides). perftest also
# depends on ibverbs-providers, whose libmlx5.so.1 and libefa.so.1 it links.
users=(ibverbs-utils rdmacm-utils perftest ibverbs-providers)

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
# A command in the root, with a clean environment.
in_root() {
	chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive "$@"
}
status() { # PKG -> dpkg's two-letter state ("ii", "rc", "un" when unknown)
	# shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
	in_root dpkg-query -W -f '${db:Status-Abbrev}' "$1" 2>/dev/null | cut -c1-2 || echo un
}
expect_state() { # STATE PKG...
	local want=$1 p s
	shift
	for p; do
		s=$(status "$p")
		[[ $s == "$want" ]] || fail "$p is '$s', expected '$want'"
	done
}
apt_summary() { # LOG: what apt removed and installed
	awk '/no longer required/ { skip = 1; next } /^[^ ]/ { skip = 0 }
		!skip && /^(The following|  [a-z]|Removing|Setting up)/' "$1"
}
wait_listen() { # PORT: bounded wait for a TCP listener (this namespace only)
	local end=$((SECONDS + 20))
	until ss -Hltn "sport = :$1" | grep -q .; do
		((SECONDS < end)) || return 1
		sleep 0.05 # polling a condition with a bound
	done
}

ip link set lo up
mount -t proc proc "$root/proc"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"

echo "-- before: rdma-core's packages"
in_root dpkg-query -W "${theirs[@]}" "${users[@]}"
expect_state ii "${theirs[@]}" "${users[@]}"

# --- install ours in place of rdma-core's ----------------------------------
debs=()
for p in "${ours[@]}"; do
	f=$(echo "$root"/tmp/debs/"$p"_*.deb)
	[[ -f $f ]] || fail "no package $p in $root/tmp/debs"
	debs+=("/tmp/debs/${f##*/}")
done
echo "-- apt-get install ${debs[*]}"
in_root apt-get install -y -q "${debs[@]}" >"$root/tmp/install.log" 2>&1 ||
	{ cat "$root/tmp/install.log"; fail "apt-get install of our packages"; }
apt_summary "$root/tmp/install.log"
expect_state ii "${ours[@]}" "${users[@]}"
for p in "${theirs[@]}"; do
	s=$(status "$p")
	[[ $s != ii ]] || fail "$p is still installed"
done
in_root apt-get check -q >/dev/null || fail "apt-get check: broken dependencies"
ok "our packages replaced ${theirs[*]}; ${users[*]} stay installed; apt-get check is clean"

owner=$(in_root dpkg -S "/usr/lib/$ma/libibverbs.so.1" | cut -d: -f1)
[[ $owner == libibverbs1-rs ]] || fail "libibverbs.so.1 belongs to '$owner'"
lib=$(in_root ldd /usr/bin/ibv_devices | awk '/libibverbs\.so\.1/ { print $3 }')
[[ $(in_root readlink -f "$lib") == "/usr/lib/$ma/libibverbs.so.1" ]] ||
	fail "ibv_devices loads libibverbs from '$lib'"
ok "ibv_devices loads $lib of libibverbs1-rs"
in_root test -f /etc/libibverbs.d/rsw.driver || fail "no /etc/libibverbs.d/rsw.driver"

# Manual pages: a sample of names, each page (or link) there and owned by
# the package that should ship it.
for spec in man3/ibv_post_send.3:libibverbs-rs-dev man3/ibv_post_recv.3:libibverbs-rs-dev \
	man3/ibv_wr_send.3:libibverbs-rs-dev man3/ibv_cmd_alloc_pd.3:libibverbs-rs-dev \
	man3/rdma_get_cm_event.3:librdmacm-rs-dev man7/rsocket.7:librdmacm-rs-dev \
	man7/rdma_cm.7:librdmacm-rs-dev man7/rsw.7:ibverbs-provider-rsw \
	man7/rdma-environ.7:libibverbs1-rs man1/rsw-run.1:rsw-tools man1/rsw-stat.1:rsw-tools; do
	page=/usr/share/man/${spec%%:*}.gz
	in_root test -e "$page" || fail "no manual page $page (or its link is broken)"
	owner=$(in_root dpkg -S "$page" | cut -d: -f1)
	[[ $owner == "${spec##*:}" ]] || fail "$page belongs to '$owner', not ${spec##*:}"
done
ok "manual pages installed with their packages (ibv_post_send(3), rsw(7), rsw-run(1), ...)"

# Everything of ours, for the check after switching back.
in_root dpkg -L "${ours[@]}" | sort -u >"$root/tmp/our-paths"

echo "-- ibv_devices"
in_root ibv_devices >"$root/tmp/devices" 2>&1 || { cat "$root/tmp/devices"; fail "ibv_devices"; }
cat "$root/tmp/devices"
grep -qw rsw_lo "$root/tmp/devices" || fail "ibv_devices does not list rsw_lo"
ok "ibv_devices lists rsw_lo"

# ibverbs-providers stays installed beside libibverbs1-rs, and each of its
# providers loads under our library (no unresolved symbol; registered).
in_root sh -c 'for f in /usr/lib/*/libibverbs/lib*-rdmav34.so /usr/lib/*/lib{mlx5,mlx4,efa,mana}.so.1; do
	[ -e "$f" ] || continue; ldd -r "$f" 2>&1 | grep -H --label="$f" "undefined symbol"; done' \
	>"$root/tmp/undef" || true
[[ -s $root/tmp/undef ]] && { cat "$root/tmp/undef"; fail "ibverbs-providers has unresolved symbols under ours"; }
in_root env IBV_SHOW_WARNINGS=1 VERBS_LOG_LEVEL=4 ibv_devices >/dev/null 2>"$root/tmp/loaded" ||
	fail "ibv_devices with Debian's drivers"
nreg=$(grep -c "rdma-core provider, for kernel devices" "$root/tmp/loaded" || true)
ndrv=$(cat "$root"/etc/libibverbs.d/*.driver | grep -c '^driver' || true)
((nreg >= 17 && nreg == ndrv - 1)) || { cat "$root/tmp/loaded"; fail "$nreg of $((ndrv - 1)) Debian providers registered"; }
ok "ibverbs-providers installed beside ours: its $nreg providers load and register"

# pair NAME PORT SERVER-CMD... -- CLIENT-CMD...: server in the background,
# client once it listens; both must exit 0.
pair() {
	local name=$1 port=$2 srv=() cli=()
	shift 2
	while (($#)) && [[ $1 != -- ]]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	echo "-- $name: ${srv[*]}  /  ${cli[*]}"
	timeout -k 5 60 chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin "${srv[@]}" >"$root/tmp/$name.srv" 2>&1 &
	local spid=$!
	wait_listen "$port" || { cat "$root/tmp/$name.srv"; fail "$name: the server does not listen on $port"; }
	local crc=0 src=0
	timeout -k 5 60 chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin "${cli[@]}" >"$root/tmp/$name.cli" 2>&1 || crc=$?
	wait "$spid" || src=$?
	echo "   server (exit $src):"
	tail -n 20 "$root/tmp/$name.srv" | sed 's/^/     /'
	echo "   client (exit $crc):"
	tail -n 20 "$root/tmp/$name.cli" | sed 's/^/     /'
	((crc == 0 && src == 0)) || fail "$name: client exit $crc, server exit $src"
}

pair ibv_rc_pingpong 18515 ibv_rc_pingpong -d rsw_lo -g 0 -n 500 -s 4096 -c -- \
	ibv_rc_pingpong -d rsw_lo -g 0 -n 500 -s 4096 -c 127.0.0.1
for side in srv cli; do
	grep -qE '[0-9]+ bytes in [0-9.]+ seconds' "$root/tmp/ibv_rc_pingpong.$side" ||
		fail "ibv_rc_pingpong ($side) reports no transfer"
done
ok "ibv_rc_pingpong server and client over rsw_lo"

# -V: the client checks every byte of every ping.
pair rping 7471 rping -s -a 127.0.0.1 -p 7471 -S 1024 -- \
	rping -c -a 127.0.0.1 -p 7471 -S 1024 -C 100 -V
ok "rping server and client over librdmacm1-rs (100 validated pings)"

# perftest links libmlx5.so.1 and libefa.so.1 of ibverbs-providers, which
# load over our libibverbs; the test itself runs on rsw_lo.
pair ib_write_bw 18516 ib_write_bw -d rsw_lo -x 0 -F -p 18516 -n 500 -- \
	ib_write_bw -d rsw_lo -x 0 -F -p 18516 -n 500 127.0.0.1
grep -qE '^ *65536 +500 ' "$root/tmp/ib_write_bw.cli" || fail "ib_write_bw printed no result row"
ok "ib_write_bw (perftest, linked with ibverbs-providers' libraries) over rsw_lo"

# The -dev packages: pkg-config finds our .pc files in the root, and a
# program built with their flags (by the host's compiler, against the
# root's headers and .so links) runs in the root.
if command -v cc >/dev/null && command -v pkg-config >/dev/null; then
	pcdir=$root/usr/lib/$ma/pkgconfig
	flags=$(PKG_CONFIG_PATH='' PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_SYSROOT_DIR=$root \
		pkg-config --cflags --libs librdmacm libibverbs) || fail "pkg-config librdmacm libibverbs"
	echo "-- pkg-config --cflags --libs librdmacm libibverbs: ${flags//$root/ROOT}"
	cat >"$root/tmp/devtest.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
int main(void)
{
	int n = 0, found = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		found |= strcmp(ibv_get_device_name(list[i]), "rsw_lo") == 0;
	ibv_free_device_list(list);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch || !found)
		return 1;
	rdma_destroy_event_channel(ch);
	printf("devtest: rsw_lo found, rdma_cm event channel made\n");
	return 0;
}
C
	# shellcheck disable=SC2086 # pkg-config's output is a list of words
	cc -o "$root/tmp/devtest" "$root/tmp/devtest.c" $flags >"$root/tmp/devtest.log" 2>&1 ||
		{ cat "$root/tmp/devtest.log"; fail "compiling against the -dev packages"; }
	# Only the root's headers: none from the host's /usr/include/{infiniband,rdma}.
	# shellcheck disable=SC2086
	cc -M "$root/tmp/devtest.c" $flags 2>/dev/null | grep -qE '(^| )/usr/include/(infiniband|rdma)/' &&
		fail "the compile used the host's RDMA headers"
	in_root /tmp/devtest || fail "devtest (built against our -dev packages) failed"
	ok "a program built with our .pc files and headers runs in the root"
else
	echo "no cc or pkg-config on the host: the -dev packages were not compiled against"
fi

# --- back to rdma-core --------------------------------------------------------
echo "-- apt-get install ${theirs[*]}"
in_root apt-get install -y -q "${theirs[@]}" >"$root/tmp/back.log" 2>&1 ||
	{ cat "$root/tmp/back.log"; fail "apt-get install of rdma-core's packages"; }
apt_summary "$root/tmp/back.log"
expect_state ii "${theirs[@]}" "${users[@]}"
for p in "${ours[@]}"; do
	s=$(status "$p")
	[[ $s != ii ]] || fail "$p is still installed"
done
in_root apt-get check -q >/dev/null || fail "apt-get check: broken dependencies"
ok "rdma-core's packages are back; ours are removed"

# Removal keeps conffiles until purge (Debian policy): only rsw.driver may be
# left, by a package in state "rc". Then purge and nothing may be left.
leftover() { # -> our paths that still exist and belong to no rdma-core package
	local p
	while IFS= read -r p; do
		[[ $p == /. || -z $p ]] && continue
		in_root test -d "$p" && continue
		in_root test -e "$p" || in_root test -L "$p" || continue
		in_root dpkg -S "$p" >/dev/null 2>&1 && continue
		echo "$p"
	done <"$root/tmp/our-paths"
}
left=$(leftover)
[[ -z $left || $left == /etc/libibverbs.d/rsw.driver ]] || fail "left behind after removal: $left"
removed=()
for p in "${ours[@]}"; do [[ $(status "$p") == rc ]] && removed+=("$p"); done
echo "-- removed, conffiles kept: ${removed[*]:-none}; dpkg --purge"
((${#removed[@]} == 0)) || in_root dpkg --purge "${removed[@]}" >/dev/null
left=$(leftover)
[[ -z $left ]] || fail "left behind after purge: $left"
target=$(in_root readlink "/usr/lib/$ma/libibverbs.so.1")
owner=$(in_root dpkg -S "/usr/lib/$ma/libibverbs.so.1" | cut -d: -f1)
[[ $owner == libibverbs1 ]] || fail "libibverbs.so.1 belongs to '$owner' after switching back"
ok "no file of ours is left; libibverbs.so.1 -> $target of libibverbs1 again"
