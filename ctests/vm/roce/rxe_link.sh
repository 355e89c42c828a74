# Sourced by the RoCEv2 guest scripts of this directory (the wrappers in
# ctests/tests share it at /roce: run-in-vm.sh -s ctests/vm/roce:/roce).
# Two hosts on one link: rxeC on vC (10.0.8.1) in the initial namespace,
# where rxe routes, and namespace roce on vD (10.0.8.2), where UDP port
# 4791 is free for rsw. Sets G, rxeC's RoCEv2 GID index of 10.0.8.1, or
# exits 1.
ip netns add roce
ip link add vC type veth peer name vD
ip link set vD netns roce
ip addr add 10.0.8.1/24 dev vC
ip link set vC up
ip -n roce addr add 10.0.8.2/24 dev vD
ip -n roce link set vD up
ip -n roce link set lo up
rdma link add rxeC type rxe netdev vC
gid_index() { # the first RoCE v2 GID of 10.0.8.1 (of up to 1024 slots)
	local g
	for g in /sys/class/infiniband/rxeC/ports/1/gids/*; do
		grep -q 0a00:0801 "$g" 2>/dev/null || continue
		[ "$(cat "/sys/class/infiniband/rxeC/ports/1/gid_attrs/types/${g##*/}")" = "RoCE v2" ] &&
			{ echo "${g##*/}"; return; }
	done
}
for _ in $(seq 100); do
	G=$(gid_index)
	[ -n "$G" ] && break
	sleep 0.1 # polling a condition with a bound: the kernel adds GIDs
done
echo "rxeC RoCEv2 GID index: $G"
[ -n "$G" ] || { echo "no RoCEv2 GID on rxeC"; exit 1; }
