#!/bin/bash
# Prints driver_layout.txt: compiles driver_layout_probe.c against rdma-core
# 44's source tree and runs it.  libibverbs-dev ships no driver.h, so the
# probe needs the source; the build directory rdma-core's cmake would make
# is replaced by a scratch one holding only what the headers include:
# infiniband/ (libibverbs/*.h plus the published ib_user_ioctl_verbs.h),
# kernel-abi/ib_user_verbs.h (made by rdma-core's own
# buildlib/make_abi_structs.py) and a minimal config.h.
#
# usage: driver_layout_probe.sh [RDMA_CORE_44_SOURCE_DIR] > driver_layout.txt
# Without an argument it downloads the v44.0 tag from GitHub (Debian's orig
# tarball is not on every mirror; Debian 12's 44.0-2 is built from it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src=${1:-}
if [ -z "$src" ]; then
    url=https://github.com/linux-rdma/rdma-core/archive/refs/tags/v44.0.tar.gz
    python3 - "$url" "$work" <<'PY'
import io, sys, tarfile, urllib.request
data = urllib.request.urlopen(sys.argv[1], timeout=120).read()
tarfile.open(fileobj=io.BytesIO(data)).extractall(sys.argv[2])
PY
    src=$work/rdma-core-44.0
fi
src=$(cd "$src" && pwd)
grep -q 'set(IBVERBS_PABI_VERSION "34")' "$src/CMakeLists.txt" ||
    { echo "$src: not rdma-core 44 (private ABI 34)" >&2; exit 1; }
grep -q 'set(PACKAGE_VERSION "44.0")' "$src/CMakeLists.txt" ||
    { echo "$src: not rdma-core 44.0" >&2; exit 1; }

inc=$work/include
mkdir -p "$inc/infiniband" "$inc/kernel-abi"
ln -s "$src"/libibverbs/*.h "$inc/infiniband/"
ln -s "$src/kernel-headers/rdma/ib_user_ioctl_verbs.h" "$inc/infiniband/"
python3 "$src/buildlib/make_abi_structs.py" \
    "$src/kernel-headers/rdma/ib_user_verbs.h" "$inc/kernel-abi/ib_user_verbs.h"
# Only what driver.h, cmd_ioctl.h and ibverbs.h test (x86_64, gcc).
cat > "$inc/config.h" <<'H'
#ifndef CONFIG_H_IN
#define CONFIG_H_IN
#define HAVE_STATEMENT_EXPR 1
#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1
#define HAVE_TYPEOF 1
#define HAVE_ISBLANK 1
#define HAVE_BUILTIN_CLZ 1
#define HAVE_BUILTIN_CLZL 1
#define IBVERBS_PABI_VERSION 34
#define SIZEOF_LONG 8
#define VERBS_IOCTL_ONLY 0
#define VERBS_WRITE_ONLY 0
#endif
H
gcc -std=gnu11 -Wall -Werror -I"$inc" -I"$src/libibverbs" -I"$src/kernel-headers" -I"$src" \
    -o "$work/probe" "$here/driver_layout_probe.c"
"$work/probe"
