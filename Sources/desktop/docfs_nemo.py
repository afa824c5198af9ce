"""docfs in Nemo (nemo-python): emblems per file state and the Keep on this device / Free up
space menu on docfs mounts. The logic is in docfs_desktop.py; this file only names Nemo's API."""
import os
import sys

# Where docfs_desktop.py is: `make install` writes its folder here; next to this file otherwise.
for _folder in ("@DOCFS_DESKTOP_LIB@", os.path.dirname(os.path.abspath(__file__))):
    if not _folder.startswith("@") and os.path.isfile(os.path.join(_folder, "docfs_desktop.py")):
        if _folder not in sys.path:
            sys.path.insert(0, _folder)
        break

import gi  # noqa: E402

gi.require_version("Nemo", "3.0")
from gi.repository import Nemo  # noqa: E402

import docfs_desktop  # noqa: E402

DocfsNemoExtension = docfs_desktop.extension_class(Nemo, "Nemo", "3.0", extra=(Nemo.NameAndDescProvider,),
    # Nemo's list of extensions (Preferences, Plugins)
    get_name_and_desc=lambda self: ["docfs:::Emblems for what is local on docfs mounts; Keep on this device, Free up space"])
