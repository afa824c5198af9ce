#!/usr/bin/env python3
"""docfs in file managers: what Nautilus, Nemo and Caja (through their Python extensions) and
Dolphin (through a service menu) show and do on a docfs mount. One module; the per-file-manager
files (docfs_nautilus.py, docfs_nemo.py, docfs_caja.py) are thin adapters over `Extension`.

- Mounts: the docfs mounts are the entries of type `fuse.docfs` in /proc/self/mountinfo, read
  again at most once a second (and at once when the kernel says the mount table changed).
  Nothing is shown, and nothing is asked, for a file on no docfs mount.
- Emblems: one `getxattr(user.docfs.state)` per file the file manager asks about, no other
  call; only a file holding changes not on the store yet (`modified`, `uploading`) costs a
  second one, `user.docfs.error`, to tell a failing upload. A conflict is told by name: a
  conflict copy `NAME (conflict DATE).EXT` and the file it belongs to (its sibling `NAME.EXT`)
  both get the conflict emblem.
- Menus: "Keep on this device" (pin), "Stop keeping on this device" (unpin), "Free up space"
  (evict), and on a file whose upload fails "Show why" (its `user.docfs.error`), on a file with
  a conflict copy "Open the other version". They run `docfs pin|unpin|evict` (or, without the
  docfs command on PATH, this module as a script, which sets the same extended attributes),
  in the background.
- Live updates: a mount whose root has `user.docfs.events` (the path of a Unix stream socket)
  sends one line per change, `PATH<TAB>STATE\n` (PATH relative to the mount root,
  percent-encoded); each line makes the file manager ask again about that file (and its folder,
  whose emblem sums up its files). The connection is made again when it ends (daemon restart).

Run as a script: `docfs_desktop.py pin|unpin|evict|state PATH...` (what the Dolphin service menu
and the fallback above run).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import sys
import time
import urllib.parse

STATE = "user.docfs.state"
ERROR = "user.docfs.error"
CONFLICT = "user.docfs.conflict"
PINNED = "user.docfs.pinned"
EVICT = "user.docfs.evict"
EVENTS = "user.docfs.events"
FSTYPE = "fuse.docfs"

#: The emblem per shown state. The icons are docfs's own (Sources/desktop/emblems, installed into
#: the hicolor theme, so every icon theme finds them): no freedesktop emblem says "in the cloud"
#: or "kept on this device".
EMBLEMS = {
    "placeholder": "emblem-docfs-cloud",
    "downloading": "emblem-docfs-downloading",
    "local": "emblem-docfs-local",
    "pinned": "emblem-docfs-pinned",
    "modified": "emblem-docfs-uploading",
    "uploading": "emblem-docfs-uploading",
    "error": "emblem-docfs-error",
    "conflict": "emblem-docfs-conflict",
}

FILE_STATES = ("placeholder", "downloading", "local", "pinned", "modified", "uploading")
#: `NAME (conflict 2026-11-22 061530).EXT`, `NAME (conflict 2026-11-22 061530 2)` (ConflictName.swift).
CONFLICT_COPY = re.compile(r"^(?P<stem>.+) \(conflict \d{4}-\d{2}-\d{2} \d{6}(?: \d+)?\)(?P<ext>\.[^.]*)?$", re.S)

HERE = os.path.dirname(os.path.abspath(__file__))
EMBLEM_DIR = os.path.join(HERE, "emblems")


# --- extended attributes -----------------------------------------------------------------------

def read_attribute(path: str, name: str) -> str | None:
    """The value of `name` on `path` (a last symlink not followed: docfs's attributes are on
    files and folders), or None when it has none or cannot be read."""
    try:
        return os.getxattr(path, name, follow_symlinks=False).rstrip(b"\0").decode("utf-8", "replace").strip()
    except OSError:
        return None


def events_socket(root: str) -> str | None:
    """The path of the mount's event socket (`user.docfs.events` of its root), if it has one."""
    return read_attribute(root, EVENTS) or None


# --- mounts ------------------------------------------------------------------------------------

def _unescape(field: str) -> str:
    """A mountinfo field (`\\040` for a space) as the path it names."""
    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), os.fsencode(field))
    return os.fsdecode(raw)


def docfs_roots(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points of the docfs mounts in `mountinfo`, the longest first."""
    roots = []
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) >= 5 and tail and tail[0] == FSTYPE:
                    roots.append(_unescape(fields[4]))
    except OSError:
        pass
    return sorted(set(roots), key=len, reverse=True)


class Mounts:
    """The docfs mount points, read again when older than `ttl` seconds or when the kernel said
    the mount table changed (a GLib watch on /proc/self/mountinfo, where a main loop runs)."""

    def __init__(self, mountinfo: str = "/proc/self/mountinfo", ttl: float = 1.0, clock=time.monotonic):
        self.mountinfo = mountinfo
        self.ttl = ttl
        self.clock = clock
        self._roots: list[str] = []
        self._read_at: float | None = None
        self._watch_file = None

    def roots(self) -> list[str]:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.ttl:
            self._roots = docfs_roots(self.mountinfo)
            self._read_at = now
        return self._roots

    def stale(self) -> None:
        self._read_at = None

    def root_of(self, path: str) -> str | None:
        """The mount point of the docfs mount holding `path` (the innermost), or None."""
        for root in self.roots():
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return root
        return None

    def watch(self) -> None:
        """Marks the table stale as soon as the kernel reports a mount or unmount (poll's
        POLLPRI/POLLERR on /proc/self/mountinfo), where a GLib main loop runs."""
        try:
            from gi.repository import GLib
            self._watch_file = open(self.mountinfo, "rb")

            def changed(_fd, _condition):
                self.stale()
                try:
                    self._watch_file.seek(0)
                    self._watch_file.read()
                except OSError:
                    pass
                return True

            self._watch_file.read()
            GLib.io_add_watch(self._watch_file.fileno(), GLib.PRIORITY_DEFAULT,
                              GLib.IOCondition.PRI | GLib.IOCondition.ERR, changed)
        except Exception:  # noqa: BLE001 - without the watch the TTL still bounds staleness
            self._watch_file = None


# --- what a state means ------------------------------------------------------------------------

def folder_counts(summary: str) -> tuple[bool, dict[str, int]]:
    """(pinned, counts) of a folder's `user.docfs.state`: `pinned placeholder=12 local=3`."""
    words = summary.split()
    pinned = bool(words) and words[0] == "pinned"
    counts = {}
    for word in words[1:] if pinned else words:
        key, sep, value = word.partition("=")
        if sep and value.isdigit():
            counts[key] = int(value)
    return pinned, counts


def is_folder_state(state: str) -> bool:
    return state not in FILE_STATES


def shown_state(state: str | None, *, error: str | None = None, name: str = "", conflicted: bool = False) -> str | None:
    """The state an emblem shows: a file's own (`error` if its upload fails, `conflict` for a
    conflict copy or the file it belongs to), or for a folder the most pressing of its files'."""
    if state is None:
        return None
    if state in ("error", "conflict"):             # a live event may say so itself
        return state
    if not is_folder_state(state):
        if error and state in ("modified", "uploading"):
            return "error"
        if conflicted or CONFLICT_COPY.match(name or ""):
            return "conflict"
        return state
    pinned, counts = folder_counts(state)
    for pressing in ("error", "uploading", "modified", "downloading"):
        if counts.get(pressing):
            return pressing
    if CONFLICT_COPY.match(name or "") or conflicted:
        return "conflict"
    if counts.get("placeholder") or state.split()[-1] == "unlisted":
        return "downloading" if pinned else "placeholder"   # a pin still fetching
    if pinned:
        return "pinned"
    if counts.get("local") or counts.get("pinned"):
        return "local"
    return None                                      # empty


def emblem_for(state: str | None, **kwargs) -> str | None:
    shown = shown_state(state, **kwargs)
    return EMBLEMS.get(shown) if shown else None


def conflict_original(path: str) -> str | None:
    """The file a conflict copy belongs to: `a/report (conflict …).pdf` -> `a/report.pdf`."""
    folder, name = os.path.split(path)
    m = CONFLICT_COPY.match(name)
    return os.path.join(folder, m.group("stem") + (m.group("ext") or "")) if m else None


def conflict_copy_path(path: str, value: str, root: str) -> str:
    """Where the conflict copy named by `user.docfs.conflict` is: a name next to the file, or a
    path from the mount's root (a copy kept under a folder made again)."""
    if "/" in value:
        return os.path.join(root, value.lstrip("/"))
    return os.path.join(os.path.dirname(path), value)


# --- the docfs command, or this module as a script ----------------------------------------------

def docfs_command() -> list[str]:
    """How to run `docfs pin|unpin|evict`: $DOCFS_CLI, the `docfs` on PATH, or this module."""
    if os.environ.get("DOCFS_CLI"):
        return [os.environ["DOCFS_CLI"]]
    found = shutil.which("docfs")
    if found:
        return [found]
    return [shutil.which("python3") or "/usr/bin/python3", os.path.abspath(__file__)]


def steer(operation: str, paths: list[str]) -> list[str]:
    """Pins, unpins or evicts `paths` through the extended attributes; the failures, as lines."""
    failures = []
    for path in paths:
        try:
            if operation == "pin":
                os.setxattr(path, PINNED, b"1")
            elif operation == "unpin":
                os.setxattr(path, PINNED, b"0")
            elif operation == "evict":
                os.setxattr(path, EVICT, b"1")
            else:
                raise ValueError(operation)
        except OSError as error:
            if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                why = "not on a docfs mount"
            elif error.errno == errno.EBUSY and operation == "evict":
                why = "open, or holding changes not on the store yet"
            else:
                why = os.strerror(error.errno)
            failures.append(f"cannot {operation} {path}: {why}")
    return failures


# --- the extension -----------------------------------------------------------------------------

class Tracker:
    """The file infos handed out, by path, held weakly (a GObject weak reference: the file
    manager's object, not Python's wrapper of it), so a change can invalidate just that one."""

    def __init__(self):
        self._refs: dict[str, tuple[int, object]] = {}
        self._token = 0

    def track(self, path: str, info) -> None:
        current = self._refs.get(path)
        if current is not None and current[1]() is info:
            return
        self._token += 1
        token = self._token
        try:
            ref = info.weak_ref(self._gone, path, token)
        except Exception:  # noqa: BLE001 - not a GObject (a test double): nothing to track
            return
        self._refs[path] = (token, ref)

    def _gone(self, path: str, token: int) -> None:
        current = self._refs.get(path)
        if current is not None and current[0] == token:
            del self._refs[path]

    def get(self, path: str):
        entry = self._refs.get(path)
        return entry[1]() if entry else None

    def paths_under(self, root: str) -> list[str]:
        prefix = root.rstrip("/") + "/"
        return [p for p in self._refs if p == root or p.startswith(prefix)]

    def __len__(self) -> int:
        return len(self._refs)


class EventStream:
    """The connection to one mount's event socket; calls on_change(root, path, state) per line,
    on_reset(root) after a reconnection (what changed meanwhile is unknown)."""

    MAX_DELAY = 10.0

    def __init__(self, root: str, on_change, on_reset, still_mounted, socket_path_of=None):
        self.root = root
        self.on_change = on_change
        self.on_reset = on_reset
        self.still_mounted = still_mounted
        self.socket_path_of = socket_path_of or (lambda root: events_socket(root))
        self.sock: socket.socket | None = None
        self.watch_id = 0
        self.retry_id = 0
        self.delay = 0.25
        self.connections = 0
        self.closed = False
        self.buffer = b""

    def start(self) -> bool:
        """Connects; False (and no retries) when the mount publishes no events."""
        path = self.socket_path_of(self.root)
        if not path:
            return False
        self._connect(path)
        return True

    def _connect(self, path: str | None = None) -> bool:
        from gi.repository import GLib
        self.retry_id = 0
        if self.closed:
            return False
        if not self.still_mounted(self.root):
            self.close()
            return False
        path = path or self.socket_path_of(self.root)
        if path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(1.0)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
            else:
                sock.setblocking(False)
                self.sock = sock
                self.buffer = b""
                self.delay = 0.25
                self.connections += 1
                self.watch_id = GLib.io_add_watch(sock.fileno(), GLib.PRIORITY_DEFAULT,
                                                  GLib.IOCondition.IN | GLib.IOCondition.HUP | GLib.IOCondition.ERR,
                                                  self._readable)
                if self.connections > 1:
                    self.on_reset(self.root)
                return False
        self._retry()
        return False

    def _retry(self) -> None:
        from gi.repository import GLib
        if self.closed or self.retry_id:
            return
        self.retry_id = GLib.timeout_add(int(self.delay * 1000), self._connect)
        self.delay = min(self.delay * 2, self.MAX_DELAY)

    def _readable(self, _fd, _condition) -> bool:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._drop()
            self._retry()
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            rel, tab, state = line.partition(b"\t")
            if not tab:
                continue
            rel = urllib.parse.unquote_to_bytes(rel.strip()).lstrip(b"/")
            path = os.path.join(self.root, os.fsdecode(rel)) if rel else self.root
            self.on_change(self.root, path.rstrip("/") if path != "/" else path,
                           state.decode("utf-8", "replace").strip())
        return True

    def _drop(self) -> None:
        from gi.repository import GLib
        if self.watch_id:
            GLib.source_remove(self.watch_id)
            self.watch_id = 0
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def close(self) -> None:
        from gi.repository import GLib
        self.closed = True
        if self.retry_id:
            GLib.source_remove(self.retry_id)
            self.retry_id = 0
        if self.watch_id:
            # From inside _readable the source is removed by returning False.
            try:
                GLib.source_remove(self.watch_id)
            except Exception:  # noqa: BLE001
                pass
            self.watch_id = 0
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Action:
    """A menu item: `label` with its mnemonic (`_K`), as all three file managers take it."""

    def __init__(self, name: str, label: str, tip: str, run, icon: str = ""):
        self.name, self.label, self.tip, self.run, self.icon = name, label, tip, run, icon


class Extension:
    """What the three file managers share: emblems per file info, menu actions, live updates.

    Hooks a test (or an adapter) may replace: `show_message(title, text)`, `open_path(path)`,
    `command()` (the argv prefix of the docfs command), `socket_path_of(root)`."""

    def __init__(self, mounts: Mounts | None = None, live: bool = True, gtk_version: str | None = None):
        self.mounts = mounts or Mounts()
        self.tracker = Tracker()
        self.live = live
        self.gtk_version = gtk_version
        self.streams: dict[str, EventStream | None] = {}
        self.conflicted: set[str] = set()        # originals of the conflict copies seen
        self.socket_path_of = events_socket
        self.command = docfs_command
        self.running = 0                           # steering commands under way
        self.on_steered = None                     # called with (operation, paths, ok, output)
        self.getxattr_calls = 0
        if live:
            self.mounts.watch()

    # --- a file info -> its path --------------------------------------------------------------

    @staticmethod
    def path_of(info) -> str | None:
        try:
            if info.get_uri_scheme() != "file":
                return None
            location = info.get_location()
            return location.get_path() if location is not None else None
        except Exception:  # noqa: BLE001
            return None

    def docfs_path(self, info) -> tuple[str, str] | None:
        """(path, mount root) of a file info on a docfs mount; None elsewhere (no I/O)."""
        path = self.path_of(info)
        if not path:
            return None
        root = self.mounts.root_of(path)
        return (path, root) if root else None

    # --- emblems ------------------------------------------------------------------------------

    def state_of(self, path: str) -> str | None:
        self.getxattr_calls += 1
        return read_attribute(path, STATE)

    def emblems(self, info) -> list[str]:
        """The emblems of a file info (at most one), tracking it for live updates."""
        found = self.docfs_path(info)
        if found is None:
            return []
        path, root = found
        self.tracker.track(path, info)
        self._ensure_stream(root)
        state = self.state_of(path)
        if state is None:
            return []
        error = None
        if state in ("modified", "uploading"):
            self.getxattr_calls += 1
            error = read_attribute(path, ERROR)
        name = os.path.basename(path)
        original = conflict_original(path)
        if original is not None and original not in self.conflicted:
            self.conflicted.add(original)
            self.invalidate(original)
        emblem = emblem_for(state, error=error, name=name, conflicted=path in self.conflicted)
        return [emblem] if emblem else []

    # --- live updates -------------------------------------------------------------------------

    def _ensure_stream(self, root: str) -> None:
        if not self.live or root in self.streams:
            return
        stream = EventStream(root, self._changed, self._reset, self._still_mounted,
                             socket_path_of=lambda r: self.socket_path_of(r))
        try:
            self.streams[root] = stream if stream.start() else None
        except Exception:  # noqa: BLE001 - no GLib: no live updates
            self.streams[root] = None

    def _still_mounted(self, root: str) -> bool:
        self.mounts.stale()
        if self.mounts.root_of(root) == root:
            return True
        self.streams.pop(root, None)
        return False

    def _changed(self, root: str, path: str, state: str) -> None:
        self.invalidate(path)
        if path != root:
            self.invalidate(os.path.dirname(path))      # its folder's summary changed too

    def _reset(self, root: str) -> None:
        for path in self.tracker.paths_under(root):
            self.invalidate(path)

    def invalidate(self, path: str) -> bool:
        info = self.tracker.get(path)
        if info is None:
            return False
        info.invalidate_extension_info()
        return True

    # --- menus --------------------------------------------------------------------------------

    def actions(self, infos) -> list[Action]:
        """The menu actions for the selected file infos (or a folder's background): none unless
        every one is on a docfs mount. Reads the selection's states (a right click, not a listing)."""
        chosen = []
        for info in infos:
            found = self.docfs_path(info)
            if found is None:
                return []
            chosen.append(found)
        if not chosen:
            return []
        paths = [p for p, _ in chosen]
        states = [read_attribute(p, STATE) for p in paths] if len(paths) <= 200 else [None] * len(paths)
        folder_pins = [s is not None and is_folder_state(s) and folder_counts(s)[0] for s in states]
        pinned = [s == "pinned" or fp for s, fp in zip(states, folder_pins)]
        placeholder_only = []
        for s in states:
            if s is None or not is_folder_state(s):
                placeholder_only.append(s == "placeholder")
            else:
                fp, counts = folder_counts(s)
                placeholder_only.append(not fp and all(k == "placeholder" for k in counts))
        items = []
        if not all(pinned):
            items.append(Action("docfs::pin", "_Keep on this device",
                                "Download now and keep the local copy (a folder: everything in it)",
                                lambda: self.run("pin", paths), icon=EMBLEMS["pinned"]))
        if any(pinned):
            items.append(Action("docfs::unpin", "_Stop keeping on this device",
                                "Let the local copy go when nothing uses it",
                                lambda: self.run("unpin", paths)))
        if not all(placeholder_only):
            items.append(Action("docfs::evict", "_Free up space",
                                "Remove the local copy; the file stays on the store",
                                lambda: self.run("evict", paths), icon=EMBLEMS["placeholder"]))
        if len(chosen) == 1:
            path, root = chosen[0]
            error = read_attribute(path, ERROR)
            if error:
                items.append(Action("docfs::why", "Show _why",
                                    "Why this file cannot be uploaded",
                                    lambda: self.show_message(f"{os.path.basename(path)} is not uploaded",
                                                              error), icon=EMBLEMS["error"]))
            other = self.other_version(path, root)
            if other:
                items.append(Action("docfs::other", "Open the other _version",
                                    f"Open {os.path.basename(other)}",
                                    lambda: self.open_path(other), icon=EMBLEMS["conflict"]))
        return items

    def other_version(self, path: str, root: str) -> str | None:
        """A conflicted file's conflict copy (`user.docfs.conflict`), or a conflict copy's original."""
        value = read_attribute(path, CONFLICT)
        if value:
            return conflict_copy_path(path, value, root)
        original = conflict_original(path)
        if original and os.path.lexists(original):
            return original
        return None

    # --- doing -------------------------------------------------------------------------------

    def run(self, operation: str, paths: list[str]) -> None:
        """`docfs OPERATION PATHS` in the background; the affected file infos are invalidated
        when it ends, and a failure is shown."""
        from gi.repository import Gio
        argv = [*self.command(), operation, *paths]
        flags = Gio.SubprocessFlags.STDOUT_PIPE | Gio.SubprocessFlags.STDERR_MERGE
        try:
            process = Gio.Subprocess.new(argv, flags)
        except Exception as error:  # noqa: BLE001
            self.show_message(f"Cannot run docfs {operation}", str(error))
            return
        self.running += 1

        def done(proc, result):
            self.running -= 1
            try:
                _ok, output, _ = proc.communicate_utf8_finish(result)
            except Exception as error:  # noqa: BLE001
                output = str(error)
            ok = proc.get_successful()
            for path in paths:
                for tracked in self.tracker.paths_under(path):
                    self.invalidate(tracked)
                self.invalidate(os.path.dirname(path))
            if not ok:
                verb = {"pin": "keep", "unpin": "stop keeping", "evict": "free up"}.get(operation, operation)
                self.show_message(f"Could not {verb} everything", (output or "").strip() or "docfs failed")
            if self.on_steered:
                self.on_steered(operation, paths, ok, output or "")

        process.communicate_utf8_async(None, None, done)

    def show_message(self, title: str, text: str) -> None:
        """A dialog in the file manager's own toolkit (GTK 4 in Nautilus 43, GTK 3 in Nemo and
        Caja); `notify-send` where that fails; stderr as the last resort."""
        try:
            import gi
            if self.gtk_version:
                gi.require_version("Gtk", self.gtk_version)
            from gi.repository import Gtk
            dialog = Gtk.MessageDialog(message_type=Gtk.MessageType.WARNING, buttons=Gtk.ButtonsType.CLOSE,
                                       text=title, secondary_text=text)
            dialog.set_title("docfs")
            dialog.connect("response", lambda d, _r: d.destroy())
            dialog.present()
            return
        except Exception:  # noqa: BLE001
            pass
        if shutil.which("notify-send"):
            try:
                from gi.repository import Gio
                Gio.Subprocess.new(["notify-send", "-a", "docfs", title, text], Gio.SubprocessFlags.NONE)
                return
            except Exception:  # noqa: BLE001
                pass
        sys.stderr.write(f"docfs: {title}: {text}\n")

    def open_path(self, path: str) -> None:
        from gi.repository import Gio
        try:
            Gio.AppInfo.launch_default_for_uri(Gio.File.new_for_path(path).get_uri(), None)
        except Exception as error:  # noqa: BLE001
            self.show_message(f"Cannot open {os.path.basename(path)}", str(error))


_shared: Extension | None = None


def extension_class(api, name: str, gtk_version: str, extra=(), **methods):
    """The class a file manager's Python support loads, for `api`, its gi module (Nautilus, Nemo
    or Caja: the three shape their InfoProvider and MenuProvider alike); `extra` interfaces and
    `methods` add what one of them asks more (Nemo's NameAndDescProvider)."""
    from gi.repository import GObject

    def __init__(self):
        GObject.GObject.__init__(self)
        self.core = shared(gtk_version=gtk_version)

    def update_file_info(self, file):
        for emblem in self.core.emblems(file):
            file.add_emblem(emblem)
        return api.OperationResult.COMPLETE

    def items(self, infos):
        made = []
        for action in self.core.actions(infos):
            item = api.MenuItem(name=action.name, label=action.label, tip=action.tip, icon=action.icon)
            item.connect("activate", lambda _item, run=action.run: run())
            made.append(item)
        return made

    # (window, files) and (window, folder); Nautilus API 4.0 dropped the window: the last one.
    body = dict(__gtype_name__=f"Docfs{name}Extension", __init__=__init__, update_file_info=update_file_info,
                _items=items, get_file_items=lambda self, *args: self._items(args[-1]),
                get_background_items=lambda self, *args: self._items([args[-1]]), **methods)
    return type(f"Docfs{name}Extension", (GObject.GObject, api.InfoProvider, api.MenuProvider, *extra), body)


def shared(gtk_version: str | None = None) -> Extension:
    """The one Extension of this process (the file manager loads its adapter once)."""
    global _shared
    if _shared is None:
        _shared = Extension(gtk_version=gtk_version)
        add_emblem_search_path(gtk_version)
    return _shared


def add_emblem_search_path(gtk_version: str | None) -> None:
    """Lets the toolkit find the emblems next to this module too (a per-user install, or the
    source tree), besides the hicolor theme `make install` puts them in."""
    if not os.path.isdir(EMBLEM_DIR) or not gtk_version:
        return
    try:
        import gi
        gi.require_version("Gtk", gtk_version)
        from gi.repository import Gtk
        if gtk_version.startswith("4"):
            from gi.repository import Gdk
            display = Gdk.Display.get_default()
            if display is not None:
                Gtk.IconTheme.get_for_display(display).add_search_path(EMBLEM_DIR)
        else:
            from gi.repository import Gdk
            if Gdk.Screen.get_default() is not None:
                Gtk.IconTheme.get_default().append_search_path(EMBLEM_DIR)
    except Exception:  # noqa: BLE001 - the hicolor copies still serve
        pass


# --- as a script -------------------------------------------------------------------------------

def _report(title: str, text: str) -> None:
    """What the script says where no terminal shows it (Dolphin's service menu): kdialog or
    notify-send, and stderr."""
    sys.stderr.write(text + "\n")
    if sys.stderr.isatty():
        return
    for argv in (["kdialog", "--title", "docfs", "--sorry", f"{title}\n\n{text}"],
                 ["notify-send", "-a", "docfs", title, text]):
        if shutil.which(argv[0]):
            import subprocess
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
            return


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("pin", "unpin", "evict", "state"):
        sys.stderr.write("usage: docfs_desktop.py pin|unpin|evict|state PATH...\n")
        return 2
    operation, paths = argv[0], [os.path.abspath(p) for p in argv[1:]]
    mounts = Mounts()
    outside = [p for p in paths if mounts.root_of(os.path.realpath(p)) is None]
    if outside:
        _report("Not on a docfs mount", "\n".join(f"{p} is not on a docfs mount" for p in outside))
        return 1
    if operation == "state":
        for p in paths:
            print(f"{p}\t{read_attribute(p, STATE)}")
        return 0
    # The docfs command names what evict refuses; without it, the attributes.
    if os.environ.get("DOCFS_CLI") or shutil.which("docfs"):
        import subprocess
        result = subprocess.run([*docfs_command(), operation, *paths], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True)
        if result.returncode != 0:
            _report(f"docfs {operation} failed", (result.stderr or result.stdout).strip())
        return result.returncode
    failures = steer(operation, paths)
    if failures:
        _report(f"docfs {operation} failed", "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
