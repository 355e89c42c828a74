#!/bin/bash
# rdma-core's own providers (Debian's ibverbs-providers) load under our
# libibverbs: every provider module and direct-verbs library resolves all
# of its symbols against ours when bound immediately (RTLD_NOW, ldd -r),
# each registers itself, and the driver files Debian installs load with no
# warning on a host without RDMA hardware (no kernel device: none listed).
set -u
. "$(dirname "$0")/lib/common.sh"

multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
pdir=/usr/lib/$multiarch/libibverbs
[ -d "$pdir" ] || fail "no $pdir: install Debian's ibverbs-providers (.ci/run does)"
ours=$BUILD/lib/libibverbs.so.1

mods=("$pdir"/lib*-rdmav34.so)
dv=()
for n in mlx5 mlx4 efa mana; do
    f=/usr/lib/$multiarch/lib$n.so.1
    [ -e "$f" ] && dv+=("$f")
done
[ "${#mods[@]}" -ge 17 ] || fail "expected Debian 12's 17 provider modules, found ${#mods[@]}"
[ "${#dv[@]}" = 4 ] || fail "expected 4 direct-verbs libraries, found ${#dv[@]}: ${dv[*]}"

# 1. ldd -r: no undefined symbol, and libibverbs.so.1 is ours.
for f in "${mods[@]}" "${dv[@]}"; do
    LD_LIBRARY_PATH=$BUILD/lib ldd -r "$f" > "$work/ldd" 2>&1
    if grep -q 'undefined symbol' "$work/ldd"; then
        cat "$work/ldd"
        fail "$f has unresolved symbols under our libibverbs"
    fi
    grep -q "libibverbs.so.1 => $BUILD/lib/libibverbs.so.1" "$work/ldd" ||
        { cat "$work/ldd"; fail "$f did not bind to our libibverbs"; }
done

# 2. dlopen RTLD_NOW in one process after ours; each module's constructor
#    registers its driver (verbs_register_driver_34 is ours: count them).
python3 - "$ours" "${mods[@]}" "${dv[@]}" > "$work/py" 2>&1 <<'PY' || { cat "$work/py"; fail "dlopen check failed"; }
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL | os.RTLD_NOW)
bad = 0
for p in sys.argv[2:]:
    try:
        ctypes.CDLL(p, mode=os.RTLD_NOW)
    except OSError as e:
        print("FAIL", p, e)
        bad += 1
maps = open("/proc/self/maps").read()
verbs = {l.split()[-1] for l in maps.splitlines() if "libibverbs.so" in l}
print("libibverbs mapped:", sorted(verbs))
if verbs != {os.path.realpath(sys.argv[1])}:
    print("FAIL: another libibverbs is mapped")
    bad += 1
# No kernel RDMA here: the list is empty, and asking must not crash.
n = ctypes.c_int(-1)
lib.ibv_get_device_list.restype = ctypes.c_void_p
lst = lib.ibv_get_device_list(ctypes.byref(n))
print("devices:", n.value)
lib.ibv_free_device_list(ctypes.c_void_p(lst))
sys.exit(1 if bad else 0)
PY
expect_in "$work/py" "^devices: "

# 3. Debian's driver files: every provider loads (no "couldn't load
#    driver", no "not a provider" warning) and ibv_devices works.
[ -d /etc/libibverbs.d ] || fail "no /etc/libibverbs.d from ibverbs-providers"
IBV_SHOW_WARNINGS=1 VERBS_LOG_LEVEL=4 IBV_CONFIG_DIR=/etc/libibverbs.d ibv_devices \
    > "$work/out" 2> "$work/err" || { cat "$work/err"; fail "ibv_devices exit $?"; }
if grep -Ei "couldn't load|not a provider|skipped" "$work/err"; then
    fail "a Debian provider did not load under our libibverbs"
fi
nprov=$(grep -c "rdma-core provider, for kernel devices" "$work/err" || true)
ndrv=$(grep -h '^driver' /etc/libibverbs.d/*.driver | sort -u | wc -l)
[ "$nprov" = "$ndrv" ] || { cat "$work/err"; fail "$nprov of $ndrv Debian drivers registered"; }

# 4. Our rsw devices beside them, unchanged.
IBV_CONFIG_DIR=/etc/libibverbs.d RDMAV_DRIVERS=rsw ibv_devices > "$work/out2" 2>&1 ||
    fail "ibv_devices with rsw exit $?"
expect_in "$work/out2" 'rsw_lo'
echo "ok: ${#mods[@]} provider modules and ${#dv[@]} direct-verbs libraries, $nprov drivers registered"
