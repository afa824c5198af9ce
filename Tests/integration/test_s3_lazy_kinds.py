"""A cold listing of many small S3 objects asks nothing per object (issue 9).

An S3 listing cannot tell an s3fs-style link or special file (a small or empty object whose
x-amz-meta-mode says so) from a file. docfs used to HEAD every small object before a listing
was answered: a cold `ls` of 5,000 small objects cost 5,000 HEADs. Now a plain listing (getdents
only: `ls`, a file manager) sends no HEAD; a small object's kind is confirmed at
its first lookup, so `ls -l` and `stat` still show links and special files as such the first
time, and each object is asked about once."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse

SMALL = 120
LINKS = {"link-a": "small000.txt", "link-b": "../elsewhere/target"}


def heads(s3):
    """HEADs of the objects in dir/ (the lookup of dir/ itself asks about that one name)."""
    return [r for r in s3.requests() if r.method == "HEAD" and r.path.startswith(f"/{s3.name}/dir/")]


def test_a_cold_plain_listing_sends_no_head_and_ls_l_still_shows_links(s3, s3_mount):
    s3.put_many({f"dir/small{i:03}.txt": b"x" * (i % 7) for i in range(SMALL)})
    for name, target in LINKS.items():
        s3.client.put_object(Bucket=s3.name, Key=f"dir/{name}", Body=target.encode(),
                             Metadata={"mode": str(stat.S_IFLNK | 0o777)})
    s3.client.put_object(Bucket=s3.name, Key="dir/fifo", Body=b"", Metadata={"mode": str(stat.S_IFIFO | 0o644)})
    m = s3_mount()

    names = os.listdir(m / "dir")
    assert len(names) == SMALL + len(LINKS) + 1, sorted(names)[:10]
    plain = subprocess.run(["ls", str(m / "dir")], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and sorted(plain.stdout.split()) == sorted(names), plain.stdout[:200]
    # Barrier: every request docfs sent is in the log (a kind is asked within the lookup that
    # needs it, never in the background).
    s3.wait_logged()
    asked = heads(s3)
    assert not asked, f"a plain listing of {len(names)} small objects sent {len(asked)} HEADs: " \
                      f"{[str(r) for r in asked[:5]]}"

    # `ls -l` stats every name: links and the FIFO show as such the first time.
    ls = subprocess.run(["ls", "-l", str(m / "dir")], capture_output=True, text=True, timeout=60)
    assert ls.returncode == 0, ls.stderr
    lines = {line.split()[-1] if " -> " not in line else line.split(" -> ")[0].split()[-1]: line
             for line in ls.stdout.splitlines()[1:]}
    for name, target in LINKS.items():
        assert lines[name].startswith("l") and lines[name].endswith(f"{name} -> {target}"), lines[name]
    assert lines["fifo"].startswith("p"), lines["fifo"]
    assert lines["small003.txt"].startswith("-"), lines["small003.txt"]
    assert stat.S_ISLNK(os.lstat(m / "dir/link-a").st_mode)
    assert os.readlink(m / "dir/link-b") == "../elsewhere/target"
    assert stat.S_ISFIFO(os.lstat(m / "dir/fifo").st_mode)
    assert stat.S_ISREG(os.lstat(m / "dir/small005.txt").st_mode)

    # Each small object was asked about at most once, and a second `ls -l` asks nothing.
    s3.wait_logged()
    per_key = {}
    for r in heads(s3):
        per_key[r.path] = per_key.get(r.path, 0) + 1
    assert max(per_key.values()) == 1, {k: v for k, v in per_key.items() if v > 1}
    assert len(per_key) <= SMALL + len(LINKS) + 1
    before = len(heads(s3))
    again = subprocess.run(["ls", "-l", str(m / "dir")], capture_output=True, text=True, timeout=60)
    assert again.stdout == ls.stdout
    s3.wait_logged()
    assert len(heads(s3)) == before, [str(r) for r in heads(s3)[before:before + 5]]


def test_a_link_replaced_by_a_file_is_a_file_after_the_next_listing(s3, s3_mount):
    s3.client.put_object(Bucket=s3.name, Key="made-elsewhere", Body=b"target.txt",
                         Metadata={"mode": str(stat.S_IFLNK | 0o777)})
    m = s3_mount("--dir-cache-ttl", "1", "--entry-timeout", "0.5", "--attr-timeout", "0.5")
    assert os.listdir(m.path) == ["made-elsewhere"]
    assert os.readlink(m / "made-elsewhere") == "target.txt"
    s3.put("made-elsewhere", b"now a file")
    # Past the TTL a listing revalidates the folder.
    wait_until(lambda: os.listdir(m.path) and not stat.S_ISLNK(os.lstat(m / "made-elsewhere").st_mode), 20,
               "a listing to show made-elsewhere as the file it now is", interval=0.3)
    assert stat.S_ISREG(os.lstat(m / "made-elsewhere").st_mode)
    assert (m / "made-elsewhere").read_bytes() == b"now a file"


def test_find_over_folders_listed_ahead_finds_every_link_and_asks_each_object_once(s3, s3_mount):
    """`find` (or `ls -lR`) stats the small objects it walks; once a lookup has needed a kind,
    folders listed ahead of the walk are swept ahead of it (their HEADs no longer wait for the
    walk to arrive). A plain `ls` still sends none. However the sweeps and the walk's own
    lookups meet, each object is asked about once and every link is found."""
    objects = {f"top/d{d:02}/s{s}/f{f:02}.txt": b"x" * (10 + f) for d in range(6) for s in range(2) for f in range(6)}
    s3.put_many(objects)
    links = {"top/d01/s0/link": "f00.txt", "top/d04/s1/link": "../s0/f01.txt"}
    for key, target in links.items():
        s3.client.put_object(Bucket=s3.name, Key=key, Body=target.encode(), Metadata={"mode": str(stat.S_IFLNK | 0o777)})
    m = s3_mount()

    plain = subprocess.run(["ls", str(m / "top")], capture_output=True, text=True, timeout=60)
    assert plain.stdout.split() == [f"d{d:02}" for d in range(6)], plain.stdout
    s3.wait_logged()
    assert not [r for r in s3.requests() if r.method == "HEAD" and "/top/d" in r.path], "a plain ls asked about objects"

    found = subprocess.run(["find", str(m / "top"), "-type", "l"], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert sorted(os.path.relpath(p, m.path) for p in found.stdout.split()) == sorted(links)
    for key, target in links.items():
        assert os.readlink(m / key) == target
    every = subprocess.run(["find", str(m / "top"), "-type", "f"], capture_output=True, text=True, timeout=120)
    assert sorted(os.path.relpath(p, m.path) for p in every.stdout.split()) == sorted(objects)
    s3.wait_logged()
    per_key = {}
    for r in s3.requests():
        if r.method == "HEAD" and "/top/d" in r.path:
            per_key[r.path] = per_key.get(r.path, 0) + 1
    assert per_key and max(per_key.values()) == 1, {k: v for k, v in per_key.items() if v > 1}
