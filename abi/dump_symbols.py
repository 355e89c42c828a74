#!/usr/bin/env python3
"""Prints a shared library's defined dynamic symbols in the format of
abi/rdma-core-44/*.symbols: name, version node, default/non-default (or
"unversioned" for the version node entries themselves), type, size.

    abi/dump_symbols.py /usr/lib/x86_64-linux-gnu/libibverbs.so.1
"""
import re
import subprocess
import sys


def main(path):
    out = subprocess.run(['readelf', '--dyn-syms', '-W', path],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        p = line.split()
        if len(p) < 8 or not p[0].endswith(':') or p[6] == 'UND':
            continue
        typ, bind, name = p[3], p[4], p[7]
        if bind not in ('GLOBAL', 'WEAK'):
            continue
        size = int(p[2], 0) if not p[2].startswith('0x') else int(p[2], 16)
        m = re.match(r'^([^@]+)(@@?)(.+)$', name)
        if m:
            sym, at, ver = m.groups()
            rows.append((sym, ver, 'default' if at == '@@' else 'nondefault', typ, size))
        else:
            # A version node's own symbol (type OBJECT, size 0).
            rows.append((name, '-', 'unversioned', typ, size))
    print('# symbol\tversion\tdefault\ttype\tsize')
    for r in sorted(rows):
        print('\t'.join(map(str, r)))


if __name__ == '__main__':
    main(sys.argv[1])
