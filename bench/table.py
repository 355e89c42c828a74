#!/usr/bin/env python3
"""bench/run.sh's table: MACHINE RESULTS -> markdown on stdout.

MACHINE holds key=value lines (the machine and the run); RESULTS holds
"key<TAB>value" lines, one per round, value a number or "fail". A figure is
the median of its rounds; rounds that failed are counted beside it."""

import statistics
import sys


def load(path):
    runs = {}
    with open(path) as f:
        for line in f:
            if "\t" not in line:
                continue
            key, value = line.rstrip("\n").split("\t", 1)
            runs.setdefault(key, []).append(value)
    return runs


def median(runs, key):
    """(median or None, how many rounds failed, how many rounds ran)."""
    values = runs.get(key)
    if not values:
        return None, 0, 0
    ok = []
    for v in values:
        try:
            ok.append(float(v))
        except ValueError:
            pass
    return (statistics.median(ok) if ok else None), len(values) - len(ok), len(values)


def num(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def ratio(ours, base):
    if ours is None or base is None or base == 0:
        return ""
    return num(ours / base) + "×"


UNIT = {"ow": "µs", "rt": "µs", "rate": "Mpps", "bw": "GB/s", "bw16": "GB/s"}
PATHS = {"lo": "loopback", "lo-tcp": "loopback, RSW_TRANSPORT=tcp", "veth": "veth, 2 netns"}


def size_label(n):
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def main():
    machine = dict(
        line.rstrip("\n").split("=", 1) for line in open(sys.argv[1]) if "=" in line
    )
    runs = load(sys.argv[2])
    paths = machine.get("paths", "lo").split()
    transport = machine.get("transport", "auto")

    def cell(key, unit, scale=1.0):
        """(text, value) of a measured figure."""
        m, bad, n = median(runs, key)
        if n == 0:
            return "skip", None
        if m is None:
            return "fail", None
        m *= scale
        text = f"{num(m)} {unit}"
        if bad:
            text += f" ({n - bad}/{n} ok)"
        return text, m

    # (perftest/qperf test, key, size, kind)
    tests = [
        ("ib_send_lat", "send_lat", 2, "ow"),
        ("ib_send_lat", "send_lat", 64, "ow"),
        ("ib_write_lat", "write_lat", 2, "ow"),
        ("ib_write_lat", "write_lat", 64, "ow"),
        ("ib_read_lat", "read_lat", 2, "rt"),
        ("ib_read_lat", "read_lat", 64, "rt"),
        ("ib_atomic_lat", "atomic_lat", 8, "rt"),
        ("ib_send_bw (message rate)", "send_bw", 2, "rate"),
        ("ib_atomic_bw (fetch-and-add rate)", "atomic_bw", 8, "rate"),
        ("ib_write_bw", "write_bw", 65536, "bw"),
        ("ib_write_bw", "write_bw", 1048576, "bw"),
        ("ib_read_bw", "read_bw", 65536, "bw"),
        ("ib_read_bw", "read_bw", 1048576, "bw"),
        ("ib_send_bw", "send_bw", 65536, "bw"),
        ("ib_send_bw", "send_bw", 1048576, "bw"),
        ("qperf rc_lat", "rc_lat", 64, "ow"),
        ("qperf rc_rdma_write_lat", "rc_rdma_write_lat", 64, "ow"),
        ("qperf rc_bw", "rc_bw", 65536, "bw"),
        ("ib_send_bw, 16 QPs at once (aggregate message rate)", "send_bw_q16", 2, "rate"),
        ("ib_send_bw, 256 QPs at once (aggregate message rate)", "send_bw_q256", 2, "rate"),
        ("ib_write_bw, 16 QPs at once (aggregate)", "write_bw_q16", 65536, "bw16"),
        ("ib_write_bw, 256 QPs at once (aggregate)", "write_bw_q256", 65536, "bw16"),
    ]

    print(f"Measured {machine.get('date', '?')} by `bench/run.sh` "
          f"(median of {machine.get('runs', '?')} rounds, {machine.get('seconds', '?')} s):")
    print()
    print(f"* machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores"
          + (f" ({machine['virt']} guest)" if machine.get("virt") else "")
          + f", Linux {machine.get('kernel', '?')}, glibc {machine.get('glibc', '?')}")
    print(f"* commit: {machine.get('commit', '?')}; libraries: {machine.get('build', '?')}")
    print(f"* tools: {machine.get('tools', '?')}")
    print(f"* load average: {machine.get('load', '?')}")
    print()
    print("| benchmark | size | path | ours | kernel TCP, same path | ours / TCP "
          "| same-host floor | ours / floor | memcpy | ours / memcpy |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    shm_text, shm = cell("shm", "µs")
    for name, key, size, kind in tests:
        for path in paths:
            if "_q" in key and path != "veth":
                continue  # many QPs: between the namespaces only
            base_path = "lo" if path == "lo-tcp" else path
            unit = UNIT[kind]
            ours_text, ours = cell(f"{key}:{size}:{path}", unit)
            tcp_text = floor_text = mem_text = ""
            tcp = floor = mem = None
            if kind in ("ow", "rt"):
                k = 2 if kind == "rt" else 1
                sp = max(size, 14)  # sockperf's smallest message is 14 B
                t, v = cell(f"sockperf_lat:{sp}:{base_path}", "µs", k)
                what = "sockperf round trip" if k == 2 else "sockperf one-way"
                tcp_text = f"{what} {sp} B: {t}"
                tcp = v
                t, v = cell("shm", "µs", k)
                floor_text = ("shm ping-pong round trip: " if k == 2 else "shm ping-pong one-way: ") + t
                floor = v
            elif kind == "bw16":
                t, tcp = cell(f"iperf3_p16:{size}:{base_path}", "GB/s")
                tcp_text = f"iperf3 -P 16: {t}"
            elif kind == "rate":
                t, tcp = cell(f"sockperf_rate:14:{base_path}", "Mpps")
                tcp_text = f"sockperf 14 B: {t}"
            else:
                t, tcp = cell(f"iperf3:{size}:{base_path}", "GB/s")
                tcp_text = f"iperf3: {t}"
                t, floor = cell(f"pvw:{size}", "GB/s")
                floor_text = f"process_vm_writev: {t}"
                mem_text, mem = cell(f"memcpy:{size}", "GB/s")
            print(f"| {name} | {size_label(size)} | {PATHS[path]} | {ours_text} | {tcp_text} "
                  f"| {ratio(ours, tcp)} | {floor_text} | {ratio(ours, floor)} "
                  f"| {mem_text} | {ratio(ours, mem)} |")

    # The baselines themselves, in the same table.
    base_paths = [p for p in paths if p != "lo-tcp"]
    rows = []
    for path in base_paths:
        for s in (14, 64):
            rows.append((f"sockperf ping-pong, TCP, one-way median", s, path, f"sockperf_lat:{s}:{path}", "µs"))
        for s in (2, 64):
            rows.append(("C ping-pong in rsw's TCP wire layout (two one-way connections, "
                         "framed, poll then recv, early ACK; bench/tcp_pingpong.c), one-way median",
                         s, path, f"tcp_pp:{s}:{path}", "µs"))
        rows.append(("sockperf throughput, TCP, message rate", 14, path, f"sockperf_rate:14:{path}", "Mpps"))
        for s in (65536, 1048576):
            rows.append(("iperf3, TCP", s, path, f"iperf3:{s}:{path}", "GB/s"))
        if path == "veth":
            rows.append(("iperf3 -P 16, TCP, aggregate", 65536, path, f"iperf3_p16:65536:{path}", "GB/s"))
    rows.append(("shm ping-pong (MAP_SHARED page, busy-poll), one-way", 8, "", "shm", "µs"))
    for s in (65536, 1048576):
        rows.append(("memcpy, page-aligned, warm buffers", s, "", f"memcpy:{s}", "GB/s"))
    for s in (65536, 1048576):
        rows.append(("process_vm_writev, parent into child", s, "", f"pvw:{s}", "GB/s"))
    for name, s, path, key, unit in rows:
        t, _ = cell(key, unit)
        print(f"| *baseline:* {name} | {size_label(s)} | {PATHS.get(path, 'same host')} | {t} "
              f"| | | | | | |")
    print()
    if transport != "auto":
        print(f"RSW_TRANSPORT={transport} for the loopback rows.")
        print()


main()
