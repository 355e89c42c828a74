#!/bin/bash
# Logging the rdma-core way: VERBS_LOG_LEVEL (0 none, the default; 1 error;
# 2 warning; 3 info; 4 debug) and VERBS_LOG_FILE (default stderr) for
# libibverbs, rsw and librdmacm; RDMACM_RS_DEBUG raises librdmacm to debug;
# IBV_SHOW_WARNINGS shows libibverbs' warnings on stderr whatever the level.
# build/ctests/trace_rc hits error paths (an ibv_reg_mr refused for its
# access flags, an RDMA WRITE with a wrong rkey: NAK, both QPs to ERR);
# build/ctests/cm_events' closed_port and pdata_reject cases are rejected
# connections. Checked: the lines name the object (the MR's range, the QP's
# number as the program printed it, the CM id and its destination) and the
# reason; with VERBS_LOG_LEVEL unset or 0 nothing is written and no file is
# created; the driver warnings still show under IBV_SHOW_WARNINGS.
set -u
. "$(dirname "$0")/lib/common.sh"

prog=$CTESTS_BIN/trace_rc
cm=$CTESTS_BIN/cm_events
[ -x "$prog" ] || fail "$prog not built (make ctests)"
[ -x "$cm" ] || fail "$cm not built (make ctests)"
unset VERBS_LOG_LEVEL VERBS_LOG_FILE RDMACM_RS_DEBUG IBV_SHOW_WARNINGS

# 1. Off: no file, nothing on stderr, with the file named or not.
mkdir "$work/off"
(cd "$work/off" && VERBS_LOG_FILE=$work/off/log timeout 60 "$prog" >/dev/null 2>"$work/off.err") ||
    fail "trace_rc failed with logging off"
(cd "$work/off" && VERBS_LOG_LEVEL=0 VERBS_LOG_FILE=$work/off/log0 timeout 60 "$prog" >/dev/null 2>>"$work/off.err") ||
    fail "trace_rc failed with VERBS_LOG_LEVEL=0"
(cd "$work/off" && VERBS_LOG_FILE=$work/off/cmlog timeout 60 "$cm" closed_port >/dev/null 2>&1) ||
    fail "cm_events failed with logging off"
[ -z "$(ls -A "$work/off")" ] || fail "files appeared with logging off: $(ls -A "$work/off")"
[ -s "$work/off.err" ] && { cat "$work/off.err"; fail "stderr written with logging off"; }
echo "ok: off, no file, no output"

# 2. Warnings and errors into a file.
VERBS_LOG_LEVEL=2 VERBS_LOG_FILE=$work/log timeout 60 "$prog" >"$work/ids.json" 2>"$work/on.err" ||
    fail "trace_rc failed with VERBS_LOG_LEVEL=2"
[ -s "$work/on.err" ] && { cat "$work/on.err"; fail "stderr written with VERBS_LOG_FILE set"; }
python3 - "$work/ids.json" "$work/log" <<'PY' || fail "log content"
import json, re, sys
ids = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read().splitlines()
a, b = ids["qpn_a"], ids["qpn_b"]
def has(pattern):
    if not any(re.search(pattern, l) for l in log):
        print("\n".join(log))
        sys.exit(f"no line matches {pattern!r}")
# Every line is '<lib>: <level>: <module>: <message>'.
for l in log:
    if not re.match(r"^(libibverbs|librdmacm|rsw): (error|warning): [\w:]+: ", l):
        sys.exit(f"malformed line {l!r}")
has(r"^rsw: error: mr: reg_mr 0x[0-9a-f]+\+0x1000: access flags 0x2 refused \(EINVAL\)")
# The WRITE with the bad rkey: the responder (whichever QP it was) goes to
# ERR for the access error, the requester gets the NAK and goes to ERR.
qps = "|".join(f"{q:#x}" for q in (a, b))
has(rf"^rsw: error: wq: qp ({qps}): RTS -> ERR: remote access error")
has(rf"^rsw: error: engine::completer: qp ({qps}): NAK from the responder .*RemAccess")
has(rf"^rsw: error: wq: qp ({qps}): RTS -> ERR: work request 0xbad failed with REM_ACCESS_ERR")
# Level 2: no info or debug lines.
if any(": info: " in l or ": debug: " in l for l in log):
    sys.exit("info/debug lines at level 2")
PY
echo "ok: level 2 into VERBS_LOG_FILE, objects and reasons"

# 3. Level 1 keeps errors only; no VERBS_LOG_FILE means stderr.
VERBS_LOG_LEVEL=1 timeout 60 "$prog" >/dev/null 2>"$work/l1.err" || fail "trace_rc failed with VERBS_LOG_LEVEL=1"
expect_in "$work/l1.err" '^rsw: error: wq: qp 0x[0-9a-f]+: RTS -> ERR'
grep -q ': warning: ' "$work/l1.err" && fail "warnings logged at level 1"
echo "ok: level 1 to stderr"

# 4. librdmacm: rejected connections, with the id, its destination and why.
VERBS_LOG_LEVEL=2 VERBS_LOG_FILE=$work/cm.log timeout 60 "$cm" closed_port pdata_reject >/dev/null 2>&1 ||
    fail "cm_events failed with VERBS_LOG_LEVEL=2"
expect_in "$work/cm.log" '^librdmacm: warning: id::events: id 0x[0-9a-f]+ \(to 127\.0\.0\.1:[0-9]+\) in [A-Za-z]+: connection rejected, reason 8 \(invalid service ID'
expect_in "$work/cm.log" 'connection rejected, reason 28 \(consumer defined'
grep -q ': debug: ' "$work/cm.log" && fail "debug lines at level 2"
# RDMACM_RS_DEBUG: librdmacm at debug level, the CM's decisions included.
RDMACM_RS_DEBUG=1 VERBS_LOG_FILE=$work/cmdebug.log timeout 60 "$cm" pdata_reject >/dev/null 2>&1 ||
    fail "cm_events failed with RDMACM_RS_DEBUG=1"
expect_in "$work/cmdebug.log" '^librdmacm: debug: id::io: id 0x[0-9a-f]+ in ReqSent got Rej'
grep -q '^rsw: \|^libibverbs: ' "$work/cmdebug.log" && fail "RDMACM_RS_DEBUG raised other libraries' levels"
echo "ok: librdmacm rejects, RDMACM_RS_DEBUG"

# 5. libibverbs' driver warnings: under IBV_SHOW_WARNINGS on stderr in
# rdma-core's form whatever the level; in the log at level 2.
conf=$work/conf
mkdir -p "$conf"
printf 'driver nosuchprovider\nthis is not a driver line\ndriver rsw\n' > "$conf/a.driver"
IBV_CONFIG_DIR=$conf ibv_devices >/dev/null 2>"$work/w0.err" || fail "ibv_devices exit $?"
[ -s "$work/w0.err" ] && { cat "$work/w0.err"; fail "warnings printed without IBV_SHOW_WARNINGS"; }
IBV_SHOW_WARNINGS=1 IBV_CONFIG_DIR=$conf ibv_devices >/dev/null 2>"$work/w1.err" || fail "ibv_devices exit $?"
expect_in "$work/w1.err" "^libibverbs: Warning: couldn't load driver 'nosuchprovider'"
expect_in "$work/w1.err" 'this is not a driver line'
IBV_SHOW_WARNINGS=1 VERBS_LOG_LEVEL=1 VERBS_LOG_FILE=$work/w2.log IBV_CONFIG_DIR=$conf ibv_devices >/dev/null 2>"$work/w2.err" ||
    fail "ibv_devices exit $?"
expect_in "$work/w2.err" "^libibverbs: Warning: couldn't load driver 'nosuchprovider'"
[ -e "$work/w2.log" ] && fail "a warning went to the log at level 1"
VERBS_LOG_LEVEL=2 VERBS_LOG_FILE=$work/w3.log IBV_CONFIG_DIR=$conf ibv_devices >/dev/null 2>"$work/w3.err" ||
    fail "ibv_devices exit $?"
[ -s "$work/w3.err" ] && { cat "$work/w3.err"; fail "stderr written with VERBS_LOG_FILE set"; }
expect_in "$work/w3.log" "^libibverbs: warning: driver: couldn't load driver 'nosuchprovider'"
echo "ok: IBV_SHOW_WARNINGS, driver warnings logged"
echo ok
