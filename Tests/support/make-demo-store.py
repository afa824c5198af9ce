#!/usr/bin/env python3
"""Creates the demo store for `make run`: a small tree of sample documents.

Usage: make-demo-store.py DIR   (does nothing if DIR already exists)

Nested folders, a text file, a Markdown file, a PNG image (drawn here, no download),
an 8 MiB file of pseudo-random bytes, a name with spaces and one with unicode.
"""
import os
import random
import struct
import sys
import zlib


def png(width, height, pixel):
    """A minimal RGB PNG; pixel(x, y) -> (r, g, b)."""
    rows = b"".join(
        b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height)
    )

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-demo-store.py DIR")
    root = sys.argv[1]
    if os.path.exists(root):
        return
    tmp = root.rstrip("/") + ".tmp"
    if os.path.exists(tmp):
        import shutil
        shutil.rmtree(tmp)

    write(f"{tmp}/README.txt",
          "This is the docfs demo store.\n"
          "Every file here shows up in the mount as a placeholder: real size and date,\n"
          "no content on disk until you open it.\n")
    write(f"{tmp}/Notes/meeting notes.md",
          "# Meeting notes\n\n- placeholders for everything\n- download on open\n- evict on last close\n")
    write(f"{tmp}/Notes/2024/Q1/plan.md", "# Plan\n\n1. Read path\n2. Write path\n3. S3\n")
    write(f"{tmp}/Notes/2024/Q2/résumé 日本.txt", "Unicode names work too: résumé, 日本, Ωμέγα.\n")
    write(f"{tmp}/Pictures/gradient.png",
          png(256, 128, lambda x, y: (x, (y * 2) & 0xFF, (255 - x) & 0xFF)))
    rng = random.Random(42)
    write(f"{tmp}/Archive/random 8MiB.bin", rng.randbytes(8 * 1024 * 1024))
    write(f"{tmp}/Archive/empty.txt", b"")
    os.rename(tmp, root)
    print(f"created demo store in {root}")


if __name__ == "__main__":
    main()
