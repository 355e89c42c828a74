#!/usr/bin/env bash
# An MPI job over UCX over our libraries: Debian's Open MPI (openmpi-bin)
# runs ctests/mpi/pingpong.py (mpi4py, python3-mpi4py) with two ranks,
# `--mca pml ucx` and UCX_TLS restricted to our verbs transports
# (rc_verbs with ud_verbs for its wire-up, and ud_verbs alone), on one host
# and across two network namespaces joined by a veth pair. Every payload
# size class UCX treats differently is checked byte for byte by both ranks,
# and UCX's own log must show the ranks' endpoint on our device and
# transport, so a silent fallback to another transport fails the test.
# Under rsw-run, which provides the /dev/infiniband and /sys/class/infiniband
# view UCX looks for. Exits 77 when Open MPI or mpi4py is missing.
set -u
. "$(dirname "$0")/lib/common.sh"

run=$BUILD/bin/rsw-run
[ -x "$run" ] || fail "$run missing (make builds it)"
command -v mpirun >/dev/null || { echo "mpirun (openmpi-bin) is not installed"; exit 77; }
/usr/bin/python3 -c 'import mpi4py' 2>/dev/null || { echo "python3-mpi4py is not installed"; exit 77; }
if ! unshare --mount true 2>/dev/null && ! unshare --user --map-root-user --mount true 2>/dev/null; then
    echo "rsw-run cannot run here (no mount namespaces)"
    exit 77
fi
prog=$repo/ctests/mpi/pingpong.py

# Open MPI refuses root unless told; no ssh, no shared-memory or TCP BTLs,
# and no one-sided component: the point-to-point path must be UCX's.
mpi_common=(--allow-run-as-root --mca pml ucx --mca btl '^openib,vader,tcp,ofi'
    --mca osc '^ucx' --mca mtl '^ofi' -x LD_LIBRARY_PATH -x IBV_CONFIG_DIR -x UCX_LOG_LEVEL=info)

# check_run NAME TLS DEV: the job's output says ok and UCX put the peer's
# endpoint on TLS's first transport over DEV.
check_run() {
    local name=$1 tls=$2 dev=$3 out=$work/$1.out first=${2%%,*}
    expect_in "$out" '^mpi pingpong: ok;'
    expect_in "$out" "ep_cfg\[1\]: tag\($first/$dev:1\)"
    echo "ok mpi $name: $(grep -E '^mpi pingpong' "$out")"
}

for tls in rc_verbs,ud_verbs,self ud_verbs,self; do
    name=lo-${tls%%,*}
    timeout 90 "$run" mpirun "${mpi_common[@]}" --oversubscribe -np 2 \
        -x UCX_TLS="$tls" -x UCX_NET_DEVICES=rsw_lo:1 /usr/bin/python3 "$prog" > "$work/$name.out" 2>&1
    rc=$?
    [ $rc = 0 ] || { cat "$work/$name.out"; fail "$name: mpirun exit $rc"; }
    check_run "$name" "$tls" rsw_lo
done

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "note: not root or no ip netns: the namespace runs are skipped"
    exit 0
fi
A=mpiA$$ B=mpiB$$ VA=mpia$$ VB=mpib$$ IP_A=10.79.0.1 IP_B=10.79.0.2
ns_cleanup() {
    ip netns pids "$A" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns pids "$B" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    rm -rf "/etc/netns/$A" "/etc/netns/$B"
}
cleanup_hooks="$cleanup_hooks ns_cleanup"
ip netns add "$A" && ip netns add "$B" || fail "ip netns add"
ip link add "$VA" type veth peer name "$VB" || fail "veth"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" || fail "moving veth ends"
for ns in "$A" "$B"; do ip netns exec "$ns" ip link set lo up || fail "lo up"; done
ip netns exec "$A" ip addr add "$IP_A/24" dev "$VA" && ip netns exec "$B" ip addr add "$IP_B/24" dev "$VB" ||
    fail "addresses"
ip netns exec "$A" ip link set "$VA" up && ip netns exec "$B" ip link set "$VB" up || fail "link up"
# The namespaces are the job's hosts: their names resolve inside both.
for ns in "$A" "$B"; do
    mkdir -p "/etc/netns/$ns" &&
        printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$IP_A" "$A" "$IP_B" "$B" > "/etc/netns/$ns/hosts" ||
        fail "/etc/netns/$ns/hosts"
done
# mpirun's remote shell: enters the host's namespace under rsw-run, with
# UCX told the host's device (both hosts have an rsw_lo at 127.0.0.1, which
# UCX cannot tell apart from a reachable address).
agent=$work/netns-agent
cat > "$agent" <<AGENT
#!/bin/sh
h=\$1; shift
case \$h in $A) dev=rsw_$VA ;; $B) dev=rsw_$VB ;; *) echo "unknown host \$h" >&2; exit 1 ;; esac
exec ip netns exec "\$h" env UCX_NET_DEVICES=\$dev:1 "$run" sh -c "\$*"
AGENT
chmod +x "$agent"

for tls in rc_verbs,ud_verbs,self ud_verbs,self; do
    name=netns-${tls%%,*}
    # Both "hosts" are this machine: binding each one's first rank to its
    # first core would put both ranks on one core.
    timeout 90 ip netns exec "$A" env UCX_NET_DEVICES="rsw_$VA:1" "$run" mpirun "${mpi_common[@]}" \
        --bind-to none --host "$A,$B" -np 2 --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "$IP_A/24" -x UCX_TLS="$tls" /usr/bin/python3 "$prog" > "$work/$name.out" 2>&1
    rc=$?
    [ $rc = 0 ] || { cat "$work/$name.out"; fail "$name: mpirun exit $rc"; }
    expect_in "$work/$name.out" "ep_cfg\[1\]: tag\(${tls%%,*}/rsw_$VB:1\)"
    check_run "$name" "$tls" "rsw_$VA"
done
