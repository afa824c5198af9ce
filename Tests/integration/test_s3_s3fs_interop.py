"""docfs and s3fs (Debian's s3fs-fuse) on the same bucket see the same links, modes and times:
docfs writes them the way s3fs does (a link object holding its target, x-amz-meta-mode with the
file type, x-amz-meta-mtime), and reads what s3fs wrote. s3fs runs in the foreground against
the test's S3 server and is stopped by its PID and unmounted, also when the test fails."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from helpers import is_mounted, wait_until, xattr_state
from s3_support import ACCESS_KEY, REGION, SECRET_KEY, s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse


@pytest.fixture
def s3fs_mount(s3, tmp_path):
    """s3fs_mount() -> mount point of the test's bucket through s3fs, unmounted at teardown."""
    if shutil.which("s3fs") is None:
        pytest.fail("s3fs is not installed (Tests/support/setup.sh installs Debian's s3fs)")
    running: list[tuple[subprocess.Popen, os.PathLike]] = []

    def do_mount():
        passwd = tmp_path / "s3fs-passwd"
        passwd.write_text(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        passwd.chmod(0o600)
        mountpoint = tmp_path / f"s3fs{len(running)}"
        mountpoint.mkdir()
        log = open(tmp_path / f"s3fs{len(running)}.log", "wb")
        proc = subprocess.Popen(
            ["s3fs", s3.name, str(mountpoint), "-f", "-o", f"url=http://127.0.0.1:{s3.server.port}",
             "-o", "use_path_request_style", "-o", f"passwd_file={passwd}", "-o", f"endpoint={REGION}",
             "-o", "stat_cache_expire=1", "-o", "enable_noobj_cache"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        running.append((proc, mountpoint))
        wait_until(lambda: is_mounted(mountpoint) or proc.poll() is not None, 30, "s3fs to mount")
        assert proc.poll() is None, f"s3fs exited {proc.returncode}: {(tmp_path / 's3fs0.log').read_text()[-2000:]}"
        return mountpoint

    yield do_mount
    for proc, mountpoint in running:
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, timeout=30)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True, timeout=30)


def test_docfs_and_s3fs_see_the_same_links_modes_and_times(s3, s3_mount, s3fs_mount, xdg):
    if s3.kind != "moto":
        pytest.skip("s3fs is checked against moto; SeaweedFS's gateway is covered by the docfs-only tests")
    # docfs writes.
    m = s3_mount()
    (m / "docs").mkdir()
    fd = os.open(m / "docs/by-docfs.txt", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640)
    os.write(fd, b"written by docfs\n")
    os.close(fd)
    os.utime(m / "docs/by-docfs.txt", (1_600_000_000, 1_600_000_000))
    os.symlink("by-docfs.txt", m / "docs/docfs-link")
    wait_until(lambda: xattr_state(m / "docs/by-docfs.txt") in ("local", "placeholder"), 30, "the upload")
    assert m.unmount().returncode == 0

    # s3fs reads, and writes its own.
    s3fs = s3fs_mount()
    assert os.readlink(s3fs / "docs/docfs-link") == "by-docfs.txt"
    assert (s3fs / "docs/docfs-link").read_bytes() == b"written by docfs\n"
    st = os.stat(s3fs / "docs/by-docfs.txt")
    assert stat.S_IMODE(st.st_mode) == 0o640, oct(st.st_mode)
    assert int(st.st_mtime) == 1_600_000_000
    os.symlink("by-docfs.txt", s3fs / "docs/s3fs-link")
    (s3fs / "docs/by-s3fs.txt").write_bytes(b"written by s3fs\n")
    os.chmod(s3fs / "docs/by-s3fs.txt", 0o604)
    os.utime(s3fs / "docs/by-s3fs.txt", (1_500_000_000, 1_500_000_000))
    wait_until(lambda: s3.head("docs/by-s3fs.txt") is not None
               and s3.head("docs/by-s3fs.txt")["Metadata"].get("mtime") == "1500000000", 30, "s3fs's upload")

    # docfs on a machine that never saw the bucket reads what s3fs wrote.
    xdg.another_machine("other-machine")
    s3.mark()
    m = s3_mount()
    assert os.readlink(m / "docs/s3fs-link") == "by-docfs.txt"
    assert (m / "docs/s3fs-link").read_bytes() == b"written by docfs\n"
    assert os.readlink(m / "docs/docfs-link") == "by-docfs.txt"
    st = os.stat(m / "docs/by-s3fs.txt")
    assert stat.S_IMODE(st.st_mode) == 0o604, oct(st.st_mode)
    assert st.st_mtime == 1_500_000_000
    assert (m / "docs/by-s3fs.txt").read_bytes() == b"written by s3fs\n"
    m.wait_idle()   # the reads' transfers have ended before the mount is taken down
