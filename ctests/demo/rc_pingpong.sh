#!/usr/bin/env bash
# `make demo`: Debian's unmodified ibv_rc_pingpong, server and client, talking
# RDMA (RC send/receive) over our libibverbs and the rsw software provider on
# the loopback interface. No NIC, no kernel module, no root.
#
# Environment: BUILD (default <repo>/build), DEMO_DEV (default rsw_lo),
# DEMO_ARGS (extra ibv_rc_pingpong options, default "-n 1000 -s 4096").
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$repo/build}
dev=${DEMO_DEV:-rsw_lo}
read -r -a extra <<<"${DEMO_ARGS:--n 1000 -s 4096}"
export LD_LIBRARY_PATH=$BUILD/lib
export IBV_CONFIG_DIR=$BUILD/etc/libibverbs.d

missing=()
command -v ibv_rc_pingpong >/dev/null || missing+=(ibverbs-utils)
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
	echo "make demo runs Debian's own ibv_rc_pingpong over our libraries; install it with:" >&2
	echo "    sudo apt-get install ${missing[*]}" >&2
	exit 1
fi

work=$(mktemp -d)
srv_pid=
cleanup() {
	[[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

. "$(dirname "$0")/../tests/lib/ports.sh"
port=$(free_port)

listening() { # is anything listening on TCP $port (IPv4 or IPv6)?
	local hex
	hex=$(printf '%04X' "$port")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

echo "== our libraries: $BUILD/lib"
ldd "$(command -v ibv_rc_pingpong)" | grep -E 'libibverbs' | sed 's/^[[:space:]]*/   /'
echo "== ibv_devices"
timeout 20 ibv_devices | sed 's/^/   /'

echo "== server: ibv_rc_pingpong -d $dev -g 0 -p $port ${extra[*]}"
timeout 60 ibv_rc_pingpong -d "$dev" -g 0 -p "$port" "${extra[@]}" >"$work/server" 2>&1 &
srv_pid=$!

# The server listens only once its verbs objects exist; wait for that (bounded)
# so the client does not race it.
for _ in $(seq 1 400); do
	listening && break
	if ! kill -0 "$srv_pid" 2>/dev/null; then break; fi
	sleep 0.05
done
if ! listening; then
	echo "server did not start listening on port $port:" >&2
	sed 's/^/   /' "$work/server" >&2
	exit 1
fi

echo "== client: ibv_rc_pingpong -d $dev -g 0 -p $port ${extra[*]} localhost"
timeout 60 ibv_rc_pingpong -d "$dev" -g 0 -p "$port" "${extra[@]}" localhost >"$work/client" 2>&1
crc=$?
wait "$srv_pid"
src=$?
srv_pid=

echo "-- server output (exit $src)"
sed 's/^/   /' "$work/server"
echo "-- client output (exit $crc)"
sed 's/^/   /' "$work/client"

if ((crc == 0 && src == 0)); then
	echo "demo: OK — RDMA over our libibverbs.so.1 and the rsw provider"
	exit 0
fi
echo "demo: FAILED" >&2
exit 1
