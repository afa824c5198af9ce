#!/usr/bin/env python3
"""Screenshot of a real file manager (PCManFM, Debian's) browsing a docfs mount, with what it cost.

Installs what is missing (xvfb, pcmanfm, x11-apps for xwd; apt-get, as root or with sudo),
serves the 208-file mixed folder of Tests/integration/mixed_tree.py with `docfs serve`
(its request log counts the bytes each GET sent), mounts it, opens PCManFM on a folder of
the mount under Xvfb, waits for it to settle, captures the screen as a PNG, then prints the
bytes the server sent while PCManFM browsed, per kind of request. It stops everything it
started and unmounts, whatever happens. Not part of `make test`.

Usage: Tests/screenshot/file_manager.py [--docfs BIN] [--out PNG] [--folder REL] [--wait SECONDS]
                                         [--mount-option OPT ...]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "integration"))
from mixed_tree import make_mixed_tree  # noqa: E402

PACKAGES = {"Xvfb": "xvfb", "pcmanfm": "pcmanfm", "xwd": "x11-apps"}


def install_missing() -> None:
    missing = sorted({package for tool, package in PACKAGES.items() if shutil.which(tool) is None})
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env)


def xwd_to_png(xwd: bytes) -> bytes:
    """A 24/32-bit TrueColor XWD dump (what `xwd -root` writes on Xvfb) as an RGB PNG."""
    (header_size, _version, _format, depth, width, height, _xoffset, byte_order, _unit, _bit_order, _pad,
     bits_per_pixel, bytes_per_line, _visual, red_mask, green_mask, blue_mask, _bits_rgb, _map_entries,
     colors) = struct.unpack(">20I", xwd[:80])[:20]
    if bits_per_pixel != 32:
        raise SystemExit(f"xwd: {bits_per_pixel} bits per pixel not handled (depth {depth})")
    start = header_size + colors * 12
    order = "<" if byte_order == 0 else ">"

    def shift(mask: int) -> int:
        return (mask & -mask).bit_length() - 1

    shifts = [shift(m) for m in (red_mask, green_mask, blue_mask)]
    rows = []
    for y in range(height):
        line = xwd[start + y * bytes_per_line: start + y * bytes_per_line + width * 4]
        pixels = struct.unpack(f"{order}{width}I", line)
        row = bytearray(b"\x00")
        for p in pixels:
            row += bytes(((p >> shifts[0]) & 0xFF, (p >> shifts[1]) & 0xFF, (p >> shifts[2]) & 0xFF))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))


def free_display() -> int:
    for n in range(90, 200):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise SystemExit("no free X display number")


def get_requests(log: Path) -> list[tuple[str, str, int]]:
    out = []
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) >= 5:
                out.append((fields[0], fields[1], int(fields[3]) if fields[3].isdigit() else 0))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docfs", default=str(REPO / ".build" / "debug" / "docfs"))
    parser.add_argument("--out", default=str(REPO / "Tests" / "screenshot" / "file-manager.png"))
    parser.add_argument("--folder", default="Pictures", help="folder of the mount PCManFM opens")
    parser.add_argument("--wait", type=float, default=15, help="seconds PCManFM browses before the capture")
    parser.add_argument("--size", default="1024x640", help="screen size, WIDTHxHEIGHT")
    parser.add_argument("--mount-option", action="append", default=[], help="passed to docfs mount (repeatable)")
    args = parser.parse_args()

    install_missing()
    work = Path(tempfile.mkdtemp(prefix="docfs-screenshot-"))
    started: list[subprocess.Popen] = []
    mountpoint = work / "docfs"
    env = dict(os.environ, HOME=str(work / "home"), XDG_STATE_HOME=str(work / "state"), XDG_CACHE_HOME=str(work / "cache"),
               XDG_CONFIG_HOME=str(work / "config"), XDG_RUNTIME_DIR=str(work / "runtime"), NO_AT_BRIDGE="1")
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    for d in ("home", "runtime", "config/pcmanfm/default"):
        (work / d).mkdir(parents=True, exist_ok=True)
    os.chmod(work / "runtime", 0o700)
    # A window that fills the screen, icons with thumbnails (PCManFM's defaults: local files, up to 2 MiB).
    (work / "config/pcmanfm/default/pcmanfm.conf").write_text(
        "[ui]\nwin_width={}\nwin_height={}\nmaximized=1\nview_mode=icon\nshow_hidden=0\nside_pane_mode=places\n".format(*args.size.split("x")))
    mounted = False
    try:
        store = work / "store"
        sizes = make_mixed_tree(store)
        log = work / "requests.log"
        server = subprocess.Popen([args.docfs, "serve", str(store), "--host", "127.0.0.1", "--port", "0", "--no-previews", "--request-log", str(log)],
                                  stdout=open(work / "serve.out", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        started.append(server)
        for _ in range(100):
            found = re.search(r"at (http://\S+)", (work / "serve.out").read_text(errors="replace"))
            if found:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("docfs serve did not start:\n" + (work / "serve.out").read_text(errors="replace"))
        mountpoint.mkdir()
        subprocess.run([args.docfs, "mount", found.group(1), str(mountpoint), "--log-file", str(work / "mount.log"),
                        *args.mount_option], check=True, env=env, timeout=60)
        mounted = True

        display = free_display()
        env["DISPLAY"] = f":{display}"
        xvfb = subprocess.Popen(["Xvfb", f":{display}", "-screen", "0", f"{args.size}x24", "-nolisten", "tcp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(xvfb)
        for _ in range(100):
            if Path(f"/tmp/.X11-unix/X{display}").exists():
                break
            time.sleep(0.1)
        before = len(get_requests(log))
        folder = mountpoint / args.folder
        manager = subprocess.Popen(["pcmanfm", "--no-desktop", str(folder)], env=env, stdout=open(work / "pcmanfm.out", "wb"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
        started.append(manager)
        time.sleep(args.wait)
        threads = subprocess.run(["ps", "-L", "-o", "comm=", "-p", str(manager.pid)], capture_output=True, text=True).stdout.split()
        shot = subprocess.run(["xwd", "-root", "-silent"], env=env, capture_output=True, timeout=60, check=True).stdout
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_bytes(xwd_to_png(shot))

        browsed = get_requests(log)[before:]
        gets = [r for r in browsed if r[0] == "GET"]
        fetched = {path for _, path, _ in gets}
        in_folder = {rel: size for rel, size in sizes.items() if rel.startswith(args.folder + "/")}
        print(f"screenshot: {args.out}")
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "pcmanfm"], capture_output=True, text=True).stdout
        print(f"PCManFM {version} "
              f"on {folder} for {args.wait:.0f} s (threads: {', '.join(sorted(set(threads)))})")
        print(f"folder: {len(in_folder)} files below it, {sum(in_folder.values()):,} bytes; the mount: {len(sizes)} files, "
              f"{sum(sizes.values()):,} bytes")
        methods = sorted({m for m, _, _ in browsed})
        print("requests: " + ", ".join(f"{sum(1 for r in browsed if r[0] == m)} {m}" for m in methods))
        print(f"content sent: {sum(n for _, _, n in gets):,} bytes in {len(gets)} GETs of {len(fetched)} files")
        for path in sorted(fetched)[:12]:
            print(f"  {path}: {sum(n for _, p, n in gets if p == path):,} bytes")
        return 0
    finally:
        for process in reversed(started[1:]):  # pcmanfm, Xvfb: before the unmount
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        if mounted:
            try:
                result = subprocess.run([args.docfs, "unmount", str(mountpoint)], env=env, capture_output=True, text=True, timeout=120)
                failure = result.stderr.strip() if result.returncode != 0 else None
            except (OSError, subprocess.TimeoutExpired) as error:  # e.g. the binary replaced by a rebuild
                failure = str(error)
            if failure is not None:
                print(f"docfs unmount: {failure}; lazy unmount", file=sys.stderr)
                subprocess.run(["fusermount3", "-uz", str(mountpoint)])
        if started and started[0].poll() is None:
            started[0].terminate()
            started[0].wait(timeout=10)
        if not any(str(work) in line for line in Path("/proc/mounts").read_text().splitlines()):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
