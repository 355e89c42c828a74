#!/usr/bin/env python3
"""Import circles between the source files of each Rust crate.

    tools/import_circles.py [--allow FILE] [--edges] [ROOT]

For every crate under ROOT (a directory with a Cargo.toml and a src/;
default: the current directory) this maps each .rs file to its module
(src/lib.rs, src/main.rs or src/bin/*, then each `mod x;` as x.rs or
x/mod.rs, nested, inline `mod x { ... }` included), draws the arrows
between the files and prints every circle: each strongly connected
component of more than one file, with the arrows that tie it
("a.rs -> b.rs: the names a takes from b").

An arrow A -> B: A's code names module B, or an item of it, of the same
crate:
  * `use crate::b::X;`, `use super::...`, `use self::...`, grouped
    `use crate::{b, c::Y};`, and `use b::X` where b is a child module;
  * a path in code: `crate::b::f(...)`, `super::b::Y`, `super::super::x`,
    `b::f()` where b is a child module of the module the code is in.
A path goes as deep as it names modules: `crate::a::b::Item` points at
the file of module a::b, `crate::a::Item` at the file of a, and `use
super::*` in a child at its parent's file. Not arrows: a `mod x;`
declaration (a parent declaring its child does not use it), a path that
stays in its own file (an inline `mod tests { use super::*; }`), items
under #[cfg(test)], the bodies of macro_rules! (expanded where they are
called), comments, strings and character literals. Integration tests
(tests/), benches and build.rs are crates of their own and not read.

An arrow to the file of an enclosing module (a child's `use super::*`,
an item of the crate root) is drawn but closes no circle: a module sees
what encloses it by Rust's scoping, and its parent is the face it stands
behind. The parent naming its child (`pub use child::f`, `child::f()`)
is the arrow downward. So a parent and its own child form no circle;
two siblings naming each other do, and so do a parent, its child and a
third file when the child names the third and the third the parent.

--allow FILE: circles that are known and tolerated, one a line, its
files (paths as printed) separated by blanks, '#' starts a comment.
An allowed circle must exist exactly as listed: one that is gone or
has changed its files is reported, so the list only shrinks.
--edges: also print every arrow, one a line.

The same check one level up: a crate's top-level modules (a file under
src/, or a folder with everything in it) are rooms, and an arrow between
files of two rooms is an arrow between the rooms. A circle of rooms
with no circle of files under it (hi/mod.rs -> lo/mod.rs -> hi/info.rs
-> lo/conn.rs) still means a lower module imports an upper one; it is
printed as "room circle" with its arrows, and fails. Arrows inside a
circle of files are left out of this (that circle is reported already).

Exit status: 0 no circle (beyond the allowed ones), 1 circles, room
circles or a stale allowance, 2 bad usage.

A folder that holds a layer cake of its own (a backend whose files run
from the bottom of the crate to its top) is named in the --allow file as
"split FOLDER": each of its files is then a room of its own.
"""

import argparse
import os
import re
import sys

SKIP_DIRS = {".git", "target", "build", "node_modules"}


def strip_code(text):
    """Blanks comments, string and character literals, keeping newlines."""
    out = []
    i, n = 0, len(text)
    char_lit = re.compile(r"'(?:[^'\\\n]|\\(?:[nrt0\\'\"]|x[0-9a-fA-F]{2}"
                          r"|u\{[0-9a-fA-F_]{1,6}\}))'")
    raw_str = re.compile(r'b?r(#*)"')

    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                and raw_str.match(text, i):
            m = raw_str.match(text, i)
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            m = char_lit.match(text, i)
            if m:  # a character literal; otherwise a lifetime or a label
                out.append(blank(m.group(0)))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokens(text):
    """(token, line) pairs of code already stripped of comments and strings."""
    line, pos = 1, 0
    for m in TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        yield m.group(0), line


def is_ident(tok):
    return tok[0].isalpha() or tok[0] == "_"


def drop_unread(toks):
    """The tokens without the items under #[cfg(test)] (or a cfg naming
    test and no `not`): unit tests and their helpers are not the design;
    and without the bodies of macro_rules!, whose paths are expanded, and
    belong, where the macro is called."""
    out, k, n = [], 0, len(toks)
    while k < n:
        if toks[k][0] == "macro_rules" and k + 3 < n and toks[k + 1][0] == "!":
            k = matching(toks, k + 3) + 1
            continue
        if toks[k][0] == "#" and k + 1 < n and toks[k + 1][0] == "[":
            end = matching(toks, k + 1)
            words = [t for t, _ in toks[k + 2:end]]
            if words[:1] == ["cfg"] and "test" in words and "not" not in words:
                k = skip_item(toks, end + 1)
                continue
        out.append(toks[k])
        k += 1
    return out


def matching(toks, k):
    """The index of the bracket that closes the one at toks[k]."""
    depth = 0
    for j in range(k, len(toks)):
        if toks[j][0] in "([{":
            depth += 1
        elif toks[j][0] in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


ITEM_WORDS = {"fn", "mod", "struct", "enum", "union", "impl", "trait", "const", "static",
              "type", "use", "extern", "unsafe", "async", "macro_rules", "let"}


def skip_item(toks, k):
    """The index after the item (or field, or statement) starting at toks[k]."""
    n = len(toks)
    while k < n and toks[k][0] == "#" and k + 1 < n and toks[k + 1][0] == "[":
        k = matching(toks, k + 1) + 1  # further attributes
    j = k + 1 if k < n and toks[k][0] == "pub" else k
    if j < n and j > k and toks[j][0] == "(":
        j = matching(toks, j) + 1  # pub(crate), pub(super)
    head = toks[j][0] if j < n else ""
    is_use = head == "use"
    # a field or an argument ends at a comma; an item (whose generics may
    # hold commas) does not
    is_item = head in ITEM_WORDS
    while k < n:
        t = toks[k][0]
        if t in "([" or (t == "{" and is_use):
            k = matching(toks, k) + 1
        elif t == "{":
            return matching(toks, k) + 1
        elif t == ";" or (t == "," and not is_item):
            return k + 1
        elif t == "}":
            return k  # the end of the enclosing block: not ours
        else:
            k += 1
    return k


class Crate:
    """One crate: the files of its modules, read from its root file."""

    def __init__(self, top):
        self.modules = {}           # module path (tuple) -> file
        self.files = {}             # file -> token list
        self.own = {}               # file -> its own module
        self.missing = []           # (file, line, name) of `mod x;` without a file
        self._load(top, (), os.path.dirname(top))

    def _load(self, path, mod, child_dir):
        """Reads the file of module `mod`, whose `mod x;` live in child_dir."""
        if path in self.files:
            return
        with open(path, encoding="utf-8", errors="replace") as f:
            toks = drop_unread(list(tokens(strip_code(f.read()))))
        self.files[path] = toks
        self.own[path] = mod
        self.modules[mod] = path
        # Walk the file for `mod x;` and inline `mod x { ... }`.
        stack = []  # for each open brace: the inline module's name or None
        for k, (tok, line) in enumerate(toks):
            if tok == "{":
                name = None
                if k >= 2 and toks[k - 2][0] == "mod" and is_ident(toks[k - 1][0]):
                    name = toks[k - 1][0]
                    self.modules[mod + self._inline(stack) + (name,)] = path
                stack.append(name)
            elif tok == "}":
                if stack:
                    stack.pop()
            elif tok == ";" and k >= 2 and toks[k - 2][0] == "mod" and is_ident(toks[k - 1][0]):
                name = toks[k - 1][0]
                inline = self._inline(stack)
                base = os.path.join(child_dir, *inline)
                for cand, owner in ((os.path.join(base, name + ".rs"), False),
                                    (os.path.join(base, name, "mod.rs"), True)):
                    if os.path.isfile(cand):
                        sub_dir = os.path.dirname(cand) if owner else os.path.join(base, name)
                        self._load(cand, mod + inline + (name,), sub_dir)
                        break
                else:
                    self.missing.append((path, line, name))

    @staticmethod
    def _inline(stack):
        return tuple(s for s in stack if s is not None)

    def resolve(self, here, segs):
        """The module a path names from module `here`, and the name taken."""
        first = segs[0]
        if first == "crate":
            mod, rest = (), segs[1:]
        elif first in ("super", "self"):
            mod, rest = here, segs
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not mod:
                        return None
                    mod = mod[:-1]
                rest = rest[1:]
        elif here + (first,) in self.modules:
            mod, rest = here + (first,), segs[1:]
        else:
            return None  # another crate, or an item in scope
        name = None
        for seg in rest:
            if mod + (seg,) in self.modules:
                mod = mod + (seg,)
            else:
                name = seg
                break
        if name is None:
            name = mod[-1] if mod else "crate"
        return mod, name

    def references(self, path):
        """(target file, name) for each reference from `path` to another file."""
        toks = self.files[path]
        base = self.own[path]
        stack = []
        k, n = 0, len(toks)
        refs = []

        def here():
            return base + Crate._inline(stack)

        def add(segs):
            r = self.resolve(here(), segs)
            if r is not None and self.modules[r[0]] != path:
                refs.append((self.modules[r[0]], r[1]))

        while k < n:
            tok = toks[k][0]
            prev = toks[k - 1][0] if k else ""
            if tok == "{":
                name = None
                if k >= 2 and toks[k - 2][0] == "mod" and is_ident(prev):
                    name = prev
                stack.append(name)
                k += 1
            elif tok == "}":
                if stack:
                    stack.pop()
                k += 1
            elif tok == "use" and prev != "::":
                end = k + 1
                while end < n and toks[end][0] != ";":
                    end += 1
                for segs in use_paths([t for t, _ in toks[k + 1:end]]):
                    if segs:
                        add(segs)
                k = end + 1
            elif is_ident(tok) and prev != "::" and k + 2 < n and toks[k + 1][0] == "::" \
                    and not (prev == "in" and k >= 2 and toks[k - 2][0] == "("):
                segs = [tok]
                j = k + 1
                while j + 1 < n and toks[j][0] == "::" and is_ident(toks[j + 1][0]):
                    segs.append(toks[j + 1][0])
                    j += 2
                add(segs)
                k = j
            else:
                k += 1
        return refs


def use_paths(toks):
    """The paths of a use tree: [a, b, c] for a::b::c, [a, b, '*'] for a::b::*."""
    out = []

    def tree(i, prefix):
        # one use tree starting at toks[i]; returns the index after it
        segs = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "::":
                i += 1
            elif t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    if toks[i] == ",":
                        i += 1
                        continue
                    i = tree(i, segs)
                return i + 1
            elif t == "*":
                out.append(segs + ["*"])
                return i + 1
            elif t in (",", "}"):
                break
            elif t == "as":
                i += 2  # the alias
                break
            elif is_ident(t):
                if t == "self" and segs:
                    pass  # `a::{self}` is a itself
                else:
                    segs.append(t)
                i += 1
            else:
                i += 1
        out.append(segs)
        return i

    i = 0
    while i < len(toks):
        if toks[i] == ",":
            i += 1
            continue
        i = tree(i, [])
    return [p for p in out if p and p[0] != "*"]


def find_crates(root):
    crates = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        src = os.path.join(dirpath, "src")
        if "Cargo.toml" in filenames and os.path.isdir(src):
            tops = [os.path.join(src, f) for f in ("lib.rs", "main.rs")
                    if os.path.isfile(os.path.join(src, f))]
            bins = os.path.join(src, "bin")
            if os.path.isdir(bins):
                for f in sorted(os.listdir(bins)):
                    p = os.path.join(bins, f)
                    if f.endswith(".rs"):
                        tops.append(p)
                    elif os.path.isfile(os.path.join(p, "main.rs")):
                        tops.append(os.path.join(p, "main.rs"))
            crates.extend(Crate(top) for top in tops)  # each root a crate of its own
    return crates


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def read_allow(path):
    """(circles allowed: [(files, line)], folders split into files)."""
    allowed, split = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if words[:1] == ["split"] and len(words) == 2:
                split.append(words[1].rstrip("/") + "/")
            elif words:
                allowed.append((frozenset(words), n))
    return allowed, split


def main(argv):
    ap = argparse.ArgumentParser(description="Import circles between a Rust crate's files.")
    ap.add_argument("--allow", metavar="FILE", help="known circles, one a line")
    ap.add_argument("--edges", action="store_true", help="print every arrow too")
    ap.add_argument("root", nargs="?", default=".")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    if not os.path.isdir(root):
        print(f"import_circles: no directory {args.root}", file=sys.stderr)
        return 2

    def rel(p):
        return os.path.relpath(p, root)

    allowed, split = read_allow(args.allow) if args.allow else ([], [])
    crates = find_crates(root)
    room = {}    # file -> (crate root, top-level module), crate roots excluded
    edges = {}   # file -> {file: [names]}: the arrows that can close a circle
    inward = {}  # file -> {file: [names]}: arrows to an enclosing module
    nfiles = 0
    for crate in crates:
        for path, line, name in crate.missing:
            print(f"warning: {rel(path)}:{line}: no file for `mod {name};`", file=sys.stderr)
        for path in sorted(crate.files):
            nfiles += 1
            mod = crate.own[path]
            if mod:
                whole = any(rel(path).startswith(d) for d in split)
                room[rel(path)] = (rel(crate.modules[()]), rel(path) if whole else mod[0])
            edges.setdefault(rel(path), {})
            for target, name in crate.references(path):
                # A module inside another sees what encloses it (Rust's
                # scoping: `use super::*`, the crate root's items): such an
                # arrow is drawn but closes no circle.
                up = crate.own[target] == mod[:len(crate.own[target])]
                table = inward if up else edges
                names = table.setdefault(rel(path), {}).setdefault(rel(target), [])
                if name not in names:
                    names.append(name)

    narrows = sum(len(t) for t in edges.values())
    nin = sum(len(t) for t in inward.values())
    if args.edges:
        for a in sorted(set(edges) | set(inward)):
            for table, note in ((edges, ""), (inward, " (to an enclosing module)")):
                for b in sorted(table.get(a, ())):
                    print(f"{a} -> {b}: {', '.join(sorted(table[a][b]))}{note}")

    circles = [c for c in sccs(sorted(edges), edges) if len(c) > 1]
    circles.sort()
    allowed_sets = {s for s, _ in allowed}
    bad = 0
    for i, comp in enumerate(circles, 1):
        tolerated = frozenset(comp) in allowed_sets
        bad += not tolerated
        note = " (allowed)" if tolerated else ""
        print(f"circle {i}: {len(comp)} files{note}: {', '.join(comp)}")
        members = set(comp)
        for a in comp:
            for b in sorted(edges[a]):
                if b in members:
                    print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
    # Rooms: arrows between top-level modules, those inside a file
    # circle left out.
    in_circle = {}
    for i, comp in enumerate(circles):
        for f in comp:
            in_circle[f] = i
    redges, rwhy = {}, {}
    for a in edges:
        for b in edges[a]:
            ra, rb = room.get(a), room.get(b)
            if not ra or not rb or ra == rb:
                continue
            if a in in_circle and in_circle.get(b) == in_circle[a]:
                continue
            redges.setdefault(ra, set()).add(rb)
            rwhy.setdefault((ra, rb), []).append(f"{a} -> {b}: {', '.join(sorted(edges[a][b]))}")
    rooms = sorted(set(room.values()))
    rcircles = sorted(c for c in sccs(rooms, redges) if len(c) > 1)
    for i, comp in enumerate(rcircles, 1):
        names = ", ".join(m for _, m in comp)
        print(f"room circle {i}: {comp[0][0]}: top-level modules {names}")
        members = set(comp)
        for ra in comp:
            for rb in sorted(redges.get(ra, ())):
                if rb in members:
                    for why in rwhy[(ra, rb)]:
                        print(f"  {why}")
    nallowed = len(circles) - bad
    bad += len(rcircles)
    found = {frozenset(c) for c in circles}
    stale = [(s, n) for s, n in allowed if s not in found]
    for s, n in stale:
        print(f"stale allowance ({args.allow}:{n}): no such circle any more: "
              f"{' '.join(sorted(s))} -- remove the line")
    print(f"{len(crates)} crates, {nfiles} files, {narrows + nin} arrows ({nin} to an enclosing"
          f" module); circles: {len(circles)} ({nallowed} allowed);"
          f" stale allowances: {len(stale)}; room circles: {len(rcircles)}")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
