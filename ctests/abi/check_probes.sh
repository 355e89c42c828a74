#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Builds the shared ABI probes (layout_probe.c, enum_probe.c) against this
# repository's include/ directory, runs them and compares their output
# byte for byte with the reference dumps taken from rdma-core 44.
#
# The reference files live in abi/rdma-core-44 in this repository; set
# ABI_DIR to point somewhere else.  CC selects the compiler (default: cc).
#
# Also verifies that no rdma-core header from the system (for example
# /usr/include/infiniband/verbs.h) is pulled in instead of ours.
#
# Exit status: 0 when everything matches, 1 on any difference or error.

set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
include_dir="$repo_root/include"
abi_dir=${ABI_DIR:-"$repo_root/abi/rdma-core-44"}
cc=${CC:-cc}

if [ ! -d "$abi_dir" ]; then
	echo "check_probes: ABI reference directory not found: $abi_dir" >&2
	echo "check_probes: set ABI_DIR to the directory of the ABI facts (abi/rdma-core-44)" >&2
	exit 1
fi
abi_dir=$(cd "$abi_dir" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/abi-probes.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

status=0

for probe in layout:layout.txt enum:enums.txt; do
	name=${probe%%:*}
	expected="$abi_dir/${probe#*:}"
	src="$abi_dir/${name}_probe.c"
	exe="$work/${name}_probe"

	for f in "$src" "$expected"; do
		if [ ! -f "$f" ]; then
			echo "check_probes: missing $f" >&2
			exit 1
		fi
	done

	# The probe sources are not ours, so warnings are shown, not fatal.
	if ! "$cc" -std=gnu11 -Wall -I "$include_dir" \
		-H -o "$exe" "$src" 2>"$work/$name.h.log"; then
		grep -v '^\.' "$work/$name.h.log" >&2 || true
		echo "check_probes: $name probe failed to build" >&2
		status=1
		continue
	fi
	grep -E ': (warning|note):' "$work/$name.h.log" >&2 || true

	# -H lists every header opened; rdma-core's own headers must come
	# from include_dir.  The kernel's UAPI headers under rdma/ are fine.
	leaks=$(sed -n 's/^\.* //p' "$work/$name.h.log" |
		grep -E '/(infiniband|rdma)/' |
		grep -v "^$include_dir/" |
		grep -vE '/rdma/(ib_user_[a-z_]+|rdma_user_[a-z_]+)\.h$' || true)
	if [ -n "$leaks" ]; then
		echo "check_probes: $name probe used headers outside $include_dir:" >&2
		echo "$leaks" >&2
		status=1
	fi

	"$exe" >"$work/$name.out"
	if cmp -s "$work/$name.out" "$expected"; then
		echo "check_probes: $name probe matches $(basename "$expected")"
	else
		echo "check_probes: $name probe differs from $expected:" >&2
		diff -u "$expected" "$work/$name.out" >&2 || true
		status=1
	fi
done

exit $status
