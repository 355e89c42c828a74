#!/bin/bash
# Port state follows the link: in a network namespace, taking a veth's
# link down makes rsw's port DOWN and Debian's ibv_asyncwatch print
# IBV_EVENT_PORT_ERR; bringing it back, PORT_ACTIVE. ibv_devinfo shows the
# state each time.
set -u
. "$(dirname "$0")/lib/common.sh"

command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
a=rswP$$ b=rswQ$$
ip netns add $a 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $b
drop_ns() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add pa$$ type veth peer name pb$$ || fail "veth"
ip link set pa$$ netns $a
ip link set pb$$ netns $b
ip -n $a addr add 203.0.113.1/24 dev pa$$
ip -n $b addr add 203.0.113.2/24 dev pb$$
ip -n $a link set pa$$ up
ip -n $b link set pb$$ up

in_a() {
    ip netns exec $a env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" "$@"
}
state() { in_a ibv_devinfo -d "rsw_pa$$" | sed -n 's/^[[:space:]]*state:[[:space:]]*\([A-Z_]*\).*/\1/p' | head -1; }

# wait_for FILE PATTERN: bounded wait until FILE has a line matching PATTERN.
wait_for() {
    for _ in $(seq 1 200); do
        grep -Eq -- "$2" "$1" && return 0
        sleep 0.05   # polling a condition with a bound, not synchronising on time
    done
    echo "--- $1"; cat "$1"; fail "'$2' did not appear in $1"
}

[ "$(state)" = PORT_ACTIVE ] || fail "port not ACTIVE at start: $(state)"
timeout 60 stdbuf -oL ip netns exec $a env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" IBV_CONFIG_DIR="$IBV_CONFIG_DIR" \
    ibv_asyncwatch -d "rsw_pa$$" > "$work/watch" 2>&1 &
bg_pids="$bg_pids $!"
wait_for "$work/watch" 'async event FD'

# The peer's end going down takes the carrier away from ours.
ip -n $b link set pb$$ down
wait_for "$work/watch" 'IBV_EVENT_PORT_ERR'
[ "$(state)" = PORT_DOWN ] || fail "port not DOWN after link loss: $(state)"
echo "ok link lost: PORT_ERR, port DOWN"

ip -n $b link set pb$$ up
wait_for "$work/watch" 'IBV_EVENT_PORT_ACTIVE'
for _ in $(seq 1 100); do [ "$(state)" = PORT_ACTIVE ] && break; sleep 0.05; done
[ "$(state)" = PORT_ACTIVE ] || fail "port not ACTIVE after link back: $(state)"
echo "ok link back: PORT_ACTIVE, port ACTIVE"
cat "$work/watch"
