#!/usr/bin/env bash
# Runs every test of the project and prints one line per test, then the
# closing count "N passed, M failed[, K skipped]". Exits non-zero when any
# test failed. `make test` builds the libraries first and then calls this.
#
#   ctests/harness.sh [-l] [PATTERN...]
#     -l        list the tests instead of running them
#     PATTERN   run only the tests whose name matches one of these shell globs
#               (e.g. 'cargo/*' 'tests/rping*')
#
# Each test runs under `timeout` (HARNESS_TIMEOUT, default 120 s; cargo tests
# HARNESS_CARGO_TIMEOUT, default 1500 s since they compile). The
# environment passes through: RSW_TRANSPORT=tcp runs the tests with rsw's
# same-host path off (`make test` runs the data-path tests both ways). A script in
# ctests/tests/ can ask for its own limit with a line "# harness-timeout: N"
# near its top. A test that exits 77 is reported as SKIP.
# Output of every test goes to build/test-logs/<name>.log; the log of a
# failed test is printed (last HARNESS_LOG_LINES lines, default 150) and
# kept as build/test-logs/failed/<name>.<time>.log, which later runs of
# the same test do not overwrite.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$REPO/build}
ABI_DIR=${ABI_DIR:-$REPO/abi/rdma-core-44}
CTESTS_BIN=${CTESTS_BIN:-$BUILD/ctests}
# RSW_TRANSPORT=tcp runs everything with rsw's same-host path off; its
# logs go beside the default run's.
LOGDIR=$BUILD/test-logs${RSW_TRANSPORT:+-$RSW_TRANSPORT}
DEFAULT_TIMEOUT=${HARNESS_TIMEOUT:-120}
CARGO_TIMEOUT=${HARNESS_CARGO_TIMEOUT:-1500}
LOG_LINES=${HARNESS_LOG_LINES:-150}
MAKE=${MAKE:-make}
CARGO=${CARGO:-cargo}
PYTHON=${PYTHON:-python3}
export BUILD ABI_DIR CTESTS_BIN

# The environment `make` built with; cargo must see the same one or it would
# rebuild the libraries under build/ with other defaults.
if [[ -f $BUILD/config.env ]]; then
	# shellcheck disable=SC1091
	source "$BUILD/config.env"
fi
CARGO_ENV=(
	"CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}"
	"RSV_SYSCONFDIR=${RSV_SYSCONFDIR:-/etc}"
	"RSV_PROVIDER_DIR=${RSV_PROVIDER_DIR:-/usr/local/lib/libibverbs}"
	"IBVERBS_LIB_DIR=${IBVERBS_LIB_DIR:-$REPO/target/release}"
)
# What a program needs to run over our libraries instead of the system's.
RUN_ENV=(
	"LD_LIBRARY_PATH=$BUILD/lib"
	"IBV_CONFIG_DIR=$BUILD/etc/libibverbs.d"
)

list_only=0
patterns=()
while (($#)); do
	case $1 in
	-l) list_only=1 ;;
	-h | --help)
		sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) patterns+=("$1") ;;
	esac
	shift
done

selected() {
	((${#patterns[@]} == 0)) && return 0
	local p
	for p in "${patterns[@]}"; do
		# shellcheck disable=SC2053
		[[ $1 == $p ]] && return 0
	done
	return 1
}

passed=0 failed=0 skipped=0
failed_names=()
mkdir -p "$LOGDIR"

report() { # STATUS NAME SECONDS [NOTE]
	printf '%-4s %-44s %8.2fs%s\n' "$1" "$2" "$3" "${4:+  ($4)}"
}

# run_test NAME TIMEOUT CMD... : runs CMD from the repository root with no
# stdin, its output in the log, and reports the outcome.
run_test() {
	local name=$1 limit=$2
	shift 2
	selected "$name" || return 0
	if ((list_only)); then
		printf '%s\n' "$name"
		return 0
	fi
	local log=$LOGDIR/${name//\//_}.log
	local t0=$EPOCHREALTIME rc note=
	{
		printf '# %s\n# timeout %ss, started %s\n' "$*" "$limit" "$(date -Is)"
		(cd "$REPO" && exec timeout -k 10 "$limit" "$@") </dev/null 2>&1
		echo "# exit status $?"
	} >"$log" 2>&1
	rc=$(tail -n 1 "$log" | sed -n 's/^# exit status //p')
	local secs
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	case $rc in
	0)
		passed=$((passed + 1))
		report PASS "$name" "$secs"
		return 0
		;;
	77)
		skipped=$((skipped + 1))
		note=$(grep -v '^#' "$log" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-100)
		report SKIP "$name" "$secs" "$note"
		return 0
		;;
	124 | 137) note="timed out after ${limit}s" ;;
	*) note="exit status $rc" ;;
	esac
	failed=$((failed + 1))
	failed_names+=("$name")
	mkdir -p "$LOGDIR/failed" &&
		cp "$log" "$LOGDIR/failed/${name//\//_}.$(date +%Y%m%dT%H%M%S.%N).log"
	report FAIL "$name" "$secs" "$note"
	echo "---- $name: last $LOG_LINES lines of $log"
	tail -n "$LOG_LINES" "$log" | sed 's/^/    /'
	echo "---- end of $name"
}

skip_test() { # NAME REASON
	selected "$1" || return 0
	if ((list_only)); then
		printf '%s\n' "$1"
		return 0
	fi
	skipped=$((skipped + 1))
	report SKIP "$1" 0 "$2"
}

script_timeout() { # FILE -> the "# harness-timeout: N" it asks for, if any
	local t
	t=$(head -n 30 "$1" | sed -n 's/^#[[:space:]]*harness-timeout:[[:space:]]*\([0-9][0-9]*\).*/\1/p' | head -n 1)
	echo "${t:-$DEFAULT_TIMEOUT}"
}

run_script() { # NAME FILE [ARGS...]: a script that must exist
	local name=$1 file=$2
	shift 2
	local t=$DEFAULT_TIMEOUT
	[[ -f $REPO/$file ]] && t=$(script_timeout "$REPO/$file")
	if [[ ! -f $REPO/$file ]]; then
		# A required test whose script is absent fails rather than passing.
		run_test "$name" "$t" bash -c 'echo "missing: $0" >&2; exit 1' "$file"
	elif [[ $file == *.py ]]; then
		run_test "$name" "$t" env "${RUN_ENV[@]}" "$PYTHON" "$file" "$@"
	else
		run_test "$name" "$t" env "${RUN_ENV[@]}" bash "$file" "$@"
	fi
}

# --- Rust unit and integration tests, one harness test per crate, in the
# order the libraries must be built in.
for crate in verbs-abi verbs-rt ibverbs rsw rdmacm rxe-rs siw-rs; do
	run_test "cargo/$crate" "$CARGO_TIMEOUT" \
		env "${CARGO_ENV[@]}" "${RUN_ENV[@]}" "$CARGO" test --release -p "$crate"
done

# --- ABI: struct layouts and enum values, headers compile on their own,
# exported symbols and versions.
run_script abi/check_probes ctests/abi/check_probes.sh
run_script abi/compile_headers ctests/abi/compile_headers.sh
run_script abi/symbols-libibverbs ctests/abi/check_symbols.py \
	--lib "$BUILD/lib/libibverbs.so.1" --expect "$ABI_DIR/libibverbs.symbols" \
	--exports libibverbs-rs/exports.txt
run_script abi/symbols-librdmacm ctests/abi/check_symbols.py \
	--lib "$BUILD/lib/librdmacm.so.1" --expect "$ABI_DIR/librdmacm.symbols" \
	--exports librdmacm-rs/exports.txt

# --- C test programs (ctests/src/*.c -> build/ctests/); the scripts in
# ctests/tests/ run them. -k: one broken program must not hide the others.
run_test ctests/compile "$DEFAULT_TIMEOUT" "$MAKE" --no-print-directory -k ctests-bin

# --- Debian's RDMA programs load and start over our libraries.
run_script programs/start_all ctests/programs/start_all.sh

# --- make install into a scratch DESTDIR and build against the result.
run_script install/test_install ctests/install/test_install.sh

# --- End-to-end tests dropped in by everyone.
shopt -s nullglob
for t in "$REPO"/ctests/tests/*.sh; do
	name=tests/$(basename "$t" .sh)
	if [[ ! -x $t ]]; then
		skip_test "$name" "not executable"
		continue
	fi
	run_test "$name" "$(script_timeout "$t")" env "${RUN_ENV[@]}" "$t"
done

((list_only)) && exit 0

if ((failed)); then
	# Again at the very end, briefly: a CI page that keeps only the head
	# and the tail of a long run still shows why each test failed.
	for name in "${failed_names[@]}"; do
		echo "---- $name ended with:"
		grep -v '^# exit status' "$LOGDIR/${name//\//_}.log" | tail -n 12 | sed 's/^/    /'
	done
	echo "failed: ${failed_names[*]}"
	echo "logs: $LOGDIR"
fi
if ((skipped)); then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
((failed == 0))
