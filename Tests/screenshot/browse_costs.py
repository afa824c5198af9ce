#!/usr/bin/env python3
"""What the tools a desktop browses with cost on a docfs mount: the figures of the README's
"File managers" table, measured again.

Serves the 208-file mixed folder of Tests/integration/mixed_tree.py with `docfs serve` (its
request log counts the bytes of content each GET sent), mounts it (extra arguments go to
`docfs mount`, e.g. `--no-fetch-for ''` or `--whole-file-limit 131072`), then runs, one step
after another, `ls -lR`, `gio list` (with and without `-a '*'`), `gio info` (all attributes,
the content type, the fast content type), `file -b --mime` (its default 7 MiB and 64 KiB), and
gdk-pixbuf-thumbnailer on every PNG, and reads every image of Pictures/Camera three times over
(open, read, close: what PCManFM does to make its thumbnails), printing per step the GETs, the
files they were of and the bytes. Tools that are not installed are skipped. Unmounts and stops
the server at the end. `--rclone off|full` mounts the same server with `rclone mount
--vfs-cache-mode MODE` instead, for comparison (the extra arguments then go to rclone).

Usage: Tests/screenshot/browse_costs.py [--docfs BIN] [--rclone MODE] [-- MOUNT OPTIONS...]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "integration"))
from mixed_tree import make_mixed_tree  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docfs", default=str(REPO / ".build" / "debug" / "docfs"))
    parser.add_argument("--rclone", choices=["off", "full"], help="mount with rclone mount --vfs-cache-mode MODE instead")
    parser.add_argument("mount_options", nargs="*", help="passed to docfs mount (after --)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="docfs-browse-costs-"))
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), XDG_CACHE_HOME=str(work / "cache"))
    store, log, mountpoint = work / "store", work / "requests.log", work / "mnt"
    sizes = make_mixed_tree(store)
    server = subprocess.Popen([args.docfs, "serve", str(store), "--host", "127.0.0.1", "--port", "0", "--no-previews", "--request-log", str(log)],
                              stdout=open(work / "serve.out", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    mounted = False
    rclone = None
    try:
        for _ in range(100):
            found = re.search(r"at (http://\S+)", (work / "serve.out").read_text(errors="replace"))
            if found:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("docfs serve did not start")
        mountpoint.mkdir()
        if args.rclone:
            # As Tests/bench/clients.py mounts it; its directory cache as long as docfs's TTL.
            rclone = subprocess.Popen(["rclone", "mount", ":webdav:", str(mountpoint), "--webdav-url", found.group(1),
                                       "--vfs-cache-mode", args.rclone, "--dir-cache-time", "30s",
                                       "--cache-dir", str(work / "rclone-cache"), "--config", "/dev/null",
                                       *args.mount_options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
            for _ in range(100):
                if any(f" {mountpoint} " in line for line in Path("/proc/mounts").read_text().splitlines()):
                    break
                time.sleep(0.1)
            else:
                raise SystemExit("rclone mount did not come up")
        else:
            subprocess.run([args.docfs, "mount", found.group(1), str(mountpoint), "--log-file", str(work / "mount.log"),
                            *args.mount_options], check=True, env=env, timeout=60)
        mounted = True

        def gets() -> list[tuple[str, int]]:
            out = []
            for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
                fields = line.split("\t")
                if len(fields) >= 5 and fields[0] == "GET":
                    out.append((fields[1], int(fields[3]) if fields[3].isdigit() else 0))
            return out

        def step(name: str, commands: list[list[str]]) -> None:
            if shutil.which(commands[0][0]) is None:
                print(f"{name:48s} skipped: {commands[0][0]} is not installed")
                return
            before, start = len(gets()), time.monotonic()
            for command in commands:
                subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            time.sleep(0.5)  # the log line of a GET is written once its body is sent
            sent = gets()[before:]
            print(f"{name:48s} {time.monotonic() - start:5.1f} s  {len(sent):4d} GETs of {len({p for p, _ in sent}):3d} files"
                  f"  {sum(n for _, n in sent):>12,d} bytes")

        folders = sorted({str(mountpoint / Path(rel).parent) for rel in sizes} | {str(mountpoint)})
        files = [str(mountpoint / rel) for rel in sorted(sizes)]
        mounter = f"rclone mount --vfs-cache-mode {args.rclone}" if args.rclone else "docfs mount"
        print(f"store: {len(sizes)} files in {len(folders)} folders, {sum(sizes.values()):,} bytes; "
              f"{mounter} {' '.join(args.mount_options) or '(default options)'}")
        step("ls -lR", [["ls", "-lR", str(mountpoint)]])
        step("gio list (every folder)", [["gio", "list", folder] for folder in folders])
        step("gio list -a '*' (every folder)", [["gio", "list", "-a", "*", folder] for folder in folders])
        step("gio info (every file)", [["gio", "info", path] for path in files])
        step("gio info -a standard::content-type", [["gio", "info", "-a", "standard::content-type", path] for path in files])
        step("gio info -a standard::fast-content-type", [["gio", "info", "-a", "standard::fast-content-type", path] for path in files])
        camera = [path for path in files if "/Camera/" in path]
        step("Pictures/Camera: each image read 3 times", [["cat", path, path, path] for path in camera])
        step("file -b --mime (every file)", [["file", "-b", "--mime", *files]])
        step("file -P bytes=65536 -b --mime", [["file", "-P", "bytes=65536", "-b", "--mime", *files]])
        step("gdk-pixbuf-thumbnailer (every PNG)", [["gdk-pixbuf-thumbnailer", "-s", "128", path, str(work / "thumbnail.png")]
                                                    for path in files if path.endswith(".png")])
        return 0
    finally:
        try:
            if mounted and rclone is not None:
                subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, timeout=60)
                rclone.terminate()
                rclone.wait(timeout=30)
            elif mounted:
                subprocess.run([args.docfs, "unmount", str(mountpoint)], env=env, capture_output=True, timeout=120)
        except OSError as error:  # the binary replaced under us (a rebuild): unmount without it
            print(f"docfs unmount: {error}; fusermount3 -uz", file=sys.stderr)
            subprocess.run(["fusermount3", "-uz", str(mountpoint)])
        finally:
            server.terminate()
            server.wait(timeout=10)
        if not any(str(work) in line for line in Path("/proc/mounts").read_text().splitlines()):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
