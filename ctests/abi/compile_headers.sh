#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Compile checks for the public C headers under include/:
#   1. every header compiles on its own (C and C++), i.e. is self-contained;
#   2. all_headers.c (every header, every inline helper emitted) builds
#      warning-free with -Wall -Wextra -Werror as gnu11 and as C++;
#   3. inline_wrappers.c, a runtime test of the inline helpers against a
#      fake provider, builds and passes as C and as C++.
#
# CC / CXX select the compilers (default: cc / c++).  Exit status is
# non-zero if any step fails; all steps run regardless.

set -u

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
include_dir="$repo_root/include"
cc=${CC:-cc}
cxx=${CXX:-c++}

work=$(mktemp -d "${TMPDIR:-/tmp}/abi-headers.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

warn="-Wall -Wextra -Werror"
failed=0

run() {
	desc=$1
	shift
	if "$@" >"$work/log" 2>&1; then
		echo "ok   $desc"
	else
		echo "FAIL $desc" >&2
		sed 's/^/     /' "$work/log" >&2
		failed=1
	fi
}

# Headers that deliberately emit "#warning obsolete" when included.
obsolete="infiniband/arch.h infiniband/sa-kern-abi.h"

headers=$(cd "$include_dir" && find . -name '*.h' | sed 's|^\./||' | sort)

# 1. each header alone
for h in $headers; do
	extra=
	case " $obsolete " in
	*" $h "*) extra=-Wno-cpp ;;
	esac
	printf '#include <%s>\n#include <%s>\nint header_probe;\n' "$h" "$h" \
		>"$work/one.c"
	run "C   standalone $h" \
		"$cc" -std=gnu11 $warn $extra -I "$include_dir" \
		-c -o "$work/one.o" "$work/one.c"
	run "C++ standalone $h" \
		"$cxx" -x c++ $warn $extra -I "$include_dir" \
		-c -o "$work/one.o" "$work/one.c"
done

# 2. everything at once, with every inline body emitted
for opt in -O0 -O2; do
	run "C   all_headers.c gnu11 $opt" \
		"$cc" -std=gnu11 $opt $warn -I "$include_dir" \
		-c -o "$work/all.o" "$here/all_headers.c"
	run "C++ all_headers.c gnu++11 $opt" \
		"$cxx" -x c++ -std=gnu++11 $opt $warn -I "$include_dir" \
		-c -o "$work/all.o" "$here/all_headers.c"
	run "C++ all_headers.c default std $opt" \
		"$cxx" -x c++ $opt $warn -I "$include_dir" \
		-c -o "$work/all.o" "$here/all_headers.c"
done

# 3. behaviour of the inline helpers
for opt in -O0 -O2; do
	run "C   build inline_wrappers.c $opt" \
		"$cc" -std=gnu11 $opt $warn -I "$include_dir" \
		-o "$work/iw_c" "$here/inline_wrappers.c" &&
		run "C   run   inline_wrappers $opt" "$work/iw_c"
	run "C++ build inline_wrappers.c $opt" \
		"$cxx" -x c++ $opt $warn -I "$include_dir" \
		-o "$work/iw_cxx" "$here/inline_wrappers.c" &&
		run "C++ run   inline_wrappers $opt" "$work/iw_cxx"
done

if [ $failed -ne 0 ]; then
	echo "compile_headers: FAILED" >&2
	exit 1
fi
echo "compile_headers: all checks passed"
