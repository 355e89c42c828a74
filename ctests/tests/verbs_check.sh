#!/bin/bash
# The misuse checker (RDMA_CHECK): build/ctests/misuse MODE makes one
# mistake per mode and prints the handles it used; with RDMA_CHECK=1 the
# report (RDMA_CHECK_FILE) must name exactly that finding (kind, object
# type, handle, QP number) once, with the spec line and a call site in the
# program's source; with RDMA_CHECK=abort the program must die of SIGABRT
# at that finding. `misuse clean` (a correct RC program) and Debian's
# ibv_rc_pingpong (plain and with completion events) must produce no
# report at all; with the checker off nothing is written either.
# harness-timeout: 300
set -u
. "$(dirname "$0")/lib/common.sh"

prog=$CTESTS_BIN/misuse
[ -x "$prog" ] || fail "$prog not built (make ctests)"

# run MODE: runs the mode with the checker reporting to $work/MODE.check;
# the program must succeed.
run() {
    RDMA_CHECK=1 RDMA_CHECK_FILE="$work/$1.check" timeout 60 "$prog" "$1" >"$work/$1.out" 2>"$work/$1.err" \
        || { cat "$work/$1.err" "$work/$1.check" 2>/dev/null; fail "misuse $1 failed under RDMA_CHECK=1"; }
}

# value MODE NAME: a "NAME=value" the program printed.
value() { grep -o "\(^\| \)$2=[^ ]*" "$work/$1.out" | head -1 | sed "s/^ *$2=//"; }

# finding MODE KIND OBJECT [SITE]: the report holds exactly one finding,
# of KIND about OBJECT ("qp 0x... qpn=N", "cq 0x..."), followed by its
# spec line and a call site naming SITE (a function of misuse.c).
finding() {
    mode=$1 kind=$2 obj=$3 site=${4:-mode_$1}
    f=$work/$mode.check
    [ -f "$f" ] || fail "$mode: no report written"
    n=$(grep -c "^rdma_check: [a-z_][a-z_]* " "$f")
    [ "$n" = 1 ] || { cat "$f"; fail "$mode: $n findings, expected exactly 1 ($kind)"; }
    grep -q "^rdma_check: $kind $obj: " "$f" || { cat "$f"; fail "$mode: no '$kind $obj' finding"; }
    grep -A1 "^rdma_check: $kind " "$f" | grep -q "^rdma_check:   spec: ." \
        || { cat "$f"; fail "$mode: finding without its spec line"; }
    grep -q "^rdma_check:   at: $site (.*ctests/src/misuse.c:[0-9]*" "$f" \
        || { cat "$f"; fail "$mode: call site $site not in the report"; }
    echo "ok: $mode -> $kind $obj"
}

qp() { echo "qp $(value "$1" qp) qpn=$(value "$1" qpn)"; }

for m in post_init post_err other_pd deregistered out_of_mr wr_other_pd buf_changed destroy_qp \
    dereg_busy unacked_cq unacked_async unacked_cm unacked_srq close_unacked rearm fork rkey mw_rkey rd_atomic \
    cq_overrun leak clean; do
    run "$m"
done

finding post_init post_state "$(qp post_init)"
grep -q "post_state .*: ibv_post_send on a QP in INIT" "$work/post_init.check" || fail "post_init: state not named"
finding post_err post_state "$(qp post_err)"
grep -q "ibv_post_recv on a QP in ERR" "$work/post_err.check" || fail "post_err: state not named"
finding other_pd lkey_other_pd "$(qp other_pd)" mode_sge
finding deregistered lkey_deregistered "$(qp deregistered)" mode_sge
finding out_of_mr sge_out_of_mr "$(qp out_of_mr)" mode_sge
finding wr_other_pd lkey_other_pd "$(qp wr_other_pd)"
grep -q "lkey_other_pd .*: ibv_wr_complete: SGE lkey=" "$work/wr_other_pd.check" || fail "wr_other_pd: SGE not named"
finding buf_changed send_buffer_changed "$(qp buf_changed)"
grep -q "wr_id=0x51 " "$work/buf_changed.check" || fail "buf_changed: wr_id not named"
finding destroy_qp destroy_busy "$(qp destroy_qp)" teardown
finding dereg_busy destroy_busy "mr $(value dereg_busy mr)"
finding unacked_cq unacked_events "cq $(value unacked_cq cq)"
finding unacked_async unacked_events "$(qp unacked_async)"
finding unacked_cm unacked_events "cm_id $(value unacked_cm cm_id)"
finding unacked_srq unacked_events "srq $(value unacked_srq srq)"
finding close_unacked unacked_events "context $(value close_unacked ctx)"
grep -q "^rdma_check: exit: unacked events on qp 0x[0-9a-f]*: 1 async" "$work/close_unacked.check" \
    || { cat "$work/close_unacked.check"; fail "close_unacked: the unacked event is not in the exit summary"; }
finding rearm rearm_undrained "cq $(value rearm cq)" wait_event
finding fork fork_unprotected "process $(value fork pid)"
finding rd_atomic rd_atomic_exceeded "$(qp rd_atomic)"
finding cq_overrun cq_overrun "cq $(value cq_overrun cq)"

# rkey: the requester's post names it; the responder (same process) refuses
# it too, a second finding about the other QP, found by a library thread.
grep -q "^rdma_check: rkey_invalidated $(qp rkey): a WR names rkey" "$work/rkey.check" \
    || { cat "$work/rkey.check"; fail "rkey: no finding on the requester"; }
echo "ok: rkey -> rkey_invalidated $(qp rkey)"
grep -q "^rdma_check: rkey_invalidated $(qp mw_rkey): a WR names rkey $(value mw_rkey rkey)," "$work/mw_rkey.check" \
    || { cat "$work/mw_rkey.check"; fail "mw_rkey: no finding on the requester"; }
echo "ok: mw_rkey -> rkey_invalidated $(qp mw_rkey)"

# Each finding once: the overrun is certain at the post and happens later;
# one report only (checked by `finding` above). The exit summary of the
# programs that leave objects behind:
grep -q "^rdma_check: exit: leaked 2 qp(s): .*$(value leak qp) qpn=$(value leak qpn)" "$work/leak.check" \
    || { cat "$work/leak.check"; fail "leak: QPs not in the exit summary"; }
grep -q "^rdma_check: exit: leaked 1 mr(s): $(value leak mr)" "$work/leak.check" \
    || { cat "$work/leak.check"; fail "leak: MR not in the exit summary"; }
for k in "2 cq(s)" "1 pd(s)"; do
    grep -q "^rdma_check: exit: leaked $k" "$work/leak.check" || { cat "$work/leak.check"; fail "leak: $k"; }
done
grep -q "^rdma_check: exit: leaked 1 cm_id(s): $(value leak cm_id)$" "$work/leak.check" \
    || { cat "$work/leak.check"; fail "leak: the CM id is not in the exit summary"; }
grep -q "^rdma_check: exit: 1 CM event(s) never acknowledged" "$work/leak.check" \
    || { cat "$work/leak.check"; fail "leak: the CM event is not in the exit summary"; }
[ "$(grep -c '^rdma_check: [a-z_][a-z_]* ' "$work/leak.check")" = 0 ] || fail "leak: findings besides the summary"
echo "ok: exit summary"

# The correct program: nothing at all.
[ ! -s "$work/clean.check" ] || { cat "$work/clean.check"; fail "clean: the checker reported something"; }
grep -q "clean done" "$work/clean.out" || fail "clean did not finish"
echo "ok: clean program, no report"

# With the tracer on too: the finding, and the trace of the same WR's post
# and completion.
RDMA_CHECK=1 RDMA_CHECK_FILE="$work/both.check" RDMA_TRACE="$work/both.trace" \
    timeout 60 "$prog" buf_changed >"$work/both.out" 2>&1 || fail "buf_changed with the tracer and the checker on"
grep -q "^rdma_check: send_buffer_changed qp " "$work/both.check" || fail "no finding with the tracer on"
grep -q " wr post_send .* wr_id=0x51 " "$work/both.trace" || fail "no traced post with the checker on"
grep -q " wc poll_cq .* wr_id=0x51 " "$work/both.trace" || fail "no traced completion with the checker on"
echo "ok: tracer and checker together"

# Off (unset, empty, 0): nothing written, the mistakes' programs behave.
for v in unset "" 0; do
    if [ "$v" = unset ]; then
        env -u RDMA_CHECK RDMA_CHECK_FILE="$work/off.check" timeout 60 "$prog" post_init >/dev/null 2>"$work/off.err"
    else
        RDMA_CHECK=$v RDMA_CHECK_FILE="$work/off.check" timeout 60 "$prog" post_init >/dev/null 2>"$work/off.err"
    fi || fail "post_init failed with the checker off ($v)"
    [ ! -e "$work/off.check" ] || fail "a report appeared with RDMA_CHECK=$v"
    ! grep -q rdma_check "$work/off.err" || fail "rdma_check on stderr with RDMA_CHECK=$v"
done
echo "ok: off"

# Without RDMA_CHECK_FILE the report goes to stderr.
RDMA_CHECK=1 timeout 60 "$prog" post_init >/dev/null 2>"$work/stderr.err" || fail "post_init to stderr"
grep -q "^rdma_check: post_state qp " "$work/stderr.err" || fail "no report on stderr"
echo "ok: stderr"

# RDMA_CHECK=abort: SIGABRT at the first finding (134 = 128 + SIGABRT
# through timeout), after writing it.
for m in post_init other_pd buf_changed unacked_cq rearm fork rd_atomic cq_overrun; do
    # (in a subshell whose stderr is closed: bash's "Aborted" notice)
    rc=$(exec 2>/dev/null; RDMA_CHECK=abort RDMA_CHECK_FILE="$work/$m.abort" timeout 60 "$prog" "$m" >/dev/null; echo $?)
    [ "$rc" = 134 ] || { cat "$work/$m.abort" 2>/dev/null; fail "$m: exit $rc under RDMA_CHECK=abort, expected SIGABRT (134)"; }
    grep -q "^rdma_check: aborting on the first finding" "$work/$m.abort" || fail "$m: no abort line"
    [ "$(grep '^rdma_check: [a-z_][a-z_]* ' "$work/$m.abort" | grep -vc '^rdma_check: aborting ')" = 1 ] \
        || fail "$m: not exactly one finding before the abort"
done
RDMA_CHECK=abort RDMA_CHECK_FILE="$work/clean.abort" timeout 60 "$prog" clean >/dev/null 2>&1 \
    || fail "clean failed under RDMA_CHECK=abort"
echo "ok: abort"

# Debian's ibv_rc_pingpong, plain and with completion events: silent.
if command -v ibv_rc_pingpong >/dev/null; then
    for opts in "" "-e" "-e -c"; do
        port=$(free_port)
        # shellcheck disable=SC2086
        RDMA_CHECK=1 RDMA_CHECK_FILE="$work/pp.srv.check" timeout 60 \
            ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" -n 200 $opts >"$work/pp.srv" 2>&1 &
        srv=$!
        bg_pids="$bg_pids $srv"
        wait_listen "$port"
        # shellcheck disable=SC2086
        RDMA_CHECK=1 RDMA_CHECK_FILE="$work/pp.cli.check" timeout 60 \
            ibv_rc_pingpong -d rsw_lo -g 0 -p "$port" -n 200 $opts 127.0.0.1 >"$work/pp.cli" 2>&1 \
            || { cat "$work/pp.cli"; fail "ibv_rc_pingpong $opts client failed under the checker"; }
        wait "$srv" || { cat "$work/pp.srv"; fail "ibv_rc_pingpong $opts server failed under the checker"; }
        for side in srv cli; do
            expect_in "$work/pp.$side" '[0-9]+ iters in [0-9.]+ seconds'
            [ ! -s "$work/pp.$side.check" ] || { cat "$work/pp.$side.check"; fail "ibv_rc_pingpong $opts ($side): reported"; }
        done
        echo "ok: ibv_rc_pingpong $opts, no report"
    done
else
    echo "skip: ibv_rc_pingpong not installed"
fi
echo "PASS"
