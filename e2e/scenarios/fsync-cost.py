#!/usr/bin/env python3
"""What one fdatasync costs on this disk, by how the file was laid out before the write.

    python3 e2e/scenarios/fsync-cost.py [DIR] [--rounds N] [--bytes B]

Each round writes B bytes (default 160 KiB: a sync group of twenty 8 KB records) at the next
offset of one file and times the fdatasync that follows. Three layouts:

  append     the file grows with each write (how levee's journal segments grow today)
  fallocate  the file's blocks are allocated up front but never written (unwritten extents)
  overwrite  the file was written and synced once before (how a recycled segment would be)

On ext4 the first two make each fdatasync commit the filesystem journal too (the file's size or
its extents changed); the third flushes data only. docs/benchmarks.md ("What bounds 8 KB sync")
quotes a run. DIR defaults to the current directory; the file is removed afterwards. Do not run it
next to a benchmark: it competes for the same disk.
"""
import argparse
import os
import sys
import time


def one(path, layout, rounds, size):
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        total = rounds * size
        if layout == "fallocate":
            os.posix_fallocate(fd, 0, total)
        elif layout == "overwrite":
            chunk = b"\0" * (1 << 20)
            done = 0
            while done < total:
                done += os.write(fd, chunk[: min(len(chunk), total - done)])
        os.fsync(fd)
        buf = os.urandom(size)
        times = []
        for i in range(rounds):
            os.pwrite(fd, buf, i * size)
            t = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.remove(path)
    times.sort()
    mean = sum(times) / len(times)
    p50 = times[len(times) // 2]
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(f"{layout:9s}  mean {mean * 1e6:6.0f} us  p50 {p50 * 1e6:6.0f} us  p99 {p99 * 1e6:6.0f} us")
    return mean


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=".")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--bytes", type=int, default=160 * 1024)
    a = ap.parse_args()
    if a.rounds < 10 or a.bytes < 512:
        sys.exit("fsync-cost: --rounds must be at least 10 and --bytes at least 512")
    if not os.path.isdir(a.dir):
        sys.exit(f"fsync-cost: {a.dir} is not a directory")
    path = os.path.join(a.dir, f".fsync-cost.{os.getpid()}")
    print(f"{a.rounds} rounds of {a.bytes} bytes + fdatasync in {os.path.abspath(a.dir)}")
    means = {}
    # Twice each, interleaved, so a drift in the disk's speed shows.
    for layout in ["append", "fallocate", "overwrite", "append", "fallocate", "overwrite"]:
        means.setdefault(layout, []).append(one(path, layout, a.rounds, a.bytes))
    base = sum(means["append"]) / 2
    for layout in ["fallocate", "overwrite"]:
        m = sum(means[layout]) / 2
        print(f"{layout}: {base / m:.2f}x the syncs per second of append")


if __name__ == "__main__":
    main()
