"""Processes and mounts the bench starts, and the promise to end them: every process it starts is
tracked, every mount point it mounts is remembered, and `cleanup()` (run at exit, on SIGINT and
on SIGTERM) unmounts what is still mounted and terminates what is still running, by PID only.
Also the small helpers every part uses: ports, polling, dropping caches, peak memory.
"""
import atexit, signal, socket, subprocess, sys, time

_processes = []
_mounts = []


def track(proc):
    _processes.append(proc)
    return proc


def untrack(proc):
    if proc in _processes:
        _processes.remove(proc)


def remember_mount(path):
    _mounts.append(path)


def forget_mount(path):
    if path in _mounts:
        _mounts.remove(path)


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def force_unmount(path):
    """Lazy unmount of a FUSE or davfs2 mount that did not go away by itself."""
    if is_mounted(path):
        subprocess.run(["fusermount3", "-uz", path], capture_output=True)
    if is_mounted(path):
        subprocess.run(["umount", "-l", path], capture_output=True)


def end(proc, sig=signal.SIGTERM):
    """Ends a process the bench started (by PID): `sig`, then SIGKILL after 10 s; untracked."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    untrack(proc)


def cleanup():
    for path in list(reversed(_mounts)):
        force_unmount(path)
        forget_mount(path)
    for proc in list(reversed(_processes)):
        end(proc)


def _on_signal(number, _frame):
    cleanup()
    sys.exit(128 + number)


atexit.register(cleanup)
signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count):
    """`count` distinct free ports, all bound at once so the kernel cannot hand one out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout, what, interval=0.02, swallow=False):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            if predicate():
                return
        except Exception as error:  # noqa: BLE001 - only while the caller asked to wait it out
            if not swallow:
                raise
            last = error
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


def drop_caches():
    """Cold start: dirty pages written, then page cache, dentries and inodes dropped (needs root)."""
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def peak_rss_kib(pid):
    """VmHWM of a process: its peak resident memory so far."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, TypeError):
        return None
