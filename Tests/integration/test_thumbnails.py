"""Thumbnails without downloads (issue 35): a folder of photos on a store that makes previews
shows thumbnails without one photo being downloaded, and a file a thumbnailer was refused
(GNOME's failure marker) gets its thumbnail once it is local.

docfs writes each thumbnail where every freedesktop file manager looks first,
`$XDG_CACHE_HOME/thumbnails/large/MD5(URI).png` with `Thumb::URI` and `Thumb::MTime`, and GIO
(what Nautilus, Nemo and Caja ask) is the judge: `gio info -a thumbnail::…` must call each
thumbnail valid. Counted in the server's request log: previews are `GET FILE?preview=1…`, and a
GET without that query is a download."""
from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import urllib.parse
import zlib
from pathlib import Path

import pytest

from conftest import DocfsServer, _serving
from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse

PHOTOS = 40


class PreviewingDocfsServer(DocfsServer):
    """`docfs serve` with previews on (gdk-pixbuf-thumbnailer), kept in its workdir."""
    previews = True


@pytest.fixture
def previewing_serve(tmp_path):
    yield from _serving(PreviewingDocfsServer, tmp_path)


def png_of(width: int, height: int, pixel, text: dict[str, str] | None = None) -> bytes:
    """An RGB PNG whose pixel (x, y) is `pixel(x, y)`, with tEXt chunks `text`."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))
    body = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    for key, value in (text or {}).items():
        body += chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    body += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def png(width: int, height: int, seed: int, text: dict[str, str] | None = None) -> bytes:
    """A small gradient that differs per seed (a "photo")."""
    return png_of(width, height, lambda x, y: ((x * 5 + seed * 29) % 256, (y * 7 + seed * 3) % 256, (x + y + seed) % 256), text)


def text_chunks(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    out, offset = {}, 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        payload = data[offset + 8:offset + 8 + length]
        crc, = struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])
        assert crc == zlib.crc32(kind + payload), f"bad CRC in chunk {kind!r}"
        if kind == b"tEXt":
            key, _, value = payload.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        offset += 12 + length
    return out


def file_uri(path: Path) -> str:
    """The URI GLib's g_filename_to_uri gives a path (what a thumbnail is named after)."""
    return "file://" + urllib.parse.quote(os.fsencode(str(path)), safe="!$&'()*+,-./:=@_~")


def thumbnail_path(cache_home: Path, size: str, path: Path) -> Path:
    return cache_home / "thumbnails" / size / (hashlib.md5(file_uri(path).encode()).hexdigest() + ".png")


def make_photos(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True)
    # Names GLib must escape too: a space, an `&`, a non-ASCII letter.
    names = [f"IMG {i:03d}{' & é' if i % 10 == 3 else ''}.png" for i in range(count)]
    for i, name in enumerate(names):
        (folder / name).write_bytes(png(48, 32, i))
    return names


def gio_thumbnail_info(paths: list[Path], cache_home: Path) -> dict[str, dict[str, str]]:
    """`gio info -a thumbnail::path,thumbnail::is-valid,thumbnail::failed` of each file, read
    with XDG_CACHE_HOME as the mount's: file URI -> {attribute: value}."""
    result = subprocess.run(["gio", "info", "-a", "thumbnail::path,thumbnail::is-valid,thumbnail::failed",
                             *map(str, paths)], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, XDG_CACHE_HOME=str(cache_home)), stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"gio info failed: {result.stderr}"
    info: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in result.stdout.splitlines():
        if line.startswith("uri: "):
            current = info.setdefault(line[5:].strip(), {})
        elif current is not None and line.startswith("  thumbnail::"):
            key, _, value = line.strip().partition(": ")
            current[key] = value
    return info


def raw_gets(server) -> tuple[list[str], list[str]]:
    """The server's GETs by its log's raw path (with the query): previews, and downloads."""
    gets = [line.split("\t")[1] for line in server.log_lines() if line.startswith("GET\t")]
    previews = [p for p in gets if "?preview=1" in p]
    return previews, [p for p in gets if "?preview=1" not in p]


@pytest.mark.skipif(shutil.which("gdk-pixbuf-thumbnailer") is None or shutil.which("gio") is None,
                    reason="needs gdk-pixbuf-thumbnailer (libgdk-pixbuf2.0-bin) and gio (libglib2.0-bin): Tests/support/setup.sh")
def test_forty_photos_get_thumbnails_from_previews_and_none_is_downloaded(tmp_path, previewing_serve, mount, xdg):
    root = tmp_path / "store"
    names = make_photos(root / "Photos", PHOTOS)
    (root / "Photos" / "notes.txt").write_text("not a photo\n")
    server = previewing_serve(root)
    m = mount(server.url)
    folder = m / "Photos"

    # A file manager that looked before docfs had the thumbnail ran its thumbnailer, refused
    # (`--no-fetch-for`): GNOME recorded a failure. The thumbnail docfs writes makes it stale.
    fail = xdg.cache_home / "thumbnails" / "fail" / "gnome-thumbnail-factory"
    fail.mkdir(parents=True)
    stale = fail / thumbnail_path(xdg.cache_home, "fail", folder / names[0]).name
    stale.write_bytes(png(1, 1, 0, {"Thumb::URI": file_uri(folder / names[0]), "Thumb::MTime": "0"}))

    # Listing the folder is all a file manager does before it looks for thumbnails.
    assert sorted(os.listdir(folder)) == sorted(names + ["notes.txt"])
    files = [folder / name for name in names]

    def valid_thumbnails():
        done = []
        for path in files:
            thumb = thumbnail_path(xdg.cache_home, "large", path)
            if thumb.exists():
                done.append(path)
        return len(done) == PHOTOS and done
    wait_until(valid_thumbnails, 60, lambda: f"{PHOTOS} thumbnails in {xdg.cache_home}/thumbnails/large "
                                             f"(have {len(list((xdg.cache_home / 'thumbnails' / 'large').glob('*.png')))}); "
                                             f"server: {raw_gets(server)[0][:3]}…\n{m.log_tail(2000)}")

    # Each as the standard says, for the file as the mount shows it.
    for path in files:
        thumb = thumbnail_path(xdg.cache_home, "large", path)
        data = thumb.read_bytes()
        text = text_chunks(data)
        st = os.stat(path)
        assert text["Thumb::URI"] == file_uri(path)
        assert text["Thumb::MTime"] == str(int(st.st_mtime))
        assert text["Thumb::Size"] == str(st.st_size)
        assert text["Software"] == "docfs"
        assert thumb.stat().st_mode & 0o777 == 0o600
        width, height = struct.unpack(">II", data[16:24])
        assert max(width, height) <= 256
    assert not list((xdg.cache_home / "thumbnails" / "large").glob(".docfs-*")), "a temporary file was left"
    assert not stale.exists(), "the failure marker of a file with a thumbnail was left"

    # GIO, which Nautilus, Nemo and Caja ask, finds each and calls it valid.
    info = gio_thumbnail_info(files, xdg.cache_home)
    assert len(info) == PHOTOS, info
    for path in files:
        attributes = info[file_uri(path)]
        assert attributes.get("thumbnail::path") == str(thumbnail_path(xdg.cache_home, "large", path)), attributes
        assert attributes.get("thumbnail::is-valid") == "TRUE", attributes
        assert attributes.get("thumbnail::failed", "FALSE") == "FALSE", attributes

    # 40 previews, and not one photo downloaded: each still a placeholder.
    m.wait_downloads_done()
    previews, downloads = raw_gets(server)
    assert len(previews) == PHOTOS, previews
    assert sorted(urllib.parse.unquote(p.split("?")[0]).rsplit("/", 1)[1] for p in previews) == sorted(names)
    assert all("x=256" in p and "y=256" in p for p in previews), previews
    assert downloads == [], downloads
    assert {xattr_state(path) for path in files} == {"placeholder"}

    # Listed again on a new mount of the same store on the same mount point (the catalog's
    # listing is refreshed): the thumbnails are valid, so no preview is asked for again.
    assert m.unmount().returncode == 0
    m2 = mount(server.url, "--log-level", "debug", mountpoint=m.path)
    os.listdir(m2 / "Photos")
    line = m2.wait_log_line("thumbnails considered", "directory=/Photos")
    assert f"previews={PHOTOS}" in line and "queued=0" in line, line
    m2.wait_downloads_done()
    assert raw_gets(server) == (previews, []), "previews asked for again though every thumbnail was valid"


@pytest.mark.skipif(shutil.which("gio") is None, reason="needs gio (libglib2.0-bin): Tests/support/setup.sh")
def test_without_previews_nothing_is_downloaded_and_a_pin_clears_the_failure_markers(tmp_path, rclone_serve, mount, xdg):
    root = tmp_path / "store"
    names = make_photos(root / "Photos", 10)
    server = rclone_serve(root)
    m = mount(server.url)
    folder = m / "Photos"
    assert sorted(os.listdir(folder)) == sorted(names)
    files = [folder / name for name in names]

    # GNOME's thumbnailer was refused the placeholders (--no-fetch-for): it records each as
    # failed, as GnomeDesktopThumbnailFactory does, a 1×1 PNG naming the file and its mtime.
    fail = xdg.cache_home / "thumbnails" / "fail" / "gnome-thumbnail-factory"
    fail.mkdir(parents=True)
    for path in files:
        marker = fail / thumbnail_path(xdg.cache_home, "fail", path).name
        marker.write_bytes(png(1, 1, 0, {"Thumb::URI": file_uri(path), "Thumb::MTime": str(int(os.stat(path).st_mtime)),
                                         "Software": "GNOME::ThumbnailFactory"}))
    before = gio_thumbnail_info(files, xdg.cache_home)
    assert all(before[file_uri(p)].get("thumbnail::failed") == "TRUE" for p in files), before

    # No preview on this store, and nothing downloaded for thumbnails.
    assert [r for r in server.requests() if r.method == "GET"] == []
    assert not (xdg.cache_home / "thumbnails" / "large").exists()

    # Pinned: local, so the markers go, and the file manager may make its thumbnails.
    result = xdg.docfs("pin", folder)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: {xattr_state(p) for p in files} == {"pinned"}, 30,
               lambda: f"every photo pinned: {[xattr_state(p) for p in files]}")
    wait_until(lambda: not list(fail.iterdir()), 10,
               lambda: f"the failure markers removed (left: {sorted(x.name for x in fail.iterdir())})\n{m.log_tail(2000)}")
    after = gio_thumbnail_info(files, xdg.cache_home)
    assert all(after[file_uri(p)].get("thumbnail::failed", "FALSE") == "FALSE" for p in files), after

    # What a file manager runs now reads the local copy, and makes the thumbnail.
    if shutil.which("gdk-pixbuf-thumbnailer"):
        out = tmp_path / "made.png"
        made = subprocess.run(["gdk-pixbuf-thumbnailer", "-s", "128", str(files[0]), str(out)],
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert made.returncode == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", made.stderr
