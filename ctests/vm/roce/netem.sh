# Sourced by the RoCEv2 scripts that lose packets on purpose (the lossy
# halves of rc_pingpong_rxe.sh and tests/rsw_rocev2_rc_netns.sh).
#
# netem_lossy DEV [NETNS] [spare-acks]: netem on DEV's egress drops 5%
# and reorders (10% go out 1 ms ahead of the rest). With spare-acks, RC
# ACKs and NAKs (BTH opcode 0x11 on UDP 4791) take a band of their own,
# delayed alike but never dropped: a program that exits once it has its
# last message, as ibv_rc_pingpong does, may leave its peer's requester
# waiting for the ACK of the last SEND, and were that ACK lost the peer
# would resend into a QP that is gone and fail, on any RC device. The
# other packets, data and READ responses, are lost both ways. Returns
# tc's status.
# netem_dropped DEV [NETNS]: packets netem dropped on DEV so far.
netem_lossy() {
	local dev=$1 ns=${2:-} spare=${3:-} t=tc
	[ -n "$ns" ] && t="ip netns exec $ns tc"
	$t qdisc del dev "$dev" root 2>/dev/null
	if [ -z "$spare" ]; then
		$t qdisc add dev "$dev" root netem loss 5% delay 1ms reorder 10%
		return
	fi
	# Band 1:2 takes everything but what the filter sends to 1:1.
	$t qdisc add dev "$dev" root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 &&
		$t qdisc add dev "$dev" parent 1:1 handle 10: netem delay 1ms &&
		$t qdisc add dev "$dev" parent 1:2 handle 20: netem loss 5% delay 1ms reorder 10% &&
		$t filter add dev "$dev" parent 1: protocol ip prio 1 u32 \
			match ip protocol 17 0xff match ip dport 4791 0xffff \
			match u8 0x11 0xff at 28 flowid 1:1
}
netem_dropped() {
	local t=tc
	[ -n "${2:-}" ] && t="ip netns exec $2 tc"
	$t -s qdisc show dev "$1" | awk '/^qdisc netem/ { n = 1; next } /^qdisc/ { n = 0 }
		n && match($0, /dropped [0-9]+/) { s += substr($0, RSTART + 8, RLENGTH - 8) }
		END { print s + 0 }'
}
