#!/bin/bash
# Builds the test VM of ctests/vm: Debian 12's own kernel (with rdma_rxe, and
# siw built out of tree, since Debian leaves CONFIG_RDMA_SIW unset), a small
# initramfs that mounts the root disk, and an ext4 root file system with
# Debian's rdma-core (ibverbs-utils, ibverbs-providers, rdmacm-utils, perftest,
# qperf, python3-pyverbs, the rdma tool) to compare our libraries against.
# Nothing is installed on the host: packages are unpacked (dpkg -x) or put
# into throwaway roots (mmdebstrap).
#
#   ctests/vm/build-image.sh [-q]       -q: no progress messages
#
# Prints the image directory (vmlinux, initrd.img, rootfs.img, ...) as its
# last line of output and points $RSV_VM_CACHE/current at it, which is where
# run-in-vm.sh looks by default.
#
# Cache: RSV_VM_CACHE (default /var/tmp/rdma-rs-vm). Every stage (kernel,
# siw, root file system, image) lives in a directory named after a hash of
# its inputs: the code of the stage (this script's function, and the guest
# files it copies), the Debian package names and the versions the host's apt
# lists give for them (kernel package, linux-source, rdma-core, perftest, ...).
# A stage whose directory exists is reused, so a second run takes a second or
# two; a change of any input rebuilds that stage and the ones after it, and
# directories no longer used are deleted at the end.
#
# Needs root, an up-to-date `apt-get update` of bookworm (and
# bookworm-security, where the kernel is), access to the Debian mirror, and
# mmdebstrap, e2fsprogs, cpio, kmod and python3 on the host.
# Environment: RSV_VM_MIRROR, RSV_VM_SECURITY (mirror URLs),
# RSV_VM_KERNEL_PKG (another linux-image-*-amd64 than the one
# linux-image-amd64 depends on), RSV_VM_EXTRA_PACKAGES (more guest packages,
# comma separated).
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RSV_VM_CACHE:-/var/tmp/rdma-rs-vm}
MIRROR=${RSV_VM_MIRROR:-http://deb.debian.org/debian}
SECURITY=${RSV_VM_SECURITY:-http://deb.debian.org/debian-security}
SUITE=bookworm
QUIET=0
[[ ${1:-} == -q ]] && QUIET=1

# The guest's packages. busybox-static serves the initramfs and poweroff.
GUEST_PACKAGES=(
	rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest qperf iperf3
	python3-pyverbs infiniband-diags iproute2 kmod procps busybox-static
)
if [[ -n ${RSV_VM_EXTRA_PACKAGES:-} ]]; then
	IFS=, read -r -a extra <<<"$RSV_VM_EXTRA_PACKAGES"
	GUEST_PACKAGES+=("${extra[@]}")
fi
# Module directories a VM with only virtio devices never loads from.
PRUNE_MODULES=(sound drivers/gpu drivers/media drivers/net/wireless
	drivers/staging drivers/iio drivers/comedi drivers/bluetooth net/bluetooth
	drivers/hid drivers/usb drivers/input drivers/isdn drivers/net/can
	drivers/hwmon drivers/mfd drivers/scsi drivers/ata drivers/infiniband/hw
	drivers/net/ethernet)

T0=$EPOCHREALTIME
say() {
	((QUIET)) && return 0
	printf '[build-image %6.1fs] %s\n' "$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "$*" >&2
}
die() { echo "build-image.sh: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (mmdebstrap, chroot, device files in the root file system)"
for tool in mmdebstrap mke2fs cpio depmod modprobe apt-get apt-cache dpkg-deb python3 flock sha256sum; do
	command -v "$tool" >/dev/null ||
		die "missing $tool (apt-get install mmdebstrap e2fsprogs cpio kmod python3)"
done
# Host libraries only: nothing here may load build/'s libibverbs.
unset LD_LIBRARY_PATH LD_PRELOAD IBV_CONFIG_DIR RDMAV_DRIVERS IBV_DRIVERS

mkdir -p "$CACHE/dl"
CACHE=$(cd "$CACHE" && pwd)
exec 9>"$CACHE/.lock"
flock 9 # one build at a time per cache

SOURCES="deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main"

# candidates PACKAGE...: "PACKAGE=VERSION" lines, the versions the host's
# apt lists offer (one apt-cache call: each costs most of a second).
candidates() {
	apt-cache policy "$@" 2>/dev/null | awk '
		/^[^ ]/ { sub(/:$/, ""); pkg = $1 }
		$1 == "Candidate:" { print pkg "=" $2 }'
}

# key FUNCTION [INPUT...]: 16 hex digits naming the function's code plus inputs.
key() {
	{ declare -f "$1"; shift; printf '%s\n' "$@"; } | sha256sum | cut -c1-16
}

# fetch_deb PACKAGE VERSION: downloads the .deb into $CACHE/dl (kept), prints its path.
fetch_deb() {
	local f
	local pat="$CACHE/dl/$1_${2//:/%3a}_"
	f=$(ls "$pat"*.deb 2>/dev/null | head -n 1 || true)
	if [[ -z $f ]]; then
		say "downloading $1 $2"
		(cd "$CACHE/dl" && apt-get download -q "$1=$2" 2>&1 | grep -v 'unsandboxed' >&2 || true)
		f=$(ls "$pat"*.deb 2>/dev/null | head -n 1 || true)
		[[ -n $f ]] || die "could not download $1=$2 (apt-get update?)"
	fi
	echo "$f"
}

# ---------------------------------------------------------------- inputs
KPKG=${RSV_VM_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 2>/dev/null |
	awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')}
[[ -n $KPKG ]] || die "apt-cache cannot resolve linux-image-amd64: run apt-get update"
KREL=${KPKG#linux-image-} # 6.1.0-56-amd64
SRCPKG=linux-source-${KREL%%.0-*}
mapfile -t all < <(candidates "$KPKG" "${GUEST_PACKAGES[@]}")
KVERSION=$(printf '%s\n' "${all[@]}" | sed -n "s/^$KPKG=//p")
mapfile -t versions < <(printf '%s\n' "${all[@]}" | grep -v "^$KPKG=")
[[ -n $KVERSION && $KVERSION != "(none)" ]] || die "no version of $KPKG in the apt lists: run apt-get update"

# ---------------------------------------------------------------- kernel
# Debian's kernel package, unpacked: modules (minus hardware classes a VM
# does not have) and vmlinux, the ELF kernel inside vmlinuz. QEMU boots
# vmlinux through its PVH entry point: no firmware boot, no decompression in
# the guest (seconds under TCG).
stage_kernel() { # OUT
	local out=$1 deb d
	deb=$(fetch_deb "$KPKG" "$KVERSION")
	dpkg-deb -x "$deb" "$out/pkg"
	for d in "${PRUNE_MODULES[@]}"; do rm -rf "$out/pkg/lib/modules/$KREL/kernel/$d"; done
	rm -rf "$out/pkg/usr/share"
	python3 - "$out/pkg/boot/vmlinuz-$KREL" "$out/vmlinux" <<'PY'
import lzma, sys
data = open(sys.argv[1], 'rb').read()
start = data.find(b'\xfd7zXZ\x00')
if start < 0:
    sys.exit('vmlinuz: no xz stream (Debian builds with CONFIG_KERNEL_XZ)')
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
if elf[:4] != b'\x7fELF':
    sys.exit('vmlinuz: the xz stream is not an ELF kernel')
open(sys.argv[2], 'wb').write(elf)
PY
	cp "$out/pkg/boot/config-$KREL" "$out/config"
	echo "$KREL" >"$out/release"
}

# ---------------------------------------------------------------- siw
# drivers/infiniband/sw/siw of the same kernel version (linux-source-6.1 of
# the kernel's Debian version), compiled against linux-headers-<release> in a
# throwaway build root. The 140 MB source package is deleted afterwards.
stage_siw() { # OUT
	local out=$1 deb tarball top
	deb=$(fetch_deb "$SRCPKG" "$KVERSION")
	mkdir -p "$out/tmp" "$out/src"
	dpkg-deb --fsys-tarfile "$deb" | tar -C "$out/tmp" -x --wildcards './usr/src/linux-source-*.tar.xz'
	tarball=$(ls "$out"/tmp/usr/src/linux-source-*.tar.xz)
	top=$(basename "$tarball" .tar.xz)
	tar -C "$out/tmp" -xJf "$tarball" "$top/drivers/infiniband/sw/siw"
	cp "$out/tmp/$top"/drivers/infiniband/sw/siw/* "$out/src/"
	rm -rf "$out/tmp" "$deb"
	say "siw: compiling against linux-headers-$KREL (build root from the mirror)"
	mmdebstrap --variant=minbase --quiet \
		--include="linux-headers-$KREL,gcc-12,make,libc6-dev" \
		--customize-hook="copy-in $out/src /root" \
		--customize-hook="chroot \"\$1\" make -s -C /usr/src/linux-headers-$KREL M=/root/src CONFIG_RDMA_SIW=m modules" \
		--customize-hook="copy-out /root/src/siw.ko $out" \
		"$SUITE" /dev/null "$SOURCES"
	test -f "$out/siw.ko"
	rm -rf "$out/src"
}

# ---------------------------------------------------------------- root file system
# A minbase bookworm with the guest packages; no man pages or translations.
stage_rootfs() { # OUT
	local out=$1 list
	list=$(IFS=,; echo "${GUEST_PACKAGES[*]}")
	mmdebstrap --variant=minbase --quiet --include="$list" \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--customize-hook='echo vm > "$1/etc/hostname"' \
		--customize-hook='printf "127.0.0.1 localhost\n10.0.0.1 vm-rxe\n10.0.1.1 vm-siw\n" > "$1/etc/hosts"' \
		--customize-hook=': > "$1/etc/fstab"' \
		--customize-hook='rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*_Packages' \
		"$SUITE" "$out/root" "$SOURCES"
}

# ---------------------------------------------------------------- image
# The root file system with the kernel's modules and siw.ko (depmod'ed), the
# guest's init, and an initramfs with busybox and the modules that reach the
# root disk (Debian builds virtio_pci, virtio_blk and ext4 as modules).
stage_image() { # OUT KERNEL_DIR SIW_DIR ROOTFS_DIR
	local out=$1 kdir=$2 sdir=$3 rdir=$4 stage mods ko m used size
	stage=$out/stage
	# Hard links: the base root stays untouched as long as files are only
	# added or removed here, never rewritten in place.
	cp -al "$rdir/root" "$stage"
	rm -rf "$stage/lib/modules" "$stage/sbin/rsv-vm-init"
	mkdir -p "$stage/lib/modules"
	cp -a "$kdir/pkg/lib/modules/$KREL" "$stage/lib/modules/"
	mkdir -p "$stage/lib/modules/$KREL/updates"
	cp "$sdir/siw.ko" "$stage/lib/modules/$KREL/updates/siw.ko"
	depmod -b "$stage" "$KREL"
	install -m 755 "$HERE/guest/init.sh" "$stage/sbin/rsv-vm-init"
	mkdir -p "$stage/job"

	# initramfs
	mods=$out/initrd
	mkdir -p "$mods"/{bin,dev,proc,sys,newroot,modules}
	mknod -m 600 "$mods/dev/console" c 5 1 # init's stdio, before devtmpfs
	cp "$stage/bin/busybox" "$mods/bin/busybox"
	ln -s busybox "$mods/bin/sh"
	install -m 755 "$HERE/guest/initramfs-init.sh" "$mods/init"
	for m in virtio_pci virtio_blk ext4; do
		modprobe -d "$stage" -S "$KREL" --show-depends "$m"
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
		cp "$ko" "$mods/modules/"
		basename "$ko" >>"$mods/modules/order"
	done
	test -s "$mods/modules/order"
	(cd "$mods" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$out/initrd.img"
	rm -rf "$mods"

	used=$(du -sm "$stage" | cut -f1)
	size=$((used + used / 4 + 256))
	mke2fs -q -t ext4 -L rsv-vm -O ^has_journal -E root_owner=0:0 -d "$stage" "$out/rootfs.img" "${size}M" 2>&1 |
		{ grep -v '^Creating regular file' || true; } >&2
	rm -rf "$stage"
	ln "$kdir/vmlinux" "$out/vmlinux"
	echo "$KREL" >"$out/kernel-release"
	printf '%s\n' "kernel $KPKG $KVERSION" "siw $SRCPKG $KVERSION" "${versions[@]}" >"$out/manifest"
}

# run_stage NAME KEY FUNCTION [ARGS...]: makes $CACHE/NAME-KEY unless it exists.
run_stage() {
	local dir=$CACHE/$1-$2 fn=$3 t
	shift 3
	if [[ -f $dir/.done ]]; then
		say "$(basename "$dir"): cached"
		return 0
	fi
	say "$(basename "$dir"): building"
	t=$SECONDS
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	# Called plainly (not under || or if): set -e must stay in force inside.
	# A failed stage leaves $dir.tmp, which the next run deletes.
	trap 'echo "build-image.sh: stage $fn failed" >&2' ERR
	"$fn" "$dir.tmp" "$@"
	trap - ERR
	touch "$dir.tmp/.done"
	mv "$dir.tmp" "$dir"
	say "$(basename "$dir"): built in $((SECONDS - t)) s"
}

k_kernel=$(key stage_kernel "$KPKG" "$KVERSION" "${PRUNE_MODULES[@]}")
k_siw=$(key stage_siw "$KPKG" "$KVERSION" "$SRCPKG" "$MIRROR" "$SECURITY")
k_rootfs=$(key stage_rootfs "${versions[@]}" "$MIRROR" "$SECURITY")
k_image=$(key stage_image "$k_kernel" "$k_siw" "$k_rootfs" \
	"$(cat "$HERE/guest/init.sh" "$HERE/guest/initramfs-init.sh")")

run_stage kernel "$k_kernel" stage_kernel
# siw's build root and the guest's root side by side: each is mostly one
# dpkg at a time, and both wait on the mirror.
run_stage siw "$k_siw" stage_siw &
siw_pid=$!
run_stage rootfs "$k_rootfs" stage_rootfs
wait "$siw_pid" || die "the siw stage failed"
run_stage image "$k_image" stage_image \
	"$CACHE/kernel-$k_kernel" "$CACHE/siw-$k_siw" "$CACHE/rootfs-$k_rootfs"

ln -sfn "image-$k_image" "$CACHE/current"
touch "$CACHE/image-$k_image"
# What the current image does not use any more. The image used before stays
# (the newest other one): a VM may be starting from it right now.
previous=$(cd "$CACHE" && ls -dt image-* 2>/dev/null | grep -v -e "\.tmp$" -e "^image-$k_image$" | head -n 1 || true)
for d in "$CACHE"/{kernel,siw,rootfs,image}-*; do
	[[ -d $d ]] || continue
	case ${d##*/} in
	kernel-$k_kernel | siw-$k_siw | rootfs-$k_rootfs | image-$k_image | "${previous:-none}") ;;
	*)
		say "removing ${d##*/} (no longer used)"
		rm -rf --one-file-system "$d"
		;;
	esac
done
find "$CACHE/dl" -name '*.deb' ! -name "${KPKG}_*" -delete
say "image $CACHE/image-$k_image ($KPKG $KVERSION)"
echo "$CACHE/image-$k_image"
