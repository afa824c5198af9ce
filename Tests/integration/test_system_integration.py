"""System integration (issue 11, item 6): `make install`/`uninstall`, `mount -t fuse.docfs`,
an /etc/fstab line, mount options in `-o`, `--log-level`.

mount(8) clears PATH, and /sbin/mount.fuse (fuse3's mount.fuse3) then runs `docfs STORE MP -o
OPTIONS` through /bin/sh with the shell's default PATH (/usr/local/bin among it); `mount -t
docfs` runs /sbin/mount.docfs. So that the test installs nothing on the machine, the mounts run
in a private mount namespace (unshare -m) in which the staged install (make install DESTDIR=...)
is bind-mounted over /usr/local/bin and laid over /usr/sbin: the real mount(8), mount.fuse3 and
util-linux's helper search find the installed docfs exactly where they would after
`sudo make install`. Needs root (mount(8) with a private fstab, unshare).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import run
from helpers import docfs_bin, free_port, mount_entries, pids_for, port_open, process_alive, wait_until

pytestmark = pytest.mark.fuse

REPO = Path(__file__).resolve().parents[2]

if os.geteuid() != 0:
    pytest.skip("system integration tests need root (mount(8), unshare -m)", allow_module_level=True)


def make(*args, timeout=300) -> subprocess.CompletedProcess:
    return run(["make", "--no-print-directory", "-C", str(REPO), *args], timeout=timeout)


def installed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """`make install DESTDIR=... BIN=$DOCFS_BIN` with the default PREFIX (/usr/local)."""
    root = tmp_path_factory.mktemp("stage")
    result = make("install", f"DESTDIR={root}", f"BIN={docfs_bin()}")
    assert result.returncode == 0, f"make install failed:\n{result.stdout}\n{result.stderr}"
    return root


class Namespace:
    """A private mount namespace held by a sleeping process; commands run in it with nsenter."""

    def __init__(self, stage: Path, env: dict):
        self.env = env
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "infinity"])
        ours = os.readlink("/proc/self/ns/mnt")
        wait_until(lambda: os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != ours, 10, "the private mount namespace")
        self.mountpoints: list[Path] = []
        self.run(["mount", "--bind", str(stage / "usr/local/bin"), "/usr/local/bin"], check=True)
        self.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={stage / 'sbin'}:/usr/sbin", "/usr/sbin"], check=True)

    def run(self, cmd, timeout=60, check=False) -> subprocess.CompletedProcess:
        return run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *map(str, cmd)], timeout=timeout,
                   env=self.env, check=check)

    def mounts(self, mountpoint: Path) -> list[dict]:
        entries = []
        with open(f"/proc/{self.holder.pid}/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if fields[4] == str(mountpoint):
                    fstype, source, options = right.split()[:3]
                    entries.append({"fstype": fstype, "source": source.replace("\\040", " "),
                                    "flags": fields[5].split(","), "options": options})
        return entries

    def close(self):
        problems = []
        for mp in self.mountpoints:
            if self.mounts(mp):
                problems.append(f"{mp} still mounted at teardown")
                self.run(["umount", "-l", mp])
            try:
                wait_until(lambda: not any(process_alive(p) for p in pids_for(str(mp))), 15,
                           f"the docfs daemon of {mp} to exit")
            except AssertionError:
                problems.append(f"docfs daemon of {mp} still running: killed")
                for pid in pids_for(str(mp)):
                    os.kill(pid, signal.SIGKILL)
        self.holder.kill()
        self.holder.wait(10)
        return problems


@pytest.fixture
def ns(staged, xdg):
    namespace = Namespace(staged, xdg.env)
    yield namespace
    problems = namespace.close()
    assert not problems, "teardown: " + "; ".join(problems)


@pytest.fixture
def store(tmp_path) -> Path:
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    (root / "hello.txt").write_text("hello from the store\n")
    (root / "docs" / "report.txt").write_bytes(b"r" * 100_000)
    return root


def new_mountpoint(ns: Namespace, tmp_path: Path, name: str) -> Path:
    mp = tmp_path / name
    mp.mkdir()
    ns.mountpoints.append(mp)
    return mp


def test_make_install_and_uninstall(tmp_path):
    root = tmp_path / "root"
    variables = [f"DESTDIR={root}", "PREFIX=/usr", f"BIN={docfs_bin()}"]
    result = make("install", *variables)
    assert result.returncode == 0, result.stdout + result.stderr
    # The binary, the mount(8) helper, the man page, and the file managers' extensions
    # (`make install-desktop`, Sources/desktop).
    emblems = [f"usr/share/icons/hicolor/scalable/emblems/emblem-docfs-{state}.svg"
               for state in ("cloud", "conflict", "downloading", "error", "local", "pinned", "uploading")]
    assert installed_files(root) == sorted(["sbin/mount.docfs", "usr/bin/docfs", "usr/share/man/man1/docfs.1",
                                            "usr/share/caja-python/extensions/docfs_caja.py",
                                            "usr/share/docfs/desktop/docfs_desktop.py", *emblems,
                                            "usr/share/kio/servicemenus/docfs.desktop",
                                            "usr/share/nautilus-python/extensions/docfs_nautilus.py",
                                            "usr/share/nemo-python/extensions/docfs_nemo.py"])
    binary = root / "usr/bin/docfs"
    assert os.access(binary, os.X_OK) and binary.stat().st_size == Path(docfs_bin()).stat().st_size
    # The helper is what mount(8) runs for `-t docfs`: the installed binary, by its final path.
    assert os.readlink(root / "sbin/mount.docfs") == "/usr/bin/docfs"
    version = run([binary, "--version"], check=True).stdout.strip()
    assert version

    # The man page is docfs's own --help: every long option of every command is in it.
    page = (root / "usr/share/man/man1/docfs.1").read_text()
    assert page.startswith(".\\\"") or ".Dt DOCFS 1" in page
    for command in ["mount", "unmount", "serve", "status"]:
        dump = json.loads(run([binary, command, "--experimental-dump-help"], check=True).stdout)
        for argument in dump["command"].get("arguments", []):
            if not argument.get("shouldDisplay", True):
                continue
            for name in argument.get("names", []):
                if name["kind"] == "long":
                    assert name["name"] in page, f"docfs.1 lacks --{name['name']} of docfs {command}"
    rendered = run(["man", "-l", "-P", "cat", str(root / "usr/share/man/man1/docfs.1")],
                   env=dict(os.environ, MANWIDTH="100"))
    assert rendered.returncode == 0 and "log-level" in rendered.stdout, rendered.stderr

    result = make("uninstall", *variables)
    assert result.returncode == 0, result.stdout + result.stderr
    assert installed_files(root) == [], "make uninstall left files behind"


def test_mount_t_fuse_docfs_and_umount(ns, store, tmp_path, xdg):
    """`mount -t fuse.docfs STORE MP -o ...`: mount.fuse3 runs the docfs it finds on the default
    PATH; docfs options given as mount options take effect; umount(8) unmounts."""
    mp = new_mountpoint(ns, tmp_path, "mnt")
    cache = tmp_path / "cache-dir"
    log = tmp_path / "daemon.log"
    result = ns.run(["mount", "-t", "fuse.docfs", store, mp,
                     "-o", f"cache_dir={cache},evict-delay=60,log_file={log},nosuid,noatime"])
    assert result.returncode == 0, f"mount exited {result.returncode}: {result.stderr}{result.stdout}"
    [entry] = ns.mounts(mp)
    assert entry["fstype"] == "fuse.docfs"
    assert entry["source"] == str(store), "the mount table names the store, as an fstab line does"
    assert "nosuid" in entry["flags"] and "noatime" in entry["flags"]

    assert ns.run(["cat", mp / "hello.txt"], check=True).stdout == "hello from the store\n"
    assert ns.run(["stat", "-c", "%s", mp / "docs/report.txt"], check=True).stdout.strip() == "100000"
    # cache_dir= and evict-delay= took effect: the released copy waits in that cache dir.
    copies = [p for p in cache.rglob("*") if p.is_file() and p.read_bytes() == b"hello from the store\n"]
    assert copies, f"no local copy kept under cache_dir {cache}: {sorted(map(str, cache.rglob('*')))}"
    assert log.exists(), "log_file= was not used"

    result = ns.run(["umount", mp])
    assert result.returncode == 0, result.stderr
    assert not ns.mounts(mp)
    wait_until(lambda: not pids_for(str(mp)), 15, "the daemon to exit after umount")


def test_fstab_lines(ns, store, tmp_path, xdg):
    """fstab lines of type docfs (the mount.docfs helper) and fuse.docfs (mount.fuse3): noauto,
    _netdev, nofail, x-systemd.*, comment= are taken; read_only refuses writes (EROFS); a second
    `mount -a` sees the line is mounted already; log_level=debug reaches the log. The two lines
    mount one store: the second has a state of its own (state_dir=), as a store is mounted once
    per state directory."""
    ro_mp = new_mountpoint(ns, tmp_path, "ro")
    auto_mp = new_mountpoint(ns, tmp_path, "auto")
    log = tmp_path / "ro.log"
    fstab = tmp_path / "fstab"
    fstab.write_text(
        "# docfs test fstab\n"
        f"{store} {ro_mp} docfs cache_dir={tmp_path / 'c1'},state_dir={tmp_path / 's1'},read_only,evict_delay=5,noauto,_netdev,"
        f"log_level=debug,log_file={log} 0 0\n"
        f"{store} {auto_mp} fuse.docfs cache_dir={tmp_path / 'c2'},defaults,nofail,x-systemd.automount,"
        f"x-gvfs-show,comment=docfs,dir_cache_ttl=5,rw 0 0\n")

    result = ns.run(["mount", "-T", fstab, "-a"])
    assert result.returncode == 0, result.stderr
    assert ns.mounts(auto_mp) and not ns.mounts(ro_mp), "mount -a mounts the auto line only"
    again = ns.run(["mount", "-T", fstab, "-a"])
    assert again.returncode == 0, f"a second mount -a tried to mount the line again: {again.stderr}"
    assert len(ns.mounts(auto_mp)) == 1

    result = ns.run(["mount", "-T", fstab, ro_mp])
    assert result.returncode == 0, result.stderr
    [entry] = ns.mounts(ro_mp)
    assert entry["fstype"] == "fuse.docfs" and "ro" in entry["flags"]
    assert ns.run(["cat", ro_mp / "hello.txt"], check=True).stdout == "hello from the store\n"
    probe = ("import errno, sys\n"
             "try:\n    open(sys.argv[1], 'w')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n"
             "else:\n    print('written')\n")
    assert ns.run(["python3", "-c", probe, ro_mp / "new.txt"], check=True).stdout.strip() == "EROFS"
    assert ns.run(["python3", "-c", probe, ro_mp / "hello.txt"], check=True).stdout.strip() == "EROFS"
    assert not (store / "new.txt").exists()
    # The rw line writes through to the store.
    assert ns.run(["sh", "-c", f"echo written > {auto_mp}/new.txt"]).returncode == 0
    wait_until(lambda: (store / "new.txt").exists() and (store / "new.txt").read_text() == "written\n", 20,
               "the write on the rw line to reach the store")
    assert " debug " in log.read_text(), "log_level=debug did not log debug lines"

    for mp in (ro_mp, auto_mp):
        result = ns.run(["umount", mp])
        assert result.returncode == 0, result.stderr
        assert not ns.mounts(mp)


def test_unknown_mount_option_is_named(ns, store, tmp_path, xdg):
    mp = new_mountpoint(ns, tmp_path, "mnt")
    direct = xdg.docfs(store, mp, "-o", "cache_dir=/tmp/x,bogus_option,evict_delay=5")
    assert direct.returncode != 0 and "bogus_option" in direct.stderr, direct.stderr
    assert "cache_dir" not in direct.stderr and "evict_delay" not in direct.stderr, "only the unknown one is named"
    through_mount = ns.run(["mount", "-t", "fuse.docfs", store, mp, "-o", "bogus_option"])
    assert through_mount.returncode != 0
    assert "bogus_option" in through_mount.stderr + through_mount.stdout
    assert not ns.mounts(mp)
    # A docfs flag with a value, and an option without one, are errors that say so.
    assert "takes no value" in xdg.docfs(store, mp, "-o", "read_only=yes").stderr
    assert "needs a value" in xdg.docfs(store, mp, "-o", "cache_dir").stderr
    # mount(8) -s (sloppy): the unknown option is named but not fatal; -f: nothing is mounted.
    fake = xdg.docfs(store, mp, "-s", "-f", "-o", "bogus_option,noauto")
    assert fake.returncode == 0 and "bogus_option" in fake.stderr, fake.stderr
    assert not ns.mounts(mp)


@pytest.mark.parametrize("level", ["debug", "info"])
def test_log_level_in_the_foreground_goes_to_stderr(store, tmp_path, xdg, level):
    mp = tmp_path / "mnt"
    mp.mkdir()
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([docfs_bin(), "mount", str(store), str(mp), "--foreground", "--log-level", level],
                                   stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL, env=xdg.env)
    try:
        wait_until(lambda: any(line.split()[4] == str(mp) for line in open("/proc/self/mountinfo")), 30,
                   "the foreground mount")
        assert (mp / "hello.txt").read_text() == "hello from the store\n"
        assert xdg.docfs("unmount", mp).returncode == 0
        process.wait(30)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                run(["fusermount3", "-uz", str(mp)])
    text = stderr_path.read_text(errors="replace")
    assert " info docfs" in text, f"no log lines on stderr:\n{text}"
    debug_lines = [line for line in text.splitlines() if " debug " in line]
    if level == "debug":
        assert any("provid" in line for line in debug_lines), f"no debug lines on stderr:\n{text}"
    else:
        assert not debug_lines, f"debug lines at --log-level info:\n{text}"


@pytest.mark.parametrize("level", ["debug", "info"])
def test_serve_log_level(tmp_path, level):
    (tmp_path / "dir").mkdir()
    port = free_port()
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([docfs_bin(), "serve", str(tmp_path / "dir"), "--port", str(port), "--log-level", level],
                                   stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open(port), 20, "docfs serve to listen")
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
    finally:
        process.terminate()
        process.wait(20)
    requests = [line for line in stderr_path.read_text(errors="replace").splitlines() if "GET / -> 200" in line]
    assert bool(requests) == (level == "debug"), stderr_path.read_text(errors="replace")


def test_mount_table_source_is_the_store_without_credentials(mount, docfs_serve, content_tree):
    """The source an fstab line names, so mount -a knows it is mounted; never the password:
    /proc/self/mountinfo is readable by every local user."""
    server = docfs_serve(content_tree)
    secret = "pw-not-for-the-mount-table"
    m = mount(server.url.replace("http://", f"http://ann:{secret}@"))
    [entry] = mount_entries(m.path)
    assert entry["fstype"] == "fuse.docfs" and entry["source"] == server.url
    with open("/proc/self/mountinfo") as f:
        assert secret not in f.read()
