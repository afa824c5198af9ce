"""Symbolic links on S3, against moto and SeaweedFS, stored the way s3fs stores them: an object
whose content is the target and whose x-amz-meta-mode carries S_IFLNK. A listing cannot show
that, so docfs asks (HEAD) about each object small enough to be a link, once per version: the
links survive relisting, a remount and a machine with no catalog, and links another client
wrote are links in the mount. `--no-symlinks` turns all of it off."""
from __future__ import annotations

import errno
import os
import stat

import pytest

from conftest import run
from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse

S_IFLNK_0777 = stat.S_IFLNK | 0o777


def link_object(s3, key: str) -> tuple[int, bytes]:
    """(x-amz-meta-mode, content) of a key, read with boto3."""
    head = s3.head(key)
    assert head is not None, f"no object {key!r} in the bucket"
    return int(head["Metadata"].get("mode", "0")), s3.get(key)


def assert_link(path, target: str):
    st = os.lstat(path)
    assert stat.S_ISLNK(st.st_mode), f"{path} is not a link: {oct(st.st_mode)}"
    assert os.readlink(path) == target
    assert st.st_size == len(target.encode())


def test_s3_symlink_is_an_s3fs_link_object_that_stays_a_link(s3, s3_mount, xdg):
    s3.put_many({"docs/target.txt": b"the target\n", "docs/other.txt": b"x" * 100})
    m = s3_mount()
    os.symlink("target.txt", m / "docs/link")
    os.symlink("../docs/target.txt", m / "docs/up-link")
    os.symlink("/absolute/nowhere", m / "dangling")

    assert_link(m / "docs/link", "target.txt")
    assert (m / "docs/link").read_bytes() == b"the target\n", "the kernel follows the link to the file"
    assert (m / "docs/up-link").read_bytes() == b"the target\n"
    with pytest.raises(FileNotFoundError):
        (m / "dangling").read_bytes()
    with pytest.raises(FileExistsError):
        os.symlink("elsewhere", m / "docs/link")

    # On the bucket: s3fs's layout, one object each, nothing else.
    assert link_object(s3, "docs/link") == (S_IFLNK_0777, b"target.txt")
    assert link_object(s3, "docs/up-link") == (S_IFLNK_0777, b"../docs/target.txt")
    assert link_object(s3, "dangling") == (S_IFLNK_0777, b"/absolute/nowhere")

    # A listing sees small files; the links stay links through a relisting and a remount.
    ls = run(["ls", "-la", str(m / "docs")], timeout=30)
    assert ls.returncode == 0 and "link -> target.txt" in ls.stdout, ls.stdout
    assert m.unmount().returncode == 0
    m = s3_mount()
    assert_link(m / "docs/link", "target.txt")
    assert_link(m / "dangling", "/absolute/nowhere")
    assert m.unmount().returncode == 0

    # Another machine, no catalog: the links are found by asking the store about small objects.
    xdg.another_machine("other-machine")
    s3.mark()
    m = s3_mount()
    assert_link(m / "docs/link", "target.txt")
    assert_link(m / "docs/up-link", "../docs/target.txt")
    assert stat.S_ISREG(os.lstat(m / "docs/other.txt").st_mode)
    assert (m / "docs/link").read_bytes() == b"the target\n"
    m.wait_downloads_done()   # barrier: a download more would be in the log by then
    s3.wait_logged()
    # Regular files were looked at with HEAD, never downloaded to find out; a link's target is
    # one small GET.
    assert not s3.content_gets("docs/other.txt"), s3.log_text()
    assert len(s3.content_gets("docs/link")) == 1, s3.log_text()

    # rename and unlink act on the link, never on its target.
    os.rename(m / "docs/link", m / "docs/renamed-link")
    assert_link(m / "docs/renamed-link", "target.txt")
    assert link_object(s3, "docs/renamed-link") == (S_IFLNK_0777, b"target.txt")
    assert s3.head("docs/link") is None
    os.unlink(m / "docs/renamed-link")
    assert s3.head("docs/renamed-link") is None
    assert s3.get("docs/target.txt") == b"the target\n"
    assert m.unmount().returncode == 0


def test_s3_links_written_by_another_client_are_links(s3, s3_mount):
    # As s3fs (or any client following its convention) writes them.
    s3.put_many({"file.txt": b"content"})
    s3.client.put_object(Bucket=s3.name, Key="made-elsewhere", Body=b"file.txt",
                         Metadata={"mode": str(S_IFLNK_0777)})
    s3.client.put_object(Bucket=s3.name, Key="marked-but-too-large", Body=b"y" * 5000,
                         Metadata={"mode": str(S_IFLNK_0777)})
    m = s3_mount()
    names = sorted(os.listdir(m.path))
    assert names == ["file.txt", "made-elsewhere", "marked-but-too-large"], names
    assert_link(m / "made-elsewhere", "file.txt")
    assert (m / "made-elsewhere").read_bytes() == b"content"
    # No link target is that long: the object is shown as the file it is.
    assert stat.S_ISREG(os.lstat(m / "marked-but-too-large").st_mode)

    # Replaced on the bucket by a regular file: a file in the mount after the next listing.
    s3.put("made-elsewhere", b"now a regular file")
    assert m.unmount().returncode == 0
    m = s3_mount()
    # A remount answers from the catalog at once and relists in the background.
    wait_until(lambda: not stat.S_ISLNK(os.lstat(m / "made-elsewhere").st_mode), 15,
               "the relisting to show made-elsewhere as the file it now is", interval=0.2)
    assert stat.S_ISREG(os.lstat(m / "made-elsewhere").st_mode)
    assert (m / "made-elsewhere").read_bytes() == b"now a regular file"


def test_s3_no_symlinks_lists_without_asking_and_refuses_links(s3, s3_mount):
    s3.put_many({f"small{i}.txt": b"x" * 10 for i in range(20)})
    s3.client.put_object(Bucket=s3.name, Key="made-elsewhere", Body=b"small0.txt",
                         Metadata={"mode": str(S_IFLNK_0777)})
    m = s3_mount("--no-symlinks")
    assert len(os.listdir(m.path)) == 21
    assert stat.S_ISREG(os.lstat(m / "made-elsewhere").st_mode), "links are off: every object is a file"
    with pytest.raises(OSError) as refused:
        os.symlink("small0.txt", m / "mine")
    assert refused.value.errno == errno.EPERM
    s3.wait_logged()   # barrier: every request docfs sent is in the log
    heads = [r for r in s3.requests() if r.method == "HEAD"]
    assert not heads, f"with --no-symlinks a listing needs no HEAD: {[str(r) for r in heads[:5]]}"
    assert s3.head("mine") is None
