#!/usr/bin/env python3
"""Thumbnails without downloads, in a real file manager (issue 35; not part of `make test`).

Serves a folder of 40 photos with `docfs serve` (previews on: gdk-pixbuf-thumbnailer), mounts
it, opens the folder in Nemo, Caja or Nautilus under Xvfb (Tests/desktop/gui.py, with the
mount's XDG_CACHE_HOME, where docfs writes the thumbnails), takes a screenshot once every
thumbnail is written and the file manager had 5 s to show them, and prints what the server
sent: preview requests, and downloads (a GET without `?preview=1`; none is expected). Stops all
it started and unmounts.

Usage: Tests/screenshot/thumbnails.py [--docfs BIN] [--manager nemo|caja|nautilus] [--out FILE]
"""
from __future__ import annotations

import argparse
import colorsys
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "Tests" / "integration"), str(REPO / "Tests" / "desktop")]
from helpers import wait_until  # noqa: E402
from test_thumbnails import png_of, thumbnail_path  # noqa: E402

import gui  # noqa: E402

PHOTOS = 40


def photo(seed: int) -> bytes:
    """A 160×120 "photo": a gradient of its own hue."""
    def pixel(x: int, y: int) -> tuple[int, int, int]:
        r, g, b = colorsys.hsv_to_rgb((seed / PHOTOS + x / 640) % 1, 0.4 + 0.6 * y / 120, 0.5 + 0.5 * x / 160)
        return int(r * 255), int(g * 255), int(b * 255)
    return png_of(160, 120, pixel)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docfs", default=str(REPO / ".build" / "debug" / "docfs"))
    parser.add_argument("--manager", default="nemo", choices=sorted(gui.MANAGERS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or REPO / "Tests" / "screenshot" / f"{args.manager}-thumbnails.png")
    missing = gui.missing_tools(args.manager)
    if missing:
        raise SystemExit(f"missing: {' '.join(missing)} (apt-get install them, or run Tests/support/setup.sh)")

    work = Path(tempfile.mkdtemp(prefix="docfs-thumbnail-shot-"))
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), XDG_CACHE_HOME=str(work / "cache"))
    store, mnt = work / "store", work / "Cloud"
    (store / "Photos").mkdir(parents=True)
    mnt.mkdir()
    names = [f"IMG_{i:04d}.png" for i in range(PHOTOS)]
    for i, name in enumerate(names):
        (store / "Photos" / name).write_bytes(photo(i))
    log = work / "requests.log"
    server = subprocess.Popen([args.docfs, "serve", str(store), "--host", "127.0.0.1", "--port", "0", "--request-log", str(log),
                               "--preview-cache", str(work / "previews")],
                              stdout=open(work / "serve.out", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    session = None
    mounted = False
    try:
        found = wait_until(lambda: re.search(r"at (http://127\.0\.0\.1:\d+/?)", (work / "serve.out").read_text()), 30,
                           "docfs serve to start")
        subprocess.run([args.docfs, "mount", found.group(1), str(mnt), "--log-file", str(work / "mount.log")],
                       check=True, env=env, timeout=60)
        mounted = True
        session = gui.Session(work / "desktop")
        session.env["XDG_CACHE_HOME"] = str(work / "cache")
        session.start()
        session.open(args.manager, mnt / "Photos")
        wait_until(lambda: all(thumbnail_path(work / "cache", "large", mnt / "Photos" / n).exists() for n in names), 60,
                   f"{PHOTOS} thumbnails")
        time.sleep(5)  # the file manager draws them
        print(f"screenshot: {session.screenshot(out)}")
        gets = [line.split("\t")[1] for line in log.read_text().splitlines() if line.startswith("GET\t")]
        previews = [g for g in gets if "?preview=1" in g]
        downloads = [g for g in gets if "?preview=1" not in g]
        print(f"{args.manager}: {len(previews)} preview requests, {len(downloads)} downloads {downloads}")
        return 0 if len(previews) == PHOTOS and not downloads else 1
    finally:
        if session is not None:
            session.stop()
        if mounted:
            subprocess.run([args.docfs, "unmount", str(mnt)], env=env, timeout=120)
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
