"""S3 multipart uploads through the mount, against moto and SeaweedFS: a >= 100 MiB file written
with dd arrives as a multipart upload (CreateMultipartUpload, several UploadPart,
CompleteMultipartUpload in the server's log; an ETag ending in -N) and reads back byte-identical;
a multipart upload whose part keeps failing is aborted (AbortMultipartUpload: DELETE ?uploadId=)
and the upload is retried with a new upload that succeeds, leaving no pending upload behind."""
from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from conftest import run
from helpers import sha256_file, wait_until, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures
from write_support import sigkill_daemon

pytestmark = pytest.mark.fuse

MiB = 1024 * 1024


def multipart_summary(s3, key):
    reqs = s3.of_key(key)
    create = [r for r in reqs if r.method == "POST" and "uploads" in r.q()]
    parts = [r for r in reqs if r.method == "PUT" and "partNumber" in r.q()]
    complete = [r for r in reqs if r.method == "POST" and "uploadId" in r.q()]
    abort = [r for r in reqs if r.method == "DELETE" and "uploadId" in r.q()]
    return create, parts, complete, abort


def test_s3_100mib_file_is_a_multipart_upload(s3, s3_mount, tmp_path):
    size = 100 * MiB + 12345
    source = tmp_path / "big.src"
    run(["dd", "if=/dev/urandom", f"of={source}", "bs=1M", "count=100", "status=none"], check=True, timeout=120)
    with open(source, "ab") as f:
        f.write(os.urandom(12345))
    digest = sha256_file(source)
    m = s3_mount()
    started = time.monotonic()
    run(["dd", f"if={source}", f"of={m / 'big.bin'}", "bs=1M", "status=none"], check=True, timeout=300)
    wrote = time.monotonic() - started
    s3.wait_requests(lambda _: multipart_summary(s3, "big.bin")[2], 300, "CompleteMultipartUpload of big.bin")
    wait_until(lambda: xattr_state(m / "big.bin") in ("local", "placeholder"), 300,
               f"big.bin to be uploaded (state {xattr_state(m / 'big.bin')!r})", interval=0.5)
    print(f"dd through the mount: {wrote:.1f} s; uploaded {time.monotonic() - started:.1f} s after dd started")

    create, parts, complete, abort = multipart_summary(s3, "big.bin")
    expected_parts = -(-size // (8 * MiB))
    assert len(create) == 1 and len(complete) == 1, f"expected one multipart upload:\n{s3.log_text(40)}"
    assert sorted({int(p.q()["partNumber"]) for p in parts}) == list(range(1, expected_parts + 1)), s3.log_text(40)
    assert not abort, s3.log_text(40)
    assert not [r for r in s3.of_key("big.bin", "PUT") if "partNumber" not in r.q()], "a single PUT of 100 MiB"
    head = s3.head("big.bin")
    assert head["ContentLength"] == size
    assert head["ETag"].strip('"').endswith(f"-{expected_parts}"), f"ETag {head['ETag']} is not a multipart ETag"
    assert s3.multipart_uploads() == []

    body = s3.client.get_object(Bucket=s3.name, Key="big.bin")["Body"]
    h = hashlib.sha256()
    for chunk in iter(lambda: body.read(MiB), b""):
        h.update(chunk)
    assert h.hexdigest() == digest, "the object on the bucket differs from what was written"

    result = m.unmount(timeout=300)
    assert result.returncode == 0, result.stderr
    m2 = s3_mount()
    assert os.stat(m2 / "big.bin").st_size == size
    assert sha256_file(m2 / "big.bin") == digest, "reading back through the mount after a remount differs"


def test_s3_failed_part_aborts_the_upload_then_retries(s3, s3_mount):
    size = 30 * MiB + 1
    data = os.urandom(size)
    first_upload: list[str] = []

    def fail_part_2_of_first_upload(target, method):
        if method != "PUT" or "partNumber=" not in target:
            return False
        query = dict(p.split("=", 1) for p in target.split("?", 1)[1].split("&") if "=" in p)
        if not first_upload:
            first_upload.append(query["uploadId"])
        return query["partNumber"] == "2" and query["uploadId"] == first_upload[0]

    s3.relay.fail_when = fail_part_2_of_first_upload
    m = s3_mount("--part-size", "5M")
    with open(m / "thirty.bin", "wb") as f:
        f.write(data)
    s3.wait_object("thirty.bin", data, timeout=120, what="(after the failed upload was retried)")

    create, parts, complete, abort = multipart_summary(s3, "thirty.bin")
    resets = [r for r in s3.relay.requests() if r.status == "reset"]
    assert resets, "the relay never failed part 2: was the file uploaded in parts?"
    uid = first_upload[0]
    print(f"part 2 of upload {uid[:16]}… reset {len(resets)} times; {len(create)} uploads created, "
          f"{len(abort)} aborted, {len(complete)} completed")
    aborted = [r for r in abort if r.q()["uploadId"] == uid]
    assert aborted, f"the failed multipart upload {uid} was not aborted (no DELETE ?uploadId=):\n{s3.log_text(60)}"
    assert not [r for r in complete if r.q()["uploadId"] == uid], "the failed upload was completed anyway"
    assert len(create) >= 2 and len(complete) == 1, f"expected a second, successful upload:\n{s3.log_text(60)}"
    reqs = s3.requests()
    assert reqs.index(aborted[0]) < reqs.index(complete[0]), "the abort must come before the retry completes"
    assert s3.multipart_uploads() == [], f"pending multipart uploads left: {s3.multipart_uploads()}"
    assert s3.head("thirty.bin")["ETag"].strip('"').endswith("-7")
    assert "aborted the multipart upload" in m.log_tail(20000), f"docfs did not log the abort:\n{m.log_tail(3000)}"


def in_progress_uploads(s3) -> set[tuple[str, str]]:
    """(key, upload id) of every multipart upload under way in the bucket."""
    answer = s3.client.list_multipart_uploads(Bucket=s3.name)
    return {(u["Key"], u["UploadId"]) for u in answer.get("Uploads", [])}


def test_a_multipart_upload_cut_by_a_killed_daemon_is_aborted_by_the_next_mount(s3, s3_mount):
    """A daemon killed during a multipart upload leaves its parts on the server, where they are
    billed and seen by no one. The next mount aborts that upload (docfs recorded it before its
    first part), and only that one: another client's upload under way in the bucket stays."""
    s3.put_many({"keep.txt": b"keep\n"})
    theirs = s3.client.create_multipart_upload(Bucket=s3.name, Key="theirs.bin")["UploadId"]
    part_sent, release = threading.Event(), threading.Event()

    def hold_parts(target: str, method: str) -> bool:
        if method == "PUT" and "partNumber=" in target:
            part_sent.set()
            release.wait(60)
            return True  # reset: the daemon that sent it is dead by now
        return False

    m = s3_mount("--part-size", "5M")
    assert os.listdir(m.path) == ["keep.txt"]
    data = os.urandom(12 * MiB)
    s3.relay.fail_when = hold_parts
    try:
        (m / "big.bin").write_bytes(data)
        assert part_sent.wait(30), "no part of big.bin was sent"
        sigkill_daemon(m)
    finally:
        s3.relay.fail_when = None
        release.set()
    orphans = {upload for upload in in_progress_uploads(s3) if upload[0] == "big.bin"}
    assert len(orphans) == 1, f"the killed daemon left no upload under way: {in_progress_uploads(s3)}"
    assert m.unmount().returncode == 0

    m2 = s3_mount("--part-size", "5M")
    s3.wait_object("big.bin", data, timeout=60, what="(uploaded by the next mount)")
    wait_until(lambda: not (orphans & in_progress_uploads(s3)), 30, "the next mount to abort the cut upload")
    assert in_progress_uploads(s3) == {("theirs.bin", theirs)}, "another client's upload is not docfs's to abort"
    assert m2.unmount().returncode == 0
    records = list((m2.xdg.state_home / "docfs").glob("*/s3-uploads/*"))
    assert not records, f"records of finished uploads are left: {records}"
    s3.client.abort_multipart_upload(Bucket=s3.name, Key="theirs.bin", UploadId=theirs)


def test_s3_a_large_new_file_is_sent_part_by_part_while_it_is_written(s3, s3_mount):
    """Issue 9's write target on S3: a new file written in order goes up as a multipart upload
    whose parts are sent while the file is written, so the bucket has it about when close
    returns; nothing shows under the key before the close completes it."""
    m = s3_mount()
    data = os.urandom(20 * MiB + 4321)
    with open(m / "copied.bin", "wb") as f:
        f.write(data[: 17 * MiB])
        # Two whole parts (8 MiB each) are behind the writer: they go now, well within the 2 s
        # a stream waits for a writer that pauses.
        s3.wait_requests(lambda _: len(multipart_summary(s3, "copied.bin")[1]) >= 2, 1.5, "two parts sent before the close")
        assert s3.head("copied.bin") is None, "the object showed before the file was closed"
        f.write(data[17 * MiB:])
    s3.wait_requests(lambda _: multipart_summary(s3, "copied.bin")[2], 60, "CompleteMultipartUpload of copied.bin")
    wait_until(lambda: xattr_state(m / "copied.bin") in ("local", "placeholder"), 60, "copied.bin to be uploaded")
    create, parts, complete, abort = multipart_summary(s3, "copied.bin")
    assert len(create) == 1 and len(complete) == 1 and not abort, s3.log_text(40)
    assert sorted(int(p.q()["partNumber"]) for p in parts) == [1, 2, 3], s3.log_text(40)
    assert not [r for r in s3.of_key("copied.bin", "PUT") if "partNumber" not in r.q()], "uploaded again at close"
    assert s3.get("copied.bin") == data
    assert s3.multipart_uploads() == []
