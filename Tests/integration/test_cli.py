"""The CLI contract: --version/--help, and `docfs mount` failures that say why in one line and
leave nothing mounted."""
from __future__ import annotations

import os
import select
import time

import pytest

from helpers import closed_port, pids_for, proc_mounts_lines, process_alive, wait_until


def test_version(xdg):
    result = xdg.docfs("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "docfs --version printed nothing"


def test_help_lists_commands(xdg):
    result = xdg.docfs("--help")
    assert result.returncode == 0, result.stderr
    for command in ("mount", "unmount", "serve"):
        assert command in result.stdout, f"`docfs --help` does not mention {command}:\n{result.stdout}"


def test_help_and_errors_name_every_kind_of_store(xdg, tmp_path):
    for args in (["--help"], ["mount", "--help"]):
        out = xdg.docfs(*args).stdout
        for kind in ("WebDAV", "S3", "local directory"):
            assert kind in out, f"`docfs {' '.join(args)}` does not name {kind}:\n{out}"
    (tmp_path / "mnt").mkdir()
    error = xdg.docfs("mount", "ftp://example.com/x", tmp_path / "mnt").stderr
    assert "s3://" in error and "http(s)://" in error and "directory" in error, error


def test_mount_help_has_examples(xdg):
    result = xdg.docfs("mount", "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "example" in text.lower(), f"`docfs mount --help` shows no examples:\n{text}"
    assert "docfs mount http" in text, f"`docfs mount --help` has no WebDAV example:\n{text}"
    for option in ("--foreground", "--read-only", "--dir-cache-ttl", "--cache-dir"):
        assert option in text, f"`docfs mount --help` does not document {option}"


def test_serve_and_unmount_help(xdg):
    for command in ("serve", "unmount"):
        result = xdg.docfs(command, "--help")
        assert result.returncode == 0, f"docfs {command} --help: {result.stderr}"
        assert f"docfs {command}" in result.stdout or command in result.stdout


def assert_one_line_failure(result, what):
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert result.returncode != 0, f"{what}: docfs mount exited 0 (stdout: {result.stdout!r})"
    assert len(lines) == 1, f"{what}: expected a one-line reason on stderr, got {len(lines)} lines:\n{result.stderr}"
    print(f"{what}: exit {result.returncode}: {lines[0]}")


def assert_nothing_mounted(mountpoint):
    assert not proc_mounts_lines(mountpoint), f"{mountpoint} is mounted: {proc_mounts_lines(mountpoint)}"
    # A daemon started in the background must not linger either.
    wait_until(lambda: not [p for p in pids_for(str(mountpoint)) if process_alive(p)], 10,
               f"no docfs process left for {mountpoint}")


@pytest.mark.fuse
def test_mount_missing_mountpoint(xdg, docfs_serve, content_tree, tmp_path):
    server = docfs_serve(content_tree)
    mp = tmp_path / "does-not-exist"
    result = xdg.docfs("mount", server.url, mp, timeout=60)
    assert_one_line_failure(result, "missing mount point")
    assert_nothing_mounted(mp)
    assert not mp.exists(), "docfs mount must not create a missing mount point"


@pytest.mark.fuse
def test_mount_point_in_use(mount, xdg, docfs_serve, content_tree, tmp_path):
    server = docfs_serve(content_tree)
    first = mount(server.url)
    result = xdg.docfs("mount", server.url, first.path, timeout=60)
    assert_one_line_failure(result, "mount point already in use")
    entries = proc_mounts_lines(first.path)
    assert len(entries) == 1, f"expected exactly the first mount on {first.path}, /proc/mounts has: {entries}"
    assert "small.txt" in os.listdir(first.path), "the first mount stopped working after the second attempt"


@pytest.mark.fuse
def test_mount_unreachable_store(xdg, tmp_path):
    mp = tmp_path / "mnt"
    mp.mkdir()
    url = f"http://127.0.0.1:{closed_port()}/"
    started = time.monotonic()
    result = xdg.docfs("mount", url, mp, timeout=90)
    elapsed = time.monotonic() - started
    assert_one_line_failure(result, f"unreachable store {url}")
    assert elapsed < 60, f"docfs mount took {elapsed:.0f} s to give up on an unreachable store"
    assert_nothing_mounted(mp)


@pytest.mark.fuse
@pytest.mark.parametrize("store", ["ftp://x", "http://", "not a url or directory", "/nonexistent/docfs/store"])
def test_mount_bad_store(xdg, tmp_path, store):
    mp = tmp_path / "mnt"
    mp.mkdir()
    result = xdg.docfs("mount", store, mp, timeout=60)
    assert_one_line_failure(result, f"bad store {store!r}")
    assert_nothing_mounted(mp)


def unmount_output(xdg, mountpoint, tty: bool) -> str:
    """What `docfs unmount` prints, to a pipe or to a terminal (stdout and stderr together)."""
    if not tty:
        result = xdg.docfs("unmount", mountpoint, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stderr + result.stdout
    import pty
    import subprocess
    from helpers import docfs_bin
    leader, follower = pty.openpty()
    proc = subprocess.Popen([docfs_bin(), "unmount", str(mountpoint)], stdin=follower, stdout=follower, stderr=follower,
                            env=xdg.env, close_fds=True)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                proc.kill()
                raise AssertionError(f"`docfs unmount` on a terminal did not end within 120 s; it printed {out!r}")
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    assert proc.wait(timeout=120) == 0, out
    return out.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.fuse
@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "pty"])
def test_unmount_prints_one_message_per_line(mount, docfs_serve, content_tree, tty):
    server = docfs_serve(content_tree)
    m = mount(server.url, "--evict-delay", "30")
    assert (m / "small.txt").read_bytes()  # a kept copy: unmount waits for the daemon to evict it
    out = unmount_output(m.xdg, m.path, tty)
    lines = [line for line in out.split("\n") if line.strip()]
    assert lines and all(line.startswith("docfs: ") and line.count("docfs: ") == 1 for line in lines), repr(out)
    assert lines[-1] == f"docfs: unmounted {m.path}", repr(out)
