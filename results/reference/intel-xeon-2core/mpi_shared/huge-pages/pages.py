"""One process, no MPI: the same streaming pass on NumPy arrays and on files of directories.

    python pages.py /dev/shm /mnt/hugeshm [--reverse]

Makes two 256 MiB float32 arrays of each kind (NumPy's own; a file in each directory, made
as ``ring.mpi_shared`` makes a part: ``posix_fallocate`` then ``mmap``), then times 11
interleaved passes over each: tile by tile (512 KiB), ``a += b`` then ``b[:] = a``.
Prints each kind's median and spread (ms). ``--reverse`` makes the arrays in reverse order.
"""

import mmap
import os
import statistics
import sys
import time

import numpy as np

BYTES = 256 << 20
COUNT = BYTES // 4
TILE = 128 * 1024


def in_directory(directory):
    path = os.path.join(directory, f"pages-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.posix_fallocate(fd, 0, BYTES)
        memory = mmap.mmap(fd, BYTES)
    finally:
        os.close(fd)
        os.unlink(path)
    return np.frombuffer(memory, np.float32)


def main(argv):
    directories = [a for a in argv if a != "--reverse"]
    kinds = {"numpy": lambda: np.empty(COUNT, np.float32)}
    kinds.update({d: (lambda d=d: in_directory(d)) for d in directories})
    if "--reverse" in argv:
        kinds = dict(reversed(list(kinds.items())))
    arrays = {}
    for kind, make in kinds.items():
        a, b = make(), make()
        a[:], b[:] = 1, 2
        arrays[kind] = (a, b)
    times = {kind: [] for kind in kinds}
    for _ in range(11):
        for kind, (a, b) in arrays.items():
            start = time.perf_counter()
            for s in range(0, COUNT, TILE):
                np.add(a[s : s + TILE], b[s : s + TILE], out=a[s : s + TILE])
                b[s : s + TILE] = a[s : s + TILE]
            times[kind].append((time.perf_counter() - start) * 1e3)
    for kind, values in times.items():
        spread = f"{min(values):.1f}-{max(values):.1f}"
        print(f"{kind:16s} median {statistics.median(values):6.1f} ms  ({spread})")


if __name__ == "__main__":
    main(sys.argv[1:])
