"""`docfs serve` on its own: a third-party WebDAV client (rclone) lists and reads it correctly,
Range requests work, and the request log has the documented format. No FUSE needed."""
from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.parse
import urllib.request

import pytest

from conftest import run
from helpers import SPECIAL_NAMES


def rclone(server, *args, timeout=120) -> subprocess.CompletedProcess:
    return run(["rclone", "--config", "/dev/null", "--webdav-url", server.url, "--low-level-retries", "1",
                "--retries", "1", *args], timeout=timeout)


def test_rclone_lsf_lists_docfs_serve(docfs_serve, content_tree):
    server = docfs_serve(content_tree)
    result = rclone(server, "lsf", "-R", ":webdav:")
    assert result.returncode == 0, f"rclone lsf failed: {result.stderr}"
    listed = {line.rstrip("/") for line in result.stdout.splitlines() if line}
    expected = content_tree.entries()
    assert listed == expected, (f"missing: {sorted(expected - listed)}; unexpected: {sorted(listed - expected)}")


def test_rclone_lsjson_sizes_and_mtimes(docfs_serve, content_tree):
    server = docfs_serve(content_tree)
    result = rclone(server, "lsjson", "-R", "--files-only", ":webdav:")
    assert result.returncode == 0, f"rclone lsjson failed: {result.stderr}"
    from datetime import datetime
    seen = {}
    for entry in json.loads(result.stdout):
        mtime = datetime.fromisoformat(entry["ModTime"].replace("Z", "+00:00")).timestamp()
        seen[entry["Path"]] = (entry["Size"], int(mtime))
    expected = {p: (content_tree.files[p], content_tree.mtimes[p]) for p in content_tree.files}
    assert seen == expected


@pytest.mark.parametrize("name", ["small.txt", "empty.txt", "one.bin", "medium.bin", *SPECIAL_NAMES])
def test_rclone_cat_reads_docfs_serve(docfs_serve, content_tree, name):
    server = docfs_serve(content_tree)
    result = subprocess.run(["rclone", "--config", "/dev/null", "--webdav-url", server.url, "cat", f":webdav:{name}"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, f"rclone cat {name!r} failed: {result.stderr.decode(errors='replace')}"
    assert hashlib.sha256(result.stdout).hexdigest() == content_tree.hashes[name], f"content of {name!r} differs"
    gets = server.gets(name)
    assert gets, f"no GET of /{name} in the request log: {server.requests()}"


def test_range_get_and_request_log_format(docfs_serve, content_tree):
    server = docfs_serve(content_tree)
    data = (content_tree.root / "medium.bin").read_bytes()
    url = server.url + "medium.bin"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=100-199"}), timeout=30) as r:
        assert r.status == 206
        assert r.read() == data[100:200]
        assert r.headers.get("ETag"), "docfs serve must send an ETag"
    quoted = server.url + urllib.parse.quote("100% sure.txt")
    with urllib.request.urlopen(quoted, timeout=30) as r:
        assert r.read() == (content_tree.root / "100% sure.txt").read_bytes()

    lines = server.log_path.read_text().splitlines()
    assert len(lines) == 2, f"expected one log line per request, got: {lines}"
    first = lines[0].split("\t")
    assert first == ["GET", "/medium.bin", "206", "100", "bytes=100-199"], f"log line: {lines[0]!r}"
    second = lines[1].split("\t")
    assert second[0] == "GET" and second[1] == "/100%25%20sure.txt" and second[2] == "200" and second[4] == "-", \
        f"log line: {lines[1]!r} (PATH must be logged as received, percent-encoded)"


def test_propfind_lists_children(docfs_serve, content_tree):
    server = docfs_serve(content_tree)
    request = urllib.request.Request(server.url, method="PROPFIND", headers={"Depth": "1"})
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 207
        body = r.read().decode()
    import re
    hrefs = {urllib.parse.unquote(h).rstrip("/").rsplit("/", 1)[-1]
             for h in re.findall(r"<(?:[A-Za-z0-9]+:)?href>([^<]*)</", body)}
    for name in ("empty.txt", "big.bin", "résumé 日本.txt", "100% sure.txt", "a%20b.txt", "dir with space"):
        assert name in hrefs, f"{name!r} not among the PROPFIND hrefs {sorted(hrefs)}"
    assert [r.method for r in server.requests()] == ["PROPFIND"]
