#!/usr/bin/env bash
# harness-timeout: 300
# The manual pages (man/*.scd, built by man/build.sh with scdoc):
#   1. every name the libraries export (libibverbs-rs/exports.txt,
#      librdmacm-rs/exports.txt, every version node, the provider
#      interface's too) and every verb the headers define inline
#      (include/infiniband/verbs.h, include/rdma/rdma_verbs.h,
#      include/rdma/rdma_cma.h) has a page in section 3 or 7;
#   2. every tool installed in bin (rsw-run, rsw-sysfs, rsw-stat) has one
#      in section 1, and every environment variable the libraries, rsw and
#      rsw-run read is described in rdma-environ(7) (or rsw-run(1));
#   3. every page renders without a warning:
#      LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l
#      prints nothing on stderr (a link page's ".so" must name a page);
#      lexgrog finds its NAME line (what mandb and lintian read); section
#      1 and 3 pages have the sections a reader looks for; the pages they
#      refer to in bold exist.
# Needs scdoc, man-db and groff-base (.ci/run installs them): without
# them the test fails rather than skips, since CI must run it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for tool in scdoc man lexgrog groff perl; do
	command -v "$tool" >/dev/null ||
		{ echo "FAIL: $tool not found (apt-get install scdoc man-db groff-base)"; exit 1; }
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$repo/man/build.sh" "$out" >/dev/null

have_page() { # NAME SECTION... -> true when OUT/manS/NAME.S exists for one S
	local name=$1 s
	shift
	for s; do [[ -f $out/man$s/$name.$s ]] && return 0; done
	return 1
}

# --- 1. exported and inline names ---------------------------------------
exported() { # exports.txt -> every symbol, one a line
	awk '/^node / { next } /^[ \t]+[A-Za-z_]/ { print $1 }' "$1"
}
# static inline functions of a header, but the header's own helpers (a
# leading underscore) and two that are no verbs: verbs_get_ctx (the
# providers' cast from ibv_context) and rdma_seterrno (rdma_verbs.h's
# errno helper).
inline_verbs() {
	perl -0777 -ne 'while (/static\s+inline\s+[^;{(]*?\b([A-Za-z][A-Za-z0-9_]*)\s*\(/gs) { print "$1\n" }' "$@" |
		grep -vxE 'verbs_get_ctx|rdma_seterrno' | sort -u
}
names=0 missing=()
while IFS= read -r name; do
	names=$((names + 1))
	have_page "$name" 3 7 || missing+=("$name")
done < <({
	exported "$repo/libibverbs-rs/exports.txt"
	exported "$repo/librdmacm-rs/exports.txt"
	inline_verbs "$repo/include/infiniband/verbs.h" "$repo/include/rdma/rdma_verbs.h" \
		"$repo/include/rdma/rdma_cma.h"
} | sort -u)
((names > 300)) || fail "only $names exported and inline names found: the lists moved?"
if ((${#missing[@]})); then
	fail "${#missing[@]} exported or inline names have no page (add them to a man/*.scd NAME line): ${missing[*]}"
else
	echo "ok   $names exported and inline names each have a page"
fi

# --- 2. tools and environment variables ------------------------------------
for tool in rsw-run rsw-sysfs rsw-stat; do
	have_page "$tool" 1 || fail "$tool has no page in section 1"
done
# What the code reads: trusted_env("X"), env::var("X"), env::var_os("X"),
# getenv("X") in the libraries and tools (not tests, not build scripts),
# and ${X:-...} in rsw-run.
env_text=$(man -l "$out/man7/rdma-environ.7" "$out/man1/rsw-run.1" 2>/dev/null || true)
vars=$({
	find "$repo/libibverbs-rs/src" "$repo/librdmacm-rs/src" "$repo/providers/rsw/src" \
		"$repo/verbs-abi/src" "$repo/verbs-rt/src" "$repo/tools" \
		\( -name '*.rs' -o -name '*.c' \) -not -path '*/tests/*' -not -name 'version_script.rs' -print0 |
		xargs -0 perl -0777 -ne 'while (/(?:trusted_env|env::var_os|env::var|getenv)\s*\(\s*"([A-Z][A-Z0-9_]*)"/g) { print "$1\n" }'
	sed -n 's/.*\${\([A-Z][A-Z0-9_]*\):-.*/\1/p' "$repo/tools/rsw-run"
} | sort -u)
nvars=0
for v in $vars; do
	nvars=$((nvars + 1))
	grep -qw -- "$v" <<<"$env_text" || fail "environment variable $v is read by the code but not in rdma-environ(7)"
done
((nvars >= 20)) || fail "only $nvars environment variables found in the code: the search is broken?"
echo "ok   $nvars environment variables read by the code are documented"

# --- 3. every page renders cleanly --------------------------------------------
pages=0 links=0
cd "$out"
while IFS= read -r -d '' f; do
	f=${f#./}
	if [[ $(head -c 4 "$f") == ".so " ]]; then
		# A link page renders as its target does, so it is enough that
		# ".so manS/x.S" names a page from the man root, as man resolves it.
		links=$((links + 1))
		target=$(sed -n '1s/^\.so //p' "$f")
		[[ $(wc -l <"$f") == 1 && -f $target && $(head -c 4 "$target") != ".so " ]] ||
			fail "$f: link to '$target', which is not a page"
		continue
	else
		pages=$((pages + 1))
		lexgrog "$f" >/dev/null 2>&1 || fail "$f: lexgrog finds no NAME line (whatis)"
		sec=${f##*.}
		want=(NAME DESCRIPTION "SEE ALSO")
		[[ $sec == [13] ]] && want+=(SYNOPSIS)
		[[ $sec == 3 ]] && want+=("RETURN VALUE")
		for h in "${want[@]}"; do
			grep -qx "\\.SH \"\\{0,1\\}$h\"\\{0,1\\}" "$f" || fail "$f: no $h section"
		done
	fi
	# Rendered from the man root, so that a link page's ".so manS/x.S"
	# resolves as it does once installed.
	warn=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l "$f" 2>&1 >/dev/null) ||
		fail "$f: man exited with an error"
	[[ -z $warn ]] || fail "$f: man --warnings:"$'\n'"$warn"
done < <(find . -path './man[0-9]/*' -type f -print0 | sort -z)
((pages > 0)) || fail "no pages built"
# Every reference in bold, name(N), is one of our pages or one the system
# has (the others are set in roman: fork(2), poll(2)).
refs=0
while read -r name sec; do
	refs=$((refs + 1))
	[[ -f man$sec/$name.$sec ]] || man -w "$sec" "$name" >/dev/null 2>&1 ||
		fail "a page refers to $name($sec), which does not exist"
done < <(grep -ho '\\fB[A-Za-z0-9_.-]*\\fR([1-8])' man[0-9]/* | sed 's/\\fB\(.*\)\\fR(\(.\))/\1 \2/' | sort -u)
((refs > 100)) || fail "only $refs cross-references found: the search is broken?"
echo "ok   $pages pages and $links link pages render without warnings; $refs references resolve"

if ((fails)); then
	echo "$fails problem(s)"
	exit 1
fi
echo "ok   manual pages"
