#!/bin/bash
# Regenerates abi/rdma-core-44/ from Debian's packages on a Debian 12
# (bookworm) x86_64 machine: the symbol lists of libibverbs.so.1 and
# librdmacm.so.1, the struct layouts and enum values printed by probes
# compiled against Debian's headers, the internal provider layouts printed
# by a probe compiled against rdma-core 44's source (needs network or
# RDMA_CORE_SRC), and what each Debian program imports.
# Needs root for apt-get (or the packages already installed). Not run by
# the tests: they compare against the committed files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/rdma-core-44
pkgs=(libibverbs1 librdmacm1 libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils
      perftest qperf fio libfabric1 ucx-utils python3-pyverbs python3-pyelftools gcc)
if [ "$(id -u)" = 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}"
fi
lib=/usr/lib/x86_64-linux-gnu
python3 "$here/dump_symbols.py" $lib/libibverbs.so.1 > "$out/libibverbs.symbols"
python3 "$here/dump_symbols.py" $lib/librdmacm.so.1 > "$out/librdmacm.symbols"

# The generators work in /tmp/abi-survey.
rm -rf /tmp/abi-survey
mkdir -p /tmp/abi-survey/gen /tmp/abi-survey/imports/extra
(cd /tmp/abi-survey && python3 "$out/gen_probes.py")
for p in layout enum; do
    cp /tmp/abi-survey/${p}_probe.c "$out/${p}_probe.c"
    gcc -o /tmp/abi-survey/$p "$out/${p}_probe.c"
done
/tmp/abi-survey/layout > "$out/layout.txt"
/tmp/abi-survey/enum > "$out/enums.txt"
# rdma-core's internal provider layouts (driver.h): libibverbs-dev ships no
# driver.h, so this probe compiles against rdma-core 44's source, downloaded
# from the GitHub tag v44.0 unless RDMA_CORE_SRC names a local copy.
bash "$out/driver_layout_probe.sh" ${RDMA_CORE_SRC:+"$RDMA_CORE_SRC"} > /tmp/abi-survey/driver_layout.txt
mv /tmp/abi-survey/driver_layout.txt "$out/driver_layout.txt"
(cd /tmp/abi-survey && python3 "$out/collect_imports.py")
rm -rf "$out/imports"
cp -r /tmp/abi-survey/imports "$out/imports"
dpkg-query -W -f '${Package} ${Version}\n' "${pkgs[@]}" > "$out/PACKAGES"
echo "regenerated $out; review with git diff"
