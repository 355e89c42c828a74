# Sourced by the end-to-end test scripts. The harness exports BUILD,
# LD_LIBRARY_PATH, IBV_CONFIG_DIR and CTESTS_BIN; a script run by hand gets
# the same defaults from the repository layout.
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${BUILD:=$repo/build}"
: "${LD_LIBRARY_PATH:=$BUILD/lib}"
: "${IBV_CONFIG_DIR:=$BUILD/etc/libibverbs.d}"
: "${CTESTS_BIN:=$BUILD/ctests}"
export BUILD LD_LIBRARY_PATH IBV_CONFIG_DIR CTESTS_BIN

work=$(mktemp -d)
bg_pids=""
cleanup_hooks=""
cleanup() {
    for p in $bg_pids; do kill "$p" 2>/dev/null; done
    for h in $cleanup_hooks; do "$h"; done
    rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# wait_listen PORT [NETNS]: bounded wait until something listens on TCP PORT.
wait_listen() {
    port=$1 ns=${2:-}
    for _ in $(seq 1 200); do
        if [ -n "$ns" ]; then
            ip netns exec "$ns" ss -Hltn "sport = :$port" | grep -q . && return 0
        else
            ss -Hltn "sport = :$port" | grep -q . && return 0
        fi
        sleep 0.05   # polling a condition with a bound, not synchronising on time
    done
    fail "nothing listens on port $port after 10 s"
}

. "$here/lib/ports.sh"

# expect_in FILE PATTERN: the file contains the extended regex.
expect_in() {
    grep -Eq -- "$2" "$1" || { echo "--- $1"; cat "$1"; fail "'$2' not found in $1"; }
}
