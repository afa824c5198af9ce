#!/usr/bin/env python3
"""delay_proxy: a TCP relay on 127.0.0.1 that puts a store "far away" for the latency bench
(latency.py): every byte takes half the round trip to go one way, and a new connection costs one
more round trip (the TCP handshake a real network charges before the first request).

    python3 delay_proxy.py UPSTREAM_PORT --port P --delay-ms 20 --log FILE

It is a delay line, not an HTTP proxy: what the client writes reaches the server DELAY/2 later,
and what the server answers reaches the client DELAY/2 later, byte for byte and unchanged (so
`Host`, `Destination` and S3 signatures are the client's own). A request answered at once thus
costs one DELAY; a PUT sent with `Expect: 100-continue` two, as on a network. Bandwidth is not
limited: each direction keeps up to WINDOW bytes in flight (a well-tuned long path, no loss, no
slow start), so a large body streams at the rate client and server manage, DELAY/2 late.

It also reads the request stream (HTTP/1.1 framing: Content-Length and chunked bodies) without
changing it, and appends to FILE one line per new connection (`C<TAB>TIME`), per request
(`R<TAB>TIME<TAB>METHOD<TAB>TARGET`) and per answer (`A<TAB>ASKED<TAB>ANSWERED`: when the request
arrived, and when the first byte of its answer reaches the client); times are CLOCK_MONOTONIC,
as the bench's time.monotonic(). So the bench counts the round trips of every server the same
way, and how long a client spent waiting for them.

`DelayProxy` is the bench's handle on one such process (start, mark, since, stop).
"""
import argparse, asyncio, collections, os, signal, subprocess, sys, time

WINDOW = 32 << 20
READ = 1 << 18


class RequestLog:
    """Finds the requests in a client's byte stream (passively; gives up on what it cannot frame)."""

    def __init__(self, out):
        self.out, self.buf, self.body_left, self.chunked, self.broken = out, b"", 0, False, False
        self.in_trailers = False
        self.waiting = collections.deque()  # arrival times of the requests not answered yet

    def feed(self, data):
        if self.broken:
            return
        if self.body_left and not self.buf:  # the common case of a large body: no copies
            n = min(self.body_left, len(data))
            self.body_left -= n
            data = data[n:] if n < len(data) else b""
        if not data:
            return
        self.buf += data
        while self.buf and not self.broken:
            if self.body_left:
                n = min(self.body_left, len(self.buf))
                self.buf, self.body_left = self.buf[n:], self.body_left - n
                continue
            if self.chunked or self.in_trailers:
                if not self.chunk_step():
                    return
                continue
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 1 << 20:
                    self.broken = True
                return
            head, self.buf = self.buf[:end].decode("latin-1"), self.buf[end + 4:]
            self.request(head)

    def request(self, head):
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.broken = True
            return
        now = time.monotonic()
        self.waiting.append(now)
        self.out.write(f"R\t{now:.6f}\t{parts[0]}\t{parts[1]}\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.chunked = True
        elif headers.get("content-length", "0").isdigit():
            self.body_left = int(headers.get("content-length", "0"))
        else:
            self.broken = True

    def answer(self, data, due):
        """The server's bytes `data` reach the client at `due`: the first of an answer (HTTP/1.1
        clients send the next request only once they have the last one's answer) ends the wait of
        the oldest request; an interim `100 Continue` alone does not."""
        if not self.waiting:
            return
        if data[:12] in (b"HTTP/1.1 100", b"HTTP/1.0 100"):
            end = data.find(b"\r\n\r\n")
            if end < 0 or end + 4 >= len(data):
                return
        self.out.write(f"A\t{self.waiting.popleft():.6f}\t{due:.6f}\n")

    def chunk_step(self):
        """One step of a chunked body; False when more bytes are needed."""
        end = self.buf.find(b"\r\n")
        if end < 0:
            return False
        line, rest = self.buf[:end], self.buf[end + 2:]
        if self.in_trailers:
            self.buf = rest
            if not line:
                self.in_trailers = False
            return True
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            self.broken = True
            return True
        if size == 0:
            self.buf, self.chunked, self.in_trailers = rest, False, True
            return True
        if len(rest) < size + 2:
            return False
        self.buf = rest[size + 2:]
        return True


async def relay(reader, writer, delay, start_at, log=None, answers=None):
    """Copies reader to writer, each chunk `delay` seconds after it arrived (and not before
    `start_at`), with at most WINDOW bytes on the way; then half-closes writer. `log` reads what
    goes through (requests), `answers` is told when each chunk will arrive (answers)."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    room = asyncio.Semaphore(WINDOW // READ)

    async def receive():
        try:
            while True:
                await room.acquire()
                data = await reader.read(READ)
                if log is not None and data:
                    log.feed(data)
                due = max(loop.time(), start_at) + delay
                if answers is not None and data:
                    answers.answer(data, due)
                await queue.put((due, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await queue.put((loop.time(), None))

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                writer.transport.abort()
                return
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            room.release()

    receiving = asyncio.ensure_future(receive())
    try:
        await send()
    except (ConnectionError, OSError):
        pass
    finally:
        receiving.cancel()


class Proxy:
    def __init__(self, upstream, delay, log):
        self.upstream, self.half, self.log = upstream, delay / 2, log
        self.delay = delay

    async def handle(self, client_reader, client_writer):
        accepted = asyncio.get_running_loop().time()
        self.log.write(f"C\t{time.monotonic():.6f}\n")
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        # The handshake: nothing the client sends leaves before one round trip has passed.
        requests = RequestLog(self.log)
        upward = relay(client_reader, up_writer, self.half, accepted + self.delay, requests)
        downward = relay(up_reader, client_writer, self.half, accepted, answers=requests)
        await asyncio.gather(upward, downward, return_exceptions=True)
        for w in (up_writer, client_writer):
            w.close()


class LineFile:
    """The log: one write(2) per line, so the bench can read it at any moment."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, line):
        os.write(self.fd, line.encode("utf-8", "replace"))


class DelayProxy:
    """The bench's handle on a delay_proxy process: `url` (and `endpoint`) for the clients,
    `mark()` and `since(mark)` for what went through it in between, `stop()`."""

    def __init__(self, upstream_port, delay_ms, port, log):
        from procs import track, wait_until, port_open
        self.delay_ms, self.port, self.log = delay_ms, port, log
        self.url = f"http://127.0.0.1:{port}/"
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = track(subprocess.Popen([sys.executable, os.path.abspath(__file__), str(upstream_port), "--port", str(port),
                                            "--delay-ms", str(delay_ms), "--log", log],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: self.proc.poll() is None and port_open(port), 30, "the delay proxy to listen")

    def mark(self):
        try:
            return os.path.getsize(self.log), time.monotonic()
        except OSError:
            return 0, time.monotonic()

    def since(self, mark):
        """What went through since `mark`: {"conns", "reqs", "methods": {KIND: n}, "wait_s",
        "in_flight"}. A request waits from its arrival until the first byte of its answer
        reaches the client; wait_s is the time at least one request was waiting, in_flight the
        requests waiting on average over that time (1: one at a time)."""
        offset, started = mark
        with open(self.log, "rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
        conns, methods, waits = 0, collections.Counter(), []
        for line in lines:
            fields = line.split("\t")
            if fields[0] == "C":
                conns += 1
            elif fields[0] == "R" and len(fields) >= 4:
                methods[kind_of(fields[2], fields[3])] += 1
            elif fields[0] == "A" and len(fields) >= 3 and float(fields[1]) >= started:
                waits.append((float(fields[1]), float(fields[2])))
        union, end = 0.0, None
        for a, b in sorted(waits):
            if end is None or a > end:
                union, end = union + (b - a), b
            elif b > end:
                union, end = union + (b - end), b
        total = sum(b - a for a, b in waits)
        return {"conns": conns, "reqs": sum(methods.values()), "methods": dict(methods), "wait_s": union,
                "in_flight": total / union if union else 0.0}

    def note(self, text):
        """A marker line in the log (for reading it later: which run made which requests)."""
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"M\t{time.monotonic():.6f}\t{text}\n".encode())
        finally:
            os.close(fd)

    def stop(self):
        from procs import end
        end(self.proc)


def kind_of(method, target):
    """A request's kind: its method, and for an S3 GET of a bucket with list parameters, LIST."""
    if method == "GET" and ("list-type=" in target or "delimiter=" in target or "prefix=" in target):
        return "LIST"
    return method


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("upstream", type=int)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    proxy = Proxy(args.upstream, args.delay_ms / 1000, LineFile(args.log))
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port, reuse_address=True, backlog=512)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"delay_proxy: 127.0.0.1:{args.port} -> 127.0.0.1:{args.upstream}, {args.delay_ms:g} ms", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
