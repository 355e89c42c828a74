#!/usr/bin/env bash
# Splits a `make install` tree into Debian binary packages that replace
# rdma-core's (README.md, "Debian packages", explains the package relations):
#
#   libibverbs1-rs        libibverbs.so.1          replaces libibverbs1
#   librdmacm1-rs         librdmacm.so.1           replaces librdmacm1
#   ibverbs-provider-rsw  the rsw provider and /etc/libibverbs.d/rsw.driver
#   ibverbs-providers-rs  the Rust twins of rdma-core's rxe and siw providers
#   rsw-tools             rsw-run (the kernel's view of the rsw devices),
#                         rsw-stat (a running process's rsw counters)
#   libibverbs-rs-dev     <infiniband/*.h>, libibverbs.so, libibverbs.pc
#   librdmacm-rs-dev      <rdma/*.h>, <infiniband/ib.h>, librdmacm.so, librdmacm.pc
#   (and the manual pages: below, "Manual pages")
#
# Called by `make deb`:
#   build.sh ROOT WORK OUT
#     ROOT  the tree `make install DESTDIR=ROOT PREFIX=/usr LIBDIR=/usr/lib/<multiarch>` made
#     WORK  scratch directory (emptied)
#     OUT   where the .deb files go (old ones of these packages are removed)
# Environment: DEB_VERSION (required), DEB_ARCH, DEB_MULTIARCH (default:
# dpkg-architecture), DEB_MAINTAINER (default: the author of the HEAD
# commit), SOURCE_DATE_EPOCH (default: the HEAD commit's time).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
(($# == 3)) || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
root=$(realpath "$1") work=$2 out=$3

die() { echo "build.sh: $*" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps dpkg-gensymbols dpkg-architecture strip objcopy; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install dpkg-dev binutils)"
done

version=${DEB_VERSION:?DEB_VERSION not set}
arch=${DEB_ARCH:-$(dpkg-architecture -qDEB_HOST_ARCH)}
ma=${DEB_MULTIARCH:-$(dpkg-architecture -qDEB_HOST_MULTIARCH)}
git_head() { git -C "$repo" log -1 --format="$1" 2>/dev/null || true; }
maintainer=${DEB_MAINTAINER:-$(git_head '%an <%ae>')}
[[ $maintainer == *'<'*@*'>' ]] || die "no maintainer: set DEB_MAINTAINER='Name <email>'"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git_head %ct)}
: "${SOURCE_DATE_EPOCH:=$(date +%s)}"
commit=$(git_head %H)

# The rdma-core release whose ABI the libraries implement (Debian 12), and
# so the version our packages provide the virtual libibverbs1 etc. at:
# programs built against rdma-core depend on "libibverbs1 (>= x)" with
# x <= 44.0, and rdma-core's -dev packages on "libibverbs1 (= 44.0-2)".
rdma_core=44.0-2

libdir=usr/lib/$ma
[[ -f $root/$libdir/libibverbs.so.1 ]] || die "$root/$libdir/libibverbs.so.1 missing: not a tree installed with LIBDIR=/usr/lib/$ma"

rm -rf "$work"
mkdir -p "$work" "$out"

# --- which installed file goes into which package -----------------------
declare -A owner=()
take() { # PKG PATH...: move these paths of ROOT into the package
	local pkg=$1 p
	shift
	for p in "$@"; do
		[[ -e $root/$p || -L $root/$p ]] || die "$p: not in the installed tree"
		[[ -z ${owner[$p]:-} ]] || die "$p: already in ${owner[$p]}"
		owner[$p]=$pkg
		mkdir -p "$work/$pkg/$(dirname "$p")"
		cp -a "$root/$p" "$work/$pkg/$p"
	done
}

rdmacm_headers=(usr/include/infiniband/ib.h)
while IFS= read -r -d '' h; do rdmacm_headers+=("${h#"$root"/}"); done \
	< <(find "$root/usr/include/rdma" -type f -print0 | sort -z)
verbs_headers=()
while IFS= read -r -d '' h; do
	h=${h#"$root"/}
	[[ $h == usr/include/infiniband/ib.h ]] || verbs_headers+=("$h")
done < <(find "$root/usr/include/infiniband" -type f -print0 | sort -z)

take libibverbs1-rs "$libdir/libibverbs.so.1"
take librdmacm1-rs "$libdir/librdmacm.so.1"
take ibverbs-provider-rsw "$libdir/libibverbs/librsw-rdmav34.so" etc/libibverbs.d/rsw.driver
take ibverbs-providers-rs "$libdir/libibverbs/librxe-rs-rdmav34.so" "$libdir/libibverbs/libsiw-rs-rdmav34.so"
take rsw-tools usr/bin/rsw-run usr/bin/rsw-sysfs usr/bin/rsw-stat
take libibverbs-rs-dev "$libdir/libibverbs.so" "$libdir/pkgconfig/libibverbs.pc" "${verbs_headers[@]}"
take librdmacm-rs-dev "$libdir/librdmacm.so" "$libdir/pkgconfig/librdmacm.pc" "${rdmacm_headers[@]}"

# Manual pages (man/*.scd, installed by make install in usr/share/man):
# the library calls and their overviews go with the headers (-dev), rsw(7)
# with the provider, the tools' pages with the tools, rdma-environ(7) (the
# variables the libraries read) with libibverbs. Compressed, and a ".so"
# link page becomes a symbolic link to its page, as dh_installman does.
man_package() { # PAGE (usr/share/man/manS/NAME.S, not a link) -> its package
	case $1 in
	*/man1/*) echo rsw-tools ;;
	*/man7/rsw.7) echo ibverbs-provider-rsw ;;
	*/man7/rdma-environ.7) echo libibverbs1-rs ;;
	*/man7/rdma_cm.7 | */man7/rsocket.7) echo librdmacm-rs-dev ;;
	*/man3/*) if grep -q '^#include <rdma/' "$root/$1"; then echo librdmacm-rs-dev; else echo libibverbs-rs-dev; fi ;;
	*) echo libibverbs-rs-dev ;;
	esac
}
if [[ -d $root/usr/share/man ]]; then
	while IFS= read -r -d '' f; do
		p=${f#"$root"/}
		target=$(sed -n '1s/^\.so \(man[0-9]\/[^ ]*\)$/\1/p' "$f")
		if [[ -n $target && $(wc -l <"$f") == 1 ]]; then
			[[ -f $root/usr/share/man/$target ]] || die "$p links to $target, which is not installed"
			pkg=$(man_package "usr/share/man/$target")
			if [[ ${target%%/*} == $(basename "$(dirname "$p")") ]]; then
				link=${target#*/}.gz
			else
				link=../$target.gz
			fi
			mkdir -p "$work/$pkg/$(dirname "$p")"
			ln -s "$link" "$work/$pkg/$p.gz"
		else
			pkg=$(man_package "$p")
			mkdir -p "$work/$pkg/$(dirname "$p")"
			gzip -9n <"$f" >"$work/$pkg/$p.gz"
			chmod 0644 "$work/$pkg/$p.gz"
		fi
		owner[$p]=$pkg
	done < <(find "$root/usr/share/man" -type f -print0 | sort -z)
fi
[[ -f $root/usr/share/man/man3/ibv_post_send.3 ]] ||
	die "no manual pages in the installed tree (apt-get install scdoc; make man)"

# Nothing installed may be left out of every package.
while IFS= read -r -d '' f; do
	f=${f#"$root"/}
	[[ -n ${owner[$f]:-} ]] || die "$f is installed but in no package (add it in $0)"
done < <(find "$root" \( -type f -o -type l \) -print0)

# --- package metadata ------------------------------------------------------
packages=(libibverbs1-rs librdmacm1-rs ibverbs-provider-rsw ibverbs-providers-rs rsw-tools libibverbs-rs-dev librdmacm-rs-dev)
declare -A section depends recommends provides conflicts replaces summary body multiarch
long_common=" These packages replace rdma-core's libibverbs1, librdmacm1 and their
 -dev packages with implementations written in Rust that export the same
 ABI (rdma-core 44, as in Debian 12), so Debian's RDMA programs (ibverbs-utils,
 rdmacm-utils, perftest, ...) run over them unchanged. The rsw provider is a
 software RDMA device that carries RC and UC queue pairs over TCP and UD
 queue pairs over UDP: RDMA programs run on any Linux machine, without an
 RDMA NIC or a kernel module."

section[libibverbs1-rs]=libs
provides[libibverbs1-rs]="libibverbs1 (= $rdma_core)"
conflicts[libibverbs1-rs]=libibverbs1
replaces[libibverbs1-rs]=libibverbs1
recommends[libibverbs1-rs]=ibverbs-provider-rsw
summary[libibverbs1-rs]="RDMA verbs library in Rust (replaces libibverbs1)"
body[libibverbs1-rs]=" This package contains libibverbs.so.1, which loads the rsw provider
 (package ibverbs-provider-rsw) and rdma-core's own providers for kernel
 RDMA devices (package ibverbs-providers: ConnectX, EFA, Broadcom, Intel,
 rxe, siw, ...), whose private interface it implements; where a Rust twin
 of such a provider is installed (package ibverbs-providers-rs) it is
 used instead, unless RDMAV_C_PROVIDERS names the provider.
 .
$long_common"

section[librdmacm1-rs]=libs
depends[librdmacm1-rs]="libibverbs1-rs (= $version)"
provides[librdmacm1-rs]="librdmacm1 (= $rdma_core)"
conflicts[librdmacm1-rs]=librdmacm1
replaces[librdmacm1-rs]=librdmacm1
summary[librdmacm1-rs]="RDMA connection manager in Rust (replaces librdmacm1)"
body[librdmacm1-rs]=" This package contains librdmacm.so.1, which sets up RDMA connections
 over TCP/IP for the devices of libibverbs1-rs.
 .
$long_common"

section[ibverbs-provider-rsw]=net
depends[ibverbs-provider-rsw]="libibverbs1-rs (= $version)"
summary[ibverbs-provider-rsw]="software RDMA provider rsw for libibverbs1-rs"
body[ibverbs-provider-rsw]=" The rsw provider gives every network interface with an IP address an
 RDMA device (rsw_lo, rsw_eth0, ...) that needs no RDMA hardware and no
 kernel module: RC and UC queue pairs travel over TCP, UD queue pairs
 (multicast included) over UDP. It installs its driver file in
 /etc/libibverbs.d and is loaded by libibverbs1-rs only.
 .
$long_common"

section[ibverbs-providers-rs]=net
depends[ibverbs-providers-rs]="libibverbs1-rs (= $version)"
summary[ibverbs-providers-rs]="Rust providers for the kernel's rxe and siw RDMA devices"
body[ibverbs-providers-rs]=" The userspace halves of the kernel's soft RDMA devices rxe (RoCE v2)
 and siw (iWARP), written in Rust: libibverbs1-rs loads them in place of
 rdma-core's C providers of the same devices from ibverbs-providers (which
 may stay installed; RDMAV_C_PROVIDERS=rxe,siw selects those instead).
 .
$long_common"

section[rsw-tools]=net
depends[rsw-tools]="ibverbs-provider-rsw (= $version)"
multiarch[rsw-tools]=foreign
summary[rsw-tools]="kernel view of the rsw RDMA devices for tools that read sysfs"
body[rsw-tools]=" rsw-run runs a command in a private mount namespace where
 /sys/class/infiniband, /sys/class/infiniband_verbs and /dev/infiniband show
 the rsw devices as the kernel lays out its own (ports, state, GIDs and their
 types, the network device), for programs such as UCX, ibstat and NCCL that
 look there instead of asking libibverbs. The host's /sys and /dev are never
 changed. rsw-stat prints the rsw counters (packets, bytes, RNR NAKs,
 errors; per device and per QP) of running processes.
 .
$long_common"

section[libibverbs-rs-dev]=libdevel
depends[libibverbs-rs-dev]="libibverbs1-rs (= $version)"
provides[libibverbs-rs-dev]="libibverbs-dev (= $rdma_core)"
conflicts[libibverbs-rs-dev]=libibverbs-dev
replaces[libibverbs-rs-dev]=libibverbs-dev
summary[libibverbs-rs-dev]="development files for libibverbs1-rs (replaces libibverbs-dev)"
body[libibverbs-rs-dev]=" This package contains the headers <infiniband/verbs.h> and friends,
 source compatible with rdma-core 44's, the libibverbs.so link and
 libibverbs.pc. It has no provider direct-verbs headers (mlx5dv.h, ...).
 .
$long_common"

section[librdmacm-rs-dev]=libdevel
depends[librdmacm-rs-dev]="librdmacm1-rs (= $version), libibverbs-rs-dev (= $version)"
provides[librdmacm-rs-dev]="librdmacm-dev (= $rdma_core)"
conflicts[librdmacm-rs-dev]=librdmacm-dev
replaces[librdmacm-rs-dev]=librdmacm-dev
summary[librdmacm-rs-dev]="development files for librdmacm1-rs (replaces librdmacm-dev)"
body[librdmacm-rs-dev]=" This package contains the headers <rdma/rdma_cma.h> and friends and
 <infiniband/ib.h>, source compatible with rdma-core 44's, the
 librdmacm.so link and librdmacm.pc.
 .
$long_common"

# --- per package: strip, docs, control files --------------------------------
date_r=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
write_changelog() { # PKG
	local doc=$work/$1/usr/share/doc/$1
	{
		echo "rdma-rs ($version) unstable; urgency=medium"
		echo
		echo "  * Binary packages made by \`make deb\`${commit:+ from commit}"
		[[ -z $commit ]] || echo "    $commit."
		echo
		echo " -- $maintainer  $date_r"
	} >"$doc/changelog.Debian"
	touch -d "@$SOURCE_DATE_EPOCH" "$doc/changelog.Debian"
	gzip -9n "$doc/changelog.Debian"
}

# Every ELF file: stripped as dh_strip does, mode 0644 (shared objects are
# not executables).
strip_elves() { # DIR
	local f
	while IFS= read -r -d '' f; do
		if [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then
			strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f"
			chmod 0644 "$f"
		fi
	done < <(find "$1" -type f -print0)
}

# dpkg-shlibdeps wants to run in a source tree: give it a minimal one.
fake_src=$work/.src
mkdir -p "$fake_src/debian"
printf 'Source: rdma-rs\n\nPackage: libibverbs1-rs\nArchitecture: any\n' >"$fake_src/debian/control"

# The copyright years: those of the history, else this year.
first=$(git -C "$repo" log --reverse --format=%cd --date=format:%Y 2>/dev/null | head -n 1 || true)
last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
years=${first:-$last}
[[ $years == "$last" ]] || years=$years-$last

# Deliberate departures from lintian's defaults, each with its reason.
lintian_overrides() { # PKG
	local pkg=$1 f=$work/$1/usr/share/lintian/overrides/$1
	mkdir -p "$(dirname "$f")"
	{
		echo "# Built outside the Debian archive by make deb: no ITP bug to close."
		echo "$pkg: initial-upload-closes-no-bugs"
		case $pkg in
		libibverbs1-rs | librdmacm1-rs)
			echo "# Named apart from rdma-core's ${pkg%-rs}, which it Provides, Conflicts with and Replaces."
			echo "$pkg: package-name-doesnt-match-sonames ${pkg%-rs}"
			;;
		esac
	} >"$f"
}

for pkg in "${packages[@]}"; do
	dir=$work/$pkg
	mkdir -p "$dir/DEBIAN" "$dir/usr/share/doc/$pkg"
	strip_elves "$dir"
	sed "s/@YEARS@/$years/" "$here/copyright" >"$dir/usr/share/doc/$pkg/copyright"
	lintian_overrides "$pkg"
	write_changelog "$pkg"
done

# Shared libraries: ldconfig trigger, shlibs and symbols (checked against
# the template: a symbol added, removed or moved fails the build).
for spec in libibverbs1-rs:libibverbs:libibverbs1 librdmacm1-rs:librdmacm:librdmacm1; do
	IFS=: read -r pkg lib virt <<<"$spec"
	dir=$work/$pkg
	echo "activate-noawait ldconfig" >"$dir/DEBIAN/triggers"
	echo "$lib 1 $virt (>= ${rdma_core%%-*}) | $pkg (>= $version)" >"$dir/DEBIAN/shlibs"
	# dpkg-gensymbols lists what the library exports; only the names are
	# compared, since it lowers every minimal version above our own package
	# version to that version and the minimal versions are rdma-core's.
	(cd "$fake_src" && dpkg-gensymbols -q -c0 -p"$pkg" -P"$dir" -v"$version" \
		-I"$here/$pkg.symbols" -O"$work/$pkg.symbols.check" -e"$dir/$libdir/$lib.so.1") ||
		die "$pkg: dpkg-gensymbols failed"
	names() { sed -n 's/^ \([^ ]*\) .*/\1/p' "$1" | sort; }
	if ! diff <(names "$here/$pkg.symbols") <(names "$work/$pkg.symbols.check") >"$work/$pkg.symbols.diff"; then
		sed -e 's/^</  only in the template:/' -e 's/^>/  only in the library: /' "$work/$pkg.symbols.diff" | grep '^  '
		die "$pkg: the exported symbols differ from $here/$pkg.symbols"
	fi
	grep -v '^#' "$here/$pkg.symbols" >"$dir/DEBIAN/symbols"
done

# Conffiles.
for pkg in "${packages[@]}"; do
	[[ -d $work/$pkg/etc ]] || continue
	(cd "$work/$pkg" && find etc -type f | sort | sed 's|^|/|') >"$work/$pkg/DEBIAN/conffiles"
done

# Depends: the ELF files' needs (libc6, libgcc-s1, and for librdmacm the
# libibverbs1 symbols file above), then the fixed relations.
shlibdeps() { # PKG -> the shlibs:Depends value
	local pkg=$1 elves=() f
	while IFS= read -r -d '' f; do
		[[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] && elves+=("$f")
	done < <(find "$work/$pkg" -path "$work/$pkg/DEBIAN" -prune -o -type f -print0)
	((${#elves[@]})) || return 0
	(cd "$fake_src" && dpkg-shlibdeps -O -S"$work/libibverbs1-rs" -S"$work/librdmacm1-rs" "${elves[@]}" 2>"$work/shlibdeps.$pkg.log") |
		sed -n 's/^shlibs:Depends=//p'
}

join_deps() { local out='' d; for d; do out+=${out:+, }$d; done; echo "$out"; }

for pkg in "${packages[@]}"; do
	dir=$work/$pkg
	deps=()
	auto=$(shlibdeps "$pkg") || die "$pkg: dpkg-shlibdeps failed: $(cat "$work/shlibdeps.$pkg.log")"
	[[ -n $auto ]] && deps+=("$auto")
	[[ -n ${depends[$pkg]:-} ]] && deps+=("${depends[$pkg]}")
	size=$(du -k -s --apparent-size "$dir" --exclude=DEBIAN | cut -f1)
	{
		echo "Package: $pkg"
		echo "Source: rdma-rs"
		echo "Version: $version"
		echo "Architecture: $arch"
		echo "Maintainer: $maintainer"
		echo "Installed-Size: $size"
		((${#deps[@]})) && echo "Depends: $(join_deps "${deps[@]}")"
		[[ -n ${recommends[$pkg]:-} ]] && echo "Recommends: ${recommends[$pkg]}"
		[[ -n ${conflicts[$pkg]:-} ]] && echo "Conflicts: ${conflicts[$pkg]}"
		[[ -n ${replaces[$pkg]:-} ]] && echo "Replaces: ${replaces[$pkg]}"
		[[ -n ${provides[$pkg]:-} ]] && echo "Provides: ${provides[$pkg]}"
		echo "Section: ${section[$pkg]}"
		echo "Priority: optional"
		echo "Multi-Arch: ${multiarch[$pkg]:-same}"
		echo "Description: ${summary[$pkg]}"
		printf '%s\n' "${body[$pkg]}"
	} >"$dir/DEBIAN/control"
	(cd "$dir" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 -r md5sum) >"$dir/DEBIAN/md5sums"
	find "$dir" -depth -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	find "$dir" -type d -exec chmod 0755 {} +
	chmod 0644 "$dir/DEBIAN/"*
	deb=$out/${pkg}_${version}_$arch.deb
	rm -f "$out/${pkg}_"*.deb
	dpkg-deb --root-owner-group -Zxz --build "$dir" "$deb" >/dev/null
	echo "  DEB   ${deb#"$repo"/}"
done
