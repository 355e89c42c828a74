"""A two-rank MPI job for ctests/tests/mpi_ucx.sh: ping-pong of every size
class UCX treats differently (short, bcopy, zcopy, rendezvous), each payload
checked byte for byte on both sides, an allreduce, and a latency and
bandwidth figure for the log. Exits non-zero on any mismatch."""

import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if comm.Get_size() != 2:
    sys.exit("needs exactly 2 ranks")
peer = 1 - rank


def pattern(size, seed):
    # Distinct per size and direction, so a stale or misplaced buffer shows.
    return bytes((i * 7 + seed + size) & 0xFF for i in range(size)) if size < 4096 else (
        bytes(range(256)) * (size // 256 + 1))[seed % 251:seed % 251 + size]


bad = 0
for size in (0, 1, 8, 64, 1024, 8192, 65536, 1 << 20, 4 << 20):
    out = pattern(size, 1 + rank)
    want = pattern(size, 1 + peer)
    got = bytearray(size)
    for it in range(3):
        if rank == 0:
            comm.Send([out, MPI.BYTE], dest=peer, tag=size & 0x7FFF)
            st = MPI.Status()
            comm.Recv([got, MPI.BYTE], source=peer, tag=size & 0x7FFF, status=st)
        else:
            st = MPI.Status()
            comm.Recv([got, MPI.BYTE], source=peer, tag=size & 0x7FFF, status=st)
            comm.Send([out, MPI.BYTE], dest=peer, tag=size & 0x7FFF)
        if st.Get_count(MPI.BYTE) != size or bytes(got) != want:
            print(f"rank {rank}: size {size} iteration {it}: payload mismatch "
                  f"(count {st.Get_count(MPI.BYTE)})", flush=True)
            bad += 1
            break
        got[:] = bytes(size)

total = comm.allreduce(rank + 40, op=MPI.SUM)
if total != 81:
    print(f"rank {rank}: allreduce gave {total}, want 81", flush=True)
    bad += 1

# Figures for the log only (never asserted).
buf = bytearray(8)
n = 2000
comm.Barrier()
t0 = time.perf_counter()
for _ in range(n):
    if rank == 0:
        comm.Send([buf, MPI.BYTE], dest=peer)
        comm.Recv([buf, MPI.BYTE], source=peer)
    else:
        comm.Recv([buf, MPI.BYTE], source=peer)
        comm.Send([buf, MPI.BYTE], dest=peer)
lat = (time.perf_counter() - t0) / n / 2 * 1e6
big = bytearray(1 << 20)
comm.Barrier()
t0 = time.perf_counter()
for _ in range(50):
    if rank == 0:
        comm.Send([big, MPI.BYTE], dest=peer)
    else:
        comm.Recv([big, MPI.BYTE], source=peer)
comm.Barrier()
bw = 50 * len(big) / (time.perf_counter() - t0) / 1e6

bad = comm.allreduce(bad, op=MPI.SUM)
if rank == 0:
    print(f"mpi pingpong: {'ok' if bad == 0 else 'FAILED'}; 8 B one-way {lat:.1f} us "
          f"(python), 1 MiB {bw:.0f} MB/s", flush=True)
sys.exit(1 if bad else 0)
