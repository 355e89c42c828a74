#!/bin/bash
# Debian's ibv_devices / ibv_devinfo see our loopback device with the
# attributes the provider promises.
set -u
. "$(dirname "$0")/lib/common.sh"

ibv_devices > "$work/devices" 2>&1 || fail "ibv_devices exit $?"
expect_in "$work/devices" '^[[:space:]]+rsw_lo[[:space:]]+[0-9a-f]{16}'

ibv_devinfo -d rsw_lo > "$work/info" 2>&1 || fail "ibv_devinfo exit $?"
expect_in "$work/info" 'hca_id:[[:space:]]+rsw_lo'
expect_in "$work/info" 'transport:[[:space:]]+InfiniBand \(0\)'
expect_in "$work/info" 'state:[[:space:]]+PORT_ACTIVE \(4\)'
expect_in "$work/info" 'link_layer:[[:space:]]+Ethernet'
expect_in "$work/info" 'active_mtu:[[:space:]]+4096 \(5\)'

ibv_devinfo -v -d rsw_lo > "$work/verbose" 2>&1 || fail "ibv_devinfo -v exit $?"
expect_in "$work/verbose" 'max_qp:[[:space:]]+[1-9]'
expect_in "$work/verbose" 'max_cqe:[[:space:]]+[1-9]'
expect_in "$work/verbose" 'GID\[[[:space:]]*0\]:[[:space:]]+::ffff:127\.0\.0\.1, RoCE v2'

ibv_devinfo -d rsw_lo -i 1 > "$work/port" 2>&1 || fail "ibv_devinfo -i 1 exit $?"
expect_in "$work/port" 'port:[[:space:]]+1'
ibv_devinfo -l > "$work/list" 2>&1 || fail "ibv_devinfo -l exit $?"
expect_in "$work/list" 'rsw_lo'

# No driver files: no devices, and the tools say so instead of crashing.
mkdir "$work/empty"
IBV_CONFIG_DIR="$work/empty" ibv_devices > "$work/none" 2>&1
IBV_CONFIG_DIR="$work/empty" ibv_devinfo > "$work/none2" 2>&1
expect_in "$work/none2" 'No IB devices found'
echo "ok"
