"""Special files (issue 12): FIFOs, sockets, character and block devices made through a docfs
mount are kept by the store, not only by the catalog. On the local store and on S3 every file
type survives an unmount, a fresh catalog (a new XDG_STATE_HOME: another machine) and a
remount with its type, permission bits, owner and device number; on S3, s3fs on the same bucket
sees what docfs made and docfs sees what s3fs made (an empty object whose x-amz-meta-mode carries
the type bits, x-amz-meta-uid and -gid the owner, x-amz-meta-rdev the device)."""
from __future__ import annotations

import os
import stat

import pytest

from conformance_probe import describe
from helpers import wait_until, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures
from test_s3_s3fs_interop import s3fs_mount  # noqa: F401 - fixture

pytestmark = pytest.mark.fuse

# name -> (how to make it, st_mode type bits, permission bits, device)
ENTRIES = {
    "pipe": (stat.S_IFIFO, 0o640, 0),
    "sock": (stat.S_IFSOCK, 0o600, 0),
    "null": (stat.S_IFCHR, 0o666, os.makedev(1, 3)),
    "loop": (stat.S_IFBLK, 0o660, os.makedev(7, 200)),
}


# The owner every entry is given (chown as root): not the mounting user's, so a store that
# forgot it would show root instead.
OWNER = (1234, 5678)
NAMES = ["dir", "file", "link", *ENTRIES]


def make_every_type(root) -> None:
    (root / "dir").mkdir(mode=0o750)
    (root / "dir").chmod(0o750)
    fd = os.open(root / "file", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o604)
    os.write(fd, b"content\n")
    os.close(fd)
    os.chmod(root / "file", 0o604)
    os.symlink("file", root / "link")
    for name, (kind, mode, device) in ENTRIES.items():
        os.mknod(root / name, kind | mode, device)
        os.chmod(root / name, mode)
    for name in NAMES:
        os.chown(root / name, *OWNER, follow_symlinks=False)


def shown(root) -> dict[str, str]:
    """Each entry's type, mode, owner and device, as stat shows them."""
    return {name: describe(str(root / name)) for name in NAMES}


def owned(description: str, owner=OWNER) -> str:
    """`description` (type, mode, size, device) with the owner stat shows after the mode."""
    words = description.split()
    at = 2 if len(words) > 1 and words[1].startswith("mode=") else 1
    return " ".join(words[:at] + [f"uid={owner[0]}", f"gid={owner[1]}"] + words[at:])


EXPECTED = {
    "dir": "dir mode=0750",
    "file": "file mode=0604 size=8",
    "link": "symlink size=4",
    "pipe": "fifo mode=0640",
    "sock": "socket mode=0600",
    "null": "chr mode=0666 rdev=1,3",
    "loop": "blk mode=0660 rdev=7,200",
}


EXPECTED_OWNED = {name: owned(description) for name, description in EXPECTED.items()}


def test_every_type_survives_a_remount_with_a_fresh_catalog_on_the_local_store(mount, xdg, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount(store)
    make_every_type(m.path)
    assert shown(m.path) == EXPECTED_OWNED
    wait_until(lambda: xattr_state(m / "file") in ("local", "placeholder"), 30, "the upload")
    assert m.unmount().returncode == 0
    # The store has the real thing, owners included.
    assert shown(store) == EXPECTED_OWNED
    xdg.another_machine("fresh")
    again = mount(store)
    assert shown(again.path) == EXPECTED_OWNED
    # A FIFO on the mount is a FIFO: what goes in comes out, through the kernel.
    assert through_the_pipe(again / "pipe", b"piped") == b"piped"


def test_every_type_survives_a_remount_with_a_fresh_catalog_on_s3(s3, s3_mount, xdg):
    m = s3_mount()
    make_every_type(m.path)
    assert shown(m.path) == EXPECTED_OWNED
    wait_until(lambda: xattr_state(m / "file") in ("local", "placeholder"), 30, "the upload")
    assert m.unmount().returncode == 0
    # Never content: each special file is an empty object whose mode says what it is.
    for name, (kind, mode, device) in ENTRIES.items():
        head = s3.client.head_object(Bucket=s3.name, Key=name)
        assert head["ContentLength"] == 0, name
        assert int(head["Metadata"]["mode"]) == kind | mode, (name, head["Metadata"])
        if device:
            assert int(head["Metadata"]["rdev"]) == device, (name, head["Metadata"])
    for name in ["file", "link", *ENTRIES]:
        head = s3.client.head_object(Bucket=s3.name, Key=name)
        assert (int(head["Metadata"]["uid"]), int(head["Metadata"]["gid"])) == OWNER, (name, head["Metadata"])
    xdg.another_machine("fresh")
    again = s3_mount()
    # A folder on S3 is a key prefix: docfs keeps no mode or owner for it there (a known gap,
    # not this issue's), so another machine sees the default 0755 and the mounting user.
    assert shown(again.path) == EXPECTED_OWNED | {"dir": "dir mode=0755 uid=0 gid=0"}
    # Used, a special file is never content: a FIFO passes bytes through the kernel, and a
    # chmod of one copies its empty object onto itself; no GET of it, no PUT of content.
    s3.mark()
    assert through_the_pipe(again / "pipe", b"piped") == b"piped"
    os.chmod(again / "sock", 0o640)
    specials = {f"/{s3.name}/{name}" for name in ENTRIES}
    touched = [(r.method, r.path) for r in s3.requests() if r.path in specials]
    assert all(method in ("HEAD", "PUT") for method, _ in touched), touched
    assert len([t for t in touched if t[0] == "PUT"]) <= 1, touched  # the chmod's copy onto itself


def test_s3fs_and_docfs_see_each_others_special_files(s3, s3_mount, s3fs_mount, xdg):
    if s3.kind != "moto":
        pytest.skip("s3fs is checked against moto")
    m = s3_mount()
    (m / "by-docfs").mkdir()
    make_every_type(m / "by-docfs")
    wait_until(lambda: xattr_state(m / "by-docfs/file") in ("local", "placeholder"), 30, "the upload")
    assert m.unmount().returncode == 0

    # Debian's s3fs (1.90) keeps no device numbers (it neither writes nor reads
    # x-amz-meta-rdev): between it and docfs, type and mode are compared; docfs's own
    # device numbers are checked above and below.
    s3fs = s3fs_mount()
    seen = shown(s3fs / "by-docfs")
    for name in ENTRIES:
        assert without_rdev(seen[name]) == without_rdev(EXPECTED_OWNED[name]), f"s3fs shows docfs's {name} as {seen[name]!r}"
    (s3fs / "by-s3fs").mkdir()
    other = (4321, 8765)
    for name, (kind, mode, device) in ENTRIES.items():
        os.mknod(s3fs / "by-s3fs" / name, kind | mode, device)
        os.chmod(s3fs / "by-s3fs" / name, mode)
        os.chown(s3fs / "by-s3fs" / name, *other)

    def made_by_s3fs():
        for name, (kind, mode, _) in ENTRIES.items():
            meta = (s3.head(f"by-s3fs/{name}") or {}).get("Metadata", {})
            if (meta.get("uid"), meta.get("gid"), meta.get("mode")) != ("4321", "8765", str(kind | mode)):
                return False
        return True
    wait_until(made_by_s3fs, 30, "s3fs's special files, with their modes and owners, on the bucket")

    xdg.another_machine("reader")
    again = s3_mount()
    seen = shown(again / "by-s3fs")
    for name in ENTRIES:
        assert without_rdev(seen[name]) == without_rdev(owned(EXPECTED[name], other)), f"docfs shows s3fs's {name} as {seen[name]!r}"
    # What docfs made is still what it was, device numbers included, for docfs on another machine.
    assert shown(again / "by-docfs") == EXPECTED_OWNED | {"dir": "dir mode=0755 uid=0 gid=0"}


def through_the_pipe(fifo, data: bytes) -> bytes:
    """Writes `data` into a FIFO and reads it back (both ends non-blocking)."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, data)
        return os.read(reader, len(data) + 10)
    finally:
        os.close(writer)
        os.close(reader)


def without_rdev(description: str) -> str:
    return " ".join(w for w in description.split() if not w.startswith("rdev="))


def test_webdav_keeps_special_files_as_dead_properties_where_the_server_keeps_them(wsgidav_serve, mount, xdg, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    server = wsgidav_serve(store)
    m = mount(server.url)
    for name, (kind, mode, device) in ENTRIES.items():
        os.mknod(m / name, kind | mode, device)
        os.chmod(m / name, mode)
    assert {name: shown_one(m / name) for name in ENTRIES} == {name: EXPECTED[name] for name in ENTRIES}
    assert m.unmount().returncode == 0
    # The server has empty resources; the type is in their dead properties.
    assert all((store / name).stat().st_size == 0 for name in ENTRIES)
    xdg.another_machine("fresh")
    again = mount(server.url)
    assert {name: shown_one(again / name) for name in ENTRIES} == {name: EXPECTED[name] for name in ENTRIES}


def test_webdav_without_dead_properties_keeps_special_files_in_the_catalog(docfs_serve, mount, xdg, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    server = docfs_serve(store)
    m = mount(server.url, "--dir-cache-ttl", "0")
    for name, (kind, mode, device) in ENTRIES.items():
        os.mknod(m / name, kind | mode, device)
        os.chmod(m / name, mode)
    (m / "sub").mkdir()
    os.rename(m / "pipe", m / "sub" / "pipe")
    # Relisted (TTL 0): the server lists empty files, the catalog knows they are what docfs made.
    # A refresh asked before the rename may still show `pipe` at the top once (a known race: a
    # listing cannot tell a name renamed away here since it was asked); the next one does not.
    wait_until(lambda: "pipe" not in os.listdir(m.path), 10, "the refresh after the rename")


    def listings() -> int:
        return sum(r.method == "PROPFIND" and r.path == "/" for r in server.requests())

    for look in range(2):
        assert sorted(os.listdir(m.path)) == sorted(["sub", *[n for n in ENTRIES if n != "pipe"]])
        assert os.listdir(m / "sub") == ["pipe"]
        if look == 0:
            # Barrier: a whole refresh of the top ran before the second look (two more listings
            # started; a folder is listed by one task at a time, which applies its answer first).
            seen = listings()
            wait_until(lambda: os.listdir(m.path) is not None and listings() >= seen + 2, 15,
                       lambda: f"two more listings of / (seen {seen}, now {listings()})")
    assert shown_one(m / "sub" / "pipe") == EXPECTED["pipe"]
    for name in ENTRIES:
        if name != "pipe":
            assert shown_one(m / name) == EXPECTED[name]
    assert m.unmount().returncode == 0
    # Another machine sees what the server has: empty files.
    xdg.another_machine("fresh")
    again = mount(m.store)
    assert shown_one(again / "null").startswith("file "), shown_one(again / "null")
    assert (again / "null").read_bytes() == b""


def shown_one(path) -> str:
    return " ".join(w for w in describe(str(path)).split() if not w.startswith(("uid=", "gid=")))
