#!/usr/bin/env python3
"""Screenshots of Nautilus, Nemo and Caja (Debian's) showing docfs's emblems and menu.

Serves a small store with `docfs serve` behind Tests/integration's fault proxy, mounts it, puts
its files into every state (Tests/desktop/states.py: placeholder, downloading, local, pinned,
uploading, a failing upload, a conflict, and folders summing them up), then for each file
manager runs it under Xvfb with the extensions installed for a throwaway user
(Tests/desktop/gui.py) and saves Tests/screenshot/nautilus-emblems.png, caja-emblems.png and,
with its context menu open on the conflicted file, nemo-menu.png. Stops all it started and unmounts,
whatever happens. Not part of `make test`.

Usage: Tests/screenshot/desktop_emblems.py [--docfs BIN] [--only nautilus,nemo,caja] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "integration"))
sys.path.insert(0, str(REPO / "Tests" / "desktop"))
from fault_proxy import FaultProxy  # noqa: E402
from helpers import wait_until, xattr_state  # noqa: E402

import gui  # noqa: E402
from states import MOUNT_OPTIONS, build_every_state, write_store  # noqa: E402

HOLD = 240          # uploading.txt shows `uploading` this long: time for the three screenshots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docfs", default=str(REPO / ".build" / "debug" / "docfs"))
    parser.add_argument("--only", default="nautilus,nemo,caja")
    parser.add_argument("--out", default=str(REPO / "Tests" / "screenshot"))
    args = parser.parse_args()
    managers = args.only.split(",")
    missing = sorted({p for m in managers for p in gui.missing_tools(m)})
    if missing:
        raise SystemExit(f"missing: {' '.join(missing)} (apt-get install them, or run Tests/support/setup.sh)")

    work = Path(tempfile.mkdtemp(prefix="docfs-desktop-shots-"))
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), XDG_CACHE_HOME=str(work / "cache"))
    store, mnt = work / "store", work / "Cloud"
    write_store(store)
    mnt.mkdir()
    server = subprocess.Popen([args.docfs, "serve", str(store), "--host", "127.0.0.1", "--port", "0"],
                              stdout=open(work / "serve.out", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    proxy = made = None
    mounted = False
    try:
        found = wait_until(lambda: re.search(r"at http://127\.0\.0\.1:(\d+)", (work / "serve.out").read_text()), 30,
                           "docfs serve to start")
        proxy = FaultProxy(int(found.group(1))).start()
        subprocess.run([args.docfs, "mount", proxy.url, str(mnt), "--log-file", str(work / "mount.log"), *MOUNT_OPTIONS],
                       check=True, env=env, timeout=60)
        mounted = True
        made = build_every_state(mnt, store, proxy, hold=HOLD, download_rate=5_000,
                                 pin=lambda p: subprocess.run([args.docfs, "pin", str(p)], check=True, env=env,
                                                              capture_output=True, timeout=60))
        for manager in managers:
            session = gui.Session(work / f"desktop-{manager}")
            try:
                session.start()
                session.env["DOCFS_CLI"] = args.docfs
                window = session.open(manager, mnt)
                time.sleep(4)
                if manager != "nemo":
                    print(f"{manager}: {session.screenshot(Path(args.out) / f'{manager}-emblems.png')}")
                else:
                    session.xdotool("windowfocus", "--sync", str(window))
                    session.xdotool("type", "--delay", "60", "conflict.txt")
                    time.sleep(0.5)
                    session.xdotool("key", "Escape")
                    time.sleep(0.3)
                    session.xdotool("key", "shift+F10")
                    time.sleep(1.5)
                    print(f"nemo menu: {session.screenshot(Path(args.out) / 'nemo-menu.png')}")
            finally:
                session.stop()
        states = {rel or "/": xattr_state(mnt / rel) for rel in made.expected}
        print("states then:", states)
        return 0
    finally:
        if made is not None:
            made.stop_download()
        if proxy is not None:
            proxy.clear()
        if mounted:
            # uploading.txt's answer is still held: --force keeps it in the recovery folder of
            # this throwaway state directory (the store keeps its old content).
            result = subprocess.run([args.docfs, "unmount", "--force", str(mnt)], env=env, capture_output=True,
                                    text=True, timeout=120)
            if result.returncode != 0:
                print(f"docfs unmount: {result.stderr.strip()}; lazy unmount", file=sys.stderr)
                subprocess.run(["fusermount3", "-uz", str(mnt)])
        if proxy is not None:
            proxy.stop()
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
