#!/usr/bin/env bash
# The README's quick start installs exactly what .ci/run installs for the
# tests: a user following the README on a fresh Debian 12 machine gets
# every package `make test` needs, and a package added to CI is added to
# the README too.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

ci=$(sed -n '/^packages=(/,/^)/p' "$repo/.ci/run" | sed '1d;$d' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u)
readme=$(awk '/^sudo apt-get install build-essential/ { on = 1 } on { print } on && !/\\$/ { exit }' "$repo/README.md" |
    sed 's/\\$//; s/sudo apt-get install//' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u)
[ -n "$ci" ] || { echo "FAIL: no packages=( ... ) list in .ci/run"; exit 1; }
[ -n "$readme" ] || { echo "FAIL: no 'sudo apt-get install build-essential ...' line in README.md"; exit 1; }
if [ "$ci" != "$readme" ]; then
    echo "FAIL: README's quick start and .ci/run install different packages"
    diff <(echo "$ci") <(echo "$readme") | sed 's/^</  only in .ci\/run:/; s/^>/  only in README:/'
    exit 1
fi
echo "ok README's quick start installs the $(echo "$ci" | wc -l) packages .ci/run installs"
