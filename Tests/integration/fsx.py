"""A random I/O exerciser for one file of a docfs mount, in the spirit of `fsx` from xfstests.

The engine (`Fsx`) runs a seeded random sequence of operations on one file and keeps a
`bytearray` shadow of what the file must hold:

- pwrite inside the file, at its end and past it (leaving a hole that must read as zeros),
- pread (also across and past the end), ftruncate (shrink and grow), fsync,
- mmap read, and mmap write with msync (growing the file with ftruncate first, as fsx does),
- close and reopen: sometimes at once, sometimes after waiting until the upload finished and
  the local copy was evicted (`user.docfs.state` back to `placeholder`), so the next open
  fetches the content from the store again; then the store's bytes are checked too,
- a second process (`Peer`, this file run with `--peer`) that stats the file and opens and
  reads it with its own descriptor while it changes.

Every read and every size (the writer's fstat after every operation, the peer's stat and
fstat) is checked against the shadow; at the end, after the last close and the upload, the
store's bytes must equal the shadow. A failure raises `FsxFailure` naming the seed, the store
and the last operations, so `FSX_SEED=<seed>` replays it.
"""
from __future__ import annotations

import base64
import ctypes
import json
import mmap
import os
import random
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Callable

from helpers import wait_until

PAGE = mmap.PAGESIZE
STATE_ATTRIBUTE = "user.docfs.state"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.msync.restype = ctypes.c_int
MS_SYNC = 4  # Linux <bits/mman-linux.h>


def msync(region: mmap.mmap) -> None:
    """msync(MS_SYNC) of a whole writable mapping, without holding the GIL.

    CPython's `mmap.flush()` calls msync() while it holds the GIL. On a docfs mount msync is an
    fsync that uploads, so when the store's server or relay runs in this Python process (the S3
    tests' `S3Relay` is a thread of the pytest process), the relay cannot forward the upload's
    requests until msync returns, and msync waits for the upload: a deadlock that only the
    daemon's 30 s request deadline breaks. A ctypes call releases the GIL while it runs.
    """
    view = (ctypes.c_char * len(region)).from_buffer(region)
    try:
        if _libc.msync(ctypes.addressof(view), len(region), MS_SYNC) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"msync: {os.strerror(code)}")
    finally:
        del view  # releases the buffer export, so the mapping can be closed


class FsxFailure(AssertionError):
    pass


class Peer:
    """A second process that looks at the file with its own syscalls (its own stat, its own
    descriptor), so what it sees is what any other program on the machine would see."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, __file__, "--peer"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, **command) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise FsxFailure(f"the peer process exited ({self.proc.poll()}) on {command}")
        return json.loads(line)

    def stat_size(self, path: Path) -> int:
        answer = self.ask(op="stat", path=str(path))
        if "errno" in answer:
            raise OSError(answer["errno"], os.strerror(answer["errno"]), str(path))
        return answer["size"]

    def read(self, path: Path, offset: int, length: int) -> tuple[int, bytes]:
        """Opens, fstats, preads and closes in the peer: (its fstat size, the bytes read)."""
        answer = self.ask(op="read", path=str(path), offset=offset, length=length)
        if "errno" in answer:
            raise OSError(answer["errno"], os.strerror(answer["errno"]), str(path))
        return answer["size"], base64.b64decode(answer["data"])

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def peer_main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "stat":
                answer = {"size": os.stat(command["path"]).st_size}
            else:
                fd = os.open(command["path"], os.O_RDONLY)
                try:
                    size = os.fstat(fd).st_size
                    data = os.pread(fd, command["length"], command["offset"])
                finally:
                    os.close(fd)
                answer = {"size": size, "data": base64.b64encode(data).decode()}
        except OSError as error:
            answer = {"errno": error.errno}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def first_difference(got: bytes, want: bytes) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"first difference at +{i:#x}: got {got[i:i + 8].hex()} want {want[i:i + 8].hex()}"
    return f"lengths differ: got {len(got):#x} bytes, want {len(want):#x}"


class Fsx:
    """One seeded run on one file. `store_bytes()` reads the file straight from the store
    (None: not there); `label` names the store in failures."""

    # Relative weights of the operations.
    WEIGHTS = {"write": 30, "read": 14, "truncate": 6, "fsync": 8, "mapread": 6, "mapwrite": 6,
               "peer_stat": 8, "peer_read": 8, "reopen": 4, "cycle": 2}

    def __init__(self, seed: int, path: Path, store_bytes: Callable[[], bytes | None], *, label: str,
                 operations: int, peer: Peer, max_length: int = 256 * 1024, settle_timeout: float = 60):
        self.seed = seed
        self.path = path
        self.store_bytes = store_bytes
        self.label = label
        self.operations = operations
        self.peer = peer
        self.max_length = max_length
        self.settle_timeout = settle_timeout
        self.rng = random.Random(seed)
        self.shadow = bytearray()
        self.log: deque[str] = deque(maxlen=20)
        self.step = 0
        self.fd = -1
        self.cycles = 0
        names = list(self.WEIGHTS)
        self._names, self._weights = names, [self.WEIGHTS[n] for n in names]

    # --- the run -------------------------------------------------------------------------

    @staticmethod
    def initial_content(seed: int) -> bytes | None:
        """What the store holds before the mount sees the file (None: the run creates it).
        Put it on the store before mounting; it depends on the seed only."""
        rng = random.Random(f"initial content {seed}")
        if rng.randrange(4) == 0:
            return None
        return rng.randbytes(rng.randrange(1, 64 * 1024))

    def run(self) -> None:
        initial = self.initial_content(self.seed)
        self.shadow = bytearray(initial or b"")
        try:
            self._open(create=initial is None)
            while self.step < self.operations:
                self.step += 1
                name = self.rng.choices(self._names, self._weights)[0]
                getattr(self, "op_" + name)()
                self.check_size("fstat after " + name)
            self.step += 1
            self.finish()
        except FsxFailure:
            raise
        except OSError as error:
            self.fail(f"{type(error).__name__}: {error}")
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def finish(self) -> None:
        """Last close, the upload settles, the store holds the shadow; a fresh open reads it."""
        self.record("close, wait for the upload and the eviction, compare the store")
        self._close()
        self.wait_evicted()
        self.check_store()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            got = os.pread(fd, len(self.shadow) + 1, 0)
        finally:
            os.close(fd)
        self.expect_bytes(got, bytes(self.shadow), "a fresh open's read of the whole file")

    # --- operations ----------------------------------------------------------------------

    def _length_for(self, offset: int, limit: int = 32 * 1024) -> int:
        return max(1, min(self.rng.randrange(1, limit + 1), self.max_length - offset))

    def _write_offset(self) -> tuple[str, int]:
        size = len(self.shadow)
        # The bigger the file, the likelier a write lands inside it, so sizes spread over the range.
        where = "inside" if self.rng.random() < size / self.max_length else self.rng.choice(["at end", "past end"])
        if where == "inside" and size > 0:
            return where, self.rng.randrange(size)
        if where == "past end" and size + 2 < self.max_length:
            return where, self.rng.randrange(size + 1, min(size + 32 * 1024, self.max_length - 1))
        return "at end", min(size, self.max_length - 1)

    def op_write(self):
        where, offset = self._write_offset()
        data = self.rng.randbytes(self._length_for(offset))
        self.record(f"pwrite {offset:#x}+{len(data):#x} ({where}, size {len(self.shadow):#x})")
        written = os.pwrite(self.fd, data, offset)
        if written != len(data):
            self.fail(f"pwrite wrote {written:#x} of {len(data):#x} bytes")
        self._apply(offset, data)

    def op_read(self):
        size = len(self.shadow)
        offset = self.rng.randrange(size + 4096)
        length = self.rng.randrange(1, 64 * 1024)
        self.record(f"pread {offset:#x}+{length:#x} (size {size:#x})")
        got = os.pread(self.fd, length, offset)
        self.expect_bytes(got, bytes(self.shadow[offset:offset + length]), "pread")

    def op_truncate(self):
        size = len(self.shadow)
        shrink = self.rng.random() < 0.3 + 0.6 * size / self.max_length
        new = self.rng.randrange(size + 1) if shrink else self.rng.randrange(size, self.max_length + 1)
        self.record(f"ftruncate {size:#x} -> {new:#x}")
        os.ftruncate(self.fd, new)
        self._resize(new)

    def op_fsync(self):
        self.record(f"fsync (size {len(self.shadow):#x})")
        os.fsync(self.fd)

    def op_mapread(self):
        size = len(self.shadow)
        if size == 0:
            return
        offset = self.rng.randrange(size)
        length = min(self.rng.randrange(1, 64 * 1024), size - offset)
        start = offset - offset % PAGE
        self.record(f"mmap read {offset:#x}+{length:#x} (size {size:#x})")
        with mmap.mmap(self.fd, offset + length - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start) as region:
            got = region[offset - start:offset - start + length]
        self.expect_bytes(got, bytes(self.shadow[offset:offset + length]), "mmap read")

    def op_mapwrite(self):
        size = len(self.shadow)
        if size == 0:
            return
        offset = self.rng.randrange(size + (8 * 1024 if self.rng.random() < 0.3 else 0))
        offset = min(offset, self.max_length - 1)
        data = self.rng.randbytes(self._length_for(offset, 16 * 1024))
        end = offset + len(data)
        if end > size:
            # A mapping cannot grow a file: grow it first, as fsx does.
            self.record(f"ftruncate {size:#x} -> {end:#x} (to mmap write past the end)")
            os.ftruncate(self.fd, end)
            self._resize(end)
            self.check_size("fstat after the ftruncate before mmap write")
        start = offset - offset % PAGE
        self.record(f"mmap write {offset:#x}+{len(data):#x}, msync (size {len(self.shadow):#x})")
        with mmap.mmap(self.fd, end - start, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start) as region:
            region[offset - start:end - start] = data
            msync(region)  # not region.flush(): see msync()
        self._apply(offset, data)

    def op_peer_stat(self):
        self.record(f"peer stat (size {len(self.shadow):#x})")
        got = self.peer.stat_size(self.path)
        if got != len(self.shadow):
            self.fail(f"another process's stat says {got:#x} bytes, the file has {len(self.shadow):#x}")

    def op_peer_read(self):
        size = len(self.shadow)
        if self.rng.random() < 0.3:
            offset, length = 0, size + 1
        else:
            offset, length = self.rng.randrange(size + 1), self.rng.randrange(1, 64 * 1024)
        self.record(f"peer open, fstat, pread {offset:#x}+{length:#x}, close (size {size:#x})")
        fstat_size, got = self.peer.read(self.path, offset, length)
        if fstat_size != size:
            self.fail(f"another process's fstat says {fstat_size:#x} bytes, the file has {size:#x}")
        self.expect_bytes(got, bytes(self.shadow[offset:offset + length]), "another process's pread")

    def op_reopen(self):
        truncate = self.rng.random() < 0.1
        self.record(f"close, reopen{' O_TRUNC' if truncate else ''} at once (size {len(self.shadow):#x})")
        self._close()
        self._open(truncate=truncate)
        if truncate:
            self._resize(0)

    def op_cycle(self):
        """Close, let the upload finish and the copy go, check the store; the reopen downloads."""
        self.record(f"close, wait for upload and eviction, compare the store, reopen (size {len(self.shadow):#x})")
        self._close()
        self.wait_evicted()
        self.check_store()
        self.cycles += 1
        self._open()

    # --- checks --------------------------------------------------------------------------

    def check_size(self, what: str) -> None:
        got = os.fstat(self.fd).st_size
        if got != len(self.shadow):
            self.fail(f"{what}: the writer's fstat says {got:#x} bytes, the file has {len(self.shadow):#x}")

    def expect_bytes(self, got: bytes, want: bytes, what: str) -> None:
        if got != want:
            self.fail(f"{what} returned {len(got):#x} bytes that differ from the {len(want):#x} expected: "
                      f"{first_difference(got, want)}")

    def check_store(self) -> None:
        stored = self.store_bytes()
        if stored is None:
            self.fail("the store does not have the file after the upload settled")
        self.expect_bytes(stored, bytes(self.shadow), "the store's copy")

    def wait_evicted(self) -> None:
        states = ["?"]

        def evicted() -> bool:
            states.append(os.getxattr(self.path, STATE_ATTRIBUTE).rstrip(b"\0").decode())
            return states[-1] == "placeholder"
        try:
            wait_until(evicted, self.settle_timeout, "the copy to be evicted after the last close", interval=0.02)
        except AssertionError:
            self.fail(f"{STATE_ATTRIBUTE} is still {states[-1]!r} {self.settle_timeout:.0f} s after the last close "
                      f"(expected the upload to finish and the copy to be evicted)")

    # --- the shadow and the descriptor ---------------------------------------------------

    def _apply(self, offset: int, data: bytes) -> None:
        if offset > len(self.shadow):
            self.shadow.extend(bytes(offset - len(self.shadow)))
        self.shadow[offset:offset + len(data)] = data

    def _resize(self, size: int) -> None:
        if size < len(self.shadow):
            del self.shadow[size:]
        else:
            self.shadow.extend(bytes(size - len(self.shadow)))

    def _open(self, create: bool = False, truncate: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | (os.O_TRUNC if truncate else 0)
        self.fd = os.open(self.path, flags, 0o644)

    def _close(self) -> None:
        fd, self.fd = self.fd, -1
        os.close(fd)

    def record(self, text: str) -> None:
        self.log.append(f"#{self.step} {text}")

    def fail(self, message: str) -> None:
        ops = "\n".join(f"  {line}" for line in self.log)
        raise FsxFailure(f"fsx seed {self.seed} on {self.label} ({self.path.name}), operation {self.step} "
                         f"of {self.operations}: {message}\nlast operations:\n{ops}\n"
                         f"replay: FSX_SEED={self.seed} FSX_OPS={self.operations} make fsx")


if __name__ == "__main__":
    if sys.argv[1:] == ["--peer"]:
        peer_main()
    else:
        sys.exit("usage: fsx.py --peer (the engine is driven by test_fsx.py)")
