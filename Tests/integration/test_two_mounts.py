"""Issue 30: two mounts of one store and a third client, with a `kill -9` in the middle.

Two docfs daemons (two state and cache directories, as on two machines) mount one store, and a
third client of the same server writes only over the version it read (`If-Match`). For
`DURATION` seconds all three append records to a few shared files: each mount by
read-modify-write (read all, append) and by blind appends (`O_APPEND`, no read), the third
client by GET and a conditional PUT. Half-way through, one daemon is killed with SIGKILL,
its stale mount cleaned up, and the store mounted again from the same state directory; a
writer that then finds no file creates it (`O_CREAT|O_EXCL`), as a program would.

Every save appends one record of its own (8 bytes: writer, number, `;`) and keeps the records
it started from, so every version made from another holds all of that one's records. Afterwards
(every upload settled):
- every record whose save returned 0 (a close, or the third client's 2xx) is in some file of
  the store: under its name, or in a conflict or unsaved copy — no saved version was lost;
- every file is a whole number of well-formed records, none twice — no file mixes the bytes
  of two versions (an append into another version's middle tears a record).

Stores: `docfs serve`, Apache `mod_dav` and moto (the third client's conditional writes are
honoured there: with `If-Match`, and on Apache under a WebDAV lock, as docfs writes there,
since Apache checks `If-Match` before it writes, not with it; moto does too, and its server
runs here with each key's check and write made one step, Tests/support/moto_server_atomic.py:
a run under load lost one of 3,514 saves to two PUTs over one version both answered 200) and `rclone serve webdav` and
nginx (which ignore `If-Match` on PUT: no third client there, two mounts only; nginx lists no
ETags, so docfs tells its versions by time and size).
"""
from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import _ACTIVE_MOUNTS, WEBDAV_FIXTURES, XDG, cleanup_mount
from helpers import pids_for, wait_until
from s3_support import s3, s3_env, s3_mount  # noqa: F401 - fixtures
from test_nothing_lost import s3_server  # noqa: F401 - moto only
from write_support import make_store, sigkill_daemon

pytestmark = pytest.mark.fuse

DURATION = float(os.environ.get("DOCFS_TWO_MOUNTS_SECONDS", "60"))
KILLS = int(os.environ.get("DOCFS_TWO_MOUNTS_KILLS", "1"))
FILES = ["f0.txt", "f1.txt", "f2.txt"]
RECORD = re.compile(rb"[A-Z][0-9]{6};")
OPTIONS = ("--dir-cache-ttl", "1", "--attr-timeout", "0", "--entry-timeout", "0",
           *os.environ.get("DOCFS_TWO_MOUNTS_OPTIONS", "").split())


def records(content: bytes) -> list[bytes]:
    """The records of a file; raises if it is not a whole number of well-formed records."""
    if len(content) % 8:
        raise ValueError(f"{len(content)} bytes: not whole records")
    chunks = [content[i:i + 8] for i in range(0, len(content), 8)]
    bad = [c for c in chunks if not RECORD.fullmatch(c)]
    if bad:
        raise ValueError(f"torn records {bad[:3]}")
    return chunks


class Ledger:
    """What every writer saved, and what it tried."""

    def __init__(self):
        self.lock = threading.Lock()
        self.saved: dict[bytes, str] = {}
        self.failed: dict[str, int] = {}

    def save(self, token: bytes, how: str) -> None:
        with self.lock:
            self.saved[token] = how

    def fail(self, why: str) -> None:
        with self.lock:
            self.failed[why] = self.failed.get(why, 0) + 1


class MountWriter(threading.Thread):
    """Appends records through a mount (read-modify-write or blind `O_APPEND`) until `stop`;
    `path` is None while its mount is down."""

    def __init__(self, letter: str, ledger: Ledger, stop: threading.Event, seed: int):
        super().__init__(daemon=True)
        self.letter, self.ledger, self.stop, self.random = letter, ledger, stop, random.Random(seed)
        self.path: Path | None = None
        self.count = 0

    def run(self):
        while not self.stop.is_set():
            path = self.path
            if path is None:
                self.stop.wait(0.05)   # its mount is down: look again for the next one (or the end)
                continue
            self.count += 1
            token = f"{self.letter}{self.count:06d};".encode()
            name = self.random.choice(FILES)
            how = self.random.choice(["read-modify-write", "blind append"])
            try:
                try:
                    if how == "read-modify-write":
                        with open(path / name, "r+b") as f:
                            records(f.read())
                            f.seek(0, os.SEEK_END)
                            f.write(token)
                    else:
                        fd = os.open(path / name, os.O_WRONLY | os.O_APPEND)
                        try:
                            os.write(fd, token)
                        finally:
                            os.close(fd)
                except FileNotFoundError:
                    # What a program does with a file it does not find: make it.
                    how = "create after ENOENT"
                    fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    try:
                        os.write(fd, token)
                    finally:
                        os.close(fd)
                self.ledger.save(token, f"{how} of {name} through mount {self.letter}")
            except (OSError, ValueError) as error:
                self.ledger.fail(f"{self.letter} {how}: {error.__class__.__name__} {getattr(error, 'errno', '')}")
            self.stop.wait(self.random.uniform(0, 0.05))   # the scenario: a writer's pace


class ThirdClient(threading.Thread):
    """Appends records straight on the server: GET, then PUT only over the version read."""

    def __init__(self, get, put, ledger: Ledger, stop: threading.Event):
        super().__init__(daemon=True)
        self.get, self.put, self.ledger, self.stop = get, put, ledger, stop
        self.random = random.Random(3)
        self.count = 0

    def run(self):
        while not self.stop.is_set():
            self.count += 1
            token = f"C{self.count:06d};".encode()
            name = self.random.choice(FILES)
            try:
                got = self.get(name)
                if got is not None:
                    content, version = got
                    records(content)
                    if self.put(name, content + token, version):
                        self.ledger.save(token, f"conditional PUT of {name}")
                    else:
                        self.ledger.fail("C: precondition failed")
            except Exception as error:  # noqa: BLE001 - a failed request saves nothing
                self.ledger.fail(f"C: {error.__class__.__name__}")
            self.stop.wait(self.random.uniform(0.02, 0.1))   # the scenario: a writer's pace


LOCK_BODY = (b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/>'
             b'</D:lockscope><D:locktype><D:write/></D:locktype><D:owner>third client</D:owner></D:lockinfo>')


def webdav_client(url: str, locks: bool = False):
    """GET and a PUT only over the version read. With `locks` (Apache) that PUT is made under an
    exclusive WebDAV lock, with the version checked under it, as docfs does there: Apache checks
    `If-Match` against the file as it stood when the request began, not when it writes, and a
    PUT held up inside the server (waiting for its lock database) went through over versions
    saved meanwhile — the lost saves of a clean-clone run were that, not docfs."""
    def get(name):
        try:
            with urllib.request.urlopen(url + urllib.parse.quote(name), timeout=30) as resp:
                return resp.read(), resp.headers["ETag"]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def request(method, name, data=None, headers=None):
        req = urllib.request.Request(url + urllib.parse.quote(name), data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers
        except urllib.error.HTTPError as error:
            return error.code, error.headers

    def put(name, data, etag):
        if not locks:
            return request("PUT", name, data, {"If-Match": etag})[0] in (200, 201, 204)
        deadline = time.monotonic() + 5
        while True:
            status, headers = request("LOCK", name, LOCK_BODY, {"Timeout": "Second-10", "Depth": "0",
                                                               "Content-Type": "application/xml"})
            if status in (200, 201):
                break
            if status != 423 or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        token = headers["Lock-Token"].strip("<> ")
        try:
            if status == 201:
                return False  # the file was gone: the lock made it
            current = request("HEAD", name)[1]["ETag"] or ""
            if current.removeprefix("W/") != etag.removeprefix("W/"):
                return False
            return request("PUT", name, data, {"If": f"(<{token}>)"})[0] in (200, 201, 204)
        finally:
            request("UNLOCK", name, headers={"Lock-Token": f"<{token}>"})

    return get, put


def s3_client(bucket):
    client = bucket.client

    def get(name):
        try:
            answer = client.get_object(Bucket=bucket.name, Key=name)
        except client.exceptions.NoSuchKey:
            return None
        return answer["Body"].read(), answer["ETag"]

    def put(name, data, etag):
        try:
            client.put_object(Bucket=bucket.name, Key=name, Body=data, IfMatch=etag)
            return True
        except client.exceptions.ClientError as error:
            if error.response["Error"]["Code"] in ("PreconditionFailed", "412", "NoSuchKey"):
                return False
            raise

    return get, put


class Store:
    """One store, its mounts (each with its own state directory) and its files."""

    def __init__(self, kind, tmp_path, request):
        self.kind, self.tmp_path, self.request = kind, tmp_path, request
        self.mounted: list[tuple[Path, XDG]] = []
        initial = {name: f"I{i:06d};".encode() for i, name in enumerate(FILES)}
        if kind == "moto":
            self.bucket = request.getfixturevalue("s3")
            self.bucket.put_many(initial)
            self.url, self.args = None, self.bucket.mount_args()
            self.third = s3_client(self.bucket)
        else:
            root = make_store(tmp_path / "store", initial)
            server = request.getfixturevalue(WEBDAV_FIXTURES[kind])(root)
            self.root, self.args = root, [server.url]
            # rclone and nginx take a PUT whatever its If-Match says: no client there can write only over
            # the version it read.
            self.third = webdav_client(server.url, locks=kind == "apache") if kind not in ("rclone", "nginx") else None
        self.initial = set(initial.values())

    def mount(self, machine: str, number: int) -> tuple[Path, XDG]:
        xdg_dir = self.tmp_path / f"xdg-{machine}"
        xdg = getattr(self, f"xdg_{machine}", None)
        if xdg is None:
            xdg = XDG(xdg_dir)
            if self.kind == "moto":
                xdg.env = s3_env(xdg.env)
            setattr(self, f"xdg_{machine}", xdg)
        path = self.tmp_path / f"mnt-{machine}{number}"
        path.mkdir()
        self.mounted.append((path, xdg))
        _ACTIVE_MOUNTS.add(str(path))
        log = self.tmp_path / f"mount-{machine}{number}.log"
        result = xdg.docfs("mount", *self.args, path, "--log-file", log, *OPTIONS)
        assert result.returncode == 0, f"docfs mount: {result.stderr}\n{log.read_text() if log.exists() else ''}"
        return path, xdg

    def files(self) -> dict[str, bytes]:
        if self.kind == "moto":
            return {k: self.bucket.get(k) for k in self.bucket.keys() if "/" not in k}
        return {p.name: p.read_bytes() for p in self.root.iterdir() if p.is_file()}

    def cleanup(self) -> list[str]:
        notes = []
        for path, xdg in self.mounted:
            notes += cleanup_mount(path, xdg)
            _ACTIVE_MOUNTS.discard(str(path))
        return notes


def settled(path: Path, xdg: XDG) -> bool:
    result = xdg.docfs("status", "--json", path)
    if result.returncode != 0:
        return False
    mount = json.loads(result.stdout)["mounts"][0]
    return mount["pendingUploads"] == 0 and not any(mount["states"].get(s) for s in ("modified", "uploading", "downloading"))


class DaemonFor:
    """What `sigkill_daemon` needs of a mount."""

    def __init__(self, path: Path):
        self.path = path

    def daemon_pids(self):
        return pids_for(str(self.path))


@pytest.mark.parametrize("kind", ["docfs-serve", "rclone", "apache", "nginx", "moto"])
def test_two_mounts_and_a_third_client_lose_no_saved_version(kind, tmp_path, request):
    store = Store(kind, tmp_path, request)
    ledger, stop = Ledger(), threading.Event()
    try:
        path_a, xdg_a = store.mount("a", 0)
        path_b, xdg_b = store.mount("b", 0)
        writer_a = MountWriter("A", ledger, stop, seed=1)
        writer_b = MountWriter("B", ledger, stop, seed=2)
        writer_a.path, writer_b.path = path_a, path_b
        threads = [writer_a, writer_b] + ([ThirdClient(*store.third, ledger, stop)] if store.third else [])
        for thread in threads:
            thread.start()

        for kill in range(KILLS):
            time.sleep(DURATION / (KILLS + 1))   # the scenario: the writers run this long between kills
            pids = sigkill_daemon(DaemonFor(path_a))
            writer_a.path = None
            wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 60, "the killed daemon to be reaped")
            result = xdg_a.docfs("unmount", path_a, timeout=120)
            assert result.returncode == 0, f"docfs unmount of the killed mount: {result.stderr}"
            path_a, xdg_a = store.mount("a", kill + 1)
            # The store has every file all along: right after the remount, none is "not found".
            missing = [name for name in FILES if not os.path.exists(path_a / name)]
            assert not missing, f"after remount {kill + 1}, {missing} not found though the store has them"
            writer_a.path = path_a
        time.sleep(DURATION / (KILLS + 1))   # the scenario: and this long after the last one
        stop.set()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive(), f"{thread} still running"

        for path, xdg in ((path_a, xdg_a), (path_b, xdg_b)):
            wait_until(lambda: settled(path, xdg), 180, f"the uploads of {path} to settle")
            result = xdg.docfs("unmount", path, timeout=120)
            assert result.returncode == 0, f"docfs unmount {path}: {result.stderr}"

        files = store.files()
        present: dict[bytes, list[str]] = {}
        torn = {}
        for name, content in files.items():
            try:
                chunks = records(content)
            except ValueError as error:
                torn[name] = str(error)
                continue
            if len(set(chunks)) != len(chunks):
                torn[name] = "a record twice: bytes of two versions"
            for chunk in chunks:
                present.setdefault(chunk, []).append(name)
        lost = {token: how for token, how in ledger.saved.items() if token not in present}
        kinds: dict[str, int] = {}
        for how in ledger.saved.values():
            kinds[how.split(" of ")[0]] = kinds.get(how.split(" of ")[0], 0) + 1
        print(f"{kind}: {len(ledger.saved)} saves {kinds}, failures {ledger.failed}, {len(files)} files on the store")
        assert not torn, f"files mixing versions: {torn}"
        assert not lost, f"{len(lost)} of {len(ledger.saved)} saved versions are on the store nowhere: {sorted(lost.items())[:10]}"
        assert len(ledger.saved) > 20, f"too few saves to mean anything: {ledger.failed}"
    finally:
        stop.set()
        for note in store.cleanup():
            print(f"teardown: {note}")


def _write_and_close_at_once(paths: list[Path], name: str, contents: list[bytes]) -> list[str]:
    """Writes `contents[i]` to `paths[i]/name` (each made with O_EXCL) and closes all together."""
    barrier, errors = threading.Barrier(len(paths)), []

    def write(path: Path, content: bytes):
        try:
            fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, content)
                barrier.wait(30)
            finally:
                os.close(fd)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(f"{path}: {error!r}")

    threads = [threading.Thread(target=write, args=(p, c)) for p, c in zip(paths, contents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


@pytest.mark.parametrize("kind", ["docfs-serve", "apache", "wsgidav", "sabre", "nginx", "moto"])
def test_two_mounts_creating_one_name_at_once_keep_both(kind, tmp_path, request):
    """Two mounts each make `new-N.txt` (neither sees the other's yet) and close at once, for
    many N: the two uploads run together. One takes the name, the other is kept as a conflict
    copy. Apache checks `If-None-Match: *` before it writes, not with it, so two creations at
    the same moment both passed it and the later one replaced the earlier."""
    store = Store(kind, tmp_path, request)
    try:
        (path_a, xdg_a), (path_b, xdg_b) = store.mount("a", 0), store.mount("b", 0)
        rounds = 100
        for n in range(rounds):
            contents = [f"A{n:06d};".encode() * 512, f"B{n:06d};".encode() * 512]
            assert not _write_and_close_at_once([path_a, path_b], f"new-{n}.txt", contents)
        for path, xdg in ((path_a, xdg_a), (path_b, xdg_b)):
            wait_until(lambda: settled(path, xdg), 120, f"the uploads of {path} to settle")
        kept = {content[:8] for name, content in store.files().items() if name.startswith("new-")}
        lost = [f"{w}{n:06d};" for n in range(rounds) for w in "AB" if f"{w}{n:06d};".encode() not in kept]
        assert not lost, f"{len(lost)} of {2 * rounds} new files are on the store nowhere: {lost[:10]}"
        if kind != "wsgidav":
            # WsgiDAV makes the empty file of a LOCK of a new name before it looks for a
            # conflicting lock, and keeps it when it answers 423: the name then holds an empty
            # file no one wrote, both new files are kept as conflict copies (doc/servers.md).
            empty = sorted(name for name, content in store.files().items() if name.startswith("new-") and not content)
            assert not empty, f"empty files no one wrote (left by a LOCK): {empty[:10]}"
        for path, xdg in ((path_a, xdg_a), (path_b, xdg_b)):
            assert xdg.docfs("unmount", path, timeout=120).returncode == 0
    finally:
        for note in store.cleanup():
            print(f"teardown: {note}")
