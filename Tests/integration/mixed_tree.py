"""A folder as a file manager meets it: 200 small and medium files of mixed types and a few
large media files, made here with the standard library only (no image library, no download).

Each file starts with the bytes its type really starts with (PNG and ZIP are complete and
valid, JPEG/PDF/MP3/MP4/MKV carry their real headers), so content sniffing (`file`, GIO's
`g_content_type_guess`) and thumbnailers see what they would see in a real folder. Some names
carry no extension or one that does not tell the type (`README`, `IMG_0042`, `.dat`), which is
what makes GIO sniff. Used by test_file_managers.py and Tests/screenshot/file_manager.py.
"""
from __future__ import annotations

import io
import json
import random
import struct
import sys
import zipfile
import zlib
from pathlib import Path

MiB = 1 << 20


def png(width: int, height: int, seed: int) -> bytes:
    """A valid RGB PNG: a gradient tinted by `seed`."""
    tint = (seed * 53) & 0xFF
    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in (x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), tint))
        for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b"")


def jpeg_like(size: int, rng: random.Random) -> bytes:
    """JFIF and EXIF headers (SOI, APP0, APP1) and entropy-coded-looking bytes to `size`."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    exif = b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x00"
    app1 = b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif
    head = b"\xff\xd8" + app0 + app1
    return head + rng.randbytes(max(0, size - len(head) - 2)) + b"\xff\xd9"


def pdf_like(pages: int) -> bytes:
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"]
    body = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
    offsets = []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(body))
        body += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    body += b"% " + b"filler text of a long report. " * (pages * 40) + b"\n"
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    body += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return body


def mp3_like(size: int, rng: random.Random) -> bytes:
    """An ID3v2.4 tag, then MPEG-1 layer III frames (128 kbit/s, 44.1 kHz: 417 bytes each)."""
    body = bytearray(rng.randbytes(size))
    for offset in range(0, size, 417):
        body[offset:offset + 4] = b"\xff\xfb\x90\x64"
    tag = b"ID3\x04\x00\x00" + bytes([0, 0, 0, 10]) + b"TIT2" + bytes([0, 0, 0, 0, 0, 0])
    return (tag + bytes(body))[:size]


def mp4_like(size: int, rng: random.Random) -> bytes:
    """An ISO BMFF file: ftyp, then one mdat box holding the rest."""
    ftyp = struct.pack(">I", 24) + b"ftypisom" + struct.pack(">I", 512) + b"isomiso2"
    mdat_size = max(8, size - len(ftyp))
    return ftyp + struct.pack(">I", mdat_size) + b"mdat" + rng.randbytes(mdat_size - 8)


def mkv_like(size: int, rng: random.Random) -> bytes:
    """An EBML header naming the matroska doc type, then a segment's bytes."""
    head = bytes.fromhex("1a45dfa3a34286810142f7810142f2810442f381084282886d6174726f736b61")
    return head + rng.randbytes(size - len(head))


def zip_file(rng: random.Random, members: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(members):
            archive.writestr(f"part-{i}.txt", f"member {i}\n" * rng.randint(10, 400))
    return out.getvalue()


def make_mixed_tree(root: Path, seed: int = 11) -> dict[str, int]:
    """Writes the tree under `root` (which must not exist); returns {relative path: size}."""
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    for i in range(40):
        files[f"Pictures/photo-{i:03}.png"] = png(rng.randint(24, 96), rng.randint(24, 96), i)
    for i in range(30):
        files[f"Pictures/Camera/IMG_{i:04}.jpg"] = jpeg_like(rng.randint(40_000, 700_000), rng)
    for i in range(4):
        files[f"Pictures/Camera/IMG_{9000 + i}"] = jpeg_like(rng.randint(300_000, 900_000), rng)  # no extension
    for i in range(25):
        files[f"Documents/report-{i:02}.pdf"] = pdf_like(rng.randint(1, 600))
    for i in range(25):
        files[f"Documents/notes-{i:02}.txt"] = (f"Notes {i}\n" + "Lorem ipsum dolor sit amet. " * rng.randint(5, 2000)).encode()
    for i in range(10):
        files[f"Documents/data-{i:02}.csv"] = "".join(f"{r},{rng.random():.6f},{rng.randint(0, 10**6)}\n"
                                                       for r in range(rng.randint(10, 5000))).encode()
    for i in range(10):
        files[f"Documents/config-{i:02}.json"] = json.dumps({"index": i, "values": list(range(rng.randint(1, 300)))}).encode()
    for name in ("README", "LICENSE", "Makefile", "notes", "TODO"):
        files[f"Documents/{name}"] = (f"{name}\n\n" + "plain text without an extension\n" * rng.randint(1, 200)).encode()
    for i in range(25):
        files[f"Music/track-{i:02}.mp3"] = mp3_like(rng.randint(200_000, 900_000), rng)
    for i in range(10):
        files[f"Archives/bundle-{i:02}.zip"] = zip_file(rng, rng.randint(1, 20))
    for i in range(8):
        files[f"Archives/blob-{i:02}.dat"] = rng.randbytes(rng.randint(10_000, 600_000))
    for i in range(8):
        files[f"Videos/clip-{i:02}.mp4"] = mp4_like(rng.randint(100_000, 900_000), rng)
    # The large ones: streamed by range above --whole-file-limit (1 MiB).
    large = {"Videos/holiday.mp4": mp4_like(20 * MiB, rng), "Videos/talk.mkv": mkv_like(12 * MiB, rng),
             "Videos/screen-recording.mp4": mp4_like(9 * MiB, rng), "Music/live-set.mp3": mp3_like(15 * MiB, rng),
             "Archives/backup.zip": zip_file(rng, 3) + rng.randbytes(6 * MiB),
             "Pictures/panorama.png": png(64, 64, 99) + rng.randbytes(5 * MiB),
             "Documents/scan.pdf": pdf_like(1) + rng.randbytes(8 * MiB), "Archives/disk-image": rng.randbytes(7 * MiB)}
    files.update(large)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return {rel: len(data) for rel, data in files.items()}


if __name__ == "__main__":
    sizes = make_mixed_tree(Path(sys.argv[1]))
    print(f"{len(sizes)} files, {sum(sizes.values()) / MiB:.1f} MiB in {sys.argv[1]}")
