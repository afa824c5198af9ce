"""A hostile store server for test_hostile_server.py (issue 10, item 8): one HTTP server that
speaks just enough WebDAV (PROPFIND, GET under /dav/) and S3 (ListObjectsV2, HEAD, GET under
/bucket) to list what a broken or malicious server would list:

- `hostile/`: names that are empty, `.`, `..`, hold `/` or NUL, exceed 255 bytes, are not UTF-8
  (percent-encoded and raw), lie outside the folder — next to two valid names;
- `big/`: a listing of about 10 MB, streamed in chunks;
- `endless/`: a listing that never ends (WebDAV: a chunked body of responses, forever; S3:
  IsTruncated with a fresh token, forever); `repeat/` (S3): the same continuation token again;
- `bloat/` (WebDAV): one response that grows forever;
- files `short.bin` (GET sends half of its Content-Length, then closes) and `long.bin` (GET
  sends more than the listing announced).

Run in process: `server = HostileServer(); server.start(); ...; server.stop()`.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, urlparse, parse_qs

VALID = ["ok-one.txt", "ok-two.txt"]
# WebDAV hrefs below /dav/hostile/ (already on the wire: percent-encoded or raw bytes).
HOSTILE_HREFS = [b"/dav/hostile/%2E", b"/dav/hostile/%2E%2E", b"/dav/hostile/..", b"/dav/hostile/a%2Fb",
                 b"/dav/hostile/nul%00x", b"/dav/hostile/" + b"n" * 256, b"/dav/hostile/bad%FF%FE",
                 b"/dav/hostile/raw\xff\xfe", b"/etc/passwd", b"/dav/hostile/deeper/inner.txt",
                 b"/dav/hostile/../../escape"]
# S3 keys below hostile/ (raw bytes; sent URL-encoded, as with encoding-type=url).
HOSTILE_KEYS = [b"hostile//empty", b"hostile/.", b"hostile/..", b"hostile/nul\x00x", b"hostile/" + b"k" * 256,
                b"hostile/bad\xff\xfe", b"elsewhere/outside"]
BIG_COUNT = 24_000
SHORT_SIZE = 100_000
LONG_LISTED, LONG_SENT = 1000, 5000


def response(href: bytes, collection=False, size=0) -> bytes:
    kind = b"<D:resourcetype><D:collection/></D:resourcetype>" if collection else b"<D:resourcetype/>"
    return (b"<D:response><D:href>" + href + b"</D:href><D:propstat><D:prop>" + kind +
            b"<D:getcontentlength>%d</D:getcontentlength>" % size +
            b"<D:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</D:getlastmodified>"
            b"<D:getetag>\"e%d\"</D:getetag></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n" % size)


HEAD = b'<?xml version="1.0" encoding="utf-8"?>\n<D:multistatus xmlns:D="DAV:">\n'
TAIL = b"</D:multistatus>\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def start_chunked(self, status: int, content_type: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def whole(self, status: int, body: bytes, content_type="application/xml"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # --- WebDAV ---

    def do_PROPFIND(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = urlparse(self.path).path.rstrip("/") + "/"
        depth = self.headers.get("Depth", "1")
        self.server.requests.append(("PROPFIND", path))
        folders = {"/dav/": None, "/dav/hostile/": None, "/dav/big/": None, "/dav/endless/": None, "/dav/bloat/": None}
        files = {"/dav/short.bin/": SHORT_SIZE, "/dav/long.bin/": LONG_LISTED}
        if path in files:
            return self.whole(207, HEAD + response(path.rstrip("/").encode(), size=files[path]) + TAIL)
        if path not in folders:
            return self.whole(404, b"")
        if depth == "0":
            return self.whole(207, HEAD + response(path.encode(), collection=True) + TAIL)
        try:
            self.start_chunked(207, "application/xml; charset=utf-8")
            self.chunk(HEAD + response(path.encode(), collection=True))
            if path == "/dav/":
                body = b"".join(response(b"/dav/" + n + b"/", collection=True) for n in (b"hostile", b"big", b"endless", b"bloat"))
                body += response(b"/dav/short.bin", size=SHORT_SIZE) + response(b"/dav/long.bin", size=LONG_LISTED)
                self.chunk(body)
            elif path == "/dav/hostile/":
                self.chunk(b"".join(response(h) for h in HOSTILE_HREFS))
                self.chunk(b"".join(response(b"/dav/hostile/" + n.encode(), size=3) for n in VALID))
            elif path == "/dav/big/":
                pad = b"p" * 180
                for start in range(0, BIG_COUNT, 1000):
                    self.chunk(b"".join(response(b"/dav/big/entry-%06d-" % i + pad, size=i) for i in range(start, start + 1000)))
            elif path == "/dav/endless/":
                i = 0
                while not self.server.stopping:
                    self.chunk(b"".join(response(b"/dav/endless/e%09d" % n, size=n) for n in range(i, i + 500)))
                    i += 500
                return
            elif path == "/dav/bloat/":
                self.chunk(b"<D:response><D:href>/dav/bloat/x</D:href><D:propstat><D:prop><D:displayname>")
                while not self.server.stopping:
                    self.chunk(b"z" * 65536)
                return
            self.chunk(TAIL)
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_GET(self):
        parsed = urlparse(self.path)
        if parsed.path.startswith("/bucket"):
            return self.s3_get(parsed)
        self.server.requests.append(("GET", parsed.path))
        if parsed.path == "/dav/short.bin":
            self.send_response(200)
            self.send_header("Content-Length", str(SHORT_SIZE))
            self.send_header("ETag", '"e%d"' % SHORT_SIZE)
            self.end_headers()
            self.wfile.write(b"s" * (SHORT_SIZE // 2))
            self.wfile.flush()
            self.close_connection = True
            return
        if parsed.path == "/dav/long.bin":
            self.send_response(200)
            self.send_header("Content-Length", str(LONG_SENT))
            self.send_header("ETag", '"e%d"' % LONG_LISTED)
            self.end_headers()
            self.wfile.write(b"l" * LONG_SENT)
            return
        self.whole(404, b"")

    def do_HEAD(self):
        parsed = urlparse(self.path)
        self.server.requests.append(("HEAD", parsed.path))
        is_object = parsed.path.startswith("/bucket/") and not parsed.path.endswith("/")
        self.send_response(200 if is_object else 404)
        self.send_header("Content-Length", "3" if is_object else "0")
        if is_object:
            self.send_header("ETag", '"abc"')
            self.send_header("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")
        self.end_headers()

    # --- S3 ---

    def s3_get(self, parsed):
        query = parse_qs(parsed.query, keep_blank_values=True)
        prefix = query.get("prefix", [""])[0]
        token = query.get("continuation-token", [None])[0]
        self.server.requests.append(("LIST", prefix, token))
        if query.get("list-type") != ["2"]:
            return self.whole(404, b"<Error><Code>NoSuchKey</Code></Error>")

        def contents(key: bytes, size=3):
            return (b"<Contents><Key>" + quote(key, safe=b"/").encode() + b"</Key><LastModified>2009-10-12T17:50:30.000Z"
                    b"</LastModified><ETag>&quot;abc&quot;</ETag><Size>%d</Size></Contents>" % size)

        def page(body: bytes, truncated=False, next_token=None) -> bytes:
            head = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    b"<Name>bucket</Name><Prefix>" + quote(prefix).encode() + b"</Prefix><MaxKeys>1000</MaxKeys>"
                    b"<Delimiter>/</Delimiter><EncodingType>url</EncodingType>")
            head += b"<IsTruncated>true</IsTruncated>" if truncated else b"<IsTruncated>false</IsTruncated>"
            if next_token:
                head += b"<NextContinuationToken>" + next_token.encode() + b"</NextContinuationToken>"
            return head + body + b"</ListBucketResult>"

        if prefix == "":
            body = b"".join(b"<CommonPrefixes><Prefix>%s/</Prefix></CommonPrefixes>" % n for n in (b"hostile", b"endless", b"repeat"))
            return self.whole(200, page(body))
        if prefix == "hostile/":
            body = b"".join(contents(k) for k in HOSTILE_KEYS) + b"".join(contents(b"hostile/" + n.encode()) for n in VALID)
            return self.whole(200, page(body))
        if prefix == "endless/":
            n = int(token or "0")
            body = b"".join(contents(b"endless/k%09d" % i) for i in range(n * 1000, n * 1000 + 1000))
            return self.whole(200, page(body, truncated=True, next_token=str(n + 1)))
        if prefix == "repeat/":
            return self.whole(200, page(contents(b"repeat/again"), truncated=True, next_token="same"))
        return self.whole(200, page(b""))


class HostileServer:
    def __init__(self, port: int = 0):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = []
        self.httpd.stopping = False
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self):
        return self.httpd.requests

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.stopping = True
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    import sys
    server = HostileServer(int(sys.argv[1]) if len(sys.argv) > 1 else 8089).start()
    print(f"hostile server on 127.0.0.1:{server.port}", flush=True)
    server.thread.join()
