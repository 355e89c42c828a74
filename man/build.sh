#!/usr/bin/env bash
# The manual pages: every man/NAME.SECTION.scd is converted to roff with
# scdoc(1) into OUT/manSECTION/NAME.SECTION, and every other name its NAME
# section lists ("a, b, c - what they do") gets a link page
# OUT/manS/b.S holding ".so manSECTION/NAME.SECTION", so `man b` works.
# A page may also name, on a comment line of its own, names that belong
# to it but are too many for the NAME line (the provider interface):
#   ; links: 3 ibv_cmd_alloc_pd ibv_cmd_dealloc_pd ...
# (the first word is the section the link pages go in).
#
#   man/build.sh OUT      build into OUT (pages whose source did not change
#                         are left alone; pages of removed sources go)
#   man/build.sh --list   print every page path (manS/x.S) a build makes,
#                         pages first, then links; no scdoc needed
#
# SOURCE_DATE_EPOCH (default: the last commit that touched man/, else now)
# is the date in the pages' footers, so builds are reproducible.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "man/build.sh: $*" >&2; exit 1; }

# page_names SRC -> the names the NAME section lists, one a line
page_names() {
	awk '/^# NAME/ { on = 1; next } on && /^#/ { exit }
		on && NF { sub(/ - .*/, ""); gsub(/[*\\]/, ""); n = split($0, a, /, */);
			for (i = 1; i <= n; i++) if (a[i] != "") print a[i]; exit }' "$1"
}

# links SRC -> "SECTION NAME" for each link page of SRC
links() {
	local src=$1 base sec name
	base=$(basename "$src" .scd)
	sec=${base##*.}
	while IFS= read -r name; do
		[[ $name == "${base%.*}" ]] || echo "$sec $name"
	done < <(page_names "$src")
	sed -n 's/^; links: *//p' "$src" | while read -r s rest; do
		for name in $rest; do echo "$s $name"; done
	done
}

sources=()
while IFS= read -r -d '' f; do sources+=("$f"); done \
	< <(find "$here" -maxdepth 1 -name '*.[0-9].scd' -print0 | sort -z)
((${#sources[@]})) || die "no man/*.scd sources"

list() {
	local src base
	for src in "${sources[@]}"; do
		base=$(basename "$src" .scd)
		echo "man${base##*.}/$base"
	done
	for src in "${sources[@]}"; do
		links "$src" | while read -r s name; do echo "man$s/$name.$s"; done
	done
}

if [[ ${1:-} == --list ]]; then
	list
	exit 0
fi
(($# == 1)) || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=$1
command -v scdoc >/dev/null || die "scdoc not found (apt-get install scdoc)"

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
	SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct -- . 2>/dev/null || true)
	: "${SOURCE_DATE_EPOCH:=$(date +%s)}"
fi
export SOURCE_DATE_EPOCH

mkdir -p "$out"
declare -A want=() owner=()
tmp=$(mktemp "$out/.page.XXXXXX")
trap 'rm -f "$tmp"' EXIT
put() { # FILE DEST: replace DEST only when the bytes differ
	if ! cmp -s "$1" "$2"; then
		mkdir -p "$(dirname "$2")"
		cp "$1" "$2.tmp" && mv -f "$2.tmp" "$2"
		echo "  MAN   ${2#"$out"/}"
	fi
}
for src in "${sources[@]}"; do
	base=$(basename "$src" .scd)
	page=man${base##*.}/$base
	[[ -z ${owner[$page]:-} ]] || die "$page: made by ${owner[$page]} and $src"
	owner[$page]=$src
	want[$page]=1
	scdoc <"$src" >"$tmp" || die "scdoc failed on $src"
	put "$tmp" "$out/$page"
done
for src in "${sources[@]}"; do
	base=$(basename "$src" .scd)
	while read -r s name; do
		page=man$s/$name.$s
		[[ -z ${owner[$page]:-} ]] || die "$page: named by ${owner[$page]} and $src"
		owner[$page]=$src
		want[$page]=1
		line=".so man${base##*.}/$base" cur=
		[[ -f $out/$page ]] && read -r cur <"$out/$page"
		if [[ $cur != "$line" ]]; then
			mkdir -p "$out/man$s"
			echo "$line" >"$out/$page"
			echo "  MAN   $page"
		fi
	done < <(links "$src")
done
# Pages whose source or name went away.
while IFS= read -r -d '' f; do
	rel=${f#"$out"/}
	[[ -n ${want[$rel]:-} ]] || { rm -f "$f"; echo "  RM    $rel"; }
done < <(find "$out" -path "$out/man[0-9]/*" -type f -print0)
exit 0
