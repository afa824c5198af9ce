"""docfs in file managers (issue 35): the Nautilus, Nemo and Caja extensions of Sources/desktop.

- The emblem each extension gives a file in each state, through the extension's own code with
  its file manager's API module loaded (fm_probe.py, in Debian's Python, which the file
  managers embed), against a real docfs mount whose files are placeholder, downloading (a
  throttled GET), local, pinned, uploading (a PUT whose answer is held), failing (a PUT
  refused), in conflict, and folders summing them up; nothing outside docfs mounts; at most
  one getxattr per file (a second only for a file holding changes).
- The menu: Keep on this device pins, Free up space evicts (user.docfs.state after each),
  Show why gives user.docfs.error, Open the other version opens the conflict copy.
- Live updates: a fake publisher on the `user.docfs.events` contract; each line invalidates
  only that file's info (and its folder's); a restarted publisher is reconnected to.
- `make install-desktop` / `uninstall-desktop` into a staging DESTDIR.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fault_proxy import FaultProxy
from helpers import wait_until, xattr_state
from states import MOUNT_OPTIONS, build_every_state, write_store

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "fm_probe.py"
SOURCES = REPO / "Sources" / "desktop"
SYSTEM_PYTHON = "/usr/bin/python3"      # the Python the file managers embed (Debian's, with gi)

sys.path.insert(0, str(SOURCES))
import docfs_desktop as core  # noqa: E402
import gui  # noqa: E402

APIS = {"nautilus": ("Nautilus", "4.0", "python3-nautilus"),
        "nemo": ("Nemo", "3.0", "nemo-python"),
        "caja": ("Caja", "2.0", "python3-caja")}


def require_api(api: str) -> None:
    """The file manager's Python extension support must be installed (Tests/support/setup.sh
    installs it); skipped only where Debian has no such package."""
    namespace, version, package = APIS[api]
    check = f"import gi; gi.require_version({namespace!r}, {version!r}); from gi.repository import {namespace}"
    if os.access(SYSTEM_PYTHON, os.X_OK) and subprocess.run([SYSTEM_PYTHON, "-c", check],
                                                            capture_output=True).returncode == 0:
        return
    known = shutil.which("apt-cache") and subprocess.run(["apt-cache", "show", package], capture_output=True).returncode == 0
    if not known:
        pytest.skip(f"{package} is not installable here (no such Debian package)")
    pytest.fail(f"{package} is not installed: run Tests/support/setup.sh (make setup)")


def require_packages(packages: list[str]) -> None:
    """Like require_api, for the commands a desktop session needs (gui.missing_tools)."""
    if not packages:
        return
    unknown = [p for p in packages if not shutil.which("apt-cache")
               or subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0]
    if unknown:
        pytest.skip(f"not installable here: {' '.join(unknown)}")
    pytest.fail(f"not installed: {' '.join(packages)}: run Tests/support/setup.sh (make setup)")


def probe(*args, env=None, timeout=90) -> dict:
    result = subprocess.run([SYSTEM_PYTHON, str(PROBE), *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"fm_probe {args[:2]} exited {result.returncode}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- what a state shows (no mount) ------------------------------------------------------------

@pytest.mark.parametrize("state, kwargs, emblem", [
    ("placeholder", {}, "emblem-docfs-cloud"),
    ("downloading", {}, "emblem-docfs-downloading"),
    ("local", {}, "emblem-docfs-local"),
    ("pinned", {}, "emblem-docfs-pinned"),
    ("modified", {}, "emblem-docfs-uploading"),
    ("uploading", {}, "emblem-docfs-uploading"),
    ("modified", {"error": "HTTP 403 Forbidden"}, "emblem-docfs-error"),
    ("uploading", {"error": "reset"}, "emblem-docfs-error"),
    ("local", {"error": "stale"}, "emblem-docfs-local"),         # only a pending change can fail
    ("local", {"name": "report (conflict 2026-11-22 061530).pdf"}, "emblem-docfs-conflict"),
    ("placeholder", {"name": "notes (conflict 2026-11-22 061530 2)"}, "emblem-docfs-conflict"),
    ("local", {"conflicted": True}, "emblem-docfs-conflict"),
    ("error", {}, "emblem-docfs-error"),                         # a live event's own words
    ("placeholder=12 local=3", {}, "emblem-docfs-cloud"),
    ("local=3 pinned=1", {}, "emblem-docfs-local"),
    ("pinned local=2 pinned=3", {}, "emblem-docfs-pinned"),
    ("pinned placeholder=2 pinned=1", {}, "emblem-docfs-downloading"),
    ("placeholder=1 downloading=1", {}, "emblem-docfs-downloading"),
    ("local=3 modified=1", {}, "emblem-docfs-uploading"),
    ("placeholder=2 modified=1 error=1", {}, "emblem-docfs-error"),
    ("unlisted", {}, "emblem-docfs-cloud"),
    ("empty", {}, None),
    ("pinned empty", {}, "emblem-docfs-pinned"),
    (None, {}, None),
])
def test_emblem_for_each_state(state, kwargs, emblem):
    assert core.emblem_for(state, **kwargs) == emblem


def test_mounts_of_type_fuse_docfs_only(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "36 25 0:32 / /home/me/cloud rw,nosuid,nodev - fuse.docfs https://dav rw,user_id=0\n"
        "37 25 0:33 / /home/me/with\\040space rw - fuse.docfs /srv rw\n"
        "38 36 0:34 / /home/me/cloud/inner rw - fuse.docfs s3://b rw\n"
        "39 25 0:35 / /home/me/rclone rw - fuse.rclone remote: rw\n"
        "40 25 0:36 / /home/me/docfs-lookalike rw - fuse.docfsx x rw\n")
    now = [0.0]
    mounts = core.Mounts(str(info), ttl=1.0, clock=lambda: now[0])
    assert mounts.root_of("/home/me/cloud/a/b.txt") == "/home/me/cloud"
    assert mounts.root_of("/home/me/cloud") == "/home/me/cloud"
    assert mounts.root_of("/home/me/cloud/inner/x") == "/home/me/cloud/inner"
    assert mounts.root_of("/home/me/with space/x") == "/home/me/with space"
    assert mounts.root_of("/home/me/cloudy/x") is None
    assert mounts.root_of("/home/me/rclone/x") is None
    assert mounts.root_of("/home/me/docfs-lookalike/x") is None
    # Cached: read again only once the TTL ran out.
    info.write_text("")
    assert mounts.root_of("/home/me/cloud/x") == "/home/me/cloud"
    now[0] = 1.5
    assert mounts.root_of("/home/me/cloud/x") is None


@pytest.mark.fuse
def test_a_new_mount_is_seen_at_once(tmp_path, mount):
    """The mount table is read again when the kernel says it changed (a GLib watch on
    /proc/self/mountinfo), not only when its TTL (here 1000 s) runs out."""
    script = f"""
import sys
sys.path.insert(0, {str(SOURCES)!r})
import docfs_desktop as core
from gi.repository import GLib
mounts = core.Mounts(ttl=1000)
mounts.roots()
mounts.watch()
loop = GLib.MainLoop()
def check():
    if mounts.root_of({str(tmp_path / 'mnt0' / 'x')!r}):
        print("seen", flush=True)
        loop.quit()
    return True
GLib.timeout_add(50, check)
GLib.timeout_add_seconds(30, loop.quit)
print("ready", flush=True)
loop.run()
"""
    watcher = subprocess.Popen([SYSTEM_PYTHON, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout.readline().strip() == "ready"
        (tmp_path / "store").mkdir()
        mount(tmp_path / "store")
        assert watcher.stdout.readline().strip() == "seen", "the new docfs mount was not seen"
    finally:
        watcher.kill()
        watcher.wait()


def test_conflict_names():
    assert core.conflict_original("/m/a/report (conflict 2026-11-22 061530).pdf") == "/m/a/report.pdf"
    assert core.conflict_original("/m/notes (conflict 2026-11-22 061530 3)") == "/m/notes"
    assert core.conflict_original("/m/report.pdf") is None
    assert core.conflict_copy_path("/m/a/r.pdf", "r (conflict 2026-11-22 061530).pdf", "/m") == \
        "/m/a/r (conflict 2026-11-22 061530).pdf"
    assert core.conflict_copy_path("/m/a/r.pdf", "/a (conflict 2026-11-22 061530)/r.pdf", "/m") == \
        "/m/a (conflict 2026-11-22 061530)/r.pdf"


# --- a real mount holding every state ---------------------------------------------------------

HOLD = 12      # seconds the store's answer to uploading.txt's PUT is held: it shows `uploading` that long


@pytest.fixture
def every_state(tmp_path, docfs_serve, mount, xdg):
    """A mount (docfs serve behind a fault proxy) whose files are in every state; yields
    (mount, {relative path: expected shown state})."""
    store = tmp_path / "store"
    write_store(store)
    server = docfs_serve(store)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    made = None
    m = None
    try:
        m = mount(proxy.url, *MOUNT_OPTIONS)
        made = build_every_state(m.path, store, proxy, pin=lambda p: xdg.docfs("pin", p), hold=HOLD)
        yield m, made.expected
    finally:
        if made is not None:
            made.stop_download()
        proxy.clear()
        if m is not None and m.is_mounted():
            # The held answer ends; the mount can then unmount with nothing left to upload but
            # the refused file (kept in the recovery folder).
            try:
                wait_until(lambda: xattr_state(m / "uploading.txt") not in ("modified", "uploading"), HOLD + 30,
                           "uploading.txt to be uploaded once its answer came")
            except AssertionError as error:
                print(error)
        proxy.stop()


@pytest.mark.fuse
def test_emblems_and_menus_on_a_mount_holding_every_state(every_state, tmp_path):
    m, expected = every_state
    for api in APIS:
        require_api(api)
    outside = tmp_path / "not-docfs.txt"
    outside.write_text("x")
    started = time.monotonic()

    # --- emblems: each file manager's extension, every state -----------------------------------
    paths = [str(m / rel) if rel else str(m.path) for rel in expected]
    states = {rel: core.read_attribute(m / rel, core.STATE) for rel in expected}
    for api in APIS:
        got = probe("emblems", api, *paths, str(outside))
        emblems = got["emblems"]
        print(f"{api}: {got['getxattrs']} getxattrs for {len(paths)} files; {emblems}")
        assert emblems[str(outside)] == [], f"{api} put an emblem outside docfs: {emblems[str(outside)]}"
        for rel, shown in expected.items():
            path = str(m / rel) if rel else str(m.path)
            assert emblems[path] == [core.EMBLEMS[shown]], \
                f"{api}: /{rel} (user.docfs.state {states[rel]!r}) shows {emblems[path]}, not {shown}"
        # One getxattr per docfs file, a second only for the two holding changes (uploading.txt,
        # failing/error.txt); the outside file costs none.
        assert got["getxattrs"] == len(paths) + 2, got["getxattrs"]
    assert time.monotonic() - started < HOLD - 5, "too slow: uploading.txt may have been uploaded meanwhile"

    # --- menus ----------------------------------------------------------------------------------
    cli = os.environ.get("DOCFS_BIN") or str(REPO / ".build/debug/docfs")
    env = dict(os.environ, DOCFS_CLI=cli)

    # Evicting what holds changes is refused, and the refusal shown.
    got = probe("menu", "nemo", "docfs::evict", m / "uploading.txt", env=env)
    assert not got["ran"]["ok"] and got["messages"], got
    print(f"refusal shown: {got['messages']}")

    # Nautilus: Keep on this device; Nemo: Free up space (through the docfs command).
    target = m / "placeholder.txt"
    got = probe("menu", "nautilus", "docfs::pin", target, env=env)
    assert [i["label"] for i in got["items"]] == ["_Keep on this device"], got["items"]
    assert got["ran"]["ok"], got
    assert xattr_state(target) == "pinned"
    got = probe("menu", "nemo", "docfs::evict", target, env=env)
    assert [i["label"] for i in got["items"]] == ["_Stop keeping on this device", "_Free up space"], got["items"]
    assert got["ran"]["ok"], got
    assert xattr_state(target) == "placeholder"

    # Caja, without the docfs command on PATH: the extended attributes, set by docfs_desktop.py.
    bare = dict(os.environ, PATH="/usr/bin:/bin")
    bare.pop("DOCFS_CLI", None)
    got = probe("menu", "caja", "docfs::pin", m / "mixed", env=bare)
    assert got["ran"]["ok"], got
    assert core.folder_counts(xattr_state(m / "mixed"))[0], xattr_state(m / "mixed")
    assert xattr_state(m / "mixed" / "y.txt") == "pinned"
    got = probe("menu", "caja", "docfs::evict", m / "mixed", env=bare)
    assert got["ran"]["ok"], got
    assert xattr_state(m / "mixed") == "placeholder=2"

    # Show why: the upload's error; Open the other version: the conflict copy, and back.
    copy = next(rel for rel in expected if core.CONFLICT_COPY.match(rel))
    got = probe("menu", "nautilus", "docfs::why", m / "failing" / "error.txt", env=env)
    error = core.read_attribute(m / "failing" / "error.txt", core.ERROR)
    assert got["messages"] == [["error.txt is not uploaded", error]], got
    got = probe("menu", "nemo", "docfs::other", m / "conflict.txt", env=env)
    assert got["ran"] == {"opened": str(m / copy)}, got
    got = probe("menu", "caja", "docfs::other", m / copy, env=env)
    assert got["ran"] == {"opened": str(m / "conflict.txt")}, got
    # Nothing outside docfs, and nothing for a selection reaching outside it.
    assert probe("menu", "nautilus", "-", tmp_path)["items"] == []
    assert probe("menu", "nautilus", "-", m / "local.txt", tmp_path)["items"] == []


# --- a real file manager, driven like a person would --------------------------------------------

@pytest.mark.fuse
def test_nemo_keeps_a_file_on_this_device_and_frees_it_up_from_its_menu(tmp_path, mount):
    """Under Xvfb: Nemo (with the extension installed for its user) on a docfs mount; the file
    selected by typing its name, its context menu opened (Shift+F10), the item chosen by its
    mnemonic; then user.docfs.state says what the menu did."""
    require_api("nemo")
    require_packages(gui.missing_tools("nemo"))
    store = tmp_path / "store"
    (store / "docs").mkdir(parents=True)
    for rel in ("a.txt", "b.txt", "docs/x.txt"):
        (store / rel).write_bytes(b"hello " * 100)
    m = mount(store, "--evict-delay", "600")
    target = m / "b.txt"
    assert xattr_state(target) == "placeholder"
    session = gui.Session(tmp_path / "desktop")
    try:
        session.start()
        session.env["DOCFS_CLI"] = os.environ.get("DOCFS_BIN") or str(REPO / ".build/debug/docfs")
        window = session.open("nemo", m.path)
        time.sleep(2)                                   # listed and drawn

        def choose(mnemonic: str) -> None:
            session.xdotool("windowfocus", "--sync", str(window))
            session.xdotool("type", "--delay", "60", "b.txt")
            time.sleep(0.5)
            session.xdotool("key", "Escape")            # ends the type-ahead; b.txt stays selected
            time.sleep(0.3)
            session.xdotool("key", "shift+F10")         # its context menu
            time.sleep(1)
            session.screenshot(tmp_path / f"menu-{mnemonic}.png")
            session.xdotool("key", mnemonic)

        def menu_makes(mnemonic: str, state: str) -> None:
            # A loaded machine may open the menu late, and the key then goes elsewhere: try again.
            for attempt in range(3):
                choose(mnemonic)
                try:
                    wait_until(lambda: xattr_state(target) == state, 10 * (attempt + 1), "")
                    return
                except AssertionError:
                    session.xdotool("key", "Escape")
            raise AssertionError(f"b.txt is {xattr_state(target)}, not {state}, after choosing "
                                 f"{mnemonic!r} in Nemo's menu three times (screenshot {tmp_path}/menu-{mnemonic}.png)")

        menu_makes("k", "pinned")                       # _Keep on this device
        menu_makes("f", "placeholder")                  # _Free up space
        assert xattr_state(m / "a.txt") == "placeholder"
    finally:
        session.stop()
    assert "Traceback" not in session.log("nemo"), session.log("nemo")[-3000:]


# --- live updates -------------------------------------------------------------------------------

class FakePublisher:
    """The daemon's side of the events contract: a Unix stream socket; every client gets the
    lines sent."""

    def __init__(self, path: Path):
        self.path = path
        self.clients: list[socket.socket] = []
        self.accepted = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.clients.append(client)
            self.accepted.set()

    def send(self, data: bytes):
        for c in self.clients:
            c.sendall(data)

    def stop(self):
        """As a daemon that exits: the connections end and the socket goes."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for c in self.clients:
            c.close()
        self.clients.clear()
        self.path.unlink(missing_ok=True)


class LiveProbe:
    def __init__(self, api: str, socket_path: str, paths: list[str]):
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(PROBE), "live", api, socket_path, *paths],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def until(self, predicate, timeout=10, what="") -> list[dict]:
        """The lines read until one satisfies `predicate` (which must come within `timeout`)."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            seen.append(line)
            if predicate(line):
                return seen
        raise AssertionError(f"no {what} within {timeout} s; got {seen}")

    def quiet(self, seconds=0.5) -> list[dict]:
        time.sleep(seconds)
        out = []
        while not self.lines.empty():
            out.append(self.lines.get())
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read()


@pytest.mark.fuse
@pytest.mark.parametrize("api", list(APIS))
def test_a_change_event_invalidates_that_file_only(api, tmp_path, mount):
    require_api(api)
    store = tmp_path / "store"
    (store / "docs").mkdir(parents=True)
    for rel in ("a.txt", "other.txt", "docs/b c.txt", "docs/d.txt"):
        (store / rel).write_bytes(b"x")
    m = mount(store)
    paths = {rel: str(m / rel) for rel in ("a.txt", "other.txt", "docs", "docs/b c.txt", "docs/d.txt")}
    sock = tmp_path / "events.sock"
    publisher = FakePublisher(sock)
    live = LiveProbe(api, str(sock), list(paths.values()))
    try:
        live.until(lambda l: l.get("ready"), 30, "ready")
        assert publisher.accepted.wait(10), "the extension did not connect to the event socket"
        live.quiet(0.3)

        publisher.send(b"docs/b%20c.txt\tpinned\n")
        got = live.until(lambda l: l.get("invalidated") == paths["docs/b c.txt"], what="invalidation of docs/b c.txt")
        got += live.quiet()
        invalidated = {l["invalidated"] for l in got if "invalidated" in l}
        assert invalidated == {paths["docs/b c.txt"], paths["docs"]}, invalidated

        # A line in two pieces, a leading slash, an unknown path: still one invalidation.
        publisher.send(b"/a.t")
        time.sleep(0.2)
        publisher.send(b"xt\tlocal\nnot/shown.txt\tlocal\n")
        got = live.until(lambda l: l.get("invalidated") == paths["a.txt"], what="invalidation of a.txt")
        got += live.quiet()
        invalidated = {l["invalidated"] for l in got if "invalidated" in l}
        assert paths["other.txt"] not in invalidated and paths["docs/d.txt"] not in invalidated, invalidated

        # The daemon restarts: the extension connects again, and asks again about everything.
        publisher.stop()
        time.sleep(0.5)
        publisher = FakePublisher(sock)
        got = live.until(lambda l: l.get("connections") == 2, 20, "a second connection")
        got += live.quiet(0.5)
        assert {l["invalidated"] for l in got if "invalidated" in l} == set(paths.values()), got
        assert publisher.accepted.wait(5)
        publisher.send(b"docs/d.txt\tuploading\n")
        got = live.until(lambda l: l.get("invalidated") == paths["docs/d.txt"], what="invalidation after the restart")
    finally:
        publisher.stop()
        stderr = live.stop()
    assert "Traceback" not in stderr, stderr


@pytest.mark.fuse
@pytest.mark.parametrize("api", list(APIS))
def test_emblems_follow_the_daemon_within_a_second(api, tmp_path, mount, xdg):
    """The extension listens on the mount's own socket (`user.docfs.events`): a pin, an
    eviction and a new file's upload each invalidate that file's info within a second."""
    require_api(api)
    store = tmp_path / "store"
    (store / "docs").mkdir(parents=True)
    (store / "docs" / "a.txt").write_bytes(b"x")
    (store / "docs" / "b.txt").write_bytes(b"y")
    m = mount(store)
    assert core.events_socket(str(m.path)), "the daemon announces no events socket"
    paths = [str(m / "docs" / "a.txt"), str(m / "docs" / "b.txt")]
    live = LiveProbe(api, "-", paths)
    try:
        got = live.until(lambda l: l.get("ready"), 30, "ready")
        if not any(l.get("connections") == 1 for l in got):
            live.until(lambda l: l.get("connections") == 1, 10, "a connection to the daemon")
        live.quiet(0.3)
        latencies = {}
        for step, argv in (("pin", ["pin", paths[0]]), ("evict", ["evict", paths[0]]), ("pin b", ["pin", paths[1]])):
            target = argv[1]
            start = time.monotonic()
            result = xdg.docfs(*argv)
            assert result.returncode == 0, result.stderr
            got = live.until(lambda l: l.get("invalidated") == target, 5, f"invalidation of {target} after {step}")
            latencies[step] = time.monotonic() - start
            assert paths[1 - paths.index(target)] not in {l.get("invalidated") for l in got}, got
            live.quiet(0.3)
        print(f"{api}: seconds from the command to the invalidation:", {k: round(v, 3) for k, v in latencies.items()})
        assert max(latencies.values()) < 1.0, latencies
    finally:
        stderr = live.stop()
    assert "Traceback" not in stderr, stderr


# --- install ------------------------------------------------------------------------------------

def test_make_install_desktop_and_uninstall(tmp_path):
    stage = tmp_path / "stage"
    run = lambda *args: subprocess.run(["make", "-s", "-C", str(REPO), *args, f"DESTDIR={stage}", "PREFIX=/usr/local"],
                                       capture_output=True, text=True, timeout=60)
    result = run("install-desktop")
    assert result.returncode == 0, result.stderr
    files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
    want = ["usr/local/share/docfs/desktop/docfs_desktop.py",
            "usr/local/share/nautilus-python/extensions/docfs_nautilus.py",
            "usr/share/nemo-python/extensions/docfs_nemo.py",
            "usr/share/caja-python/extensions/docfs_caja.py",
            "usr/local/share/kio/servicemenus/docfs.desktop"]
    assert set(want) <= set(files), files
    emblems = [f for f in files if f.startswith("usr/local/share/icons/hicolor/scalable/emblems/")]
    assert len(emblems) == len(set(core.EMBLEMS.values())), emblems
    for rel in want[1:]:
        text = (stage / rel).read_text()
        assert "@DOCFS_DESKTOP_LIB@" not in text and "/usr/local/share/docfs/desktop" in text, rel
    assert os.stat(stage / want[-1]).st_mode & 0o111, "KIO takes only executable service menus"
    result = run("uninstall-desktop")
    assert result.returncode == 0, result.stderr
    assert [p for p in stage.rglob("*") if p.is_file()] == []
