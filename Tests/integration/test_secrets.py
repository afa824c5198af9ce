"""Secrets stay out of what other local users see (issue 10, item 4).

`docfs mount http://user:secret@host/ MNT` must not leave the password in the daemon's command
line (`ps -eo args`, /proc/PID/cmdline, readable by every local user), nor in its environment
(/proc/PID/environ), its log, or an error message. Against rclone serve webdav with --user/--pass
(real Basic auth: a mount without the right password cannot list anything).
"""
from __future__ import annotations

import base64
import os
import secrets as pysecrets
import signal
import subprocess

import pytest

from conftest import RcloneServer, run
from helpers import docfs_bin, free_port, is_mounted, pids_for, wait_until
from write_support import make_store

pytestmark = pytest.mark.fuse

USER = "alice"


class AuthRcloneServer(RcloneServer):
    """rclone serve webdav with Basic auth (--user/--pass)."""
    kind = "rclone-auth"
    password = ""

    def start(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self._spawn(["rclone", "serve", "webdav", str(self.root), "--addr", f"127.0.0.1:{self.port}",
                     "--user", USER, "--pass", self.password,
                     "-v", "--log-file", str(self.log_path), "--config", str(self.workdir / "rclone.conf")])
        return self._wait_listening("rclone serve webdav --user --pass")


@pytest.fixture
def secret() -> str:
    # Distinctive, so a hit anywhere is this password and nothing else.
    return "pw-" + pysecrets.token_hex(12)


@pytest.fixture
def auth_server(tmp_path, secret):
    root = make_store(tmp_path / "store", {"hello.txt": b"hello through basic auth\n"})
    workdir = tmp_path / "rclone-auth"
    workdir.mkdir()
    server = AuthRcloneServer(root, workdir)
    server.password = secret
    server.start()
    yield server
    server.stop()


def url_with_password(server: AuthRcloneServer, password: str) -> str:
    return f"http://{USER}:{password}@127.0.0.1:{server.port}/"


def forms_of(secret: str) -> list[bytes]:
    """The password as it could leak: itself and inside a Basic Authorization header."""
    return [secret.encode(), base64.b64encode(f"{USER}:{secret}".encode())]


def leaks(data: bytes, secret: str) -> list[bytes]:
    return [form for form in forms_of(secret) if form in data]


def proc_file(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def assert_process_clean(pid: int, secret: str):
    for name in ("cmdline", "environ"):
        data = proc_file(pid, name)
        assert not leaks(data, secret), f"/proc/{pid}/{name} holds the password: {data!r}"
    ps = run(["ps", "-eo", "pid,args"], check=True).stdout
    assert secret not in ps, f"`ps -eo args` shows the password:\n" + \
        "\n".join(line for line in ps.splitlines() if secret in line)


def test_password_in_url_is_not_in_the_daemon_argv_environment_or_log(mount, auth_server, secret):
    m = mount(url_with_password(auth_server, secret), "--verbose")
    assert (m / "hello.txt").read_bytes() == b"hello through basic auth\n"  # the password was used
    (m / "new.txt").write_bytes(b"written with basic auth\n")
    pids = m.daemon_pids()
    assert pids, "no docfs daemon found for the mount"
    for pid in pids:
        assert_process_clean(pid, secret)
        # The redacted URL is what is left: the user may stay, the password may not.
        assert f"127.0.0.1:{auth_server.port}".encode() in proc_file(pid, "cmdline")
    assert m.unmount().returncode == 0
    assert (auth_server.root / "new.txt").read_bytes() == b"written with basic auth\n"
    log = m.log_file.read_bytes()
    assert log, "the daemon wrote no log"
    assert not leaks(log, secret), f"the debug log holds the password:\n{log[-3000:]!r}"


def test_password_from_the_environment_is_not_in_the_daemons_environment(mount, xdg, auth_server, secret):
    xdg.env.update(DOCFS_USER=USER, DOCFS_PASSWORD=secret)
    m = mount(auth_server.url, "--verbose")
    assert (m / "hello.txt").read_bytes() == b"hello through basic auth\n"
    pids = m.daemon_pids()
    assert pids
    for pid in pids:
        assert_process_clean(pid, secret)
        assert b"DOCFS_USER=" + USER.encode() in proc_file(pid, "environ"), "only the secret goes, not the rest"


def test_foreground_mount_scrubs_its_own_argv_and_environment(tmp_path, xdg, auth_server, secret):
    mountpoint = tmp_path / "fg"
    mountpoint.mkdir()
    env = dict(xdg.env, AWS_SECRET_ACCESS_KEY=secret + "-aws")
    proc = subprocess.Popen([docfs_bin(), "mount", url_with_password(auth_server, secret), str(mountpoint),
                             "--foreground"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: is_mounted(mountpoint) or proc.poll() is not None, 30, "the foreground mount")
        assert is_mounted(mountpoint), proc.stderr.read().decode(errors="replace")
        assert (mountpoint / "hello.txt").read_bytes() == b"hello through basic auth\n"
        assert_process_clean(proc.pid, secret)
        assert (secret + "-aws").encode() not in proc_file(proc.pid, "environ")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=10)
        if is_mounted(mountpoint):
            run(["fusermount3", "-uz", str(mountpoint)], timeout=30)
    assert not leaks(out + err, secret), f"the foreground mount printed the password: {out + err!r}"


@pytest.mark.parametrize("case", ["wrong password", "unreachable host"])
def test_error_messages_do_not_show_the_password(tmp_path, xdg, auth_server, secret, case):
    mountpoint = tmp_path / "mnt-fail"
    mountpoint.mkdir()
    if case == "wrong password":
        url = url_with_password(auth_server, secret)  # the server expects another one
        auth_server.stop()
        other = AuthRcloneServer(auth_server.root, auth_server.workdir)
        other.password = "something-else"
        other.start()
        url = url.replace(str(auth_server.port), str(other.port))
    else:
        other = None
        url = f"http://{USER}:{secret}@127.0.0.1:{free_port()}/"
    log = tmp_path / "fail.log"
    try:
        result = xdg.docfs("mount", url, mountpoint, "--log-file", log, "--verbose", timeout=90)
    finally:
        if other:
            other.stop()
    assert result.returncode != 0, "the mount must fail"
    assert not is_mounted(mountpoint)
    assert result.stderr.strip(), "a failing mount says why"
    assert not leaks((result.stdout + result.stderr).encode(), secret), f"error shows the password: {result.stderr!r}"
    assert f"127.0.0.1:" in result.stderr, f"the error names the store: {result.stderr!r}"
    if log.exists():
        assert not leaks(log.read_bytes(), secret)
    assert not pids_for(str(mountpoint)), "no daemon left behind"


def test_a_daemon_holding_a_handed_off_secret_is_not_dumpable(tmp_path, monkeypatch, mount, auth_server, secret):
    """With a secret handed off, the daemon sets PR_SET_DUMPABLE 0 (no core dump through a
    core_pattern pipe, no ptrace or /proc/PID/mem by the same user); without one it does not.
    Seen from outside as the kernel shows a non-dumpable process: its /proc/PID files are owned by
    root:root rather than by its credentials. The daemons run with group 4321 (as root still,
    which FUSE mounting needs) so that the difference shows."""
    wrapper = tmp_path / "docfs-gid"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --regid=4321 --clear-groups {docfs_bin()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("DOCFS_BIN", str(wrapper))
    with_secret = mount(url_with_password(auth_server, secret))
    open_store = mount(make_store(tmp_path / "plain", {"a.txt": b"a\n"}))
    # (Not read through here: FUSE lets in only processes with the mounting uid and gid.)
    groups = {}
    for name, m in (("with a secret", with_secret), ("without", open_store)):
        pids = m.daemon_pids()
        assert pids, f"no daemon for the mount {name}"
        groups[name] = {pid: os.stat(f"/proc/{pid}/status").st_gid for pid in pids}
    print(f"/proc/PID/status group of the daemons: {groups}")
    assert set(groups["without"].values()) == {4321}, f"the daemon does not run with group 4321: {groups}"
    assert set(groups["with a secret"].values()) == {0}, f"a daemon holding a secret is dumpable: {groups}"
