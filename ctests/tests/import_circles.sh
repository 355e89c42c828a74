#!/bin/bash
# harness-timeout: 60
# No Rust crate of the repository has an import circle between its source
# files (issue 26): tools/import_circles.py draws an arrow A -> B where
# A's code names module B or an item of it (`use crate::b::X`, grouped
# uses, `super::`, inline paths such as `crate::b::f(`), and fails on any
# circle of files, listing the arrows that tie it. An arrow to an
# enclosing module (a child's `use super::*`) closes no circle; see the
# script's head for what it reads. Circles known and being fixed are
# listed in ctests/import_circles.allow, and an allowed circle that no
# longer exists fails too, so the list only shrinks. One level up, the
# crate's top-level modules (a file or a whole folder) must not form a
# circle either ("room circles": wq -> engine/*/info.rs -> wq/conn.rs,
# no circle of files, was one), except across a folder the allow file
# splits into its files.
# First the script checks itself on small fake crates: circles it must
# find, and shapes that are no circle.
set -u
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
. "$(dirname "$0")/lib/common.sh"

py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "no $py"; exit 77; }
tool=$repo/tools/import_circles.py
allow=$repo/ctests/import_circles.allow

# put FILE: writes standard input into $work/FILE.
put() { mkdir -p "$(dirname "$work/$1")" && cat > "$work/$1"; }

# --- self-test: a fake repository, one crate per shape.
put t/Cargo.toml <<< '[workspace]'
# Two siblings, one through `use`, the other through a path in code.
put t/sib/Cargo.toml <<< '[package]'
put t/sib/src/lib.rs <<< 'mod a; mod b;'
put t/sib/src/a.rs <<< 'use crate::b::B; pub fn fa(_: B) {}'
put t/sib/src/b.rs <<< 'pub struct B; pub fn fb() { crate::a::fa(B) }'
# Nested modules, a grouped use and super::super: deep/x/y.rs -> top.rs ->
# deep/z.rs -> deep/x/y.rs.
put t/nest/Cargo.toml <<< '[package]'
put t/nest/src/main.rs <<< 'mod deep; mod top; fn main() {}'
put t/nest/src/deep/mod.rs <<< 'pub mod x; pub mod z;'
put t/nest/src/deep/x/mod.rs <<< 'pub mod y;'
put t/nest/src/deep/x/y.rs <<< 'use super::super::super::top::T; pub struct Y(T);'
put t/nest/src/top.rs <<< 'use crate::{deep::z::Z, deep::x}; pub struct T(Option<Box<Z>>);'
put t/nest/src/deep/z.rs <<< 'pub struct Z(super::x::y::Y);'
# A parent, its child and a third: mod.rs -> b.rs -> c.rs -> mod.rs.
put t/third/Cargo.toml <<< '[package]'
put t/third/src/lib.rs <<< 'mod p; mod c;'
put t/third/src/p/mod.rs <<< 'mod b; pub struct P; pub fn g() { b::fb(); }'
put t/third/src/p/b.rs <<< 'pub fn fb() -> Option<crate::c::C> { None }'
put t/third/src/c.rs <<< 'use crate::p::P; pub struct C(P);'
# No circle: a parent and its child (`use super::*`, `pub use api::f`),
# the crate root's items, paths in comments and strings, a unit test
# naming a module that names this one, mod declarations.
put t/clean/Cargo.toml <<< '[package]'
put t/clean/src/lib.rs <<< 'pub mod id; mod low; pub struct Root;'
put t/clean/src/id/mod.rs <<'EOF'
mod api;
pub use api::f;
use crate::low::L;
pub struct Id(L);
// crate::low2::nothing and "crate::id::api::f" are no paths
#[cfg(test)]
mod tests {
    use crate::low::uses_id;
}
EOF
put t/clean/src/id/api.rs <<< 'use super::*; pub fn f(_: &Id, _: crate::Root) {}'
put t/clean/src/low.rs <<'EOF'
pub struct L;
#[cfg(test)]
pub fn uses_id(_: crate::id::Id) {}
/* crate::id::Id */
pub const S: &str = r#"crate::id::Id"#;
EOF

"$py" "$tool" "$work/t" > "$work/self.out" 2>&1
rc=$?
[ "$rc" = 1 ] || cat "$work/self.out"
[ "$rc" = 1 ] || fail "the fake crates' circles: exit $rc, not 1"
expect_in "$work/self.out" '^circle [0-9]+: 2 files: sib/src/a\.rs, sib/src/b\.rs$'
expect_in "$work/self.out" '^  sib/src/a\.rs -> sib/src/b\.rs: B$'
expect_in "$work/self.out" '^  sib/src/b\.rs -> sib/src/a\.rs: fa$'
expect_in "$work/self.out" '^circle [0-9]+: 3 files: nest/src/deep/x/y\.rs, nest/src/deep/z\.rs, nest/src/top\.rs$'
expect_in "$work/self.out" '^  nest/src/top\.rs -> nest/src/deep/z\.rs: Z$'
expect_in "$work/self.out" '^  nest/src/deep/z\.rs -> nest/src/deep/x/y\.rs: Y$'
expect_in "$work/self.out" '^  nest/src/deep/x/y\.rs -> nest/src/top\.rs: T$'
expect_in "$work/self.out" '^circle [0-9]+: 3 files: third/src/c\.rs, third/src/p/b\.rs, third/src/p/mod\.rs$'
expect_in "$work/self.out" '^4 crates, 17 files, .*; circles: 3 \(0 allowed\)'
grep -q 'clean/' "$work/self.out" && fail "a circle reported in the crate that has none"
echo "ok: the fake crates' three circles are found, the clean crate passes"

# The clean crate alone passes; allowing the three circles passes; an
# allowance for a circle that does not exist fails.
mv "$work/t/clean" "$work/clean"
"$py" "$tool" "$work/clean" > "$work/clean.out" 2>&1 || { cat "$work/clean.out"; fail "the clean crate failed"; }
expect_in "$work/clean.out" '^1 crates, 4 files, 4 arrows \(2 to an enclosing module\); circles: 0'
{
    echo "# fake"
    echo "sib/src/b.rs sib/src/a.rs"
    echo "nest/src/deep/x/y.rs nest/src/deep/z.rs nest/src/top.rs  # a comment"
    echo "third/src/c.rs third/src/p/b.rs third/src/p/mod.rs"
} > "$work/allow"
"$py" "$tool" --allow "$work/allow" "$work/t" > "$work/allowed.out" 2>&1 ||
    { cat "$work/allowed.out"; fail "allowed circles failed"; }
echo "sib/src/a.rs third/src/c.rs" >> "$work/allow"
"$py" "$tool" --allow "$work/allow" "$work/t" > "$work/stale.out" 2>&1 &&
    { cat "$work/stale.out"; fail "a stale allowance passed"; }
expect_in "$work/stale.out" "^stale allowance \(.*allow:5\): no such circle any more: sib/src/a\.rs third/src/c\.rs"
echo "ok: the clean crate passes, allowed circles pass, a stale allowance fails"

# Rooms: no circle of files, but the top-level modules hi and lo import
# each other (hi/mod.rs -> lo/mod.rs -> hi/info.rs -> lo/conn.rs): a
# lower module imports an upper one. "split" makes a folder's files rooms
# of their own: splitting hi alone leaves hi/info.rs <-> lo, splitting
# both opens it.
put r/Cargo.toml <<< '[workspace]'
put r/rooms/Cargo.toml <<< '[package]'
put r/rooms/src/lib.rs <<< 'mod hi; mod lo;'
put r/rooms/src/hi/mod.rs <<< 'pub mod info; use crate::lo::L; pub fn f(_: L) {}'
put r/rooms/src/hi/info.rs <<< 'pub struct Info(pub crate::lo::conn::C);'
put r/rooms/src/lo/mod.rs <<< 'pub mod conn; pub struct L(pub crate::hi::info::Info);'
put r/rooms/src/lo/conn.rs <<< 'pub struct C;'
"$py" "$tool" "$work/r" > "$work/rooms.out" 2>&1 && { cat "$work/rooms.out"; fail "a circle of top-level modules passed"; }
expect_in "$work/rooms.out" '^room circle 1: rooms/src/lib\.rs: top-level modules hi, lo$'
expect_in "$work/rooms.out" '^  rooms/src/lo/mod\.rs -> rooms/src/hi/info\.rs: Info$'
expect_in "$work/rooms.out" '; circles: 0 \(0 allowed\); stale allowances: 0; room circles: 1$'
echo "split rooms/src/hi" > "$work/split"
"$py" "$tool" --allow "$work/split" "$work/r" > "$work/split.out" 2>&1 && { cat "$work/split.out"; fail "hi split, lo whole: passed"; }
expect_in "$work/split.out" '^room circle 1: rooms/src/lib\.rs: top-level modules lo, rooms/src/hi/info\.rs$'
echo "split rooms/src/lo/" >> "$work/split"
"$py" "$tool" --allow "$work/split" "$work/r" > "$work/split.out" 2>&1 || { cat "$work/split.out"; fail "both folders split: still a room circle"; }
echo "ok: a circle of top-level modules fails, a split folder's files are rooms of their own"

# --- the repository's crates.
cd "$repo" || fail "no repository"
"$py" "$tool" --allow "$allow" . > "$work/repo.out" 2>&1
rc=$?
cat "$work/repo.out"
if [ "$rc" != 0 ]; then
    echo "Every circle above that is not allowed must be opened: a lower module"
    echo "must not import an upper one (docs/architecture.md); an allowance that"
    echo "is stale must leave ctests/import_circles.allow. The arrows of every file:"
    echo "  $py tools/import_circles.py --edges"
    fail "import circles in the repository's crates"
fi
echo "ok: no import circle in the repository's crates beyond the allowed ones"
