#!/usr/bin/env bash
# Every program and library of the "primary" group in
# $ABI_DIR/imports/SUMMARY.tsv must load over our libraries:
#   1. `ldd -r` with LD_LIBRARY_PATH=$BUILD/lib reports no missing library,
#      symbol or version node (problems that also show up with the system's
#      rdma-core are reported but are not ours);
#   2. libibverbs.so.1 and librdmacm.so.1, wherever they appear, resolve to
#      the copies in $BUILD/lib;
#   3. executables start with a harmless argument without a loader error and
#      without dying from a signal; libraries are started through a program
#      that loads them (fi_info, ucx_info, python3 -c 'import pyverbs.X').
# One line per program, then a count. Exit status 1 when anything failed.
#
# Environment: BUILD (default <repo>/build), ABI_DIR (default
# <repo>/abi/rdma-core-44), START_ALL_ALLOW_MISSING=1 turns "package not
# installed" into SKIP (for machines without Debian's RDMA packages; CI never
# sets it), START_TIMEOUT (seconds per started program, default 20).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$repo/build}
ABI_DIR=${ABI_DIR:-$repo/abi/rdma-core-44}
allow_missing=${START_ALL_ALLOW_MISSING:-0}
start_timeout=${START_TIMEOUT:-20}
summary=$ABI_DIR/imports/SUMMARY.tsv
# Debian's own interpreter: pyverbs is built for it, not for any other python3.
syspython=/usr/bin/python3

ours_ibverbs=$(readlink -f "$BUILD/lib/libibverbs.so.1")
ours_rdmacm=$(readlink -f "$BUILD/lib/librdmacm.so.1")
for f in "$BUILD/lib/libibverbs.so.1" "$BUILD/lib/librdmacm.so.1"; do
	[[ -f $f ]] || { echo "FAIL: $f is missing; run make first" >&2; exit 1; }
done
[[ -f $summary ]] || { echo "FAIL: $summary is missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What the loader says when a program cannot run against a library.
loader_errors='not found|undefined symbol|no version information available|symbol lookup error|cannot open shared object|error while loading shared libraries'

npass=0 nfail=0 nskip=0
failures=()

package_of() { # SUMMARY name -> the Debian package that ships it
	case $1 in
	ibv_*) echo ibverbs-utils ;;
	rping | ucmatose | udaddy | mckey | cmtime | rdma_client | rdma_server | rstream | riostream)
		echo rdmacm-utils ;;
	ib_*) echo perftest ;;
	qperf) echo qperf ;;
	fio) echo fio ;;
	libfabric.so.*) echo libfabric-bin ;;
	ucx/*) echo ucx-utils ;;
	pyverbs/*) echo python3-pyverbs ;;
	*) echo "" ;;
	esac
}

# The library package that holds a file when the listed package is only the
# front end (libfabric-bin -> libfabric1, ucx-utils -> libucx0).
packages_to_search() {
	case $1 in
	libfabric-bin) echo "libfabric-bin libfabric1" ;;
	ucx-utils) echo "ucx-utils libucx0" ;;
	*) echo "$1" ;;
	esac
}

installed() {
	[[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

# The path a program had on the machine the imports were read on (first line
# of its .imports file); if it is not there, whatever the package ships under
# that file name.
locate() { # NAME PACKAGE
	local imp=$ABI_DIR/imports/${1//\//__}.imports path base pkg
	path=$(head -n 1 "$imp" 2>/dev/null | sed -n 's/^# \(\/.*\)/\1/p')
	if [[ -n $path && -e $path ]]; then
		echo "$path"
		return
	fi
	base=$(basename "${path:-$1}")
	for pkg in $(packages_to_search "$2"); do
		dpkg -L "$pkg" 2>/dev/null | grep -E "/${base//./\\.}\$" | head -n 1
	done | head -n 1
}

# needed_libs NAME: which of our two libraries the imports say it links.
needed_libs() {
	local imp=$ABI_DIR/imports/${1//\//__}.imports
	sed -n 's/^# NEEDED: //p' "$imp" 2>/dev/null | tr ' ' '\n' | grep -E '^lib(ibverbs|rdmacm)\.so\.1$'
}

# The argument that makes a program print its usage (or, for the two
# device listers, do their one harmless job) and exit.
start_args() {
	case $1 in
	ibv_devices | ibv_devinfo) echo "" ;;
	qperf | fio) echo "--help" ;;
	*) echo "-h" ;;
	esac
}

line() { # STATUS NAME DETAIL
	printf '%-4s %-40s %s\n' "$1" "$2" "$3"
	case $1 in
	PASS) npass=$((npass + 1)) ;;
	FAIL) nfail=$((nfail + 1)); failures+=("$2") ;;
	SKIP) nskip=$((nskip + 1)) ;;
	esac
}

# check_ldd NAME PATH -> prints problems; returns 1 if any are ours.
check_ldd() {
	local name=$1 path=$2 lib want got bad=0
	LD_LIBRARY_PATH=$BUILD/lib ldd -r "$path" >"$work/ldd.ours" 2>&1
	ldd -r "$path" >"$work/ldd.sys" 2>&1
	# Strip the load addresses and our directory so both runs compare.
	grep -E "$loader_errors" "$work/ldd.ours" | sed "s|$BUILD/lib/||g" | sort -u >"$work/err.ours"
	grep -E "$loader_errors" "$work/ldd.sys" | sort -u >"$work/err.sys"
	if [[ -s $work/err.ours ]]; then
		comm -23 "$work/err.ours" "$work/err.sys" >"$work/err.new"
		if [[ -s $work/err.new ]]; then
			sed 's/^[[:space:]]*/    ldd: /' "$work/err.new"
			bad=1
		fi
		# (Captured, not piped into grep -q: under pipefail an early
		# grep exit would fail the pipeline.)
		if [[ -n $(comm -12 "$work/err.ours" "$work/err.sys") ]]; then
			echo "    note: loader problems that the system's rdma-core has too:"
			comm -12 "$work/err.ours" "$work/err.sys" | sed 's/^[[:space:]]*/    ldd: /'
		fi
	fi
	for lib in libibverbs.so.1 librdmacm.so.1; do
		want=$ours_ibverbs
		[[ $lib == librdmacm.so.1 ]] && want=$ours_rdmacm
		got=$(sed -n "s/^[[:space:]]*${lib//./\\.} => \([^ ]*\) .*/\1/p" "$work/ldd.ours" | head -n 1)
		if [[ -z $got ]]; then
			if grep -qx "$lib" <<<"$(needed_libs "$name")"; then
				echo "    ldd: $lib is NEEDED but ldd does not list it"
				bad=1
			fi
			continue
		fi
		if [[ $(readlink -f "$got") != "$want" ]]; then
			echo "    ldd: $lib resolves to $got, not to $BUILD/lib"
			bad=1
		fi
	done
	return $bad
}

# run_checked NAME CMD...: start a program over our libraries; fail on a
# loader error in its output, a signal or a hang.
run_checked() {
	local rc
	shift
	env LD_LIBRARY_PATH="$BUILD/lib" IBV_CONFIG_DIR="$BUILD/etc/libibverbs.d" \
		timeout -k 5 "$start_timeout" "$@" </dev/null >"$work/run.out" 2>"$work/run.err"
	rc=$?
	if grep -E "$loader_errors|dlopen\(.*\) failed" "$work/run.out" "$work/run.err" |
		sed 's/^[^:]*://; s/^/    run: /' | head -n 20 | grep .; then
		echo "    run: (exit status $rc)"
		return 1
	fi
	if ((rc == 124 || rc == 137)); then
		echo "    run: '$*' did not finish within ${start_timeout}s"
		return 1
	fi
	# 128+N is death by signal N (exit(-1) gives 255, which is not).
	if ((rc > 128 && rc <= 192)); then
		echo "    run: '$*' died with signal $((rc - 128))"
		tail -n 5 "$work/run.err" | sed 's/^/    stderr: /'
		return 1
	fi
	echo "$rc" >"$work/run.rc"
	return 0
}

echo "# programs from $summary, loaded with LD_LIBRARY_PATH=$BUILD/lib"
mapfile -t names < <(awk -F'\t' '$1 == "primary" { print $2 }' "$summary")

for name in "${names[@]}"; do
	pkg=$(package_of "$name")
	if [[ -z $pkg ]]; then
		line FAIL "$name" "no package known for it: teach package_of() in $0"
		continue
	fi
	if ! installed "$pkg"; then
		if [[ $allow_missing == 1 ]]; then
			line SKIP "$name" "package $pkg not installed"
		else
			line FAIL "$name" "package $pkg is not installed (it must be: see .ci/run)"
		fi
		continue
	fi
	path=$(locate "$name" "$pkg")
	if [[ -z $path || ! -e $path ]]; then
		line FAIL "$name" "not found in package $pkg"
		continue
	fi

	: >"$work/detail.ldd"
	: >"$work/detail"
	ok=1
	check_ldd "$name" "$path" >"$work/detail.ldd" || ok=0

	what="ldd -r"
	case $name in
	pyverbs/*)
		mod=${name//\//.}
		what+=", import $mod"
		run_checked "$name" "$syspython" -c "import $mod" >>"$work/detail" || ok=0
		if [[ $ok == 1 && $(cat "$work/run.rc") != 0 ]]; then
			# An import that fails for any reason means the module does not load.
			sed 's/^/    python: /' "$work/run.err" | tail -n 5 >>"$work/detail"
			ok=0
		fi
		;;
	libfabric.so.*)
		what+=", fi_info --version"
		run_checked "$name" fi_info --version >>"$work/detail" || ok=0
		;;
	ucx/*)
		# ucx_info -d dlopens every transport module, libuct_ib and
		# libuct_rdmacm included; at debug level UCX reports a failed dlopen.
		what+=", ucx_info -d"
		run_checked "$name" env UCX_LOG_LEVEL=debug ucx_info -d >>"$work/detail" || ok=0
		;;
	*)
		args=$(start_args "$name")
		what+=", $(basename "$path")${args:+ $args}"
		# shellcheck disable=SC2086
		run_checked "$name" "$path" $args >>"$work/detail" || ok=0
		[[ $ok == 1 ]] && what+=" (exit $(cat "$work/run.rc"))"
		;;
	esac

	if [[ $ok == 1 ]]; then
		line PASS "$name" "$path: $what"
	else
		line FAIL "$name" "$path: $what"
	fi
	# Enough of the evidence to act on; the first lines name the problem.
	for d in "$work/detail.ldd" "$work/detail"; do
		head -n 10 "$d"
		n=$(wc -l <"$d")
		((n > 10)) && echo "    ... ($((n - 10)) more lines)"
	done
done

echo "start_all: $npass passed, $nfail failed, $nskip skipped"
((nfail)) && echo "start_all: failed: ${failures[*]}"
((nfail == 0))
