#!/bin/bash
# make bench: perftest and qperf over our libraries beside the baselines a
# same-host transport is judged by, all measured in the same run on the same
# machine, printed as one table with ratios. Nothing here asserts a time.
#
# Paths (the transport each of our measurements used):
#   lo       both sides in this network namespace on rsw_lo, with the
#            caller's RSW_TRANSPORT (unset = auto: the same-host path)
#   lo-tcp   the same with RSW_TRANSPORT=tcp (skipped when the caller
#            already forces tcp)
#   veth     server and client in two network namespaces joined by a veth
#            pair (needs root; rows say "skip" otherwise): TCP between them
# Baselines:
#   sockperf (TCP ping-pong one-way median; message rate) and iperf3 (TCP
#   bandwidth) on the same path; memcpy, process_vm_writev from a parent
#   into its child, and a shared-memory ping-pong (bench/*.c, cc -O2).
#   Not a target's baseline: bench/tcp_pingpong.c, rsw's TCP wire layout
#   with nothing else, on the same paths (what the layout itself costs).
#
# Each figure is the median of BENCH_RUNS (default 3) rounds; a round
# measures everything once, baselines interleaved with ours, so drift on a
# shared machine hits both. Every perftest/qperf run is under `timeout 60`;
# a run that fails shows as "fail" (logs in $BENCH_OUT/logs).
#   bench/run.sh                 after `make`; BUILD=... picks another build
#   BENCH_RUNS=1 bench/run.sh    one round (a quick look)
# Then the same rows in a VM beside the kernel's rxe and siw, with rsw
# over TCP and in RoCEv2 mode (bench/vm.sh; BENCH_VM=0 leaves them out),
# and between two VMs on one link (bench/vm2.sh; BENCH_VM2=0 leaves them
# out, BENCH_VM=0 both).
# Writes $BENCH_OUT/table.md (default build/bench/) and prints it;
# BENCH_DOC=docs/benchmarks.md also puts it in that file.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${BUILD:=$repo/build}"
BUILD=$(cd "$BUILD" && pwd) || exit 1
[ -e "$BUILD/lib/libibverbs.so.1" ] || { echo "bench: no $BUILD/lib/libibverbs.so.1; run make first" >&2; exit 1; }
runs=${BENCH_RUNS:-3}
out=${BENCH_OUT:-$repo/build/bench}
mkdir -p "$out/logs" || exit 1
rm -f "$out"/logs/*
work=$(mktemp -d)
# A private copy of the libraries, so a rebuild during the run cannot mix
# two builds in one table.
mkdir "$work/build" && cp -a "$BUILD/lib" "$BUILD/etc" "$work/build/" || exit 1
build_desc="$BUILD (from $(git -C "$BUILD/.." describe --always --dirty 2>/dev/null || echo "?"), built $(date -u -r "$BUILD/lib/libibverbs/librsw-rdmav34.so" '+%Y-%m-%d %H:%M UTC'))"
export LD_LIBRARY_PATH=$work/build/lib IBV_CONFIG_DIR=$work/build/etc/libibverbs.d
results=$work/results
: > "$results"
. "$repo/ctests/tests/lib/ports.sh"   # free_port

for t in ib_send_lat qperf sockperf iperf3 cc python3; do
    command -v $t > /dev/null || { echo "bench: $t is not installed (apt-get install perftest qperf sockperf iperf3)" >&2; exit 1; }
done

# The two namespaces of the veth path.
nsA=bnA$$ nsB=bnB$$ vA=bnva$$ vB=bnvb$$ ipA=198.18.77.1 ipB=198.18.77.2
have_ns=""
cleanup() {
    # shellcheck disable=SC2046 # one word per job
    kill $(jobs -p) 2>/dev/null
    if [ -n "$have_ns" ]; then ip netns del $nsA 2>/dev/null; ip netns del $nsB 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ip netns add $nsA 2>/dev/null; then
    have_ns=1
    if ! { ip netns add $nsB && ip link add $vA type veth peer name $vB &&
           ip link set $vA netns $nsA && ip link set $vB netns $nsB &&
           ip -n $nsA addr add $ipA/24 dev $vA && ip -n $nsB addr add $ipB/24 dev $vB &&
           ip -n $nsA link set lo up && ip -n $nsB link set lo up &&
           ip -n $nsA link set $vA up && ip -n $nsB link set $vB up; }; then
        echo "bench: could not set up the veth pair; veth rows skipped" >&2
        ip netns del $nsA 2>/dev/null; ip netns del $nsB 2>/dev/null; have_ns=""
    fi
else
    echo "bench: cannot create network namespaces (not root?); veth rows skipped" >&2
fi

paths="lo"
[ "${RSW_TRANSPORT:-auto}" != tcp ] && paths="$paths lo-tcp"
[ -n "$have_ns" ] && paths="$paths veth"

# use_path PATH: the namespaces, devices, server address and transport
# override of one path.
use_path() {
    case $1 in
    lo|lo-tcp) srv_ns="" cli_ns="" srv_dev=rsw_lo cli_dev=rsw_lo addr=127.0.0.1 ;;
    veth) srv_ns=$nsA cli_ns=$nsB srv_dev=rsw_$vA cli_dev=rsw_$vB addr=$ipA ;;
    esac
    if [ "$1" = lo-tcp ]; then tenv="RSW_TRANSPORT=tcp"; else tenv="RSW_TRANSPORT=${RSW_TRANSPORT:-auto}"; fi
    prefixes
}

# The server's and the client's command prefixes: their namespace and the
# path's RSW_TRANSPORT (the rest of the environment passes through). Each
# execs the next, so $! of a backgrounded command is the program's own.
prefixes() {
    if [ -n "$srv_ns" ]; then
        srv_pre=(ip netns exec "$srv_ns" env "$tenv") cli_pre=(ip netns exec "$cli_ns" env "$tenv")
    else
        srv_pre=(env "$tenv") cli_pre=(env "$tenv")
    fi
}

# wait_listen PORT NS: bounded wait until something listens on TCP PORT.
wait_listen() {
    for _ in $(seq 1 200); do
        if [ -n "$2" ]; then
            ip netns exec "$2" ss -Hltn "sport = :$1" | grep -q . && return 0
        else
            ss -Hltn "sport = :$1" | grep -q . && return 0
        fi
        sleep 0.05   # polling a condition with a bound
    done
    return 1
}

# stop PID: give a server 5 s to finish on its own, then end it.
stop() {
    for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
    kill "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

record() { printf '%s\t%s\n' "$1" "$2" >> "$results"; }

# failed NAME: keep the logs of a failed run and say so.
failed() {
    echo "bench: $1 failed (logs: $out/logs/$1.*)" >&2
    tail -3 "$work/cli" | sed 's/^/    /' >&2
    cp "$work/srv" "$out/logs/$1.srv" 2>/dev/null
    cp "$work/cli" "$out/logs/$1.cli" 2>/dev/null
}

# perftest KEY COLUMN TOOL ARGS...: one server/client pair on the current
# path; records COLUMN of the client's result row (x SCALE) under KEY.
scale=1
perftest() {
    key=$1 col=$2 tool=$3; shift 3
    port=$(free_port)
    "${srv_pre[@]}" timeout 60 "$tool" -d "$srv_dev" -x 0 -F -p "$port" "$@" > "$work/srv" 2>&1 &
    srv=$!
    : > "$work/cli"
    if wait_listen "$port" "$srv_ns"; then
        "${cli_pre[@]}" timeout 60 "$tool" -d "$cli_dev" -x 0 -F -p "$port" "$@" "$addr" > "$work/cli" 2>&1
        crc=$?
    else
        echo "server did not listen on $port" > "$work/cli"; crc=1
    fi
    stop $srv
    v=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$work/cli" | tail -1 | awk -v c="$col" -v s="$scale" '{ print $c * s }')
    if [ "$crc" != 0 ] || [ -z "$v" ]; then
        failed "$key.r$round"; v=fail
    fi
    record "$key" "$v"
}

# qperf KEY TEST ARGS...: qperf's client against a qperf server on the
# current path; records the latency (us) or bandwidth (GB/s). Connected
# through the RDMA CM (-cm1): without it qperf exchanges no GIDs, so two
# namespaces cannot reach each other ("Retries exceeded"). Polling the
# completion queues (-cp1) like perftest; qperf's default waits for
# completion events.
qperf_run() {
    key=$1 test=$2; shift 2
    port=$(free_port)
    "${srv_pre[@]}" timeout 60 qperf -lp "$port" > "$work/srv" 2>&1 &
    srv=$!
    : > "$work/cli"
    if wait_listen "$port" "$srv_ns"; then
        "${cli_pre[@]}" timeout 60 qperf -lp "$port" -cm1 -cp1 "$@" "$addr" "$test" > "$work/cli" 2>&1
        crc=$?
    else
        echo "server did not listen on $port" > "$work/cli"; crc=1
    fi
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    v=$(awk '$1 == "latency" || $1 == "bw" {
            u = $4; x = $3
            if (u == "ns") x /= 1000; else if (u == "ms") x *= 1000; else if (u == "sec") x *= 1e6
            else if (u == "KB/sec") x /= 1e6; else if (u == "MB/sec") x /= 1e3; else if (u == "bytes/sec") x /= 1e9
            print x }' "$work/cli")
    if [ "$crc" != 0 ] || [ -z "$v" ]; then
        failed "$key.r$round"; v=fail
    fi
    record "$key" "$v"
}

# better lower|higher BEST V: the better of two figures (BEST may be empty).
better() {
    if [ -z "$2" ]; then echo "$3"; elif [ -z "$3" ]; then echo "$2"
    else awk -v w="$1" -v a="$2" -v b="$3" 'BEGIN { print ((w == "lower") == (b + 0 < a + 0)) ? b : a }'; fi
}

# sockperf_run KEY MODE SIZE: kernel TCP at its best on the path. Ping-pong
# records the one-way median (us), the better of a 1-second run with both
# sides busy-polling non-blocking sockets (--nonblocked --timeout 0, as
# perftest busy-polls) and one blocking in epoll (sockperf's default; on a
# loaded machine a spinner can wait out a scheduler tick). Throughput
# records the sender's message rate (Mpps), the better of two 1-second runs.
sockperf_run() {
    key=$1 mode=$2 size=$3 best=""
    if [ "$mode" = ping-pong ]; then
        set -- "--nonblocked --timeout 0" ""
    else
        set -- "" ""
    fi
    for spin in "$@"; do
        port=$(free_port)
        # shellcheck disable=SC2086
        "${srv_pre[@]}" timeout 60 sockperf server --tcp -i "$addr" -p "$port" $spin > "$work/srv" 2>&1 &
        srv=$!
        : > "$work/cli"
        if wait_listen "$port" "$srv_ns"; then
            # shellcheck disable=SC2086
            "${cli_pre[@]}" timeout 60 sockperf "$mode" --tcp -i "$addr" -p "$port" -m "$size" -t 1 $spin > "$work/cli" 2>&1
        fi
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        if [ "$mode" = ping-pong ]; then
            v=$(awk '/percentile 50.000/ { print $NF }' "$work/cli")
            best=$(better lower "$best" "$v")
        else
            v=$(sed -n 's/.*Message Rate is \([0-9]*\).*/\1/p' "$work/cli" | awk '{ print $1 / 1e6 }')
            best=$(better higher "$best" "$v")
        fi
    done
    [ -n "$best" ] || { failed "$key.r$round"; best=fail; }
    record "$key" "$best"
}

# tcp_pp_run KEY SIZE: bench/tcp_pingpong.c, rsw's wire layout (two
# one-way connections, framed messages, a reader that asks poll(2) before
# recv and lets the kernel acknowledge early) with nothing else, on the path: one-way median (us) of 200000
# exchanges.
tcp_pp_run() {
    key=$1 size=$2 v=""
    port=$(free_port)
    "${srv_pre[@]}" timeout 60 "$work/tcp_pingpong" server "$port" "$size" > "$work/srv" 2>&1 &
    srv=$!
    if wait_listen "$port" "$srv_ns"; then
        v=$("${cli_pre[@]}" timeout 60 "$work/tcp_pingpong" client "$addr" "$port" "$size" 200000 2> "$work/cli")
    fi
    wait $srv 2>/dev/null
    [ -n "$v" ] || { failed "$key.r$round"; v=fail; }
    record "$key" "$v"
}

# iperf3_run KEY SIZE [ARGS]: TCP bandwidth (GB/s received) with SIZE-byte
# writes, the better of two 2-second runs; ARGS go to the client (-P 16).
iperf3_run() {
    key=$1 size=$2 best=""
    shift 2
    for _ in 1 2; do
        port=$(free_port)
        "${srv_pre[@]}" timeout 60 iperf3 -s -1 -p "$port" > "$work/srv" 2>&1 &
        srv=$!
        : > "$work/cli"
        if wait_listen "$port" "$srv_ns"; then
            "${cli_pre[@]}" timeout 60 iperf3 -c "$addr" -p "$port" -t 2 -l "$size" -J "$@" > "$work/cli" 2>&1
        fi
        kill $srv 2>/dev/null; wait $srv 2>/dev/null
        v=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' "$work/cli" 2>/dev/null)
        best=$(better higher "$best" "$v")
    done
    [ -n "$best" ] || { failed "$key.r$round"; best=fail; }
    record "$key" "$best"
}

# The baseline programs, compiled here so they are this machine's best.
for p in memcpy_bw pvw_bw shm_pingpong tcp_pingpong; do
    cc -O2 -o "$work/$p" "$repo/bench/$p.c" || { echo "bench: cannot compile bench/$p.c" >&2; exit 1; }
done

# perftest reports MiB/s ("MB/sec"); the table is in GB/s (10^9 B/s).
mib=0.001048576
t0=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$runs"); do
    echo "== round $round of $runs ($(($(date +%s) - t0)) s)" >&2
    for r in $("$work/memcpy_bw" 65536 1048576 | awk '{ print $1 ":" $2 }'); do
        record "memcpy:${r%%:*}" "${r#*:}"
    done
    for r in $("$work/pvw_bw" 65536 1048576 | awk '{ print $1 ":" $2 }'); do
        record "pvw:${r%%:*}" "${r#*:}"
    done
    record shm "$("$work/shm_pingpong" 1000000 || echo fail)"
    for path in $paths; do
        use_path $path
        echo "   $path" >&2
        if [ $path != lo-tcp ]; then   # kernel TCP is the same for lo and lo-tcp
            for s in 14 64; do sockperf_run "sockperf_lat:$s:$path" ping-pong $s; done
            for s in 2 64; do tcp_pp_run "tcp_pp:$s:$path" $s; done
            sockperf_run "sockperf_rate:14:$path" throughput 14
            for s in 65536 1048576; do iperf3_run "iperf3:$s:$path" $s; done
        fi
        scale=1
        # 100000 exchanges (under a second over TCP, as sockperf's one
        # second): at 2000 a run lasted 14 ms over TCP, and a kernel
        # thread taking a core for a few ms moved the median of the
        # run. ib_write_lat over TCP can take 2 ms an exchange (see
        # docs/benchmarks.md), so it stays short.
        for s in 2 64; do
            perftest "send_lat:$s:$path" 5 ib_send_lat -s $s -n 100000
            perftest "write_lat:$s:$path" 5 ib_write_lat -s $s -n 1000
            perftest "read_lat:$s:$path" 5 ib_read_lat -s $s -n 100000
        done
        perftest "atomic_lat:8:$path" 5 ib_atomic_lat -n 100000
        # A million messages (a third of a second at the target rate): at
        # 100000 a run lasts ~30 ms and one kernel thread taking a core
        # for a few ms moved the figure by a third.
        perftest "send_bw:2:$path" 5 ib_send_bw -s 2 -n 1000000
        perftest "atomic_bw:8:$path" 5 ib_atomic_bw -n 100000
        scale=$mib
        for t in write read send; do
            perftest "${t}_bw:65536:$path" 4 ib_${t}_bw -s 65536 -n 20000
            perftest "${t}_bw:1048576:$path" 4 ib_${t}_bw -s 1048576 -n 2000
        done
        qperf_run "rc_lat:64:$path" rc_lat -t 2 -m 64
        qperf_run "rc_rdma_write_lat:64:$path" rc_rdma_write_lat -t 2 -m 64
        qperf_run "rc_bw:65536:$path" rc_bw -t 2 -m 65536
        # Many QPs streaming at once between the hosts (perftest's -q:
        # its iterations are per QP, its figures the aggregate), beside
        # 16 TCP streams. -N: perftest computes its peak over every
        # message of every QP in quadratic time unless a QP's iterations
        # pass 20000 (256 x 6250 SENDs took minutes after the transfer).
        # Counts per QP are multiples of perftest's CQ moderation (100):
        # Debian's perftest (4.5-0.17) counts each QP's last completion
        # as 100, so with another count the total is reached while some
        # QPs still wait, and it stops polling for good (fixed upstream
        # in 2023, perftest 5ff3afa, "fill_count").
        if [ $path = veth ]; then
            iperf3_run "iperf3_p16:65536:$path" 65536 -P 16
            for q in 16 256; do
                scale=1
                perftest "send_bw_q$q:2:$path" 5 ib_send_bw -s 2 -q $q -N -n $((1600000 / q / 100 * 100))
                scale=$mib
                perftest "write_bw_q$q:65536:$path" 4 ib_write_bw -s 65536 -q $q -N -n $((32000 / q))
            done
        fi
    done
done
secs=$(($(date +%s) - t0))
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# The machine and what was measured.
{
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    echo "cores=$(nproc)"
    echo "kernel=$(uname -r)"
    echo "virt=$(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -1)"
    echo "glibc=$(ldd --version | head -1 | awk '{ print $NF }')"
    echo "commit=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo "?")"
    echo "build=$build_desc"
    echo "tools=$(dpkg-query -W -f '${Package} ${Version}, ' perftest qperf sockperf iperf3 2>/dev/null | sed 's/, $//')"
    echo "transport=${RSW_TRANSPORT:-auto}"
    echo "runs=$runs"
    echo "seconds=$secs"
    echo "load=$load0 at the start, $load1 at the end"
    echo "paths=$paths"
} > "$work/machine"
python3 "$repo/bench/table.py" "$work/machine" "$results" > "$out/table.md" || exit 1
# What objects cost (bench/footprint.c): resident memory and descriptors
# per connected RC QP and per 4 KiB MR, on each loopback path.
if cc -O2 -I "$repo/include" -o "$work/footprint" "$repo/bench/footprint.c" \
    -L "$work/build/lib" -libverbs; then
    {
        echo
        echo "| footprint (1000 objects) | path | resident memory per object | descriptors per object |"
        echo "|---|---|---|---|"
        for path in lo lo-tcp; do
            t=auto; [ $path = lo-tcp ] && t=tcp
            RSW_TRANSPORT=$t timeout 120 "$work/footprint" rsw_lo 1000 1000 |
                awk -v p=$path '{ printf "| %s | %s | %.1f KiB | %s |\n", ($1 == "qp" ? "connected RC QP" : "MR, 4 KiB"), p, $2 / 1024, $3 }'
        done
    } >> "$out/table.md"
else
    echo "bench: cannot compile bench/footprint.c" >&2
fi
# Beside the kernel's soft devices in the VM of ctests/vm/ (bench/vm.sh;
# about 15 minutes under TCG): BENCH_VM=0 leaves it out; without root or
# the VM image it is skipped.
if [ "${BENCH_VM:-1}" != 0 ]; then
    echo "== the VM: rxe0, siw0, rsw over TCP and in RoCEv2 mode" >&2
    BUILD=$work/build "$repo/bench/vm.sh" > "$work/vm.md"
    case $? in
    0) { echo; cat "$work/vm.md"; } >> "$out/table.md" ;;
    77) echo "bench: the VM rows are skipped (bench/vm.sh says why above)" >&2 ;;
    *) echo "bench: the VM rows failed" >&2 ;;
    esac
fi
# Two VMs on one link (bench/vm2.sh; about 10 minutes under TCG), where
# every packet crosses the link for every device: BENCH_VM2=0 leaves it out.
if [ "${BENCH_VM2:-${BENCH_VM:-1}}" != 0 ]; then
    echo "== two VMs on one link: rxe, siw, rsw over TCP and in RoCEv2 mode" >&2
    BUILD=$work/build "$repo/bench/vm2.sh" > "$work/vm2.md"
    case $? in
    0) { echo; cat "$work/vm2.md"; } >> "$out/table.md" ;;
    77) echo "bench: the two-VM rows are skipped (bench/vm2.sh says why above)" >&2 ;;
    *) echo "bench: the two-VM rows failed" >&2 ;;
    esac
fi
cp "$results" "$out/results.tsv"
cat "$out/table.md"
# BENCH_DOC=docs/benchmarks.md: put the table between its markers there.
if [ -n "${BENCH_DOC:-}" ]; then
    python3 - "$BENCH_DOC" "$out/table.md" <<'PY' || echo "bench: could not update $BENCH_DOC" >&2
import sys
doc, table = sys.argv[1], open(sys.argv[2]).read()
text = open(doc).read()
begin, end = "<!-- bench:begin -->\n", "<!-- bench:end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(doc, "w").write(text[:a] + table + text[b:])
PY
fi
echo "bench: $out/table.md ($secs s)" >&2
