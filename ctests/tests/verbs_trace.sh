#!/bin/bash
# The verbs tracer (RDMA_TRACE): build/ctests/trace_rc runs a small RC
# exchange (a failing ibv_reg_mr, a SEND, an RDMA WRITE with a wrong rkey,
# a SEND through ibv_wr_* polled with ibv_start_poll, one CM event, the
# destroy verbs) and prints the handles, keys and QP
# numbers it used; the trace must carry them. Checked: with RDMA_TRACE unset
# (or empty) no file appears; the JSON-lines trace has the verb calls with
# arguments, results and errno, every WR (opcode, wr_id, SGE lkey/length,
# remote address and rkey), every completion (status, opcode, byte_len),
# the CM event, in the order the program made them; RDMA_TRACE_FILTER keeps
# only what it names; the text form has the same records.
set -u
. "$(dirname "$0")/lib/common.sh"

prog=$CTESTS_BIN/trace_rc
[ -x "$prog" ] || fail "$prog not built (make ctests)"

# 1. Off: no file, whatever the format and filter say.
mkdir "$work/off"
(cd "$work/off" && env -u RDMA_TRACE RDMA_TRACE_FORMAT=json RDMA_TRACE_FILTER=qp \
    timeout 60 "$prog" >"$work/off.out") || fail "trace_rc failed with the tracer off"
(cd "$work/off" && RDMA_TRACE= timeout 60 "$prog" >/dev/null) || fail "trace_rc failed with RDMA_TRACE empty"
[ -z "$(ls -A "$work/off")" ] || fail "files appeared with RDMA_TRACE unset or empty: $(ls -A "$work/off")"
echo "ok: off, no file"

# 2. JSON lines, everything.
RDMA_TRACE=$work/all.json RDMA_TRACE_FORMAT=json timeout 60 "$prog" >"$work/all.out" \
    || fail "trace_rc failed with the tracer on"
# 3. A filter: completions and ibv_modify_qp only.
RDMA_TRACE=$work/filtered.json RDMA_TRACE_FORMAT=json RDMA_TRACE_FILTER=wc,ibv_modify_qp \
    timeout 60 "$prog" >"$work/filtered.out" || fail "trace_rc failed with a filter"
# 4. The text form, to stderr.
RDMA_TRACE=stderr timeout 60 "$prog" >/dev/null 2>"$work/text.log" || fail "trace_rc failed tracing to stderr"

python3 - "$work" <<'PY' || fail "trace content"
import json, sys
w = sys.argv[1]
def load(name):
    with open(f"{w}/{name}") as f:
        return [json.loads(l) for l in f]   # every line must be one JSON object
exp = json.load(open(f"{w}/all.out"))
recs = load("all.json")
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
for r in recs:
    for k in ("t_ns", "tid", "kind", "name"):
        check(k in r, f"{k} missing in {r}")
ts = [r["t_ns"] for r in recs]
check(ts == sorted(ts), "timestamps go backwards (one thread)")
check(sum(r["kind"] == "header" for r in recs) == 3, "one header per library (libibverbs, rsw, librdmacm)")
check(all("wall_ns" in r for r in recs if r["kind"] == "header"), "header without wall clock")
verbs = [r for r in recs if r["kind"] == "verb"]
def find(pred, what):
    for i, r in enumerate(recs):
        if pred(r):
            return i, r
    errors.append(f"not found: {what}")
    return None, None
def n(x): return int(x, 16) if isinstance(x, str) else x

# The record carries the name of the export the program called, not of
# the function behind it.
opens = [r for r in verbs if r["name"] == "ibv_open_device"]
check(opens and all(n(r["ret"]) != 0 and "errno" not in r for r in opens), f"ibv_open_device returning contexts: {opens}")
check(not [r for r in verbs if "open_device_with" in r["name"]], "an internal name in the trace")
i_qp_a, _ = find(lambda r: r["name"] == "ibv_create_qp" and n(r["ret"]) == n(exp["qp_a"]) and n(r["pd"]) == n(exp["pd"]), "ibv_create_qp -> qp_a")
i_qp_b, _ = find(lambda r: r["name"] == "ibv_create_qp" and n(r["ret"]) == n(exp["qp_b"]), "ibv_create_qp -> qp_b")
mods = [r for r in verbs if r["name"] == "ibv_modify_qp" and n(r["qp"]) == n(exp["qp_a"])]
check(len(mods) == 3 and all(r["ret"] == 0 and "errno" not in r for r in mods), f"3 ibv_modify_qp(qp_a) returning 0: {mods}")
i_badmr, badmr = find(lambda r: r["name"].startswith("ibv_reg_mr") and r.get("ret") == "0x0", "failing ibv_reg_mr")
if badmr:
    check(badmr.get("errno") == 22 and badmr.get("err") == "EINVAL" and badmr.get("access") == 2, f"reg_mr failure: {badmr}")
i_recv, rv = find(lambda r: r["kind"] == "wr" and r["name"] == "post_recv", "post_recv WR")
if rv:
    check(n(rv["obj"]) == n(exp["qp_b"]) and n(rv["wr_id"]) == 0xb0b, f"recv WR: {rv}")
    check(rv["sg_list"] == [{"addr": rv["sg_list"][0]["addr"], "length": 2048, "lkey": exp["r_lkey"]}], f"recv SGE: {rv}")
i_send, sd = find(lambda r: r["kind"] == "wr" and r["name"] == "post_send" and r["opcode"] == "SEND", "SEND WR")
if sd:
    check(n(sd["obj"]) == n(exp["qp_a"]) and sd["qp_num"] == exp["qpn_a"] and n(sd["wr_id"]) == 0xa0a, f"SEND WR: {sd}")
    check(sd["num_sge"] == 1 and sd["sg_list"][0]["length"] == 1000 and sd["sg_list"][0]["lkey"] == exp["s_lkey"], f"SEND SGE: {sd}")
    check(n(sd["send_flags"]) == 2, "IBV_SEND_SIGNALED")
i_wc_s, _ = find(lambda r: r["kind"] == "wc" and n(r["wr_id"]) == 0xa0a, "SEND completion")
i_wc_r, wcr = find(lambda r: r["kind"] == "wc" and n(r["wr_id"]) == 0xb0b, "RECV completion")
if wcr:
    check(wcr["status"] == "SUCCESS" and wcr["opcode"] == "RECV" and wcr["byte_len"] == 1000
          and wcr["qp_num"] == exp["qpn_b"] and n(wcr["obj"]) == n(exp["cq_b"]), f"RECV wc: {wcr}")
i_wr, wr = find(lambda r: r["kind"] == "wr" and r.get("opcode") == "RDMA_WRITE", "RDMA_WRITE WR")
if wr:
    check(n(wr["wr_id"]) == 0xbad and wr["rkey"] == exp["bad_rkey"] and n(wr["remote_addr"]) == n(exp["r_addr"])
          and wr["sg_list"][0]["length"] == 64 and wr["sg_list"][0]["lkey"] == exp["s_lkey"], f"WRITE WR: {wr}")
i_wc_e, wce = find(lambda r: r["kind"] == "wc" and n(r["wr_id"]) == 0xbad, "error completion")
if wce:
    check(wce["status"] == "REM_ACCESS_ERR" and wce["status_code"] == 10 and wce["opcode"] == "RDMA_WRITE"
          and n(wce["obj"]) == n(exp["cq_a"]), f"error wc: {wce}")
i_wx, wx = find(lambda r: r["kind"] == "wr" and r["name"] == "wr_complete", "ibv_wr_complete WR")
if wx:
    check(n(wx["obj"]) == n(exp["qp_x"]) and n(wx["wr_id"]) == 0xd0d and wx["opcode"] == "SEND"
          and wx["sg_list"][0]["length"] == 300 and wx["sg_list"][0]["lkey"] == exp["s_lkey"], f"wr_complete WR: {wx}")
xs = [r for r in recs if r["kind"] == "wc" and r["name"] == "cq_ex_poll"]
check(sorted(n(r["wr_id"]) for r in xs) == [0xc0c, 0xd0d] and all(r["status"] == "SUCCESS" and n(r["obj"]) == n(exp["cq_x"]) for r in xs),
      f"cq_ex completions: {xs}")
check({r["opcode"]: r["byte_len"] for r in xs} == {"SEND": 300, "RECV": 300}, f"cq_ex opcodes/lengths: {xs}")
i_cm, cm = find(lambda r: r["kind"] == "cm", "CM event")
if cm:
    check(cm["event"] == "RDMA_CM_EVENT_ADDR_RESOLVED" and cm["status"] == 0 and n(cm["id"]) == n(exp["cm_id"]), f"cm: {cm}")
find(lambda r: r["name"] == "rdma_resolve_addr" and r["ret"] == 0 and r["timeout_ms"] == 2000, "rdma_resolve_addr")
i_dq, _ = find(lambda r: r["name"] == "ibv_destroy_qp" and n(r["handle"]) == n(exp["qp_a"]) and r["ret"] == 0, "ibv_destroy_qp(qp_a)")
find(lambda r: r["name"] == "ibv_dealloc_pd" and r["ret"] == 0, "ibv_dealloc_pd")
find(lambda r: r["name"] == "ibv_close_device" and r["ret"] == 0, "ibv_close_device")
order = [i_qp_a, i_qp_b, i_badmr, i_recv, i_send, i_wc_s, i_wc_r, i_wr, i_wc_e, i_wx, i_cm, i_dq]
if None not in order:
    check(order == sorted(order), f"records out of order: {order}")

# Calls the header inlines, traced by the trampolines libibverbs puts in
# the context's tables, and exported calls outside entry!.
find(lambda r: r["name"] == "ibv_get_device_list" and n(r["ret"]) != 0, "ibv_get_device_list")
find(lambda r: r["name"] == "ibv_create_cq_ex" and n(r["ret"]) == n(exp["cq_x"]) and n(r["context"]) == n(exp["ctx"]), "ibv_create_cq_ex -> cq_x")
find(lambda r: r["name"] == "ibv_req_notify_cq" and n(r["cq"]) == n(exp["cq_b"]) and r["solicited_only"] == 0 and r["ret"] == 0, "ibv_req_notify_cq(cq_b)")
find(lambda r: r["name"] == "ibv_alloc_mw" and n(r["ret"]) == n(exp["mw"]) and n(r["pd"]) == n(exp["pd"]) and r["mw_type"] == 2, "ibv_alloc_mw")
find(lambda r: r["name"] == "ibv_dealloc_mw" and n(r["mw"]) == n(exp["mw"]) and r["ret"] == 0, "ibv_dealloc_mw")
find(lambda r: r["name"] == "ibv_alloc_dm" and n(r["ret"]) == n(exp["dm"]), "ibv_alloc_dm")
find(lambda r: r["name"] == "ibv_memcpy_to_dm" and n(r["dm"]) == n(exp["dm"]) and r["length"] == 64 and r["ret"] == 0, "ibv_memcpy_to_dm")
find(lambda r: r["name"] == "ibv_free_dm" and n(r["dm"]) == n(exp["dm"]) and r["ret"] == 0, "ibv_free_dm")
find(lambda r: r["name"] == "ibv_query_port" and r["port_num"] == 1 and r["ret"] == 0, "ibv_query_port")
check(sum(r["name"] == "ibv_destroy_qp" for r in verbs) == 4, "each ibv_destroy_qp traced once")
# librdmacm's calls around the CM event.
find(lambda r: r["name"] == "rdma_create_event_channel" and n(r["ret"]) != 0, "rdma_create_event_channel")
find(lambda r: r["name"] == "rdma_create_id" and r["ps"] == 0x106 and r["ret"] == 0, "rdma_create_id(RDMA_PS_TCP)")
find(lambda r: r["name"] == "rdma_ack_cm_event" and r["ret"] == 0, "rdma_ack_cm_event")
find(lambda r: r["name"] == "rdma_destroy_id" and n(r["id"]) == n(exp["cm_id"]) and r["ret"] == 0, "rdma_destroy_id")
find(lambda r: r["name"] == "rdma_destroy_event_channel", "rdma_destroy_event_channel")
# rsocket calls (through librdmacm too): the failed read names its errno.
find(lambda r: r["name"] == "rsocket" and r["ret"] == exp["rs"] and r["type_"] == 1, "rsocket")
find(lambda r: r["name"] == "rrecv" and r["socket"] == exp["rs"] and r["ret"] == -1 and r.get("err") in ("EAGAIN", "ENOTCONN"), "rrecv failing")
find(lambda r: r["name"] == "rclose" and r["socket"] == exp["rs"] and r["ret"] == 0, "rclose")

flt = load("filtered.json")
body = [r for r in flt if r["kind"] != "header"]
check(all(r["kind"] == "wc" or r["name"] == "ibv_modify_qp" for r in body), "filter let through: " +
      str({(r["kind"], r["name"]) for r in body if not (r["kind"] == "wc" or r["name"] == "ibv_modify_qp")}))
check(sum(r["kind"] == "wc" for r in body) == 5, "filter: the 5 completions")
check(sum(r["name"] == "ibv_modify_qp" for r in body) == 12, "filter: the 12 ibv_modify_qp")

text = open(f"{w}/text.log").read().splitlines()
check(any(" verb ibv_create_qp " in l for l in text), "text: ibv_create_qp")
check(any(" wc poll_cq " in l and "status=REM_ACCESS_ERR" in l for l in text), "text: the error completion")
check(any(" wr post_send " in l and "opcode=RDMA_WRITE" in l and " rkey=0x" in l and "wr_id=0xbad" in l for l in text), "text: the WRITE")
check(any("errno=22 err=EINVAL" in l for l in text), "text: the EINVAL")

for e in errors:
    print("  " + e)
print(f"{len(recs)} records, {len(flt)} filtered, {len(text)} text lines")
sys.exit(1 if errors else 0)
PY
echo "ok: verb calls, WRs, completions, CM event, filter and text form in the trace"
