#!/bin/bash
# harness-timeout: 180
# rdma_xserver / rdma_xclient (Debian's rdmacm-utils) over our libraries:
# synchronous endpoints (rdma_getaddrinfo, rdma_create_ep, rdma_get_request)
# with an RC QP (-c r) and with XRC (-c x: RDMA_PS_IB, an XRC receive QP
# and XRC SRQ in the device's XRC domain on the server, an XRC send QP
# naming the SRQ number the server sent as private data on the client).
# On loopback, then between two network namespaces joined by a veth pair.
# Each run's exit status and its "end 0" lines are checked.
set -u
. "$(dirname "$0")/lib/common.sh"

for p in rdma_xserver rdma_xclient; do
    command -v "$p" >/dev/null || { echo "$p is not installed"; exit 77; }
done

# run NS_SERVER NS_CLIENT ADDR TYPE LABEL (an empty NS is this namespace)
run() {
    local sns=$1 cns=$2 addr=$3 type=$4 label=$5 port srv sst cst
    port=$(free_port)
    ${sns:+ip netns exec "$sns"} timeout -k 5 30 env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" rdma_xserver -p "$port" -c "$type" \
        >"$work/xs.$label" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen "$port" "$sns"
    ${cns:+ip netns exec "$cns"} timeout -k 5 30 env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" rdma_xclient -s "$addr" -p "$port" -c "$type" \
        >"$work/xc.$label" 2>&1
    cst=$?
    wait $srv
    sst=$?
    if [ $cst != 0 ] || [ $sst != 0 ]; then
        echo "--- server"; cat "$work/xs.$label"; echo "--- client"; cat "$work/xc.$label"
        fail "rdma_xserver/rdma_xclient $label: client $cst server $sst"
    fi
    expect_in "$work/xc.$label" '^rdma_xclient: end 0$'
    expect_in "$work/xs.$label" '^rdma_xserver: end 0$'
    echo "ok rdma_xserver/rdma_xclient $label"
}

run "" "" 127.0.0.1 r loopback-rc
run "" "" 127.0.0.1 x loopback-xrc

[ "$(id -u)" = 0 ] && command -v ip >/dev/null || { echo "skip: no network namespaces (not root)"; exit 0; }
A=cmudXa$$ B=cmudXb$$
ip netns add $A 2>/dev/null || { echo "skip: cannot create network namespaces"; exit 0; }
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
ip netns add $B || fail "netns"
ip link add cmxa$$ type veth peer name cmxb$$ || fail "veth"
ip link set cmxa$$ netns $A && ip link set cmxb$$ netns $B || fail "moving veth ends"
ip -n $A addr add 10.78.0.1/24 dev cmxa$$ && ip -n $B addr add 10.78.0.2/24 dev cmxb$$ || fail "addresses"
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set cmxa$$ up && ip -n $B link set cmxb$$ up || fail "link up"
run $A $B 10.78.0.1 r hosts-rc
run $A $B 10.78.0.1 x hosts-xrc
echo "ok: rdma_xserver/rdma_xclient passed"
