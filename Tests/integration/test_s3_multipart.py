"""S3 multipart uploads through the mount, against moto and SeaweedFS: a >= 100 MiB file written
with dd arrives as a multipart upload (CreateMultipartUpload, several UploadPart,
CompleteMultipartUpload in the server's log; an ETag ending in -N) and reads back byte-identical;
a multipart upload whose part keeps failing is aborted (AbortMultipartUpload: DELETE ?uploadId=)
and the upload is retried with a new upload that succeeds, leaving no pending upload behind."""
from __future__ import annotations

import hashlib
import os
import time

import pytest

from conftest import run
from helpers import sha256_file, wait_until, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

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
