"""Load (issue 10, item 9): 16 processes x 200 file operations each, reads and writes mixed, some
on the same files, through one mount of a WebDAV store (`docfs serve` and rclone serve webdav) and of an S3 store
(moto).

Each process reads shared files and checks their sha256, creates its own files and reads them
back, rewrites and appends to some of them, and writes its own 4 KiB record into files every
process writes at once. Afterwards: no operation failed, every byte on the store is what was
written last (sha256 per file, read from the store itself, not through the mount), no conflict
copy appeared, and once every upload finished the cache dir holds no local copy.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

PROCESSES = 16
OPERATIONS = 200
RECORD = 4096
CONTENDED = 4


def record(writer: int, step: int) -> bytes:
    """The 4 KiB a process writes at its own offset of a contended file: says who and when."""
    head = f"writer {writer:02d} step {step:03d} ".encode()
    return head + random.Random(writer * 100_000 + step).randbytes(RECORD - len(head))


def worker(mount: str, writer: int, shared: dict[str, str], out: str) -> None:
    """One process's operations; writes {errors, expected: rel -> sha256, records} to `out`."""
    rng = random.Random(writer)
    errors: list[str] = []
    expected: dict[str, str] = {}
    mine: list[str] = []
    last_record: dict[str, int] = {}
    log = b""
    own = f"w{writer:02d}"
    os.makedirs(os.path.join(mount, own), exist_ok=True)

    def check(rel: str, data: bytes, sha: str, what: str):
        if hashlib.sha256(data).hexdigest() != sha:
            errors.append(f"{what} {rel}: {len(data)} bytes, wrong sha256")

    for step in range(OPERATIONS):
        kind = step % 10
        try:
            if kind <= 4:
                rel = rng.choice(sorted(shared))
                with open(os.path.join(mount, rel), "rb") as f:
                    check(rel, f.read(), shared[rel], "read of shared")
            elif kind <= 6 or (kind == 7 and not mine):
                rel = f"{own}/n{step:03d}.bin"
                data = rng.randbytes(rng.randint(1, 48 * 1024))
                with open(os.path.join(mount, rel), "xb") as f:
                    for i in range(0, len(data), 8192):
                        f.write(data[i:i + 8192])
                expected[rel] = hashlib.sha256(data).hexdigest()
                mine.append(rel)
                with open(os.path.join(mount, rel), "rb") as f:
                    check(rel, f.read(), expected[rel], "read-back of new")
            elif kind == 7:
                rel = rng.choice(mine)
                data = rng.randbytes(rng.randint(1, 48 * 1024))
                with open(os.path.join(mount, rel), "wb") as f:
                    f.write(data)
                expected[rel] = hashlib.sha256(data).hexdigest()
            elif kind == 8:
                rel = f"{own}/log.txt"
                line = f"{writer} {step}\n".encode() * 20
                with open(os.path.join(mount, rel), "ab") as f:
                    f.write(line)
                log += line
                expected[rel] = hashlib.sha256(log).hexdigest()
                with open(os.path.join(mount, rel), "rb") as f:
                    check(rel, f.read(), expected[rel], "read-back of appended")
            else:
                rel = f"contended/c{step // 10 % CONTENDED}.bin"
                fd = os.open(os.path.join(mount, rel), os.O_WRONLY)
                try:
                    os.pwrite(fd, record(writer, step), writer * RECORD)
                finally:
                    os.close(fd)
                last_record[rel] = step
        except OSError as error:
            errors.append(f"step {step} ({kind}): {error!r}")
    with open(out, "w") as f:
        json.dump({"errors": errors, "expected": expected, "records": last_record}, f)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    _, _, _mount, _writer, _shared, _out = sys.argv
    with open(_shared) as _f:
        worker(_mount, int(_writer), json.load(_f), _out)
    sys.exit(0)

# --- the test (pytest) ---------------------------------------------------------------------------

import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from helpers import pseudo_random_bytes, wait_until  # noqa: E402
from s3_support import get_server, s3, s3_mount  # noqa: E402,F401 - fixtures
from write_support import make_store  # noqa: E402

pytestmark = pytest.mark.fuse

SHARED_FILES = 48


def seed() -> dict[str, bytes]:
    files = {f"shared/s{i:02d}.bin": pseudo_random_bytes(1024 + i * 1500, 7000 + i) for i in range(SHARED_FILES)}
    # Two files above the 1 MiB whole-file limit: those reads are streamed.
    files["shared/big0.bin"] = pseudo_random_bytes(1_500_000, 1)
    files["shared/big1.bin"] = pseudo_random_bytes(2_100_000, 2)
    for c in range(CONTENDED):
        files[f"contended/c{c}.bin"] = b"." * (PROCESSES * RECORD)
    return files


def run_load(m, tmp_path: Path, files: dict[str, bytes]) -> tuple[dict[str, bytes | str], float]:
    """Runs the processes; returns what the store must hold (rel -> bytes or sha256) and the time."""
    shared = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items() if rel.startswith("shared/")}
    manifest = tmp_path / "shared.json"
    manifest.write_text(json.dumps(shared))
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(m.path), str(w), str(manifest),
                               str(tmp_path / f"worker{w}.json")], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for w in range(PROCESSES)]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outputs.append(out.decode(errors="replace"))
    elapsed = time.monotonic() - started
    failures = [f"worker {w} exited {p.returncode}: {outputs[w][-2000:]}" for w, p in enumerate(procs) if p.returncode]
    assert not failures, "\n".join(failures)
    want: dict[str, bytes | str] = dict(files)
    records: dict[str, bytearray] = {rel: bytearray(data) for rel, data in files.items() if rel.startswith("contended/")}
    errors = []
    for w in range(PROCESSES):
        result = json.loads((tmp_path / f"worker{w}.json").read_text())
        errors += [f"worker {w}: {e}" for e in result["errors"]]
        want.update(result["expected"])
        for rel, step in result["records"].items():
            records[rel][w * RECORD:(w + 1) * RECORD] = record(w, step)
    assert not errors, f"{len(errors)} failed operations:\n" + "\n".join(errors[:40])
    want.update({rel: bytes(data) for rel, data in records.items()})
    return want, elapsed


def sha(data: bytes | str) -> str:
    return data if isinstance(data, str) else hashlib.sha256(data).hexdigest()


def compare(want: dict[str, bytes | str], have: dict[str, bytes]) -> list[str]:
    problems = [f"missing on the store: {rel}" for rel in sorted(set(want) - set(have))]
    problems += [f"on the store but never written (conflict copy?): {rel}" for rel in sorted(set(have) - set(want))]
    for rel in sorted(set(want) & set(have)):
        if sha(want[rel]) != hashlib.sha256(have[rel]).hexdigest():
            detail = ""
            if rel.startswith("contended/"):
                bad = [w for w in range(PROCESSES) if have[rel][w * RECORD:(w + 1) * RECORD]
                       != want[rel][w * RECORD:(w + 1) * RECORD]]
                detail = f" (records of writers {bad} differ; store has {len(have[rel])} bytes)"
            problems.append(f"wrong content on the store: {rel}, {len(have[rel])} bytes{detail}")
    return problems


def settle(m, xdg, timeout: float = 90) -> float:
    """Waits until every upload finished and every local copy is evicted: the cache dir is empty."""
    started = time.monotonic()
    try:
        wait_until(lambda: not xdg.cache_files(), timeout, "the cache dir to be empty after every close and upload",
                   interval=0.5)
    except AssertionError as error:
        left = xdg.cache_files()
        raise AssertionError(f"{error}: {len(left)} files left, e.g. {left[:10]}\nlog:\n{m.log_tail(3000)}") from None
    return time.monotonic() - started


def test_load_webdav(store_server, mount, xdg, tmp_path):
    files = seed()
    root = make_store(tmp_path / "store", files)
    server = store_server(root)
    m = mount(server.url)
    want, elapsed = run_load(m, tmp_path, files)
    settled = settle(m, xdg)
    result = m.unmount(timeout=120)
    assert result.returncode == 0, result.stderr
    have = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    problems = compare(want, have)
    assert not problems, "\n".join(problems[:40])
    print(f"\nwebdav ({server.kind}): {PROCESSES} x {OPERATIONS} operations in {elapsed:.1f} s, settled {settled:.1f} s later; "
          f"{len(have)} files checked on the store")


@pytest.fixture
def s3_server():
    """Moto only: one S3 server is enough for load, and SeaweedFS's own start costs time."""
    return get_server("moto")


def test_load_s3(s3, s3_mount, xdg, tmp_path):
    files = seed()
    s3.put_many(files)
    m = s3_mount()
    want, elapsed = run_load(m, tmp_path, files)
    settled = settle(m, xdg)
    result = m.unmount(timeout=120)
    assert result.returncode == 0, result.stderr
    keys = sorted(k for k in s3.keys() if not k.endswith("/"))
    have = {k: s3.get(k) for k in keys}
    problems = compare(want, have)
    assert not problems, "\n".join(problems[:40])
    print(f"\ns3: {PROCESSES} x {OPERATIONS} operations in {elapsed:.1f} s, settled {settled:.1f} s later; "
          f"{len(have)} objects checked on the store")
