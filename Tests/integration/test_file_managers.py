"""File managers browse a mount without downloading it (issue 11, item 5).

On a folder of 208 files of mixed types (mixed_tree.py: PNG, JPEG, PDF, MP3, MP4, MKV, ZIP,
text, names without an extension, 8 large files of 5-20 MiB), served by `docfs serve`, whose
request log says how many bytes each GET sent:

- GIO (what Nautilus, Thunar, Nemo and `gio` use): `gio list -a '*'` of every folder and
  `gio info` of every file download nothing for a file whose name tells its type. GIO sniffs
  the others (no extension, `.dat`, `.json`): it reads their first 4 KiB (GLib 2.74), which costs the
  file if it is small (under --whole-file-limit) or a 128 KiB head if it is large, never a
  large file whole.
- Thumbnailers and indexers (`--no-fetch-for`, a default list) get content only for files
  that are local already: opening a placeholder fails with EACCES and costs the store
  nothing; a file open elsewhere or pinned reads as usual, and a sparse copy gives them the
  bytes it holds and no more.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import wait_until
from mixed_tree import make_mixed_tree

pytestmark = pytest.mark.fuse

MiB = 1 << 20
WHOLE_FILE_LIMIT = 1 * MiB   # docfs mount's default --whole-file-limit
HEAD = 128 * 1024            # what open() of a larger file fetches first

# Names GIO cannot type without looking inside (glob unknown or ambiguous): it sniffs these.
SNIFFED_SUFFIXES = (".dat", ".json")
SNIFFED_NAMES = {"LICENSE", "TODO", "notes", "disk-image"} | {f"IMG_{9000 + i}" for i in range(4)}


def sniffed_by_gio(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(SNIFFED_SUFFIXES) or name in SNIFFED_NAMES


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed") / "store"
    return root, make_mixed_tree(root)


def bytes_by_file(server, since: int = 0) -> dict[str, int]:
    """Bytes sent per path by the GETs logged after the first `since` requests."""
    sent: dict[str, int] = {}
    for r in server.requests()[since:]:
        if r.method == "GET":
            sent[r.path.lstrip("/")] = sent.get(r.path.lstrip("/"), 0) + (r.bytes or 0)
    return sent


def run_all(commands, timeout=60):
    for command in commands:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)


# A process (or one thread of it) named as the arguments say opens a file and reads a range:
# prints {"open": errno} or {"read": [sha256, length]} or {"read_error": errno}.
NAMED_READER = r"""
import ctypes, hashlib, json, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def name(n):
    assert libc.prctl(15, ctypes.c_char_p(n.encode()), 0, 0, 0) == 0  # PR_SET_NAME
process_name, thread_name, path, offset, count = sys.argv[1:6]
name(process_name)
result = {}
def reader():
    if thread_name != "-":
        name(thread_name)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        result["open"] = e.errno
        return
    try:
        data = os.pread(fd, int(count), int(offset))
        result["read"] = [hashlib.sha256(data).hexdigest(), len(data)]
    except OSError as e:
        result["read_error"] = e.errno
    finally:
        os.close(fd)
t = threading.Thread(target=reader)
t.start()
t.join()
print(json.dumps(result))
"""


def read_as(process_name: str, path, offset: int = 0, count: int = 1 << 30, thread_name: str = "-") -> dict:
    out = subprocess.run([sys.executable, "-c", NAMED_READER, process_name, thread_name, str(path), str(offset), str(count)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def digest(data: bytes) -> list:
    return [hashlib.sha256(data).hexdigest(), len(data)]


def named_copy_of_cat(tmp_path: Path, name: str) -> str:
    """/bin/cat under another name: its process is called that (comm, argv[0])."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    shutil.copy("/bin/cat", tools / name)
    return str(tools / name)


@pytest.mark.skipif(shutil.which("gio") is None, reason="gio (libglib2.0-bin) is not installed: run Tests/support/setup.sh")
def test_gio_lists_and_inspects_208_files_for_the_heads_of_the_untyped_ones_only(mixed, docfs_serve, mount):
    root, sizes = mixed
    server = docfs_serve(root)
    m = mount(server.url)
    folders = sorted({str(m / Path(rel).parent) for rel in sizes} | {str(m.path)})
    files = [str(m / rel) for rel in sorted(sizes)]
    store_bytes = sum(sizes.values())

    start = time.monotonic()
    run_all([["gio", "list", "-a", "*", folder] for folder in folders])
    m.wait_downloads_done()   # barrier: what they fetched (a read-ahead too) is in the log
    listed = bytes_by_file(server)
    since = len(server.requests())
    run_all([["gio", "info", path] for path in files])
    m.wait_downloads_done()
    inspected = bytes_by_file(server, since)
    elapsed = time.monotonic() - start
    print(f"\ngio list -a '*' of {len(folders)} folders: {sum(listed.values()):,} bytes of {len(listed)} files; "
          f"then gio info of {len(files)} files ({elapsed:.1f} s in all): {sum(inspected.values()):,} bytes of "
          f"{len(inspected)} files; the store holds {store_bytes:,} bytes")

    for what, sent in (("gio list -a '*'", listed), ("gio info", inspected)):
        typed = {rel: n for rel, n in sent.items() if not sniffed_by_gio(rel)}
        assert not typed, f"{what} downloaded files whose names tell their type: {typed}"
        for rel, n in sent.items():
            bound = sizes[rel] if sizes[rel] <= WHOLE_FILE_LIMIT else 2 * HEAD
            assert n <= bound, f"{what}: sniffing {rel} ({sizes[rel]:,} bytes) cost {n:,} bytes, more than {bound:,}"
    sniffable = [rel for rel in sizes if sniffed_by_gio(rel)]
    assert set(listed) <= set(sniffable) and len(sniffable) < len(sizes) // 5
    # Every large file GIO sniffed cost a head, never the file; all of it together a sliver of the store.
    assert sum(inspected.values()) <= len(sniffable) * WHOLE_FILE_LIMIT
    assert sum(inspected.values()) < store_bytes / 10
    assert not [rel for rel in inspected if sizes[rel] > WHOLE_FILE_LIMIT and inspected[rel] >= sizes[rel]]


def test_thumbnailers_and_indexers_get_only_what_is_local(mixed, docfs_serve, mount, tmp_path):
    root, sizes = mixed
    server = docfs_serve(root)
    m = mount(server.url)  # the default --no-fetch-for list
    pngs = sorted(rel for rel in sizes if rel.startswith("Pictures/photo-"))

    # A thumbnailer (a copy of cat under a thumbnailer's name) meets a placeholder: EACCES, no GET.
    thumbnailer = named_copy_of_cat(tmp_path, "ffmpegthumbnailer")
    out = subprocess.run([thumbnailer, str(m / pngs[0])], capture_output=True, timeout=30)
    assert out.returncode != 0 and b"Permission denied" in out.stderr, out
    assert read_as("ffmpegthumbnailer", m / pngs[1]) == {"open": errno.EACCES}
    # A thread inside a process named as an indexer (tumblerd runs its plugins in threads).
    assert read_as("tumblerd", m / pngs[2], thread_name="png-plugin") == {"open": errno.EACCES}
    # The real gdk-pixbuf thumbnailer, where installed, over every PNG of the folder.
    if shutil.which("gdk-pixbuf-thumbnailer"):
        run_all([["gdk-pixbuf-thumbnailer", "-s", "128", str(m / rel), str(tmp_path / f"thumb-{i}.png")]
                 for i, rel in enumerate(pngs)])
        assert not list(tmp_path.glob("thumb-*.png")), "a thumbnail was made of a placeholder"
    m.wait_downloads_done()   # barrier: a download they caused would be in the log by then
    assert bytes_by_file(server) == {}, f"placeholders were downloaded for thumbnailers: {bytes_by_file(server)}"

    # Anyone else is served, as always (the control: same file, another process name).
    data = (root / pngs[1]).read_bytes()
    assert read_as("myviewer", m / pngs[1]) == {"read": digest(data)}
    wait_until(lambda: bytes_by_file(server) == {pngs[1]: len(data)}, 10,
               f"one GET of {pngs[1]} for the viewer (have: {bytes_by_file(server)})")

    # A file open elsewhere is local: the thumbnailer reads it, and nothing more is fetched.
    held = pngs[3]
    with open(m / held, "rb") as reader:
        assert reader.read() == (root / held).read_bytes()
        gets = len(server.gets(held))
        out = subprocess.run([thumbnailer, str(m / held)], capture_output=True, timeout=30)
        assert out.returncode == 0 and out.stdout == (root / held).read_bytes(), out.stderr
        assert len(server.gets(held)) == gets

    # A pinned file is local: the same.
    pinned = pngs[4]
    subprocess.run(["setfattr", "-n", "user.docfs.pinned", "-v", "1", str(m / pinned)], check=True, timeout=30)
    wait_until(lambda: os.getxattr(m / pinned, "user.docfs.state").decode() == "pinned", 20, f"{pinned} to be pinned and local")
    gets = len(server.gets(pinned))
    assert read_as("tracker-extract-3", m / pinned) == {"read": digest((root / pinned).read_bytes())}
    assert len(server.gets(pinned)) == gets == 1

    # A large file open elsewhere is a sparse copy: its head is there to read, the rest is not
    # fetched for the thumbnailer.
    large = "Videos/holiday.mp4"
    body = (root / large).read_bytes()
    with open(m / large, "rb") as reader:
        assert reader.read(4096) == body[:4096]
        m.wait_downloads_done()   # barrier: the head and its read-ahead have come
        before = bytes_by_file(server).get(large, 0)
        assert read_as("totem-video-thumbnailer", m / large, 0, 4096) == {"read": digest(body[:4096])}
        assert read_as("totem-video-thumbnailer", m / large, 15 * MiB, 4096) == {"read_error": errno.EACCES}
        m.wait_downloads_done()   # barrier: a download they caused would be in the log by then
        assert bytes_by_file(server).get(large, 0) == before < 4 * MiB


def test_no_fetch_for_names_its_own_list_and_empty_blocks_nobody(mixed, docfs_serve, mount, tmp_path):
    root, sizes = mixed
    server = docfs_serve(root)
    first, second, third = "Documents/notes-01.txt", "Documents/notes-02.txt", "Documents/notes-03.txt"

    m = mount(server.url, "--no-fetch-for", "my-indexer, a-very-long-indexer-name")
    assert read_as("my-indexer", m / first) == {"open": errno.EACCES}
    # The kernel keeps 15 bytes of a name; a longer name given to --no-fetch-for still matches.
    assert read_as("a-very-long-indexer-name", m / first) == {"open": errno.EACCES}
    assert server.gets(first) == []
    # Its own list replaces the default one.
    assert read_as("ffmpegthumbnailer", m / second) == {"read": digest((root / second).read_bytes())}
    assert m.unmount().returncode == 0

    m = mount(server.url, "--no-fetch-for", "")
    assert read_as("ffmpegthumbnailer", m / third) == {"read": digest((root / third).read_bytes())}
    assert read_as("tracker-extract-3", m / first) == {"read": digest((root / first).read_bytes())}
