#!/bin/bash
# harness-timeout: 240
# rsw-run shows our devices where programs look for the kernel's side of
# RDMA: /sys/class/infiniband (ports, state, GIDs and their types, netdev
# link), /sys/class/infiniband_verbs and /dev/infiniband, with the values
# libibverbs reports (ibv_devinfo -v is the reference). Then the lookups real
# tools make: ibstat (infiniband-diags) and UCX's ucx_info -d, if installed.
# As root (unshare --mount) and, when the kernel allows unprivileged user
# namespaces, as an ordinary user. The host's /sys/class, /dev and mounts
# must be the same afterwards.
set -u
. "$(dirname "$0")/lib/common.sh"

run=$BUILD/bin/rsw-run
[ -x "$run" ] && [ -x "$BUILD/bin/rsw-sysfs" ] || fail "$run or rsw-sysfs missing (make builds them)"
command -v unshare >/dev/null || { echo "no unshare (util-linux)"; exit 77; }
command -v ibv_devinfo >/dev/null || { echo "ibverbs-utils (ibv_devinfo) is not installed"; exit 77; }
if ! unshare --mount true 2>/dev/null && ! unshare --user --map-root-user --mount true 2>/dev/null; then
    echo "no mount namespaces here (not root, or no CAP_SYS_ADMIN, and no user namespaces)"
    exit 77
fi

# What the host looks like before: compared at the end.
host_state() {
    ls -la --time-style=+ /sys/class
    ls -la --time-style=+ /dev | grep -v ' pts$'
    ls -d /sys/class/infiniband /sys/class/infiniband_verbs /dev/infiniband 2>&1
    # mounts on /sys and /dev only: other programs may mount elsewhere meanwhile
    awk '$5 ~ "^/(sys|dev)(/|$)" { print $5, $9, $10 }' /proc/self/mountinfo | sort
}
host_state > "$work/host.before"

# --- the reference: what libibverbs says
ibv_devinfo -v -d rsw_lo > "$work/devinfo" 2>&1 || fail "ibv_devinfo -v exit $?"
gid0=$(sed -n 's/^[[:space:]]*GID\[[[:space:]]*0\]:[[:space:]]*\([^,]*\),.*/\1/p' "$work/devinfo")
[ -n "$gid0" ] || { cat "$work/devinfo"; fail "no GID 0 in ibv_devinfo -v"; }
# sysfs prints a GID as eight groups of four hex digits (%pI6).
gid0_full=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$gid0") ||
    fail "cannot expand $gid0"
guid=$(sed -n 's/^[[:space:]]*node_guid:[[:space:]]*//p' "$work/devinfo")
ibv_devices | awk 'NR > 2 { print $1 }' | sort > "$work/devices"
[ -s "$work/devices" ] || fail "ibv_devices lists nothing"
echo "reference: rsw_lo GID 0 $gid0 = $gid0_full, node_guid $guid; devices: $(tr '\n' ' ' < "$work/devices")"

# --- what a program sees under rsw-run (as whoever runs this function)
look() {
    "$@" "$run" bash -c '
        d=/sys/class/infiniband/rsw_lo p=$d/ports/1
        echo "uid=$(id -u)"
        for f in state phys_state link_layer rate lid sm_lid lid_mask_count sm_sl cap_mask gids/0 gid_attrs/types/0 gid_attrs/ndevs/0 pkeys/0; do
            echo "$f=$(cat $p/$f)"
        done
        echo "node_type=$(cat $d/node_type)"
        echo "node_guid=$(cat $d/node_guid)"
        echo "net=$(ls $d/device/net/)"
        [ -e $d/device/net/lo/mtu ] && echo "netlink=ok"
        ls /sys/class/infiniband | sed "s/^/ibdev /"
        for u in /sys/class/infiniband_verbs/uverbs*; do
            n=${u##*/}
            echo "uverbs $n $(cat $u/ibdev) $(stat -c %F /dev/infiniband/$n)"
            [ -r /dev/infiniband/$n ] && [ -w /dev/infiniband/$n ] && echo "rw $n"
        done
        echo "abi=$(cat /sys/class/infiniband_verbs/abi_version)"
        [ -c /dev/infiniband/rdma_cm ] && echo "rdma_cm=char"
        [ -d /sys/class/net/lo ] && echo "classes=kept"
        [ -c /dev/null ] && [ -d /dev/pts ] && echo "dev=kept"
        touch /sys/class/infiniband/rsw_lo/state 2>/dev/null || echo "readonly=yes"
    '
}
check_view() { # FILE WHO
    local f=$1
    expect_in "$f" '^state=4: ACTIVE$'
    expect_in "$f" '^phys_state=5: LinkUp$'
    expect_in "$f" '^link_layer=Ethernet$'
    expect_in "$f" '^rate=[0-9.]+ Gb/sec \([0-9]+X [A-Z0-9]+\)$'
    expect_in "$f" "^gids/0=$gid0_full\$"
    expect_in "$f" '^gid_attrs/types/0=RoCE v2$'
    expect_in "$f" '^gid_attrs/ndevs/0=lo$'
    expect_in "$f" '^pkeys/0=0xffff$'
    expect_in "$f" '^node_type=1: CA$'
    expect_in "$f" "^node_guid=$guid\$"
    expect_in "$f" '^net=lo$'
    expect_in "$f" '^netlink=ok$'
    expect_in "$f" '^abi=6$'
    expect_in "$f" '^rdma_cm=char$'
    expect_in "$f" '^classes=kept$'
    expect_in "$f" '^dev=kept$'
    expect_in "$f" '^readonly=yes$'
    # every device libibverbs lists, with a uverbs node UCX accepts (a
    # character device it can open read-write)
    sed -n 's/^ibdev //p' "$f" | sort | cmp -s - "$work/devices" ||
        { cat "$f"; fail "/sys/class/infiniband does not list exactly: $(cat "$work/devices")"; }
    while read -r dev; do
        grep -Eq "^uverbs uverbs[0-9]+ $dev character special file\$" "$f" ||
            { cat "$f"; fail "no /dev/infiniband/uverbsN character device for $dev"; }
    done < "$work/devices"
    [ "$(grep -c '^rw uverbs' "$f")" = "$(wc -l < "$work/devices")" ] ||
        { cat "$f"; fail "a /dev/infiniband/uverbsN cannot be opened read-write"; }
}

if [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; then
    look > "$work/view.root" 2>&1 || { cat "$work/view.root"; fail "rsw-run as root exit $?"; }
    check_view "$work/view.root"
    expect_in "$work/view.root" '^uid=0$'
    echo "ok root: the tree for rsw_lo matches ibv_devinfo -v; /dev/infiniband has uverbsN and rdma_cm"
    sed 's/^/    /' "$work/view.root"
fi

# An ordinary user: unshare --user --map-root-user --mount, and the command
# back under the user's own uid.
user=()
if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
    user=(env)
elif command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    as_nobody=(setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups)
    if "${as_nobody[@]}" unshare --user --map-root-user --mount true 2>/dev/null &&
       "${as_nobody[@]}" test -x "$run"; then
        user=("${as_nobody[@]}")
    fi
fi
if [ ${#user[@]} -gt 0 ]; then
    look "${user[@]}" > "$work/view.user" 2>&1 || { cat "$work/view.user"; fail "rsw-run as a user exit $?"; }
    check_view "$work/view.user"
    want=$("${user[@]}" id -u)
    expect_in "$work/view.user" "^uid=$want\$"
    echo "ok user (uid $want, user namespace): the same tree; the command runs under uid $want again"
else
    echo "note: no unprivileged user namespaces here; only the root path was tested"
fi

# The command's exit status and arguments come through unchanged.
"$run" sh -c 'exit 7' a; rc=$?
[ $rc = 7 ] || fail "rsw-run did not pass on exit status 7 (got $rc)"
out=$("$run" printf '%s|' 'a b' '' c) || fail "rsw-run printf"
[ "$out" = "a b||c|" ] || fail "arguments changed: $out"
"$run" /nonexistent/cmd 2>/dev/null && fail "a missing command succeeded"
echo "ok exit status and arguments pass through"

# --- tools that read the kernel's side
if command -v ibstat >/dev/null; then
    "$run" ibstat rsw_lo > "$work/ibstat" 2>&1 || { cat "$work/ibstat"; fail "ibstat exit $?"; }
    expect_in "$work/ibstat" "^CA 'rsw_lo'"
    expect_in "$work/ibstat" 'State: Active'
    expect_in "$work/ibstat" 'Physical state: LinkUp'
    expect_in "$work/ibstat" 'Link layer: Ethernet'
    expect_in "$work/ibstat" "Node GUID: 0x$(echo "$guid" | tr -d :)"
    "$run" ibstat -l > "$work/ibstat.l" 2>&1 || fail "ibstat -l exit $?"
    sort "$work/ibstat.l" | cmp -s - "$work/devices" ||
        { cat "$work/ibstat.l"; fail "ibstat -l does not list our devices"; }
    echo "ok ibstat lists $(tr '\n' ' ' < "$work/ibstat.l")and reads rsw_lo's port:"
    sed 's/^/    /' "$work/ibstat"
else
    echo "note: ibstat not installed (infiniband-diags); skipped"
fi

if command -v ucx_info >/dev/null; then
    # UCX lists an IB memory domain only for a device whose
    # /dev/infiniband/uverbsN it can open: none without rsw-run.
    timeout 60 ucx_info -d > "$work/ucx.plain" 2>&1
    if grep -q 'Memory domain: rsw_' "$work/ucx.plain"; then
        echo "note: ucx_info -d shows rsw devices even without rsw-run"
    fi
    timeout 60 "$run" ucx_info -d > "$work/ucx" 2>&1 || { tail -20 "$work/ucx"; fail "ucx_info -d exit $?"; }
    while read -r dev; do
        expect_in "$work/ucx" "Memory domain: $dev\$"
    done < "$work/devices"
    # rc_verbs and ud_verbs on rsw_lo's port
    awk '/Memory domain: rsw_lo$/ { on = 1; next } /Memory domain:/ { on = 0 }
         on && /Transport:/ { t = $3 } on && /Device: rsw_lo:1/ { print t }' "$work/ucx" > "$work/ucx.tl"
    grep -qx rc_verbs "$work/ucx.tl" || { cat "$work/ucx"; fail "no rc_verbs on rsw_lo:1"; }
    grep -qx ud_verbs "$work/ucx.tl" || { cat "$work/ucx"; fail "no ud_verbs on rsw_lo:1"; }
    echo "ok ucx_info -d under rsw-run: $(grep -c 'Memory domain: rsw_' "$work/ucx") rsw memory domains; rsw_lo:1 transports: $(tr '\n' ' ' < "$work/ucx.tl")"
    grep -E 'Memory domain: rsw|Transport:.*verbs|Device: rsw' "$work/ucx" | sed 's/^/    /'
    # And UCX moves data over rsw_lo: ucx_perftest, two processes, RDMA
    # writes over rc_verbs (UCX connects it through ud_verbs). UCX's UD
    # drops every datagram whose GRH destination it cannot match, reading
    # the RoCE header type (IPv4 or IPv6) from the completion's sl field as
    # mlx5 fills it; rsw reports it the same way, so UCX's own check stays on.
    if command -v ucx_perftest >/dev/null; then
        port=$(free_port)
        ucx_env=(env UCX_NET_DEVICES=rsw_lo:1 UCX_TLS=rc_verbs,ud_verbs)
        timeout 60 "$run" "${ucx_env[@]}" ucx_perftest -p "$port" > "$work/perf.server" 2>&1 &
        bg_pids="$bg_pids $!"
        wait_listen "$port"
        timeout 60 "$run" "${ucx_env[@]}" ucx_perftest -p "$port" -t ucp_put_bw -n 2000 -s 65536 127.0.0.1 \
            > "$work/perf.client" 2>&1 || { cat "$work/perf.client" "$work/perf.server"; fail "ucx_perftest exit $?"; }
        expect_in "$work/perf.client" '^Final:[[:space:]]+2000[[:space:]]'
        echo "ok ucx_perftest ucp_put_bw over rc_verbs on rsw_lo:1 under rsw-run:"
        grep -E 'Final:' "$work/perf.client" | sed 's/^/    /'
    fi
else
    echo "note: ucx_info not installed (ucx-utils); skipped"
fi

# --- the host is as it was
host_state > "$work/host.after"
diff "$work/host.before" "$work/host.after" ||
    fail "the host's /sys/class, /dev or mounts changed"
echo "ok the host's /sys/class, /dev and mount table are unchanged"
echo "ok"
