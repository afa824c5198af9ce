"""Dates from year 1000 to 9999 never take the daemon down (issue 8, item 2).

docfs keeps a time as Int64 nanoseconds since 1970: 1677-09-21 00:12:43.145224192 ..
2262-04-11 23:47:16.854775807 UTC. A time outside saturates to the nearer end; one inside is
shown exactly as set. Checked through real mounts:
- `touch -d DATE` on files of the mount (existing ones and new ones), on WebDAV (docfs serve,
  rclone) and on a local-directory store;
- stores that already hold such dates: files whose mtimes were set with os.utime before the
  mount (on tmpfs where there is one, since ext4 itself clamps to 1901-12-13 .. 2446-05-10),
  and S3 objects whose `x-amz-meta-mtime` is `nan`, `1e300`, `-1e300`.
After every step the mount must still answer: a crash shows as ENOTCONN.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from conftest import run
from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse

NS = 1_000_000_000
EARLIEST_NS = -(2**63)    # 1677-09-21 00:12:43.145224192 UTC
LATEST_NS = 2**63 - 1     # 2262-04-11 23:47:16.854775807 UTC

# (what `touch -d` is given, in UTC; that instant in ns since 1970)
DATES = [
    ("1000-01-01", -30_610_224_000 * NS),
    ("1601-01-01", -11_644_473_600 * NS),
    ("1900-01-01", -2_208_988_800 * NS),
    ("1969-12-31 23:59:59.5", -500_000_000),
    ("2038-01-19 03:14:08", 2_147_483_648 * NS),
    ("2262-04-12", 9_223_372_800 * NS),
    ("2300-01-01", 10_413_792_000 * NS),
    ("9999-12-31", 253_402_214_400 * NS),
]


def representable(ns: int) -> int:
    """What docfs shows for `ns`: itself, or the nearest instant Int64 nanoseconds hold."""
    return min(max(ns, EARLIEST_NS), LATEST_NS)


def whole_second(ns: int) -> int:
    """An HTTP date (WebDAV getlastmodified) carries whole seconds: the second `ns` falls in."""
    return (ns // NS) * NS


def label(ns: int) -> str:
    return f"{ns} ns ({ns / NS:.3f} s)"


def assert_alive(m, after: str):
    assert m.is_mounted(), f"the mount is gone after {after}\nlog:\n{m.log_tail()}"
    try:
        os.listdir(m.path)
    except OSError as error:
        raise AssertionError(f"the mount no longer answers after {after}: {error}\nlog:\n{m.log_tail()}") from None
    assert m.daemon_pids(), f"the docfs daemon is gone after {after}\nlog:\n{m.log_tail()}"


def touch(path: Path, date: str):
    result = run(["touch", "-d", date, str(path)], env=dict(os.environ, TZ="UTC"))
    assert result.returncode == 0, f"touch -d {date!r} {path}: {result.stderr.strip()}"


@pytest.fixture
def tmpfs_dir():
    """A directory on tmpfs (/dev/shm), which keeps any year; tmp_path's ext4 would clamp the
    store's own dates to 1901..2446 before docfs ever saw them. Falls back to a temp dir."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="docfs-dates-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def seed(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (root / f"old-{i}.txt").write_bytes(b"x" * (i + 1))
        os.utime(root / f"old-{i}.txt", ns=(1_650_000_000 * NS, 1_650_000_000 * NS))
    return root


def touch_every_date(m):
    """touch -d on existing files and on new ones: stat shows the date or the nearest one."""
    wrong = []
    for i, (date, ns) in enumerate(DATES):
        for name in (f"old-{i}.txt", f"new-{i}.txt"):
            touch(m / name, date)
            assert_alive(m, f"touch -d {date!r} {name}")
            got = os.stat(m / name).st_mtime_ns
            if got != representable(ns):
                wrong.append(f"{name} touched to {date!r}: stat shows {label(got)}, want {label(representable(ns))}")
    assert not wrong, "\n".join(wrong)
    # Once the new files are uploaded (a different path through the catalog), still the same.
    for i, (date, ns) in enumerate(DATES):
        wait_until(lambda: os.getxattr(m / f"new-{i}.txt", "user.docfs.state").rstrip(b"\0") in (b"local", b"placeholder"),
                   30, f"new-{i}.txt to be uploaded")
        assert os.stat(m / f"new-{i}.txt").st_mtime_ns == representable(ns), f"new-{i}.txt after its upload ({date!r})"
        assert os.stat(m / f"old-{i}.txt").st_mtime_ns == representable(ns), f"old-{i}.txt ({date!r})"
    assert_alive(m, "every touch")


def test_touch_d_any_year_on_webdav(store_server, tmp_path, mount):
    server = store_server(seed(tmp_path / "store", len(DATES)))
    m = mount(server.url)
    touch_every_date(m)


def test_touch_d_any_year_on_a_local_store(tmpfs_dir, mount):
    m = mount(str(seed(tmpfs_dir / "store", len(DATES))))
    touch_every_date(m)


def filesystem_keeps(directory: Path, ns: int) -> bool:
    probe = directory / ".docfs-date-probe"
    probe.write_bytes(b"")
    try:
        os.utime(probe, ns=(ns, ns))
        return os.stat(probe).st_mtime_ns == ns
    finally:
        probe.unlink()


def test_cp_p_of_a_file_dated_1900_keeps_its_date(tmpfs_dir, tmp_path, mount, xdg):
    ns = dict(DATES)["1900-01-01"]
    if filesystem_keeps(xdg.cache_home, ns):
        pytest.skip(f"the cache dir's filesystem ({xdg.cache_home}) keeps 1900-01-01: nothing to show here")
    source = tmpfs_dir / "old.txt"  # tmpfs keeps 1900 (ext4 would clamp the source itself)
    source.write_bytes(b"from 1900\n")
    os.utime(source, ns=(ns, ns))
    m = mount(str(seed(tmpfs_dir / "store", 0)))
    # cp -p writes, sets the time on the open file (futimens), then closes: the copy is dirty.
    result = run(["cp", "-p", str(source), str(m / "old.txt")])
    assert result.returncode == 0, result.stderr
    assert_alive(m, "cp -p of a file dated 1900")
    got = os.stat(m / "old.txt").st_mtime_ns
    assert got == ns, f"stat shows {label(got)}, want {label(ns)} (1900-01-01 is representable)"


def store_with_dates(root: Path) -> dict[str, int]:
    """Files and folders whose mtimes are DATES; returns name -> the mtime the store really holds
    (a filesystem may clamp: ext4 keeps 1901-12-13 .. 2446-05-10)."""
    root.mkdir(parents=True)
    held = {}
    for i, (_date, ns) in enumerate(DATES):
        (root / f"file-{i}.txt").write_bytes(b"y" * (i + 1))
        (root / f"dir-{i}").mkdir()
        (root / f"dir-{i}" / "inside.txt").write_bytes(b"z")
        for name in (f"file-{i}.txt", f"dir-{i}"):
            os.utime(root / name, ns=(ns, ns))
            held[name] = os.stat(root / name).st_mtime_ns
    if str(root).startswith("/dev/shm/"):
        assert held["file-0.txt"] == DATES[0][1] and held["file-7.txt"] == DATES[7][1], \
            f"tmpfs should hold years 1000 and 9999 exactly: {held}"
    return held


def check_listed_dates(m, held: dict[str, int], to_store_precision):
    names = sorted(os.listdir(m.path))
    assert names == sorted(held), names
    wrong = []
    for name, ns in held.items():
        st = os.stat(m / name)
        assert stat.S_ISDIR(st.st_mode) == name.startswith("dir-"), name
        if name.startswith("dir-"):
            assert os.listdir(m / name) == ["inside.txt"], name
        want = representable(to_store_precision(ns))
        if st.st_mtime_ns != want:
            wrong.append(f"{name}: the store holds {label(ns)}, stat shows {label(st.st_mtime_ns)}, want {label(want)}")
        assert_alive(m, f"stat {name}")
    # Listed, stat'ed, and the content is still there.
    with open(m / "file-7.txt", "rb") as f:
        assert f.read() == b"y" * 8
    assert_alive(m, "reading a file dated 9999")
    return wrong


def test_a_local_store_holding_dates_from_1000_to_9999(tmpfs_dir, mount):
    held = store_with_dates(tmpfs_dir / "store")
    m = mount(str(tmpfs_dir / "store"))
    wrong = check_listed_dates(m, held, lambda ns: ns)
    assert not wrong, "\n".join(wrong)


def test_a_webdav_store_holding_dates_from_1000_to_9999(store_server, tmpfs_dir, mount):
    held = store_with_dates(tmpfs_dir / "store")
    server = store_server(tmpfs_dir / "store")
    m = mount(server.url)
    # getlastmodified has whole seconds; folders' times are the server's to report.
    wrong = [w for w in check_listed_dates(m, held, whole_second) if not w.startswith("dir-")]
    assert not wrong, "\n".join(wrong)


def test_s3_objects_with_absurd_mtime_metadata(s3, s3_mount):
    values = {"nan.txt": "nan", "big.txt": "1e300", "small.txt": "-1e300", "inf.txt": "-inf", "junk.txt": "soon"}
    for key, value in values.items():
        s3.client.put_object(Bucket=s3.name, Key=key, Body=key.encode(), Metadata={"mtime": value})
    last_modified = {key: int(o["LastModified"].timestamp()) for key, o in s3.objects().items()}
    m = s3_mount()
    assert sorted(os.listdir(m.path)) == sorted(values)
    for key in values:
        os.stat(m / key)
        with open(m / key, "rb") as f:      # a GET brings the object's metadata
            assert f.read() == key.encode()
        assert_alive(m, f"reading {key} (x-amz-meta-mtime: {values[key]})")
    wait_until(lambda: os.stat(m / "big.txt").st_mtime_ns == LATEST_NS, 10,
               f"big.txt (mtime 1e300) to show {label(LATEST_NS)}; shows {label(os.stat(m / 'big.txt').st_mtime_ns)}")
    wait_until(lambda: os.stat(m / "small.txt").st_mtime_ns == EARLIEST_NS, 10,
               f"small.txt (mtime -1e300) to show {label(EARLIEST_NS)}")
    wait_until(lambda: os.stat(m / "inf.txt").st_mtime_ns == EARLIEST_NS, 10, "inf.txt (mtime -inf) to show the earliest")
    # No number is no time: the object's Last-Modified stands.
    for key in ("nan.txt", "junk.txt"):
        got = os.stat(m / key).st_mtime
        assert abs(got - last_modified[key]) <= 1, f"{key}: stat shows {got}, Last-Modified is {last_modified[key]}"
    assert_alive(m, "every object")


def test_s3_touch_d_far_dates_reach_the_bucket_saturated(s3, s3_mount, xdg):
    s3.put_many({"past.txt": b"p", "future.txt": b"f", "half.txt": b"h"})
    m = s3_mount()
    touch(m / "past.txt", "1000-01-01")
    touch(m / "future.txt", "2300-01-01")
    touch(m / "half.txt", "1969-12-31 23:59:59.5")
    assert_alive(m, "touch -d on S3")
    assert os.stat(m / "past.txt").st_mtime_ns == EARLIEST_NS
    assert os.stat(m / "future.txt").st_mtime_ns == LATEST_NS
    assert os.stat(m / "half.txt").st_mtime_ns == -500_000_000
    meta = {key: (s3.head(key) or {}).get("Metadata", {}) for key in ("past.txt", "future.txt", "half.txt")}
    assert meta["past.txt"].get("mtime") == "-9223372036.854775808", meta
    assert meta["future.txt"].get("mtime") == "9223372036.854775807", meta
    # Half a second before 1970, signed as a number is (not -1 + .5 written as "-1.500000000").
    assert meta["half.txt"].get("mtime") == "-0.500000000", meta
    assert m.unmount().returncode == 0

    # Another machine reads them back from the bucket as the same instants.
    xdg.another_machine("other")
    m2 = s3_mount()
    for key, want in (("past.txt", EARLIEST_NS), ("future.txt", LATEST_NS), ("half.txt", -500_000_000)):
        with open(m2 / key, "rb") as f:
            f.read()
        wait_until(lambda: os.stat(m2 / key).st_mtime_ns == want, 10, f"{key} to show {label(want)} on another machine")
    assert_alive(m2, "reading the far dates back")
