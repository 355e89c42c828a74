#!/bin/bash
# harness-timeout: 900
# The Debian packages of `make deb`, installed in place of rdma-core's in a
# throwaway Debian 12 root and used there by Debian's own programs:
#   1. make deb; lintian on the .debs (any error fails the test);
#   2. a minimal bookworm root made by mmdebstrap with rdma-core's
#      libibverbs1, librdmacm1, their -dev packages, ibverbs-providers,
#      ibverbs-utils, rdmacm-utils and perftest (cached in build/deb-test/ as a tar,
#      apt's package cache kept so that nothing below needs the network);
#   3. inside it (lib/deb_inside.sh, in new mount, PID and network
#      namespaces with only a loopback interface): apt-get install of our
#      .debs replaces rdma-core's, ibv_devices lists rsw_lo, ibv_rc_pingpong,
#      rping and ib_write_bw run server + client, a program built with our .pc files
#      and headers runs, then apt-get install of rdma-core's
#      packages switches back and no file of ours is left.
# The host is never changed: everything happens in the unpacked root under
# build/deb-test/, which is deleted afterwards. Needs root, mmdebstrap and
# unshare; exits 77 (skip) without them or without a reachable Debian mirror.
# DEB_TEST_KEEP=1 keeps the unpacked root for a look.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$repo/build}
MAKE=${MAKE:-make}
# Nothing here may run over build/: the packages are what is tested.
unset LD_LIBRARY_PATH IBV_CONFIG_DIR LD_PRELOAD RDMAV_DRIVERS IBV_DRIVERS

t_start=$SECONDS
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '== [%3ds] %s\n' $((SECONDS - t_start)) "$*"; }

[[ $(id -u) == 0 ]] || skip "needs root (mmdebstrap, chroot, unshare)"
for tool in mmdebstrap unshare chroot ss dpkg-deb dpkg-architecture tar; do
	command -v "$tool" >/dev/null || skip "$tool not installed (apt-get install mmdebstrap dpkg-dev iproute2)"
done
[[ $(dpkg-architecture -qDEB_HOST_ARCH) == amd64 ]] || skip "the throwaway root is amd64 only"

cache=$BUILD/deb-test
mkdir -p "$cache"
run=
cleanup() {
	[[ -n $run && -d $run ]] || return 0
	# The mounts were made in a mount namespace that is gone; never delete
	# through a mount that is somehow still there.
	if grep -qF " $run/" /proc/self/mountinfo; then
		echo "warning: mounts remain under $run; not deleting it" >&2
		return 0
	fi
	if [[ -n ${DEB_TEST_KEEP:-} ]]; then
		echo "kept: $run/root"
	else
		rm -rf --one-file-system "$run"
	fi
}
trap cleanup EXIT

# --- 1. the packages ------------------------------------------------------
step "make deb"
log=$cache/make-deb.log
if ! "$MAKE" -C "$repo" --no-print-directory deb >"$log" 2>&1; then
	tail -n 40 "$log"
	fail "make deb (log: $log)"
fi
grep '  DEB ' "$log" || true
debs=("$BUILD"/deb/*.deb)
((${#debs[@]} == 7)) || fail "expected 7 packages in $BUILD/deb, found ${#debs[@]}"

step "lintian"
if command -v lintian >/dev/null; then
	lintian --pedantic -I --show-overrides "${debs[@]}" >"$cache/lintian.log" 2>&1 || true
	grep -v 'running with root privileges' "$cache/lintian.log" || true
	if grep -q '^E:' "$cache/lintian.log"; then
		fail "lintian reports errors"
	fi
	echo "lintian: no errors"
else
	echo "lintian not installed: not run"
fi

# --- 2. the throwaway root ------------------------------------------------
suite=bookworm
include=ibverbs-utils,rdmacm-utils,perftest,ibverbs-providers,libibverbs1,librdmacm1,libibverbs-dev,librdmacm-dev
# The host's own Debian 12 sources when it is Debian 12 (same mirror and
# security updates), else the default mirror.
mirror=http://deb.debian.org/debian
if grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		[[ -s $f ]] && { mirror=$f; break; }
	done
fi
key=$({ echo "$suite $include"; [[ -f $mirror ]] && cat "$mirror" || echo "$mirror"; } | sha256sum | cut -c1-12)
tarball=$cache/root-$suite-$key.tar
if [[ -f $tarball ]]; then
	step "throwaway root: cached $(basename "$tarball")"
else
	step "throwaway root: mmdebstrap $suite (cached afterwards in ${tarball#"$repo"/})"
	rm -f "$cache"/root-*.tar "$cache"/root-*.tar.tmp
	# In a mount namespace of its own: the mounts mmdebstrap makes in the
	# root it builds can never outlive it on the host. A mirror answers
	# badly now and then (a dropped connection, a hash mismatch while it
	# syncs): up to three tries whatever went wrong (each failure's log
	# is shown); after three, a mirror that never answered is a skip and
	# anything else a failure.
	netfail='Failed to fetch|Hash Sum mismatch|Temporary failure resolving|Could not resolve|Unable to connect|Network is unreachable|Connection (refused|timed out|failed)|Could not connect|Undetermined Error|Error reading from server|Bad header line|unexpected size'
	for try in 1 2 3; do
		if unshare --mount --propagation private --fork --kill-child \
			mmdebstrap --variant=apt --format=tar --skip=cleanup/apt --include="$include" \
			"$suite" "$tarball.tmp" "$mirror" </dev/null >"$cache/mmdebstrap.log" 2>&1; then
			break
		fi
		rm -f "$tarball.tmp"
		tail -n 20 "$cache/mmdebstrap.log"
		if ((try == 3)); then
			grep -qE "$netfail" "$cache/mmdebstrap.log" &&
				skip "no Debian mirror answered mmdebstrap in 3 tries"
			fail "mmdebstrap failed 3 times (log: $cache/mmdebstrap.log)"
		fi
		echo "mmdebstrap failed (try $try of 3); again in $((try * 10)) s"
		sleep $((try * 10)) # backing off from a mirror, not synchronising
	done
	mv "$tarball.tmp" "$tarball"
fi

run=$(mktemp -d "$cache/run.XXXXXX")
root=$run/root
mkdir "$root"
tar -C "$root" -xf "$tarball"
mkdir -p "$root/tmp/debs"
cp "${debs[@]}" "$root/tmp/debs/"

# --- 3. inside the root ---------------------------------------------------
step "inside the root (new mount, PID and network namespaces)"
unshare --mount --propagation private --pid --fork --kill-child --net \
	bash "$here/lib/deb_inside.sh" "$root" || fail "inside the throwaway root (output above)"

step "done in $((SECONDS - t_start)) s"
