#!/bin/bash
# Driver loading the rdma-core way: every regular file in IBV_CONFIG_DIR,
# "driver NAME" lines, comments and blank lines skipped, anything else and
# unloadable drivers warned about (only under IBV_SHOW_WARNINGS) and skipped;
# RDMAV_DRIVERS adds names; absolute paths load as given.
set -u
. "$(dirname "$0")/lib/common.sh"

provider=$BUILD/lib/libibverbs/librsw-rdmav34.so
[ -f "$provider" ] || fail "no provider at $provider"

# A messy configuration directory: the good line must still win.
conf=$work/conf
mkdir -p "$conf/subdir"
cat > "$conf/a.driver" <<'CONF'
# a comment

driver nosuchprovider
this is not a driver line
driver rsw
CONF
echo "driver mlx5" > "$conf/mlx5.driver"        # Debian's real provider: not ours
echo "driver rsw" > "$conf/subdir/ignored.driver" # not a regular file in the dir

IBV_CONFIG_DIR=$conf ibv_devices > "$work/out" 2> "$work/err" || fail "ibv_devices exit $?"
expect_in "$work/out" 'rsw_lo'
[ "$(grep -c rsw_lo "$work/out")" = 1 ] || fail "rsw_lo listed more than once"
[ -s "$work/err" ] && { cat "$work/err"; fail "warnings printed without IBV_SHOW_WARNINGS"; }

IBV_SHOW_WARNINGS=1 IBV_CONFIG_DIR=$conf ibv_devices > "$work/out2" 2> "$work/err2" ||
    fail "ibv_devices with warnings exit $?"
expect_in "$work/out2" 'rsw_lo'
expect_in "$work/err2" 'nosuchprovider'
expect_in "$work/err2" 'this is not a driver line'

# No driver files at all, but RDMAV_DRIVERS names the provider.
mkdir "$work/empty"
IBV_CONFIG_DIR=$work/empty RDMAV_DRIVERS=rsw ibv_devices > "$work/out3" 2>&1 ||
    fail "RDMAV_DRIVERS=rsw exit $?"
expect_in "$work/out3" 'rsw_lo'

# An absolute path in a driver file.
mkdir "$work/abs"
echo "driver $provider" > "$work/abs/rsw.driver"
IBV_CONFIG_DIR=$work/abs ibv_devices > "$work/out4" 2>&1 || fail "absolute driver path exit $?"
expect_in "$work/out4" 'rsw_lo'

# A configuration directory that does not exist: no devices, no crash.
IBV_CONFIG_DIR=$work/missing "$CTESTS_BIN/devlist" > "$work/out5" 2>&1 || fail "devlist exit $?"
expect_in "$work/out5" 'devices: 0'
echo ok
