#!/usr/bin/env python3
"""The markdown table of a VM bench (bench/vm.sh, bench/vm2.sh).

    vm_table.py ROWS TITLE COLUMNS RATIOS

ROWS: lines ROW<TAB>DEVICE<TAB>VALUE (other lines are ignored).
COLUMNS: "dev=Header;..." the devices shown, in order.
RATIOS: "ours/theirs=Header;..." one column of ratios each, oriented so
that above 1.00x means ours does better (rows ending ", us" are times).
"""
import sys


def num(v):
    try:
        return float(v)
    except ValueError:
        return None


def fmt(v):
    x = num(v)
    if x is None:
        return v
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def ratio(row, ours, theirs):
    a, b = num(ours), num(theirs)
    if a is None or b is None or a == 0 or b == 0:
        return ""
    r = b / a if row.endswith(", us") else a / b
    return f"{r:.2f}x"


def pairs(spec):
    return [tuple(p.split("=", 1)) for p in spec.split(";") if p]


def main():
    path, title, cols, ratios = sys.argv[1:5]
    cols, ratios = pairs(cols), pairs(ratios)
    rows, order = {}, []
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3:
            continue
        row, dev, v = parts
        if row not in rows:
            rows[row] = {}
            order.append(row)
        rows[row][dev] = v
    heads = [title] + [h for _, h in cols] + [h for _, h in ratios]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for row in order:
        d = rows[row]
        cells = [row] + [fmt(d.get(c, "")) for c, _ in cols]
        for spec, _ in ratios:
            ours, theirs = spec.split("/")
            cells.append(ratio(row, d.get(ours, ""), d.get(theirs, "")))
        print("| " + " | ".join(cells) + " |")
    print()
    print("Ratios are rsw's figure against the device's, oriented so that above "
          "1.00x means rsw does better (for latencies: theirs / ours).")


if __name__ == "__main__":
    main()
