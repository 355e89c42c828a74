#!/bin/bash
# harness-timeout: 300
# rdma-core's own test suite (shipped in Debian's python3-pyverbs, under
# /usr/share/doc/rdma-core/tests) over our libraries on rsw_lo. Most
# vendor tests (mlx5, EFA, CUDA, dmabuf) skip themselves; everything else
# must pass, except the few below that test what a kernel provider or a
# RoCE NIC does and rsw deliberately does not:
#   test_create_ah_roce            an AH without a GRH means this host here
#   test_import_dm,                 ibv_import_device / ibv_import_pd share
#   test_imported_rc_ex_rdma_write  objects through the kernel's cmd_fd
# The tag-matching tests (test_tag_matching: eager, unexpected, NO_TAG,
# rendezvous) must pass, not skip: rsw matches tags in software.
# The suite runs under rsw-run, whose /sys/class/infiniband view gives
# rsw_lo its network device (device/net/lo): the rdma_cm tests
# (test_rdmacm) look for one there and skip without it. Where rsw-run
# cannot run (no mount namespaces) they skip, and 10 fewer must pass.
set -u
. "$(dirname "$0")/lib/common.sh"

src=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3   # pyverbs is built for Debian's interpreter
[ -d "$src" ] && "$py" -c 'import pyverbs' 2>/dev/null || { echo "python3-pyverbs is not installed"; exit 77; }

cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz 2>/dev/null
run=$BUILD/bin/rsw-run
[ -x "$run" ] || fail "$run missing (make builds it)"
min_ok=134
if ! unshare --mount true 2>/dev/null && ! unshare --user --map-root-user --mount true 2>/dev/null; then
    echo "rsw-run cannot run here (no mount namespaces): the rdma_cm tests will skip"
    run=""
    min_ok=124
fi
# The ODP and parent-domain huge page tests need 2 MiB pages reserved:
# as root, reserve a few for the run (and give them back after).
huge=/proc/sys/vm/nr_hugepages huge_before="" huge_tests=""
restore_huge() { [ -z "$huge_before" ] || echo "$huge_before" > "$huge" 2>/dev/null; }
if [ "$(cat "$huge" 2>/dev/null)" = 0 ] && echo 64 > "$huge" 2>/dev/null; then
    huge_before=0
    cleanup_hooks="$cleanup_hooks restore_huge"
    [ "$(cat "$huge")" -gt 0 ] && huge_tests="test_odp_rc_huge_traffic test_odp_rc_huge_user_addr_traffic test_huge_page_traffic"
fi
(cd "$work/tests" && timeout 240 $run "$py" run_tests.py --dev rsw_lo --gid 0 -v) > "$work/out" 2>&1
restore_huge
tail -4 "$work/out"
expected="test_create_ah_roce test_import_dm test_imported_rc_ex_rdma_write"
bad=""
for t in $(sed -n 's/^\(FAIL\|ERROR\): \([a-zA-Z0-9_]*\) .*/\2/p' "$work/out"); do
    case " $expected " in *" $t "*) echo "known: $t" ;; *) bad="$bad $t" ;; esac
done
if [ -n "$bad" ]; then
    grep -A30 -E "^(FAIL|ERROR): " "$work/out" | head -150
    fail "pyverbs tests failed:$bad"
fi
ok=$(grep -cE '\.\.\. ok$' "$work/out")
grep -q '^Ran [0-9]* tests' "$work/out" || { tail -30 "$work/out"; fail "the suite did not run"; }
# Guard against a regression that makes tests skip instead of pass.
[ "$ok" -ge "$min_ok" ] || fail "only $ok tests passed"
# As root, rsw's raw packet QPs, flows and RSS run rdma-core's tests of
# them (they skip for other users: requires_root_on_eth).
raw_tests=""
[ "$(id -u)" = 0 ] && raw_tests="test_eth_spec_flow_traffic test_ipv4_spec_flow_traffic test_ipv6_spec_flow_traffic test_udp_spec_flow_traffic test_tcp_spec_flow_traffic test_rss_traffic test_create_raw_qp_no_attr test_create_raw_qp_with_attr test_create_raw_qp_ex_no_attr test_create_raw_qp_ex_with_attr test_query_raw_qp"
for t in $raw_tests; do
    # A test with a docstring has its verdict on the next line.
    grep -A1 -E "^$t " "$work/out" | grep -qE '\.\.\. ok$' || { grep -A3 -E "^$t " "$work/out"; fail "$t did not pass as root"; }
done
[ -z "$raw_tests" ] || echo "ok: raw packet, flow and RSS tests: $raw_tests"
for t in $huge_tests; do
    grep -qE "^$t .*\.\.\. ok\$" "$work/out" || { grep -A3 -E "^$t " "$work/out"; fail "$t did not pass with huge pages reserved"; }
done
[ -z "$huge_tests" ] || echo "ok: with huge pages reserved: $huge_tests"
# (Their docstrings put "... ok" on the line after the name.)
tm_ok=$(grep -A1 -E '^test_tm_[a-z_]* \(tests\.test_tag_matching\.' "$work/out" | grep -cE '\.\.\. ok$')
[ "$tm_ok" -ge 4 ] || { grep -A1 -E 'test_tag_matching' "$work/out"; fail "only $tm_ok tag-matching tests passed"; }
if [ -n "$run" ]; then
    rdmacm_ok=$(grep -E '\(tests\.test_rdmacm\.' "$work/out" | grep -cE '\.\.\. ok$')
    [ "$rdmacm_ok" -ge 10 ] || { grep -E 'test_rdmacm' "$work/out"; fail "only $rdmacm_ok rdma_cm tests passed"; }
fi
echo "ok: $ok pyverbs tests passed"
