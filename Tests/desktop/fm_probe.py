#!/usr/bin/python3
"""Drives a file manager extension of Sources/desktop the way its file manager does, with the
file manager's own API module loaded (gi: Nautilus 4.0, Nemo 3.0, Caja 2.0), in the Python the
file managers embed (Debian's /usr/bin/python3, which has gi). The file infos are the API's own
FileInfo interface, implemented here (the file manager's implementation lives in its binary).

  fm_probe.py emblems API PATH...         one JSON object: {"emblems": {path: [...]}, "getxattrs": N}
  fm_probe.py menu API ACTION|- PATH...   the menu's items; ACTION (e.g. docfs::pin) activated,
                                          waited for: {"items": [...], "ran": {...}, "messages": [...]}
  fm_probe.py live API SOCKET PATH...     tracks PATH's infos, reads the event socket at SOCKET
                                          (for every docfs mount), prints one JSON line per
                                          invalidation or reconnection, until stdin closes
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = os.path.join(REPO, "Sources", "desktop")

APIS = {"nautilus": ("Nautilus", "4.0", "docfs_nautilus.py"),
        "nemo": ("Nemo", "3.0", "docfs_nemo.py"),
        "caja": ("Caja", "2.0", "docfs_caja.py")}


def load(api: str):
    namespace, version, adapter = APIS[api]
    import gi
    gi.require_version(namespace, version)
    from gi.repository import Gio, GObject
    module = getattr(__import__("gi.repository", fromlist=[namespace]), namespace)
    spec = importlib.util.spec_from_file_location(adapter[:-3], os.path.join(SOURCES, adapter))
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    provider_class = next(v for k, v in vars(extension).items() if k.startswith("Docfs") and k.endswith("Extension"))

    class FileInfo(GObject.Object, module.FileInfo):
        """What the file manager hands the extension for one file."""

        def __init__(self, path: str):
            super().__init__()
            self.path = path
            self.emblems: list[str] = []
            self.invalidations = 0

        def do_get_location(self):
            return Gio.File.new_for_path(self.path)

        def do_get_uri(self):
            return Gio.File.new_for_path(self.path).get_uri()

        def do_get_uri_scheme(self):
            return "file"

        def do_get_name(self):
            return os.path.basename(self.path)

        def do_is_directory(self):
            return os.path.isdir(self.path)

        def do_add_emblem(self, emblem):
            self.emblems.append(emblem)

        def do_invalidate_extension_info(self):
            self.invalidations += 1
            self.emblems = []

    return module, provider_class(), FileInfo


def main(argv: list[str]) -> int:
    mode, api, rest = argv[0], argv[1], argv[2:]
    module, provider, FileInfo = load(api)
    core = provider.core
    from gi.repository import GLib

    if mode == "emblems":
        core.live = False
        infos = [FileInfo(p) for p in rest]
        core.getxattr_calls = 0
        for info in infos:
            result = provider.update_file_info(info)
            assert result == module.OperationResult.COMPLETE, result
        first_pass = core.getxattr_calls
        # What the file manager does with an info the extension invalidated: asks again.
        asked = {id(i): 0 for i in infos}
        for _ in range(3):
            again = [i for i in infos if i.invalidations > asked[id(i)]]
            for info in again:
                asked[id(info)] = info.invalidations
                provider.update_file_info(info)
        print(json.dumps({"emblems": {i.path: i.emblems for i in infos}, "getxattrs": first_pass,
                          "asked again": core.getxattr_calls - first_pass}))
        return 0

    if mode == "menu":
        core.live = False
        action, paths = rest[0], rest[1:]
        messages, ran = [], {}
        core.show_message = lambda title, text: messages.append([title, text])
        core.open_path = lambda path: ran.update(opened=path)
        loop = GLib.MainLoop()

        def steered(operation, paths, ok, output):
            ran.update(operation=operation, paths=paths, ok=ok, output=output)
            loop.quit()

        core.on_steered = steered
        infos = [FileInfo(p) for p in paths]
        items = provider.get_file_items(infos) if api == "nautilus" else provider.get_file_items(None, infos)
        listed = [{"name": i.props.name, "label": i.props.label} for i in items]
        if action != "-":
            (item,) = [i for i in items if i.props.name == action]
            item.activate()
            if core.running:
                GLib.timeout_add_seconds(60, loop.quit)
                loop.run()
        print(json.dumps({"items": listed, "ran": ran, "messages": messages}))
        return 0

    if mode == "live":
        sock_path, paths = rest[0], rest[1:]
        if sock_path != "-":          # "-": the mount's own user.docfs.events
            core.socket_path_of = lambda root: sock_path
        infos = {p: FileInfo(p) for p in paths}
        seen = {p: 0 for p in paths}
        loop = GLib.MainLoop()

        def report():
            for p, info in infos.items():
                if info.invalidations != seen[p]:
                    seen[p] = info.invalidations
                    print(json.dumps({"invalidated": p, "count": info.invalidations}), flush=True)
            for root, stream in core.streams.items():
                count = stream.connections if stream else 0
                if count != report.connections.get(root):
                    report.connections[root] = count
                    print(json.dumps({"connections": count, "root": root}), flush=True)
            return True
        report.connections = {}

        for info in infos.values():
            provider.update_file_info(info)
        report()
        GLib.timeout_add(20, report)
        GLib.io_add_watch(sys.stdin.fileno(), GLib.IOCondition.IN | GLib.IOCondition.HUP,
                          lambda *_: (loop.quit(), False)[1])
        print(json.dumps({"ready": True}), flush=True)
        loop.run()
        return 0

    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
