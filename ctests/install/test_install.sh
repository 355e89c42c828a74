#!/usr/bin/env bash
# `make install` into a scratch DESTDIR, then use the result the way a user
# would: pkg-config for the flags, compile two small programs against the
# installed headers, run them against the installed libraries and provider,
# and finally `make uninstall` must leave no file behind.
#
# Install uses the PREFIX/LIBDIR/INCLUDEDIR/SYSCONFDIR that build/ was made
# with (build/config.env), so it copies build/ instead of rebuilding the
# libraries with other compiled-in defaults.
# harness-timeout: 600
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/ctests/install
BUILD=${BUILD:-$repo/build}
MAKE=${MAKE:-make}
CC=${CC:-cc}

PREFIX=/usr/local
BINDIR= LIBDIR= INCLUDEDIR= SYSCONFDIR=/etc
if [[ -f $BUILD/config.env ]]; then
	# shellcheck disable=SC1091
	source "$BUILD/config.env"
fi
BINDIR=${BINDIR:-$PREFIX/bin}
LIBDIR=${LIBDIR:-$PREFIX/lib}
INCLUDEDIR=${INCLUDEDIR:-$PREFIX/include}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
ok() { echo "ok   $*"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root
mkdir -p "$dest" "$tmp/out"

vars=(DESTDIR="$dest" PREFIX="$PREFIX" BINDIR="$BINDIR" LIBDIR="$LIBDIR" INCLUDEDIR="$INCLUDEDIR" SYSCONFDIR="$SYSCONFDIR")
echo "# make install ${vars[*]}"
"$MAKE" --no-print-directory -C "$repo" install "${vars[@]}" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "make install"; }

lib=$dest$LIBDIR
inc=$dest$INCLUDEDIR
etc=$dest$SYSCONFDIR

# --- the files, where a user (and libibverbs) expects them
for so in libibverbs.so.1 librdmacm.so.1; do
	[[ -f $lib/$so && ! -L $lib/$so ]] || fail "$lib/$so is not a regular file"
	cmp -s "$lib/$so" "$BUILD/lib/$so" || fail "$lib/$so differs from $BUILD/lib/$so"
	soname=$(readelf -d "$lib/$so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
	[[ $soname == "$so" ]] || fail "$lib/$so has SONAME '$soname'"
	link=${so%.1}
	[[ -L $lib/$link && $(readlink "$lib/$link") == "$so" ]] ||
		fail "$lib/$link is not a symlink to $so"
done
ok "libraries, SONAMEs and development links in $LIBDIR"

provider=$lib/libibverbs/librsw-rdmav34.so
[[ -f $provider ]] || fail "provider $provider missing"
cmp -s "$provider" "$BUILD/lib/libibverbs/librsw-rdmav34.so" || fail "$provider differs from build/"
ok "provider $LIBDIR/libibverbs/librsw-rdmav34.so"
for twin in rxe siw; do
	f=$lib/libibverbs/lib$twin-rs-rdmav34.so
	cmp -s "$f" "$BUILD/lib/libibverbs/lib$twin-rs-rdmav34.so" || fail "$f missing or differs from build/"
done
ok "Rust twins of rdma-core's rxe and siw providers installed"

driver=$etc/libibverbs.d/rsw.driver
[[ -f $driver ]] || fail "driver file $driver missing"
[[ $(cat "$driver") == "driver rsw" ]] || fail "$driver says '$(cat "$driver")', not 'driver rsw'"
ok "driver file $SYSCONFDIR/libibverbs.d/rsw.driver"

for t in rsw-run rsw-sysfs rsw-stat; do
	[[ -x $dest$BINDIR/$t ]] || fail "$BINDIR/$t missing or not executable"
	cmp -s "$dest$BINDIR/$t" "$BUILD/bin/$t" || fail "$BINDIR/$t differs from build/"
done
ok "rsw-run, rsw-sysfs and rsw-stat in $BINDIR"

# The manual pages (built when scdoc is installed, as CI has it).
if command -v scdoc >/dev/null; then
	man=$dest$PREFIX/share/man
	for p in man3/ibv_post_send.3 man3/ibv_post_recv.3 man3/rdma_connect.3 man7/rsw.7 \
		man7/rdma-environ.7 man1/rsw-run.1 man1/rsw-stat.1; do
		[[ -f $man/$p ]] || fail "$PREFIX/share/man/$p not installed"
	done
	np=$(find "$man" -type f | wc -l)
	[[ $np == "$("$repo/man/build.sh" --list | wc -l)" ]] || fail "$np manual pages installed, man/build.sh lists $("$repo/man/build.sh" --list | wc -l)"
	ok "$np manual pages in $PREFIX/share/man"
fi

nh=0
while IFS= read -r -d '' h; do
	rel=${h#"$repo/include/"}
	cmp -s "$h" "$inc/$rel" || fail "header $INCLUDEDIR/$rel missing or different"
	nh=$((nh + 1))
done < <(find "$repo/include" -type f -print0)
((nh > 0)) || fail "include/ has no headers"
for h in infiniband/verbs.h rdma/rdma_cma.h; do
	[[ -f $inc/$h ]] || fail "$INCLUDEDIR/$h not installed"
done
ok "$nh headers in $INCLUDEDIR"

for pc in libibverbs librdmacm; do
	[[ -f $lib/pkgconfig/$pc.pc ]] || fail "$LIBDIR/pkgconfig/$pc.pc missing"
done
ok "pkg-config files in $LIBDIR/pkgconfig"

# --- pkg-config: only our .pc files (PKG_CONFIG_LIBDIR replaces the system
# search path), paths relocated into DESTDIR by the sysroot.
pc() {
	PKG_CONFIG_PATH='' PKG_CONFIG_LIBDIR="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
		pkg-config "$@"
}
cflags=$(pc --cflags libibverbs librdmacm) || fail "pkg-config --cflags"
libs=$(pc --libs libibverbs librdmacm) || fail "pkg-config --libs"
echo "# cflags: $cflags"
echo "# libs:   $libs"
[[ " $cflags " == *" -I$inc "* ]] || fail "cflags lack -I$inc"
[[ " $libs " == *" -L$lib "* ]] || fail "libs lack -L$lib"
[[ " $libs " == *" -libverbs "* && " $libs " == *" -lrdmacm "* ]] || fail "libs lack -libverbs/-lrdmacm"
[[ $(pc --modversion libibverbs) == 1.* ]] || fail "libibverbs version"
ok "pkg-config --cflags --libs libibverbs librdmacm"

# --- compile against the installed tree only
for prog in hello hello_rdmacm; do
	# shellcheck disable=SC2086
	"$CC" -Wall -Werror -MD -MF "$tmp/out/$prog.d" $cflags -o "$tmp/out/$prog" \
		"$here/$prog.c" $libs || fail "compiling $prog.c"
	if grep -E '/usr/include/(infiniband|rdma)/' "$tmp/out/$prog.d"; then
		fail "$prog.c used system RDMA headers instead of $INCLUDEDIR"
	fi
	grep -q "$inc/" "$tmp/out/$prog.d" || fail "$prog.c did not use the installed headers"
done
ok "hello.c and hello_rdmacm.c compile against the installed headers"

# --- run against the installed libraries and provider
run() {
	LD_LIBRARY_PATH=$lib IBV_CONFIG_DIR=$etc/libibverbs.d timeout 30 "$@"
}
# ldd's output is captured first: `ldd | grep -q` under pipefail fails
# whenever grep exits before ldd has written everything (SIGPIPE).
declare -A deps
for prog in hello hello_rdmacm; do
	deps[$prog]=$(LD_LIBRARY_PATH=$lib ldd "$tmp/out/$prog")
	echo "${deps[$prog]}" | sed 's/^/# /'
done
grep -qF "libibverbs.so.1 => $lib/libibverbs.so.1 " <<<"${deps[hello]}" ||
	fail "hello does not load $lib/libibverbs.so.1"
grep -qF "librdmacm.so.1 => $lib/librdmacm.so.1 " <<<"${deps[hello_rdmacm]}" ||
	fail "hello_rdmacm does not load $lib/librdmacm.so.1"
grep -qF "libibverbs.so.1 => $lib/libibverbs.so.1 " <<<"${deps[hello_rdmacm]}" ||
	fail "hello_rdmacm (through librdmacm) does not load $lib/libibverbs.so.1"
ok "ldd: both programs use the DESTDIR copies"

rc=0
out=$(run "$tmp/out/hello" 2>&1) || rc=$?
((rc == 0)) || { echo "$out"; fail "hello exited with status $rc"; }
echo "$out" | sed 's/^/# /'
n=$(echo "$out" | sed -n 's/^devices: \([0-9][0-9]*\)$/\1/p')
[[ -n $n ]] || fail "hello printed no device count"
# The installed libibverbs must find the installed provider by itself.
((n >= 1)) || fail "no device: libibverbs did not load $LIBDIR/libibverbs/librsw-rdmav34.so"
grep -q '^device [0-9]*: rsw_' <<<"$out" || fail "no rsw_ device listed"
ok "hello: $n device(s) through the installed provider"

rc=0
out=$(run "$tmp/out/hello_rdmacm" 2>&1) || rc=$?
((rc == 0)) || { echo "$out"; fail "hello_rdmacm exited with status $rc"; }
echo "$out" | sed 's/^/# /'
grep -qx 'rdma_cm: ok' <<<"$out" || fail "hello_rdmacm did not finish"
ok "hello_rdmacm: event channel created and destroyed"

# The installed rsw-sysfs writes the kernel's view of the installed
# provider's devices (rsw-run itself needs namespaces: ctests/tests/rsw_run.sh).
rc=0
out=$(run "$dest$BINDIR/rsw-sysfs" "$tmp/view/class" "$tmp/view/dev" 2>&1) || rc=$?
((rc == 0)) || { echo "$out"; fail "rsw-sysfs exited with status $rc"; }
[[ $out == "$n" ]] || fail "rsw-sysfs wrote $out devices, hello saw $n"
[[ $(cat "$tmp/view/class/infiniband/rsw_lo/ports/1/state") == "4: ACTIVE" ]] ||
	fail "rsw-sysfs: rsw_lo port 1 is not ACTIVE"
ok "rsw-sysfs: $out device(s) laid out as in sysfs"

# --- uninstall leaves nothing but (empty) directories
"$MAKE" --no-print-directory -C "$repo" uninstall "${vars[@]}" >"$tmp/uninstall.log" 2>&1 ||
	{ cat "$tmp/uninstall.log"; fail "make uninstall"; }
left=$(find "$dest" ! -type d)
[[ -z $left ]] || fail "make uninstall left: $left"
ok "make uninstall removes every file"
echo "test_install: all checks passed"
