"""fault_proxy: an HTTP/1.1 proxy of our own between docfs and a real server on 127.0.0.1 that
injects faults into chosen requests, so the fault tests (test_faults.py) can make a real server
slow, stalled, cut off, rude or broken on demand.

    proxy = FaultProxy(upstream_port=server.port).start()     # listens on 127.0.0.1:proxy.port
    # (`Host` is rewritten to the server's, as `docfs serve` checks it; for S3, whose SigV4
    # signs `Host`, pass rewrite_host=False and give docfs the proxy as its endpoint)
    url = proxy.url                                            # http://127.0.0.1:PORT/
    f = proxy.respond(503, method="GET", path=r"^/big\\.bin", headers={"Retry-After": "2"}, seconds=5)
    proxy.stall(every=5.0, method="GET", path="big")           # trickle: one body byte every 5 s
    proxy.cut(after=100_000, method="GET")                     # close after 100,000 body bytes
    proxy.cut_upload(after=50_000, method="PUT")               # close after 50,000 request body bytes
    proxy.reset(method="PROPFIND", count=2)                    # RST the next 2 PROPFINDs
    proxy.latency(1.5, method="GET")                           # wait 1.5 s, then forward
    proxy.throttle(200_000, method="GET")                      # the body at 200,000 bytes/s
    proxy.throttle_upload(500_000, method="PUT")               # read the request body at 500,000 bytes/s
    proxy.extend(b"junk", method="GET")                        # longer body, Content-Length to match
    proxy.unframed(method="GET", extra=b"junk")                # no Content-Length: body until close
    proxy.unframed(method="GET", keep=1000)                    # ... and only its first 1000 bytes
    proxy.etag('"changed"', method="GET")                      # rewrite the answer's ETag
    proxy.lose_answer(method="PUT")                            # the server does it; the answer never comes
    proxy.hold_answer(30, method="MOVE")                       # the server does it; the answer waits 30 s
    proxy.swallow(method="DELETE")                             # never relayed, never answered
    proxy.remove(f); proxy.clear()                             # turn faults off
    proxy.count("PUT", r"^/a\\.txt$")                           # requests seen (faulted or not)
    proxy.stop()

Every fault takes the same selectors and lifetime:
- `method`: exact HTTP method, or None for any;
- `path`: a regular expression searched (re.search) in the request target as sent (path and
  query, percent-encoded), or None for any;
- `count`: the fault applies to the next `count` matching requests, then retires; None: no limit;
- `seconds`: the fault applies for this long from now, then retires; None: no limit.
The first active fault that matches a request (in the order they were added) decides it;
`fault.hits` says how many requests it took. Requests no fault takes are relayed unchanged.

Actions:
- respond(status, headers=, body=): answers without asking the server (the request body is read
  first, so the connection stays usable); e.g. 500, 503 + Retry-After, 413, 403.
- reset(): reads the request, then closes the client connection with RST.
- latency(delay): waits `delay` seconds, then relays.
- throttle(rate): relays the head, then the whole body at about `rate` bytes per second (a slow
  but steady network: a transfer that takes a while and then completes).
- throttle_upload(rate): reads the request body (Content-Length framed, or chunked) at about `rate` bytes
  per second before relaying it and the answer: a slow uplink, so an upload takes a while.
- stall(every, after=0): relays the head and `after` body bytes, then one byte every `every`
  seconds, until the body ends or the client goes away.
- cut(after, rst=False): relays the head and `after` body bytes, then closes (FIN, or RST): a
  body shorter than its Content-Length.
- cut_upload(after, rst=False): reads the request head and `after` bytes of its body, then closes
  (FIN, or RST) without relaying anything: an upload cut off mid-body (the server sees nothing).
- extend(extra): the whole answer, with `extra` appended and Content-Length (not Content-Range)
  grown to match: a body longer than asked that is still well framed.
- unframed(extra=b"", keep=None): the answer without Content-Length (and without chunking), with
  `extra` appended (or cut to its first `keep` bytes), ended by closing the connection: a client
  cannot tell from the framing whether it got all of it.
- etag(value): the answer with its ETag header replaced.
- lose_answer(): relays the request, reads the server's whole answer, then closes the client
  connection with RST instead of relaying it: the server did the work (a PUT stored), and the
  client cannot know (a reply lost to a network failure or a timeout).
- hold_answer(delay): relays the request and reads the server's whole answer, then waits `delay`
  seconds before relaying it: the server did the work, and a test can kill the client while its
  answer is on the way.
- swallow(): reads the request and neither relays nor answers it, until the client hangs up: a
  request lost on the way, which a client killed while it waits never gets to the server.

The request log (`proxy.requests()`: method, target, status or what was done, time) counts
every request that reached the proxy, so a test can count PUTs even when none reaches the server.

Out of process: `python3 fault_proxy.py UPSTREAM_PORT [--port P] --rules FILE` runs the same
proxy; FILE holds a JSON list of faults ({"action": "respond", "status": 503, "method": "GET",
...} with the keyword arguments above) and is read again whenever it changes.

The proxy is threads of the test process. While a test is blocked in a call that holds the GIL
the proxy stops too; plain reads and writes on the mount (os.read, open, subprocess) release it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Callable

REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclasses.dataclass
class Fault:
    action: str
    method: str | None = None
    path: str | None = None
    count: int | None = None
    until: float | None = None          # time.monotonic() after which the fault is retired
    status: int = 503
    headers: dict = dataclasses.field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0                  # latency: before relaying; stall: between two bytes; hold_answer
    after: int = 0                      # stall, cut: body bytes relayed normally first
    extra: bytes = b""                  # extend, unframed: bytes appended to the body
    rst: bool = False                   # cut: close with RST rather than FIN
    value: str = ""                     # etag: the new ETag
    keep: int | None = None             # unframed: send only this many body bytes
    rate: int = 0                       # throttle, throttle_upload: body bytes per second
    hits: int = 0

    def active(self, now: float) -> bool:
        return (self.count is None or self.hits < self.count) and (self.until is None or now < self.until)

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and \
            (self.path is None or re.search(self.path, target) is not None)


@dataclasses.dataclass(frozen=True)
class Logged:
    method: str
    target: str
    outcome: str        # the status relayed or answered ("503"), or "reset", "cut", "stalled", ...
    at: float           # time.monotonic() when the request head arrived


class _Conn:
    """A buffered reader over a socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def fill(self) -> bool:
        data = self.sock.recv(1 << 16)
        if not data:
            return False
        self.buf += data
        return True

    def head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1 << 20 or not self.fill():
                return None
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def take(self, n: int) -> bytes:
        """Up to n bytes (at least one unless EOF): what is buffered, else one recv."""
        if not self.buf and not self.fill():
            return b""
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def exact(self, n: int) -> bytes:
        parts = []
        while n > 0:
            part = self.take(n)
            if not part:
                raise ConnectionError("end of stream inside a body")
            parts.append(part)
            n -= len(part)
        return b"".join(parts)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self.fill():
                raise ConnectionError("end of stream inside a chunk line")
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line + b"\r\n"

    def chunked_raw(self, exact=None) -> bytes:
        """A chunked body as it is on the wire (chunk lines, trailers and all); `exact` reads
        each chunk's bytes (a throttle reads them slowly)."""
        exact = exact or self.exact
        parts = []
        while True:
            line = self.line()
            parts.append(line)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:
                    trailer = self.line()
                    parts.append(trailer)
                    if trailer == b"\r\n":
                        return b"".join(parts)
            parts.append(exact(size + 2))

    def to_eof(self) -> bytes:
        parts = [self.buf]
        self.buf = b""
        while self.fill():
            parts.append(self.buf)
            self.buf = b""
        return b"".join(parts)


def _parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _get(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name.lower():
            return value
    return None


def _build_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")


def _without(headers: list[tuple[str, str]], *names: str) -> list[tuple[str, str]]:
    drop = {n.lower() for n in names}
    return [(k, v) for k, v in headers if k.lower() not in drop]


def no_delay(sock: socket.socket) -> None:
    """Sends each write at once (TCP_NODELAY). A proxy writes an answer's head and its body
    separately; with Nagle's algorithm the second write waited for the client's delayed ACK,
    up to 40 ms a request."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


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


class _Close(Exception):
    """Ends the client connection (after the fault did what it does)."""


class FaultProxy:
    """HTTP/1.1 proxy 127.0.0.1:port -> 127.0.0.1:upstream_port with faults; see the module doc."""

    def __init__(self, upstream_port: int, port: int = 0, log_path: Path | None = None, rewrite_host: bool = True):
        self.upstream_port = upstream_port
        self.rewrite_host = rewrite_host
        self.port = port
        self.log_path = log_path
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._log: list[Logged] = []
        self._listener: socket.socket | None = None
        self._clients: set[socket.socket] = set()
        self._stopped = threading.Event()

    # --- life -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> "FaultProxy":
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, daemon=True, name=f"fault-proxy-{self.port}").start()
        return self

    def stop(self) -> None:
        """Stops listening and resets every open connection (stalled ones end too)."""
        self._stopped.set()
        with self._lock:
            listener, self._listener = self._listener, None
            clients, self._clients = set(self._clients), set()
        if listener is not None:
            listener.close()
        for c in clients:
            _reset(c)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- faults ---------------------------------------------------------------------------

    def add(self, action: str, method: str | None = None, path: str | None = None, count: int | None = None,
            seconds: float | None = None, **options) -> Fault:
        if isinstance(options.get("body"), str):
            options["body"] = options["body"].encode()
        if isinstance(options.get("extra"), str):
            options["extra"] = options["extra"].encode()
        fault = Fault(action, method, path, count,
                      None if seconds is None else time.monotonic() + seconds, **options)
        with self._lock:
            self._faults.append(fault)
        return fault

    def respond(self, status: int, headers: dict | None = None, body: bytes | str = b"", **select) -> Fault:
        return self.add("respond", status=status, headers=dict(headers or {}), body=body, **select)

    def reset(self, **select) -> Fault:
        return self.add("reset", **select)

    def latency(self, delay: float, **select) -> Fault:
        return self.add("latency", delay=delay, **select)

    def throttle(self, rate: int, **select) -> Fault:
        return self.add("throttle", rate=rate, **select)

    def throttle_upload(self, rate: int, **select) -> Fault:
        return self.add("throttle_upload", rate=rate, **select)

    def stall(self, every: float, after: int = 0, **select) -> Fault:
        return self.add("stall", delay=every, after=after, **select)

    def cut(self, after: int, rst: bool = False, **select) -> Fault:
        return self.add("cut", after=after, rst=rst, **select)

    def cut_upload(self, after: int, rst: bool = False, **select) -> Fault:
        return self.add("cut_upload", after=after, rst=rst, **select)

    def extend(self, extra: bytes | str, **select) -> Fault:
        return self.add("extend", extra=extra, **select)

    def unframed(self, extra: bytes | str = b"", keep: int | None = None, **select) -> Fault:
        return self.add("unframed", extra=extra, keep=keep, **select)

    def etag(self, value: str, **select) -> Fault:
        return self.add("etag", value=value, **select)

    def lose_answer(self, **select) -> Fault:
        return self.add("lose_answer", **select)

    def hold_answer(self, delay: float, **select) -> Fault:
        return self.add("hold_answer", delay=delay, **select)

    def swallow(self, **select) -> Fault:
        return self.add("swallow", **select)

    def _wait_for_hangup(self, client: socket.socket) -> None:
        """Until the client closes its connection (or the proxy stops)."""
        client.settimeout(0.2)
        while not self._stopped.is_set():
            try:
                if not client.recv(65536):
                    return
            except socket.timeout:
                continue
            except OSError:
                return

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def set_faults(self, specs: list[dict]) -> None:
        """Replaces every fault by those described (the rules-file form: {"action": ..., ...})."""
        self.clear()
        for spec in specs:
            spec = dict(spec)
            self.add(spec.pop("action"), **spec)

    def _pick(self, method: str, target: str) -> Fault | None:
        now = time.monotonic()
        with self._lock:
            for fault in self._faults:
                if fault.active(now) and fault.matches(method, target):
                    fault.hits += 1
                    return fault
        return None

    # --- the log --------------------------------------------------------------------------

    def requests(self) -> list[Logged]:
        with self._lock:
            return list(self._log)

    def count(self, method: str | None = None, path: str | None = None) -> int:
        return sum(1 for r in self.requests()
                   if (method is None or r.method == method) and (path is None or re.search(path, r.target)))

    def _record(self, method: str, target: str, outcome: str, at: float) -> None:
        entry = Logged(method, target, outcome, at)
        with self._lock:
            self._log.append(entry)
            if self.log_path is not None:
                with open(self.log_path, "a") as f:
                    f.write(f"{at:.3f}\t{method}\t{target}\t{outcome}\n")

    # --- relaying -------------------------------------------------------------------------

    def _accept(self):
        listener = self._listener
        while listener is not None:
            try:
                client, _ = listener.accept()
                no_delay(client)
            except OSError:
                return
            with self._lock:
                if self._stopped.is_set():
                    _reset(client)
                    return
                self._clients.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket):
        upstream: socket.socket | None = None
        cin = _Conn(client)
        try:
            while not self._stopped.is_set():
                head = cin.head()
                if head is None:
                    return
                at = time.monotonic()
                request_line, headers = _parse_head(head)
                method, target = request_line.split(" ")[:2]
                if (_get(headers, "expect") or "").lower() == "100-continue":
                    headers = _without(headers, "expect")
                    head = _build_head(request_line, headers)
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if self.rewrite_host:
                    # As a reverse proxy must: the Host, and the authority of a MOVE or COPY's
                    # Destination (the server answers 502 to a Destination on another server).
                    upstream_host = f"127.0.0.1:{self.upstream_port}"
                    head = _build_head(request_line, [(k, upstream_host if k.lower() == "host" else
                                                       re.sub(r"^(https?://)[^/]+", rf"\g<1>{upstream_host}", v) if k.lower() == "destination" else v)
                                                      for k, v in headers])
                length = _get(headers, "content-length")
                fault = self._pick(method, target)
                if fault is not None and fault.action == "cut_upload":
                    want = min(fault.after, int(length)) if length is not None else fault.after
                    received = 0
                    while received < want:
                        part = cin.take(want - received)
                        if not part:
                            break
                        received += len(part)
                    self._record(method, target, f"upload cut after {received}", at)
                    if fault.rst:
                        _reset(client)
                    return
                if length is not None and fault is not None and fault.action == "throttle_upload":
                    body = self._read_slowly(cin, int(length), fault.rate)
                elif length is not None:
                    body = cin.exact(int(length))
                elif "chunked" in (_get(headers, "transfer-encoding") or "").lower():
                    if fault is not None and fault.action == "throttle_upload":
                        body = cin.chunked_raw(exact=lambda n, rate=fault.rate: self._read_slowly(cin, n, rate))
                    else:
                        body = cin.chunked_raw()
                else:
                    body = b""
                action = fault.action if fault else "relay"
                if action == "reset":
                    self._record(method, target, "reset", at)
                    _reset(client)
                    return
                if action == "respond":
                    extra = [(k, str(v)) for k, v in fault.headers.items()]
                    answer = _build_head(f"HTTP/1.1 {fault.status} {REASONS.get(fault.status, 'Fault')}",
                                         [("Content-Length", str(len(fault.body)))] + extra)
                    client.sendall(answer + (b"" if method == "HEAD" else fault.body))
                    self._record(method, target, str(fault.status), at)
                    continue
                if action == "swallow":
                    self._record(method, target, "swallowed", at)
                    self._wait_for_hangup(client)
                    return
                if action == "latency":
                    if self._stopped.wait(fault.delay):
                        return
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=300)
                    no_delay(upstream)
                upstream.sendall(head + body)
                closed = self._relay_answer(client, _Conn(upstream), method, target, fault, at)
                if closed or (_get(headers, "connection") or "").lower() == "close":
                    return
        except _Close:
            return
        except (OSError, ConnectionError, ValueError, IndexError):
            return
        finally:
            with self._lock:
                self._clients.discard(client)
            try:
                client.close()
            except OSError:
                pass
            if upstream is not None:
                upstream.close()

    def _read_slowly(self, cin: _Conn, n: int, rate: int) -> bytes:
        """A request body of `n` bytes, read at about `rate` bytes per second (throttle_upload)."""
        parts, tick = [], 0.05
        step = max(1, int(rate * tick))
        while n > 0:
            part = cin.take(min(step, n))
            if not part:
                raise ConnectionError("end of stream inside a body")
            parts.append(part)
            n -= len(part)
            if n > 0 and self._stopped.wait(tick):
                raise _Close()
        return b"".join(parts)

    def _relay_answer(self, client: socket.socket, uin: _Conn, method: str, target: str,
                      fault: Fault | None, at: float) -> bool:
        """Relays one answer, applying a body fault; True when the connection must end."""
        while True:
            rhead = uin.head()
            if rhead is None:
                raise ConnectionError("the server closed the connection without an answer")
            status_line, rheaders = _parse_head(rhead)
            status = int(status_line.split(" ")[1])
            if 100 <= status < 200:
                client.sendall(rhead)
                continue
            break
        has_body = not (method == "HEAD" or status in (204, 304))
        length = _get(rheaders, "content-length")
        chunked = "chunked" in (_get(rheaders, "transfer-encoding") or "").lower()
        until_close = has_body and length is None and not chunked
        server_closes = until_close or (_get(rheaders, "connection") or "").lower() == "close"

        def read_body() -> bytes:
            if not has_body:
                return b""
            if chunked:
                return uin.chunked_raw()
            if length is not None:
                return uin.exact(int(length))
            return uin.to_eof()

        action = fault.action if fault else "relay"
        if action == "lose_answer":
            read_body()
            self._record(method, target, f"answer lost ({status})", at)
            _reset(client)
            raise _Close()
        if action == "hold_answer":
            body = read_body()
            self._record(method, target, f"{status} held", at)
            if self._stopped.wait(fault.delay):
                raise _Close()
            client.sendall(rhead + body)
            return server_closes
        if action == "etag":
            rheaders = [(k, fault.value if k.lower() == "etag" else v) for k, v in rheaders]
            if _get(rheaders, "etag") is None:
                rheaders.append(("ETag", fault.value))
            client.sendall(_build_head(status_line, rheaders) + read_body())
            self._record(method, target, f"{status} etag", at)
            return server_closes
        if action in ("extend", "unframed") and has_body and not chunked:
            data = read_body() + fault.extra
            if action == "unframed" and fault.keep is not None:
                data = data[:fault.keep]
            if action == "extend":
                rheaders = _without(rheaders, "content-length") + [("Content-Length", str(len(data)))]
                client.sendall(_build_head(status_line, rheaders) + data)
                self._record(method, target, f"{status} extended", at)
                return server_closes
            rheaders = _without(rheaders, "content-length", "connection") + [("Connection", "close")]
            client.sendall(_build_head(status_line, rheaders) + data)
            self._record(method, target, f"{status} unframed", at)
            raise _Close()
        if action == "throttle" and has_body and not chunked and length is not None:
            client.sendall(rhead)
            remaining, tick = int(length), 0.05
            step = max(1, int(fault.rate * tick))
            while remaining > 0 and not self._stopped.is_set():
                part = uin.take(min(step, remaining))
                if not part:
                    break
                client.sendall(part)
                remaining -= len(part)
                if remaining > 0 and self._stopped.wait(tick):
                    break
            self._record(method, target, f"{status} throttled", at)
            if remaining > 0:
                raise _Close()
            return server_closes
        if action in ("stall", "cut") and has_body:
            client.sendall(rhead)
            sent = 0
            while sent < fault.after:
                part = uin.take(fault.after - sent)
                if not part:
                    break
                client.sendall(part)
                sent += len(part)
            if action == "cut":
                self._record(method, target, f"{status} cut after {sent}", at)
                if fault.rst:
                    _reset(client)
                raise _Close()
            self._record(method, target, f"{status} stalled after {sent}", at)
            while not self._stopped.is_set():
                byte = uin.take(1)
                if not byte:
                    break
                if self._stopped.wait(fault.delay):
                    break
                client.sendall(byte)   # raises once the client has gone: the stall ends
            raise _Close()
        client.sendall(rhead + read_body())
        self._record(method, target, str(status), at)
        return server_closes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTTP fault-injecting proxy for docfs's tests")
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rules", type=Path, help="JSON list of faults, read again when it changes")
    parser.add_argument("--log", type=Path)
    args = parser.parse_args(argv)
    proxy = FaultProxy(args.upstream_port, args.port, args.log).start()
    print(f"fault_proxy: listening at {proxy.url}", flush=True)
    seen = None
    try:
        while True:
            if args.rules is not None and args.rules.exists():
                stamp = args.rules.stat().st_mtime_ns
                if stamp != seen:
                    seen = stamp
                    try:
                        proxy.set_faults(json.loads(args.rules.read_text() or "[]"))
                    except (ValueError, TypeError, KeyError) as error:
                        print(f"fault_proxy: bad rules file: {error}", file=sys.stderr, flush=True)
            time.sleep(0.1)   # not a test's wait: the standalone proxy looks at its rules file 10 times a second
    except KeyboardInterrupt:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
