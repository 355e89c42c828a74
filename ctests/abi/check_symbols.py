#!/usr/bin/env python3
"""Compare a built library's exported symbols with rdma-core's.

For every row of the reference symbol list marked `default`, the library
must export that name as the default version (name@@NODE) of that node.
Anything else the library exports must be either

  * listed in the crate's exports.txt under a node the reference does not
    have (the newer public nodes, e.g. IBVERBS_1.15..1.18, RDMACM_1.4/1.5), or
  * a non-default version (name@NODE) that the reference also has as
    non-default.

Usage:
  check_symbols.py --lib build/lib/libibverbs.so.1 \
      --expect $ABI_DIR/libibverbs.symbols --exports libibverbs-rs/exports.txt

Exits 0 when everything matches, 1 with a list of problems otherwise,
2 on usage or tool errors.
"""

import argparse
import re
import shutil
import subprocess
import sys


def read_expected(path):
    """(default pairs, non-default pairs, version nodes) of the reference."""
    default, nondefault, nodes = set(), set(), set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) < 3:
                cols = line.split()
            if len(cols) < 3:
                raise ValueError(f"{path}: malformed row: {line!r}")
            name, version, kind = cols[0], cols[1], cols[2]
            if kind == "unversioned":
                # The version-node marker symbols (IBVERBS_1.0 ...).
                nodes.add(name)
            elif kind == "default":
                default.add((name, version))
                nodes.add(version)
            elif kind == "nondefault":
                nondefault.add((name, version))
                nodes.add(version)
            else:
                raise ValueError(f"{path}: unknown kind {kind!r} in {line!r}")
    return default, nondefault, nodes


def read_exports(path):
    """{(name, node)} and the node order of an exports.txt."""
    pairs, nodes = set(), []
    node = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("node "):
                node = line.split()[1]
                nodes.append(node)
                continue
            if node is None:
                raise ValueError(f"{path}: symbol {line!r} before any node")
            pairs.add((line, node))
    return pairs, nodes


DYNSYM_RE = re.compile(
    r"^\s*\d+:\s+[0-9a-fA-F]+\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)"
)


def exported_with_readelf(lib):
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", lib],
        check=True, capture_output=True, text=True,
    ).stdout
    syms = []
    for line in out.splitlines():
        m = DYNSYM_RE.match(line)
        if not m:
            continue
        typ, bind, _vis, ndx, name = m.groups()
        if ndx == "UND" or bind not in ("GLOBAL", "WEAK"):
            continue
        syms.append((name, typ, ndx))
    return syms


def exported_with_objdump(lib):
    out = subprocess.run(
        ["objdump", "-T", lib], check=True, capture_output=True, text=True
    ).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        # addr flags... section [version] name ; version "(NODE)" = hidden
        if len(parts) < 4 or "*UND*" in parts:
            continue
        if not re.fullmatch(r"[0-9a-fA-F]{8,16}", parts[0]):
            continue
        name = parts[-1]
        version = parts[-2]
        section = next((p for p in parts[1:] if p.startswith(".") or p == "*ABS*"), "")
        typ = "FUNC" if " DF " in f" {line} " else "OBJECT"
        if version.startswith("(") and version.endswith(")"):
            syms.append((f"{name}@{version[1:-1]}", typ, section))
        elif version in ("Base",) or not re.match(r"[A-Z]", version):
            syms.append((name, typ, section))
        else:
            syms.append((f"{name}@@{version}", typ, section))
    return syms


def exported(lib):
    if shutil.which("readelf"):
        return exported_with_readelf(lib)
    if shutil.which("objdump"):
        return exported_with_objdump(lib)
    raise RuntimeError("neither readelf nor objdump is installed")


def split_version(symbol):
    """name@@NODE -> (name, NODE, True); name@NODE -> (.., False); name -> (name, None, None)."""
    if "@@" in symbol:
        name, node = symbol.split("@@", 1)
        return name, node, True
    if "@" in symbol:
        name, node = symbol.split("@", 1)
        return name, node, False
    return symbol, None, None


def check(lib, expect_path, exports_path):
    expected_default, expected_nondefault, ref_nodes = read_expected(expect_path)
    listed, listed_nodes = read_exports(exports_path)
    newer_nodes = [n for n in listed_nodes if n not in ref_nodes]

    have_default, have_nondefault = set(), set()
    unversioned = []
    for symbol, typ, ndx in exported(lib):
        name, node, is_default = split_version(symbol)
        if node is None:
            # GNU ld may emit the version-node names themselves as absolute
            # symbols; they are part of the version definitions, not exports.
            if ndx in ("ABS", "*ABS*") and (name in ref_nodes or name in listed_nodes):
                continue
            unversioned.append(name)
        elif is_default:
            if ndx in ("ABS", "*ABS*") and name == node:
                continue
            have_default.add((name, node))
        else:
            have_nondefault.add((name, node))

    problems = []
    for name, node in sorted(expected_default - have_default):
        if (name, node) in have_nondefault:
            problems.append(f"not default: {name}@{node} is exported, {name}@@{node} expected")
        else:
            problems.append(f"missing: {name}@@{node}")

    for name, node in sorted(have_default - expected_default):
        if node in newer_nodes and (name, node) in listed:
            continue
        if node in newer_nodes:
            problems.append(f"unlisted: {name}@@{node} is not in {exports_path}")
        else:
            problems.append(f"unexpected export: {name}@@{node}")

    for name, node in sorted(have_nondefault - expected_nondefault):
        problems.append(f"unexpected non-default export: {name}@{node}")

    for name in sorted(unversioned):
        problems.append(f"unversioned export: {name}")

    stats = (len(expected_default), len(have_default), len(have_nondefault), newer_nodes)
    return problems, stats


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="the built shared library")
    ap.add_argument("--expect", required=True, help="reference *.symbols file")
    ap.add_argument("--exports", required=True, help="the crate's exports.txt")
    args = ap.parse_args(argv)
    try:
        problems, (n_expect, n_default, n_nondefault, newer) = check(
            args.lib, args.expect, args.exports
        )
    except (OSError, ValueError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"check_symbols: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"check_symbols: {args.lib}: {len(problems)} problem(s) against {args.expect}:")
        for p in problems:
            print(f"  {p}")
        return 1
    print(
        f"check_symbols: {args.lib}: OK ({n_expect} reference symbols present as default; "
        f"{n_default} default and {n_nondefault} non-default exports; "
        f"newer nodes allowed: {', '.join(newer) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
