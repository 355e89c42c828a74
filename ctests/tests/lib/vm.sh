# Sourced by the tests that run a script in the VM of ctests/vm (vm_*.sh),
# after `set -uo pipefail`: sets repo, BUILD (exported), vm and work (a
# directory removed at exit), skip and fail; skips when QEMU is missing.
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$repo/build}
export BUILD
vm=$repo/ctests/vm

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v qemu-system-x86_64 >/dev/null ||
	skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Fails unless $BUILD holds our libibverbs and the rsw driver (make).
vm_need_build() {
	[[ -f $BUILD/lib/libibverbs.so.1 && -f $BUILD/etc/libibverbs.d/rsw.driver ]] ||
		fail "no build in $BUILD (make)"
}

# Builds the guest image or reuses it (ctests/vm/build-image.sh): $image.
vm_image() {
	"$vm/build-image.sh" >"$work/image" || fail "build-image.sh failed"
	image=$(tail -n 1 "$work/image")
	[[ -f $image/rootfs.img ]] || fail "build-image.sh named no image ($image)"
}

# run-in-vm.sh ARGS... in the image: the guest's output in $work/out (shown),
# run-in-vm's in $work/err (its last line shown), its exit in $vmrc.
vm_run() {
	"$vm/run-in-vm.sh" -i "$image" "$@" >"$work/out" 2>"$work/err"
	vmrc=$?
	cat "$work/out"
	tail -n 1 "$work/err"
}
