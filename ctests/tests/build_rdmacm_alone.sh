#!/bin/bash
# harness-timeout: 300
# librdmacm links against our libibverbs or does not build: built alone in
# a clean target directory (no libibverbs built there), or pointed at
# rdma-core's libibverbs, its build script stops with a message naming the
# problem; pointed at ours, it builds and its libibverbs.so.1 dependency is
# satisfied by ours.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v cargo >/dev/null || { echo "no cargo"; exit 77; }
cd "$repo" || fail "no repository"
target=$work/target
export CARGO_TARGET_DIR=$target CARGO_TERM_COLOR=never

# `cargo check` runs the build script without linking anything heavy.
unset IBVERBS_LIB_DIR
cargo check --release -q -p rdmacm > "$work/alone" 2>&1 && fail "librdmacm built with no libibverbs of ours"
expect_in "$work/alone" 'libibverbs\.so is missing: build it first'
echo "ok: alone in a clean target directory, the build stops"

debian=$(ls /usr/lib/*-linux-gnu/libibverbs.so.1 2>/dev/null | head -n 1)
if [ -n "$debian" ]; then
    mkdir -p "$work/theirs"
    ln -s "$debian" "$work/theirs/libibverbs.so"
    IBVERBS_LIB_DIR=$work/theirs cargo check --release -q -p rdmacm > "$work/theirs.log" 2>&1 &&
        fail "librdmacm built against rdma-core's libibverbs"
    expect_in "$work/theirs.log" 'libibverbs\.so is not ours'
    echo "ok: pointed at rdma-core's libibverbs ($debian), the build stops"
fi

ours=$repo/target/release
[ -f "$ours/libibverbs.so" ] || fail "our libibverbs is not built in $ours"
IBVERBS_LIB_DIR=$ours cargo check --release -q -p rdmacm > "$work/ours.log" 2>&1 ||
    { cat "$work/ours.log"; fail "librdmacm does not build against ours"; }
echo "ok: against ours it builds"
