"""Faults between docfs and a real server (issue 10): docfs -> fault_proxy -> `docfs serve`.

What they prove, through a real mount:
- a 503 with Retry-After is waited out: the read succeeds once the outage ends;
- a body that trickles fails the read with ETIMEDOUT/EIO within the store's transfer deadline
  (plus the retry deadline and a margin), and the download does not go on afterwards;
- a body cut after N bytes is fetched again (sha256 right), or fails cleanly;
- a body longer or shorter than the file, framed or not, never reaches a reader as the file;
- a 413 on every PUT is not sent again and again;
- a PUT answered 503 with Retry-After is not sent again sooner than asked, and reaches the store
  once the outage ends;
- changes made while every PUT fails transiently (503, a reset, a body cut off mid-way, or an
  answer lost after the store took the PUT), on WebDAV (`docfs serve`) and S3 (moto), all reach
  the store once the fault ends, byte for byte, and no conflict copy is made;
- latency slows reads but every caller has its bytes within --io-timeout (plus a margin);
- a 500, or a reset with no answer at all, is retried until it clears; one that does not clear
  fails the read with EIO/ETIMEDOUT within --io-timeout (plus a margin);
- an answer whose ETag is not the version being read (rewritten by the proxy, also in the middle
  of a streamed read) is never served as the file: the read fails (ESTALE/EIO) or has the
  right sha256, and nothing wrong stays cached.
Every read runs in a child process with a timeout, so a hang fails the test instead of it;
the mount fixture always unmounts.
"""
from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_proxy import FaultProxy
from helpers import NOT_ON_STORE_YET, pseudo_random_bytes, wait_until, wait_upload_failed, xattr_state

pytestmark = pytest.mark.fuse

SIZE = 300_000          # fetched whole at open (under the streaming limit)
DATA = pseudo_random_bytes(SIZE, seed=10)
SHA = hashlib.sha256(DATA).hexdigest()
# A short transfer deadline for these mounts: a stalled body fails after about this long.
TRANSFER_TIMEOUT = 3
# Store calls a reader waits for are retried within the mount's --io-timeout (set here).
RETRY_DEADLINE = 20


def read_in_child(path: Path, timeout: float) -> tuple[str, float]:
    """Reads `path` whole in a child process: ('sha:<hex>' | 'errno:<NAME>', seconds)."""
    code = ("import hashlib, os, sys, errno\n"
            "try:\n"
            "    with open(os.environ['TARGET'], 'rb') as f: data = f.read()\n"
            "except OSError as e:\n"
            "    print('errno:' + errno.errorcode.get(e.errno, str(e.errno))); sys.exit(0)\n"
            "print('sha:' + hashlib.sha256(data).hexdigest() + ':' + str(len(data)))\n")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, TARGET=str(path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"reading {path} did not end within {timeout} s") from None
    return out.strip() or f"crash:{err.strip()[-300:]}", time.monotonic() - started


def served_through_proxy(tmp_path: Path, docfs_serve, files: dict[str, bytes]) -> tuple[Path, FaultProxy]:
    """(root, proxy): a store directory holding `files`, served by `docfs serve` behind a fault
    proxy (started; the caller stops it)."""
    root = tmp_path / "store"
    root.mkdir()
    for name, content in files.items():
        (root / name).write_bytes(content)
    server = docfs_serve(root)
    return root, FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()


@pytest.fixture
def faulty(tmp_path, docfs_serve, mount, xdg):
    """(mount, proxy): a store with `data.bin` served through a fault proxy, mounted."""
    root, proxy = served_through_proxy(tmp_path, docfs_serve, {"data.bin": DATA})
    try:
        m = mount(proxy.url, "--io-timeout", str(RETRY_DEADLINE), "--transfer-timeout", str(TRANSFER_TIMEOUT))
        assert "data.bin" in os.listdir(m.path)
        yield m, proxy, root
    finally:
        proxy.clear()
        proxy.stop()


def gets(proxy: FaultProxy) -> list[str]:
    return [r.outcome for r in proxy.requests() if r.method == "GET" and "data.bin" in r.target]


def puts(proxy: FaultProxy, name: str) -> list:
    """The PUTs of `name` the proxy saw, in order (each with its outcome and arrival time)."""
    return [r for r in proxy.requests() if r.method == "PUT" and name in r.target]


def sha_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def wait_for_store(root: Path, name: str, data: bytes, proxy: FaultProxy, m, timeout: float = 60) -> None:
    want = hashlib.sha256(data).hexdigest()
    try:
        wait_until(lambda: sha_of(root / name) == want, timeout, f"{name} to reach the store with its sha256")
    except AssertionError as error:
        tries = [(r.outcome, round(r.at, 1)) for r in puts(proxy, name)]
        raise AssertionError(f"{error}; PUTs of it: {tries}\n{m.log_tail()}") from None
    # The upload ends after the PUT (docfs then asks for the new version): only then may the
    # proxy go, or unmount finds the upload unfinished and the store unreachable.
    wait_until(lambda: xattr_state(m / name) not in NOT_ON_STORE_YET, timeout, f"the upload of {name} to be recorded")


def test_503_with_retry_after_is_waited_out(faulty):
    m, proxy, _ = faulty
    proxy.respond(503, headers={"Retry-After": "2"}, method="GET", path=r"data\.bin", seconds=5)
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"503 + Retry-After: 2 for 5 s: {outcome[:20]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome == f"sha:{SHA}:{SIZE}", f"{outcome} after {elapsed:.1f} s; GETs {gets(proxy)}\n{m.log_tail()}"
    assert elapsed >= 4, f"read succeeded after {elapsed:.1f} s, inside the outage?"
    served_503 = gets(proxy).count("503")
    assert 2 <= served_503 <= 4, f"Retry-After: 2 over 5 s should mean about 3 tries, not {served_503}"


def test_trickled_body_fails_in_bounded_time(faulty):
    m, proxy, _ = faulty
    proxy.stall(every=2.0, after=1000, method="GET", path=r"data\.bin")
    bound = RETRY_DEADLINE + TRANSFER_TIMEOUT + 5
    outcome, elapsed = read_in_child(m / "data.bin", timeout=90)
    print(f"trickled body: {outcome} after {elapsed:.1f} s (bound {bound} s); GETs {gets(proxy)}")
    assert outcome in ("errno:ETIMEDOUT", "errno:EIO"), f"{outcome} after {elapsed:.1f} s"
    assert elapsed < bound, f"a trickling body kept the reader {elapsed:.1f} s (bound {bound} s)"
    # Every attempt was ended by its deadline: no GET goes on once the read failed. Barrier:
    # the mount has no download under way (it gave the file up).
    m.wait_downloads_done(TRANSFER_TIMEOUT + 5)
    count = len(gets(proxy))
    # No barrier shows "never again": a window past a transfer deadline, in which a download
    # that went on would send its next GET.
    time.sleep(TRANSFER_TIMEOUT + 3)
    assert len(gets(proxy)) == count, f"GETs went on after the read failed: {gets(proxy)}"


def test_body_cut_short_is_fetched_again(faulty):
    m, proxy, _ = faulty
    proxy.cut(after=100_000, method="GET", path=r"data\.bin", count=2)
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"two cut bodies: {outcome[:20]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome == f"sha:{SHA}:{SIZE}", f"{outcome}; GETs {gets(proxy)}"
    assert len(gets(proxy)) >= 3


def test_body_always_cut_fails_cleanly(faulty):
    m, proxy, _ = faulty
    proxy.cut(after=100_000, rst=True, method="GET", path=r"data\.bin")
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"every body cut: {outcome} after {elapsed:.1f} s; {len(gets(proxy))} GETs")
    assert outcome.startswith("errno:"), f"a read of cut bodies returned {outcome}"
    assert elapsed < RETRY_DEADLINE + 10


@pytest.mark.parametrize("fault", ["longer framed", "longer unframed", "shorter unframed", "unframed"])
def test_body_of_the_wrong_length_is_never_the_file(faulty, fault):
    m, proxy, _ = faulty
    if fault == "longer framed":
        proxy.extend(b"JUNK" * 100, method="GET", path=r"data\.bin")
    elif fault == "longer unframed":
        proxy.unframed(extra=b"JUNK" * 100, method="GET", path=r"data\.bin")
    elif fault == "shorter unframed":
        proxy.unframed(keep=SIZE - 1000, method="GET", path=r"data\.bin")
    else:
        proxy.unframed(method="GET", path=r"data\.bin")
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"{fault}: {outcome[:40]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    if fault == "unframed":
        # The whole file without a length: checked against the entry's size, and accepted.
        assert outcome == f"sha:{SHA}:{SIZE}", outcome
    else:
        assert outcome.startswith("errno:"), f"a {fault} body was read as the file: {outcome}"
    # Nothing wrong was kept: once the fault is gone the file reads right.
    proxy.clear()
    outcome, _ = read_in_child(m / "data.bin", timeout=60)
    assert outcome == f"sha:{SHA}:{SIZE}", outcome


def test_413_on_put_is_not_sent_again_and_again(faulty):
    m, proxy, root = faulty
    proxy.respond(413, method="PUT", body=b"too large")
    (m / "new.bin").write_bytes(b"x" * 5000)
    wait_until(lambda: proxy.count("PUT", r"new\.bin") >= 1, 20, "a PUT of new.bin")
    # A transient failure is tried again after at most 0.5, 1, 2, 4 s (full jitter): in 12 s
    # that is at least 5 PUTs, where a refusal gets at most 2.
    time.sleep(12)
    puts = proxy.count("PUT", r"new\.bin")
    print(f"PUTs answered 413 within 12 s: {puts}")
    assert puts <= 2, f"a 413 was answered {puts} times in 12 s: the upload is retried as if transient"
    assert not (root / "new.bin").exists()
    # The store takes it again: let the change reach it, so the mount can end cleanly.
    proxy.clear()


def test_put_answered_503_with_retry_after_waits_that_long(faulty):
    m, proxy, root = faulty
    asked = 4
    proxy.respond(503, headers={"Retry-After": str(asked)}, method="PUT", path=r"late\.bin", seconds=9)
    data = pseudo_random_bytes(200_000, seed=11)
    (m / "late.bin").write_bytes(data)
    wait_for_store(root, "late.bin", data, proxy, m)
    tries = puts(proxy, "late.bin")
    outcomes = [r.outcome for r in tries]
    gaps = [round(b.at - a.at, 2) for a, b in zip(tries, tries[1:])]
    print(f"PUTs of late.bin: {outcomes}, gaps {gaps} s")
    assert outcomes.count("503") >= 2 and outcomes[-1] != "503", outcomes
    # Every try after a 503 came at least Retry-After later (the proxy stamps a request's head).
    assert all(gap >= asked - 0.1 for gap in gaps), f"a PUT was sent again before Retry-After: {asked} s: gaps {gaps}"
    assert len(tries) <= 4, f"{len(tries)} PUTs for an outage of 9 s with Retry-After: {asked}: {outcomes}"


def test_a_new_change_during_retry_after_waits_too(faulty):
    """A change saved again while the store's Retry-After runs is not sent before it ends: the
    retry that is due sends it (the latest content), once."""
    m, proxy, root = faulty
    asked = 5
    proxy.respond(503, headers={"Retry-After": str(asked)}, method="PUT", path=r"again\.bin", count=1)
    first = pseudo_random_bytes(100_000, seed=13)
    (m / "again.bin").write_bytes(first)
    wait_until(lambda: puts(proxy, "again.bin"), 20, "the first PUT of again.bin")
    wait_upload_failed(m / "again.bin")          # barrier: docfs has the 503 and its Retry-After
    second = pseudo_random_bytes(120_000, seed=14)
    (m / "again.bin").write_bytes(second)        # saved again while Retry-After runs
    wait_for_store(root, "again.bin", second, proxy, m)
    tries = puts(proxy, "again.bin")
    gaps = [round(b.at - a.at, 2) for a, b in zip(tries, tries[1:])]
    print(f"PUTs of again.bin: {[r.outcome for r in tries]}, gaps {gaps} s")
    assert tries[0].outcome == "503"
    assert gaps and gaps[0] >= asked - 0.1, f"a new change was sent before Retry-After: {asked} s ended: gaps {gaps}"


# --- changes made during a transient fault on PUT reach the store once it ends ---------------

PUT_FAULT_SECONDS = 8
PUT_FAULTS = {
    "503": lambda proxy: proxy.respond(503, method="PUT", body=b"down", seconds=PUT_FAULT_SECONDS),
    "reset": lambda proxy: proxy.reset(method="PUT", seconds=PUT_FAULT_SECONDS),
    "cut mid-body": lambda proxy: proxy.cut_upload(after=40_000, rst=True, method="PUT", seconds=PUT_FAULT_SECONDS),
    # The store takes each PUT, and docfs never hears so: its next try finds a version it does
    # not know. That version is its own (the same bytes, or an earlier commit of the same file
    # it sent), so it is no conflict: no copy is kept, and the latest content replaces it.
    "answer lost": lambda proxy: proxy.lose_answer(method="PUT", seconds=PUT_FAULT_SECONDS),
}
FAULT_OUTCOME = {"503": "503", "reset": "reset", "cut mid-body": "upload cut after", "answer lost": "answer lost"}


def changes_during_put_fault(m, proxy, fault: str, has, names) -> None:
    """Makes changes while every PUT fails (`fault`), then checks each reaches the store
    (`has(name, data)` polls the store) with no conflict copy made (`names()` lists the store)."""
    PUT_FAULTS[fault](proxy)
    changes = {
        "new-1.bin": pseudo_random_bytes(150_000, seed=31),
        "data.bin": pseudo_random_bytes(120_000, seed=32),          # an existing file, rewritten
    }
    for name, data in changes.items():
        (m / name).write_bytes(data)
    wait_until(lambda: any(r.outcome.startswith(FAULT_OUTCOME[fault]) for r in proxy.requests() if r.method == "PUT"),
               20, f"a PUT to meet the fault ({fault})")
    # And one more change after the fault was met: appended to a file that was already waiting.
    changes["new-2.bin"] = pseudo_random_bytes(90_000, seed=33)
    (m / "new-2.bin").write_bytes(changes["new-2.bin"])
    with open(m / "new-1.bin", "ab") as f:
        f.write(b"appended during the fault")
    changes["new-1.bin"] += b"appended during the fault"
    for name, data in changes.items():
        want = hashlib.sha256(data).hexdigest()
        try:
            wait_until(lambda: has(name) == want, 60, f"{name} to reach the store with its sha256")
        except AssertionError as error:
            tries = [(r.method, r.target, r.outcome) for r in proxy.requests() if r.method == "PUT"]
            raise AssertionError(f"{error}; PUTs: {tries}\n{m.log_tail()}") from None
    outcomes = [r.outcome for r in proxy.requests() if r.method == "PUT"]
    print(f"{fault}: PUT outcomes {outcomes}")
    assert any(o.startswith(FAULT_OUTCOME[fault]) for o in outcomes), outcomes
    m.wait_uploads_done()   # barrier: a conflict copy made by a late upload would be there by then
    stored = names()
    assert not [n for n in stored if "conflict" in n], f"a conflict copy was made: {sorted(stored)}"
    assert not [n for n in os.listdir(m.path) if "conflict" in n], sorted(os.listdir(m.path))
    for name in changes:   # and the error shown while it failed is gone
        wait_until(lambda: not error_of(m / name), 10, f"user.docfs.error of {name} to clear")


def error_of(path: Path) -> str:
    try:
        return os.getxattr(path, "user.docfs.error").decode()
    except OSError as error:
        if error.errno == errno.ENODATA:
            return ""
        raise


@pytest.mark.parametrize("fault", list(PUT_FAULTS))
def test_changes_made_during_a_put_fault_reach_webdav(faulty, fault):
    m, proxy, root = faulty
    changes_during_put_fault(m, proxy, fault, has=lambda name: sha_of(root / name),
                             names=lambda: os.listdir(root))


@pytest.fixture
def faulty_s3(tmp_path, mount, xdg):
    """(mount, proxy, bucket): a moto bucket with `data.bin`, mounted through a fault proxy."""
    from s3_support import get_server, new_bucket, s3_env
    server = get_server("moto")
    xdg.env = s3_env(xdg.env)
    bucket = new_bucket(server, tmp_path, "put-faults")
    bucket.put("data.bin", DATA)
    # SigV4 signs Host: the proxy relays it as docfs sent it (moto does not check signatures).
    proxy = FaultProxy(server.port, rewrite_host=False, log_path=tmp_path / "proxy.log").start()
    try:
        m = mount(bucket.url, "--endpoint", proxy.url.rstrip("/"), "--io-timeout", str(RETRY_DEADLINE))
        assert "data.bin" in os.listdir(m.path)
        yield m, proxy, bucket
    finally:
        proxy.clear()
        proxy.stop()
        bucket.destroy()


@pytest.mark.parametrize("fault", list(PUT_FAULTS))
def test_changes_made_during_a_put_fault_reach_s3(faulty_s3, fault):
    m, proxy, bucket = faulty_s3

    def has(name):
        data = bucket.get(name)
        return None if data is None else hashlib.sha256(data).hexdigest()
    changes_during_put_fault(m, proxy, fault, has=has, names=lambda: bucket.keys())


# --- latency, 500, reset with no answer, a changed ETag: callers bounded by --io-timeout ------

SHORT_IO_TIMEOUT = 6
# What a caller may wait beyond --io-timeout: the reply, a busy machine.
MARGIN = 3
MiB = 1 << 20
BIG = pseudo_random_bytes(24 * MiB, seed=12)     # streamed in ranges (over the whole-file limit)
BIG_SHA = hashlib.sha256(BIG).hexdigest()


@pytest.fixture
def short_faulty(tmp_path, docfs_serve, mount, xdg):
    """(mount, proxy, root): data.bin, small-0..3.bin and big.bin through a fault proxy, mounted
    with --io-timeout SHORT_IO_TIMEOUT."""
    files = {"data.bin": DATA, "big.bin": BIG} | {f"small-{i}.bin": DATA[i:] + DATA[:i] for i in range(4)}
    root, proxy = served_through_proxy(tmp_path, docfs_serve, files)
    try:
        m = mount(proxy.url, "--io-timeout", str(SHORT_IO_TIMEOUT), "--transfer-timeout", str(TRANSFER_TIMEOUT))
        assert "big.bin" in os.listdir(m.path)
        yield m, proxy, root
    finally:
        proxy.clear()
        proxy.stop()


def read_many_in_children(paths: list[Path], timeout: float) -> list[tuple[str, float]]:
    """Reads every path at once, each in its own child process."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
        return list(pool.map(lambda p: read_in_child(p, timeout), paths))


def test_latency_slows_reads_but_each_caller_is_served_within_io_timeout(short_faulty):
    m, proxy, _ = short_faulty
    delay = 2.0
    proxy.latency(delay)          # every request: listings, stats and GETs
    names = [f"small-{i}.bin" for i in range(4)]
    results = read_many_in_children([m / n for n in names], timeout=60)
    print(f"latency {delay} s: {[(o[:12], round(t, 1)) for o, t in results]}")
    for name, (outcome, elapsed) in zip(names, results):
        i = int(name[6])
        want = hashlib.sha256(DATA[i:] + DATA[:i]).hexdigest()
        assert outcome == f"sha:{want}:{SIZE}", f"{name}: {outcome} after {elapsed:.1f} s\n{m.log_tail()}"
        assert elapsed < SHORT_IO_TIMEOUT + MARGIN, f"{name} took {elapsed:.1f} s (--io-timeout {SHORT_IO_TIMEOUT})"
    assert max(t for _, t in results) >= delay, "the latency fault did not slow the reads"


def test_500_is_retried_until_it_clears(short_faulty):
    m, proxy, _ = short_faulty
    proxy.respond(500, method="GET", path=r"data\.bin", body=b"oops", seconds=2.5)
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"500 for 2.5 s: {outcome[:20]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome == f"sha:{SHA}:{SIZE}", f"{outcome} after {elapsed:.1f} s; GETs {gets(proxy)}"
    assert gets(proxy).count("500") >= 2, gets(proxy)
    assert elapsed < SHORT_IO_TIMEOUT + MARGIN


def test_500_that_does_not_clear_fails_within_io_timeout(short_faulty):
    m, proxy, _ = short_faulty
    proxy.respond(500, method="GET", path=r"data\.bin", body=b"oops")
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"500 for good: {outcome} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome in ("errno:EIO", "errno:ETIMEDOUT"), f"{outcome} after {elapsed:.1f} s"
    assert elapsed < SHORT_IO_TIMEOUT + MARGIN, f"a 500 kept the reader {elapsed:.1f} s"
    assert gets(proxy).count("500") >= 2, f"a 500 was not retried: {gets(proxy)}"


def test_reset_with_no_answer_is_retried_until_it_clears(short_faulty):
    m, proxy, _ = short_faulty
    proxy.reset(method="GET", path=r"data\.bin", count=2)
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"2 resets: {outcome[:20]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome == f"sha:{SHA}:{SIZE}", f"{outcome}; GETs {gets(proxy)}"
    assert gets(proxy).count("reset") == 2


def test_reset_that_does_not_clear_fails_within_io_timeout(short_faulty):
    m, proxy, _ = short_faulty
    proxy.reset(method="GET", path=r"data\.bin")
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"reset for good: {outcome} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome in ("errno:EIO", "errno:ETIMEDOUT", "errno:EHOSTDOWN"), f"{outcome} after {elapsed:.1f} s"
    assert elapsed < SHORT_IO_TIMEOUT + MARGIN, f"resets kept the reader {elapsed:.1f} s"
    assert gets(proxy).count("reset") >= 2, f"a reset was not retried: {gets(proxy)}"


def test_a_whole_file_answered_with_another_etag_is_never_kept_as_the_listed_version(short_faulty):
    m, proxy, _ = short_faulty
    proxy.etag('"rewritten-by-proxy"', method="GET", path=r"data\.bin")
    outcome, elapsed = read_in_child(m / "data.bin", timeout=60)
    print(f"ETag rewritten: {outcome[:20]} after {elapsed:.1f} s; GETs {gets(proxy)}")
    assert outcome in ("errno:ESTALE", "errno:EIO", f"sha:{SHA}:{SIZE}"), outcome
    if outcome.startswith("sha:"):
        # Served whole, the bytes are the version their answer named, not the one listed.
        assert os.getxattr(m / "data.bin", "user.docfs.etag") == b'"rewritten-by-proxy"', "kept as the listed version"
    proxy.clear()
    outcome, _ = read_in_child(m / "data.bin", timeout=60)
    assert outcome == f"sha:{SHA}:{SIZE}", outcome


def test_an_etag_that_changes_in_the_middle_of_a_streamed_read_is_never_served(short_faulty):
    m, proxy, _ = short_faulty
    fd = os.open(m / "big.bin", os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == BIG[:4096]
        # From now on every range of big.bin comes with another version's ETag.
        proxy.etag('"rewritten-by-proxy"', method="GET", path=r"big\.bin")
        offset = 16 * MiB
        started = time.monotonic()
        try:
            got = os.pread(fd, 65536, offset)
            outcome = "right bytes" if got == BIG[offset:offset + 65536] else "WRONG BYTES"
        except OSError as error:
            outcome = f"errno:{errno.errorcode.get(error.errno, error.errno)}"
        elapsed = time.monotonic() - started
    finally:
        os.close(fd)
    big_gets = [r.outcome for r in proxy.requests() if r.method == "GET" and "big.bin" in r.target]
    print(f"ETag changed mid-read: {outcome} after {elapsed:.1f} s; GETs {big_gets}")
    # Bytes answered under another version's ETag are never served, even when (as here) they
    # happen to be the same: docfs cannot know that.
    assert outcome in ("errno:ESTALE", "errno:EIO"), outcome
    assert elapsed < SHORT_IO_TIMEOUT + MARGIN
    # Nothing of the other "version" stays: with the fault gone the file reads whole and right.
    proxy.clear()
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after close")
    outcome, _ = read_in_child(m / "big.bin", timeout=120)
    assert outcome == f"sha:{BIG_SHA}:{len(BIG)}", outcome


# --- a conflict copy whose name the store cannot take ------------------------------------------

def test_a_conflict_copy_name_over_255_bytes_is_not_retried_forever(tmp_path, docfs_serve, mount, xdg):
    """A file with a 250-byte name, changed on both sides: its conflict copy's name (the name plus
    " (conflict DATE)") is over 255 bytes. The upload is not sent again and again; the change is
    kept (readable, and in the recovery folder at unmount, named) and user.docfs.error says why."""
    name = "n" * 246 + ".txt"
    assert len(name.encode()) == 250
    old = b"the version both sides started from\n" * 40
    theirs = b"their version, written by another client\n" * 30
    root, proxy = served_through_proxy(tmp_path, docfs_serve, {name: old})
    try:
        m = mount(proxy.url, "--dir-cache-ttl", "0")
        target = m / name
        fd = os.open(target, os.O_RDWR)
        try:
            assert os.pread(fd, 1, 0) == old[:1]
            (root / name).write_bytes(theirs)          # another client changes it on the store
            os.utime(root / name, (1_700_000_000, 1_700_000_000))
            os.listdir(m.path)
            os.pwrite(fd, b"OURS", 0)
        finally:
            os.close(fd)
        ours = b"OURS" + old[4:]
        error = wait_until(lambda: error_of(target), 30, "user.docfs.error on the file")
        sent = len([r for r in proxy.requests() if r.method == "PUT"])
        # No barrier shows "never again": a window in which a retried upload would be sent again.
        time.sleep(8)
        puts = [(r.target[:40] + "…", r.outcome) for r in proxy.requests() if r.method == "PUT"]
        print(f"250-byte name in conflict: user.docfs.error {error!r}; PUTs {puts}")
        assert len(puts) <= sent + 1, f"the upload goes on being sent: {len(puts)} PUTs, {sent} when the error showed"
        assert "conflict" not in "".join(n for n in os.listdir(root) if n != name), os.listdir(root)
        assert (root / name).read_bytes() == theirs, "their version was overwritten"
        assert target.read_bytes() == ours, "the change is not readable through the mount"
        result = m.unmount(timeout=60)
        print(result.stderr)
        assert result.returncode == 0, f"docfs unmount exited {result.returncode}: {result.stderr}"
        assert name in result.stderr, f"the unmount message does not name the kept file: {result.stderr}"
        kept = list(xdg.state_home.glob(f"docfs/*/recovery/*/{name}"))
        assert kept and kept[0].read_bytes() == ours, f"no recovery copy with our change; stderr: {result.stderr}"
    finally:
        proxy.stop()


def killed_during(m, command: list[str], when, what: str) -> None:
    """Runs `command` (a user's `mv` or `rm` on the mount), SIGKILLs the daemon of `m` once
    `when()` holds (the store is where the test wants the kill), and ends that mount."""
    from write_support import sigkill_daemon
    user = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(when, 20, what)
    pids = sigkill_daemon(m)
    _, err = user.communicate(timeout=30)
    print(f"{command[0]} after the kill: exit {user.returncode} {err.strip()}")
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 60, "the killed daemon to be reaped")
    assert m.unmount().returncode == 0


@pytest.mark.parametrize("operation", ["mv", "rm"])
def test_a_daemon_killed_while_the_store_answers_a_rename_or_removal_ends_as_the_store_has_it(
        tmp_path, docfs_serve, mount, xdg, operation):
    """`mv` or `rm` of a file whose changes are not on the store yet; the store makes the move or
    the deletion, and the daemon is killed before its answer arrives. Before, the next mount
    sent the changes under the old name again (as a conflict copy of a file the store no longer
    had), next to a stale new name, or brought the removed file back. Now the next mount asks
    the store which way it went: the file ends under its new name with the changes, or gone."""

    root, proxy = served_through_proxy(tmp_path, docfs_serve, {"draft.txt": b"the version on the store\n"})
    try:
        m = mount(proxy.url, "--io-timeout", "20")
        refused = proxy.respond(503, method="PUT")      # the change stays in the cache
        (m / "draft.txt").write_bytes(b"the edited version\n")
        wait_until(lambda: puts(proxy, "draft.txt"), 20, "an upload of draft.txt to be tried")
        assert xattr_state(m / "draft.txt") in NOT_ON_STORE_YET
        method, command = ("MOVE", ["mv", str(m / "draft.txt"), str(m / "final.txt")]) if operation == "mv" \
            else ("DELETE", ["rm", str(m / "draft.txt")])
        held = proxy.hold_answer(60, method=method, path=r"draft\.txt")
        killed_during(m, command, lambda: held.hits == 1 and not (root / "draft.txt").exists(),
                      f"the store to make the {method}")
        proxy.remove(refused)
        proxy.remove(held)

        m2 = mount(proxy.url, "--io-timeout", "20")
        if operation == "mv":
            wait_until(lambda: sha_of(root / "final.txt") == hashlib.sha256(b"the edited version\n").hexdigest(), 30,
                       "the edited version under the new name")
        m2.wait_uploads_done()   # barrier: an upload under the old name would have been sent by then
        expected = ["final.txt"] if operation == "mv" else []
        assert sorted(os.listdir(root)) == expected, f"store: {sorted(os.listdir(root))}\n{m2.log_tail()}"
        assert sorted(os.listdir(m2.path)) == expected
    finally:
        proxy.clear()
        proxy.stop()


@pytest.mark.parametrize("edited", [True, False], ids=["with-unsent-changes", "clean"])
def test_a_daemon_killed_between_the_copy_and_the_delete_of_an_s3_rename_ends_under_the_new_name(
        tmp_path, mount, xdg, edited):
    """S3 has no rename: `mv` of a file is a CopyObject to the new key, then a DeleteObject of
    the old one. A daemon killed between the two left both keys holding the old version, so the
    user's `mv` was undone and a duplicate stood next to it; an unsent edit was sent under the
    old name. Now the next mount sees the copy is whole (the new key has the old one's ETag),
    deletes the old key, and sends the edit under the new name."""
    from s3_support import get_server, new_bucket, s3_env

    server = get_server("moto")
    xdg.env = s3_env(xdg.env)
    bucket = new_bucket(server, tmp_path, "cut-rename")
    bucket.put("draft.txt", b"the version on the store\n")
    # SigV4 signs Host: the proxy relays it as docfs sent it.
    proxy = FaultProxy(server.port, rewrite_host=False, log_path=tmp_path / "proxy.log").start()
    try:
        args = [bucket.url, "--endpoint", proxy.url.rstrip("/"), "--io-timeout", "20"]
        m = mount(*args)
        refused = proxy.respond(503, method="PUT", path=r"/draft\.txt$")     # a change stays in the cache
        want = b"the version on the store\n"
        if edited:
            want = b"the edited version\n"
            (m / "draft.txt").write_bytes(want)
            wait_until(lambda: puts(proxy, "draft.txt"), 20, "an upload of draft.txt to be tried")
            assert xattr_state(m / "draft.txt") in NOT_ON_STORE_YET
        else:
            assert "draft.txt" in os.listdir(m.path)
        # The copy reaches the store; the DELETE of the old key never does.
        cut = proxy.swallow(method="DELETE", path=r"/draft\.txt$")
        killed_during(m, ["mv", str(m / "draft.txt"), str(m / "final.txt")],
                      lambda: cut.hits >= 1 and bucket.head("final.txt") is not None,
                      "the copy to be made and the deletion of the old key to be tried")
        proxy.remove(refused)
        proxy.remove(cut)
        assert bucket.keys() == {"draft.txt", "final.txt"}, "the kill did not fall between the copy and the delete"

        m2 = mount(*args)
        wait_until(lambda: bucket.keys() == {"final.txt"} and bucket.get("final.txt") == want, 30,
                   f"{want!r} under the new name alone")
        m2.wait_uploads_done()   # barrier: an upload under the old name would have been sent by then
        assert bucket.keys() == {"final.txt"}, f"store: {sorted(bucket.keys())}\n{m2.log_tail()}"
        assert sorted(os.listdir(m2.path)) == ["final.txt"]
        assert (m2 / "final.txt").read_bytes() == want
    finally:
        proxy.clear()
        proxy.stop()
        bucket.destroy()
