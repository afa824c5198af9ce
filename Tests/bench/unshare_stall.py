#!/usr/bin/env python3
"""Reads while a big file is written during its own upload: does a reader stall?

A closed file goes up from a snapshot that shares the copy's file (a hard link); the next write
gives the copy a file of its own, which on ext4 (no reflink) means copying every byte. A reader
of the same file must not wait for that copy. One round: a writer changes one byte and closes (the
upload starts); while the file is `uploading`, a reader opens it and keeps reading 4 KiB at
random offsets (past the kernel's page cache: POSIX_FADV_DONTNEED before each read, so every
read reaches docfs), and the writer changes another byte (the copy). Reported per round: how long the second
write took, the longest and the median read meanwhile, and how many reads there were.

    DOCFS_BIN=.build/release/docfs python3 Tests/bench/unshare_stall.py [--mib 256] [--rounds 5]
"""
import argparse, os, random, statistics, sys, tempfile, threading, time, types

sys.path.insert(0, os.path.dirname(__file__))
from clients import Docfs  # noqa: E402
from procs import wait_until  # noqa: E402


def state_of(path):
    try:
        return os.getxattr(path, "user.docfs.state").decode()
    except OSError:
        return "?"


def reader(path, size, stop, latencies):
    fd = os.open(path, os.O_RDONLY)
    try:
        while not stop.is_set():
            offset = random.randrange(0, size - 4096) & ~4095
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.monotonic()
            os.pread(fd, 4096, offset)
            latencies.append((start, time.monotonic() - start))
    finally:
        os.close(fd)


def write_byte(path, offset):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes([random.randrange(256)]), offset)
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    docfs = os.environ.get("DOCFS_BIN", ".build/release/docfs")
    work = tempfile.mkdtemp(prefix="docfs-unshare-")
    store = os.path.join(work, "store")
    os.mkdir(store)
    block = os.urandom(1 << 20)
    with open(os.path.join(store, "big.bin"), "wb") as f:
        for _ in range(args.mib):
            f.write(block)
    size = args.mib << 20
    rows = []
    with Docfs(types.SimpleNamespace(url=store, kind="local"), work, docfs) as mnt:
        path = os.path.join(mnt, "big.bin")
        with open(path, "rb") as f:  # the whole copy, local before the rounds
            while f.read(1 << 22):
                pass
        for _ in range(args.rounds):
            write_byte(path, 0)
            wait_until(lambda: state_of(path) == "uploading", 60, "the upload to start", interval=0.001)
            stop, latencies = threading.Event(), []
            thread = threading.Thread(target=reader, args=(path, size, stop, latencies))
            thread.start()
            try:
                wait_until(lambda: len(latencies) >= 20, 60, "the reader to read")
                start = time.monotonic()
                write_byte(path, 1)
                end = time.monotonic()
                time.sleep(0.05)
            finally:
                stop.set()
                thread.join()
            during = [took for at, took in latencies if at < end and at + took > start]
            during.sort()
            rows.append((end - start, during[-1] if during else 0.0, during[len(during) // 2] if during else 0.0, len(during)))
            wait_until(lambda: state_of(path) in ("local", "placeholder"), 120, "the uploads to end", interval=0.05)
    print(f"{'write during upload':>20}  {'longest read meanwhile':>22}  {'median read':>12}  reads")
    for took, longest, median, count in rows:
        print(f"{took * 1000:>17.1f} ms  {longest * 1000:>19.1f} ms  {median * 1000:>9.2f} ms  {count:>5}")
    print(f"medians: write {statistics.median(r[0] for r in rows) * 1000:.1f} ms, "
          f"longest read {statistics.median(r[1] for r in rows) * 1000:.1f} ms, "
          f"median read {statistics.median(r[2] for r in rows) * 1000:.2f} ms, reads {statistics.median(r[3] for r in rows):.0f}")


if __name__ == "__main__":
    main()
