"""docfs in Caja (caja-python): emblems per
file state and the Keep on this device / Free up space menu on docfs mounts. The logic is in
docfs_desktop.py; this file only speaks Caja's API."""
import os
import sys

# Where docfs_desktop.py is: `make install` writes its folder here; next to this file otherwise.
for _folder in ("@DOCFS_DESKTOP_LIB@", os.path.dirname(os.path.abspath(__file__))):
    if not _folder.startswith("@") and os.path.isfile(os.path.join(_folder, "docfs_desktop.py")):
        if _folder not in sys.path:
            sys.path.insert(0, _folder)
        break

import gi  # noqa: E402

gi.require_version("Caja", "2.0")
from gi.repository import GObject, Caja  # noqa: E402

import docfs_desktop  # noqa: E402


class DocfsCajaExtension(GObject.GObject, Caja.InfoProvider, Caja.MenuProvider):
    def __init__(self):
        super().__init__()
        self.core = docfs_desktop.shared(gtk_version="3.0")

    def update_file_info(self, file):
        for emblem in self.core.emblems(file):
            file.add_emblem(emblem)
        return Caja.OperationResult.COMPLETE

    def _items(self, infos):
        items = []
        for action in self.core.actions(infos):
            item = Caja.MenuItem(name=action.name, label=action.label, tip=action.tip, icon=action.icon)
            item.connect("activate", lambda _item, run=action.run: run())
            items.append(item)
        return items

    # (window, files) and (window, folder).
    def get_file_items(self, *args):
        return self._items(args[-1])

    def get_background_items(self, *args):
        return self._items([args[-1]])
