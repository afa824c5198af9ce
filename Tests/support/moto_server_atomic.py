"""moto's S3 server with conditional writes made atomic, for docfs's tests.

moto (5.2.1) checks `If-Match` / `If-None-Match` in `S3Response.put_object` (and
CompleteMultipartUpload, DeleteObject) and writes afterwards, with nothing held in between; its
server is threaded, so two conditional PUTs over one version at the same moment can both pass the
check and both answer 200, the later replacing the earlier: a saved version lost, which
test_two_mounts's third client then reports. Here every key write (PUT, POST, DELETE on a key)
runs under one lock, so a check and its write are one step, as on S3. Reads stay concurrent.

    python3 Tests/support/moto_server_atomic.py -H 127.0.0.1 -p PORT   (the arguments of moto_server)
"""
import sys
import threading

from moto.s3 import responses

_writes = threading.Lock()
_key_response = responses.S3Response._key_response


def _atomic_key_response(self, request, full_url):
    if request.method in ("PUT", "POST", "DELETE"):
        with _writes:
            return _key_response(self, request, full_url)
    return _key_response(self, request, full_url)


responses.S3Response._key_response = _atomic_key_response

if __name__ == "__main__":
    from moto.server import main
    main(sys.argv[1:])
