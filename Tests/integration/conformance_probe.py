"""The operations of the conformance test (test_conformance.py), run in a separate process as
root or as `nobody` on a base directory: on a docfs mount and on a local directory alike. Each
operation's outcome is "ok", an errno name, or what stat shows; the test compares the two runs
key by key. Usage: conformance_probe.py BASE PHASE, PHASE one of root, setup-nobody, nobody,
setup-groups, member (a user with the team's group among its supplementary groups), stranger."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import stat
import sys
import time

TYPES = ["file", "dir", "symlink", "fifo", "socket", "chr", "blk"]
DEVICE = {"chr": (stat.S_IFCHR, os.makedev(1, 3)), "blk": (stat.S_IFBLK, os.makedev(7, 200))}
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
AT_SYMLINK_NOFOLLOW = 0x100

libc = ctypes.CDLL(None, use_errno=True)


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path: str, atime: tuple[int, int], mtime: tuple[int, int], flags: int = 0) -> None:
    times = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    if libc.utimensat(-100, path.encode(), times, flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def attempt(f) -> str:
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def make(path: str, kind: str, mode: int = 0o644) -> None:
    if kind == "file":
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
    elif kind == "dir":
        os.mkdir(path, mode)
    elif kind == "symlink":
        os.symlink("target-of-" + os.path.basename(path), path)
    elif kind == "fifo":
        os.mkfifo(path, mode)
    elif kind == "socket":
        os.mknod(path, stat.S_IFSOCK | mode)
    else:
        kind_bits, device = DEVICE[kind]
        os.mknod(path, kind_bits | mode, device)


def describe(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    kind = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
            stat.S_IFSOCK: "socket", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}.get(stat.S_IFMT(st.st_mode), "?")
    mode = "" if kind == "symlink" else f" mode={stat.S_IMODE(st.st_mode):04o}"
    size = f" size={st.st_size}" if kind in ("file", "symlink") else ""
    rdev = f" rdev={os.major(st.st_rdev)},{os.minor(st.st_rdev)}" if kind in ("chr", "blk") else ""
    return f"{kind}{mode} uid={st.st_uid} gid={st.st_gid}{size}{rdev}"


def a_moment_later() -> None:
    """The scenario, not a wait for anything: what comes next happens measurably after the
    times just read, so a time it moves shows as advanced."""
    time.sleep(0.02)


def ctime_moves(path: str, change) -> str:
    """Whether `change` moves the status change time of `path` forward (as on ext4)."""
    try:
        before = os.lstat(path).st_ctime_ns
    except OSError as e:
        return errno.errorcode[e.errno]
    a_moment_later()
    outcome = attempt(change)
    if outcome != "ok":
        return outcome
    try:
        after = os.lstat(path).st_ctime_ns
    except OSError as e:
        return errno.errorcode[e.errno]
    return "advanced" if after > before else "unchanged"


def folder_times_move(folders: list[str], change) -> str:
    """How `change` moves the modification and status change times of `folders` (ext4 moves
    both of a folder whose entries are added, removed or renamed, and nothing else)."""
    try:
        before = [os.lstat(f) for f in folders]
    except OSError as e:
        return errno.errorcode[e.errno]
    a_moment_later()
    outcome = attempt(change)
    if outcome != "ok":
        return outcome
    shown = []
    for folder, old in zip(folders, before):
        new = os.lstat(folder)
        shown.append(f"mtime {'advanced' if new.st_mtime_ns > old.st_mtime_ns else 'unchanged'}, "
                     f"ctime {'advanced' if new.st_ctime_ns > old.st_ctime_ns else 'unchanged'}")
    return "; ".join(shown)


def folder_times(base: str) -> dict[str, str]:
    """A folder's times as its entries come and go, for each type; and the link count and
    status change time of an open file that is unlinked."""
    r: dict[str, str] = {}
    here, there = f"{base}/times-here", f"{base}/times-there"
    os.mkdir(here)
    os.mkdir(there)
    for kind in TYPES:
        p = f"{here}/{kind}"
        r[f"{kind}: folder times on create"] = folder_times_move([here], lambda: make(p, kind))
        r[f"{kind}: folder times on chmod of an entry"] = (
            "skip" if kind == "symlink" else folder_times_move([here], lambda: os.chmod(p, 0o600)))
        r[f"{kind}: folder times on rename within"] = folder_times_move([here], lambda: os.rename(p, p + "-renamed"))
        r[f"{kind}: folder times on rename to another folder"] = folder_times_move(
            [here, there], lambda: os.rename(p + "-renamed", f"{there}/{kind}"))
        remove = os.rmdir if kind == "dir" else os.unlink
        r[f"{kind}: folder times on unlink"] = folder_times_move([there], lambda: remove(f"{there}/{kind}"))
    # A folder's link count is 2 + its subfolders, or 1 where a file system does not count
    # them (btrfs, many FUSE file systems): tools that skip the stat of entries (fts with
    # FTS_NOSTAT) trust anything else, and a 2 makes them miss the subfolders.
    os.mkdir(f"{here}/counted")
    os.mkdir(f"{here}/counted/sub")
    links = os.lstat(f"{here}/counted").st_nlink
    r["dir: link count with one subfolder"] = "consistent" if links in (1, 3) else f"says {links}"
    written = f"{here}/written"
    make(written, "file")
    def write_some():
        with open(written, "wb") as f:
            f.write(b"content")
    r["file: folder times on a write to an entry"] = folder_times_move([here], write_some)
    opened = f"{here}/opened"
    fd = os.open(opened, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    try:
        before = os.fstat(fd)
        a_moment_later()
        r["file: unlink while open"] = attempt(lambda: os.unlink(opened))
        after = os.fstat(fd)
        r["file: link count of an open file after unlink"] = f"{before.st_nlink} -> {after.st_nlink}"
        r["file: ctime of an open file on unlink"] = "advanced" if after.st_ctime_ns > before.st_ctime_ns else "unchanged"
    finally:
        os.close(fd)
    return r


def times(path: str) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_atime_ns, st.st_mtime_ns


def root_phase(base: str) -> dict[str, str]:
    r: dict[str, str] = {}
    for kind in TYPES:
        p = f"{base}/{kind}"
        r[f"{kind}: create"] = attempt(lambda: make(p, kind))
        r[f"{kind}: stat"] = describe(p)
        r[f"{kind}: O_CREAT|O_EXCL on it"] = attempt(lambda: os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)))
        r[f"{kind}: create again"] = attempt(lambda: make(p, kind))
        if kind != "symlink":
            r[f"{kind}: chmod 0640"] = attempt(lambda: os.chmod(p, 0o640))
            r[f"{kind}: stat after chmod"] = describe(p)
            r[f"{kind}: ctime on chmod"] = ctime_moves(p, lambda: os.chmod(p, 0o604))
        r[f"{kind}: chown 1234:5678"] = attempt(lambda: os.chown(p, 1234, 5678, follow_symlinks=False))
        r[f"{kind}: stat after chown"] = describe(p)
        r[f"{kind}: ctime on chown"] = ctime_moves(p, lambda: os.chown(p, 1235, 5679, follow_symlinks=False))
        if kind != "symlink":
            utimes = [("OMIT,OMIT", (0, UTIME_OMIT), (0, UTIME_OMIT)), ("NOW,OMIT", (0, UTIME_NOW), (0, UTIME_OMIT)),
                      ("OMIT,1000", (0, UTIME_OMIT), (1000, 0)), ("2000,NOW", (2000, 0), (0, UTIME_NOW))]
            utime_at = {}
            for label, atime, mtime in utimes:
                before = times(p)
                a_moment_later()
                utime_at[label] = attempt(lambda: utimensat(p, atime, mtime))
                after = times(p)
                a = "kept" if after[0] == before[0] else ("2000" if after[0] == 2000 * 10**9 else "changed")
                m = "kept" if after[1] == before[1] else ("1000" if after[1] == 1000 * 10**9 else "changed")
                r[f"{kind}: utimensat {label}"] = f"{utime_at[label]} atime {a} mtime {m}"
        moved = f"{base}/{kind}-moved"
        before = os.lstat(p).st_ctime_ns
        a_moment_later()
        r[f"{kind}: rename"] = attempt(lambda: os.rename(p, moved))
        r[f"{kind}: stat after rename"] = describe(moved)
        r[f"{kind}: old name after rename"] = describe(p)
        try:
            r[f"{kind}: ctime on rename"] = "advanced" if os.lstat(moved).st_ctime_ns > before else "unchanged"
        except OSError as e:
            r[f"{kind}: ctime on rename"] = errno.errorcode[e.errno]
        if kind == "chr":
            # /dev/null's number: opened, it is this machine's /dev/null.
            r[f"{kind}: open the device"] = attempt(lambda: os.close(os.open(moved, os.O_WRONLY)))
        if kind != "dir":
            r[f"{kind}: hard link"] = attempt(lambda: os.link(moved, f"{base}/{kind}-link", follow_symlinks=False))
        r[f"{kind}: unlink"] = attempt(lambda: (os.rmdir if kind == "dir" else os.unlink)(moved))
        r[f"{kind}: stat after unlink"] = describe(moved)
    # A FIFO opens as a local FIFO does: a reader without a writer, a writer without a reader.
    fifo = f"{base}/pipe"
    r["fifo: mkfifo for open"] = attempt(lambda: os.mkfifo(fifo, 0o666))
    r["fifo: open O_WRONLY|O_NONBLOCK, no reader"] = attempt(lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)))
    def pipe_round_trip():
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(writer, b"through the pipe")
        data = os.read(reader, 100)
        os.close(writer)
        os.close(reader)
        if data != b"through the pipe":
            raise OSError(errno.EIO, "pipe lost data")
    r["fifo: write and read through it"] = attempt(pipe_round_trip)
    r["fifo: stat after use"] = describe(fifo)
    # bind() of a Unix socket makes a socket entry.
    sock_path = f"{base}/bound.sock"
    def bind_socket():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(sock_path)
        finally:
            s.close()
    r["socket: bind"] = attempt(bind_socket)
    r["socket: stat after bind"] = describe(sock_path).split(" mode=")[0]
    r |= folder_times(base)
    return r


def setup_nobody(base: str) -> dict[str, str]:
    """Run as root: what the nobody phase works on."""
    os.mkdir(f"{base}/sticky", 0o1777)
    os.chmod(f"{base}/sticky", 0o1777)
    os.mkdir(f"{base}/open", 0o777)
    os.chmod(f"{base}/open", 0o777)
    r: dict[str, str] = {}
    for kind in TYPES:
        for where in ("sticky", "open"):
            r[f"setup: {where} {kind}"] = attempt(lambda: make(f"{base}/{where}/{kind}", kind, 0o666))
    for mode in (0o600, 0o644, 0o666, 0o622):
        r[f"setup: file {mode:o}"] = attempt(lambda: (make(f"{base}/f{mode:o}", "file", mode), os.chmod(f"{base}/f{mode:o}", mode)))
        r[f"setup: fifo {mode:o}"] = attempt(lambda: (make(f"{base}/p{mode:o}", "fifo", mode), os.chmod(f"{base}/p{mode:o}", mode)))
    return r


def nobody_phase(base: str) -> dict[str, str]:
    r: dict[str, str] = {}
    access = {"O_RDONLY": os.O_RDONLY, "O_WRONLY": os.O_WRONLY, "O_RDWR": os.O_RDWR}
    for mode in (0o600, 0o644, 0o666, 0o622):
        for label, flags in access.items():
            r[f"open root's {mode:o} file {label}"] = attempt(lambda: os.close(os.open(f"{base}/f{mode:o}", flags)))
            # Non-blocking, so a FIFO without a peer does not wait (O_WRONLY then says ENXIO).
            r[f"open root's {mode:o} fifo {label}"] = attempt(lambda: os.close(os.open(f"{base}/p{mode:o}", flags | os.O_NONBLOCK)))
        for label, atime, mtime in [("NOW,NOW", (0, UTIME_NOW), (0, UTIME_NOW)), ("OMIT,OMIT", (0, UTIME_OMIT), (0, UTIME_OMIT)),
                                    ("1000,1000", (1000, 0), (1000, 0)), ("NOW,OMIT", (0, UTIME_NOW), (0, UTIME_OMIT))]:
            r[f"utimensat {label} root's {mode:o} file"] = attempt(lambda: utimensat(f"{base}/f{mode:o}", atime, mtime))
        r[f"chmod root's {mode:o} file"] = attempt(lambda: os.chmod(f"{base}/f{mode:o}", 0o777))
        r[f"chown root's {mode:o} file to nobody"] = attempt(lambda: os.chown(f"{base}/f{mode:o}", os.getuid(), os.getgid()))
    for kind in TYPES:
        for where in ("sticky", "open"):
            d = f"{base}/{where}"
            r[f"{where}: O_CREAT|O_EXCL on root's {kind}"] = attempt(
                lambda: os.close(os.open(f"{d}/{kind}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)))
            r[f"{where}: chmod root's {kind}"] = "skip" if kind == "symlink" else attempt(lambda: os.chmod(f"{d}/{kind}", 0o600))
            r[f"{where}: rename root's {kind}"] = attempt(lambda: os.rename(f"{d}/{kind}", f"{d}/{kind}-by-nobody"))
            r[f"{where}: unlink root's {kind}"] = attempt(
                lambda: (os.rmdir if kind == "dir" else os.unlink)(f"{d}/{kind}" if os.path.lexists(f"{d}/{kind}") else f"{d}/{kind}-by-nobody"))
            own = f"{d}/own-{kind}"
            r[f"{where}: create own {kind}"] = attempt(lambda: make(own, kind, 0o600))
            r[f"{where}: stat own {kind}"] = describe(own)
            r[f"{where}: rename own {kind}"] = attempt(lambda: os.rename(own, own + "-moved"))
            r[f"{where}: unlink own {kind}"] = attempt(lambda: (os.rmdir if kind == "dir" else os.unlink)(own + "-moved"))
    return r


GROUP = 65532   # the team's group: a member has it as a supplementary group, a stranger does not


def setup_groups(base: str) -> dict[str, str]:
    """Run as root: a file for the team (0640, group GROUP), a setgid folder of the team, a
    folder only the team may write (0770), for the member and stranger phases."""
    r: dict[str, str] = {}
    r["setup: team file"] = attempt(lambda: (make(f"{base}/team.txt", "file", 0o640), os.chown(f"{base}/team.txt", 0, GROUP)))
    r["setup: team file stat"] = describe(f"{base}/team.txt")
    for name, mode in (("project", 0o2775), ("teamonly", 0o770)):
        r[f"setup: {name}"] = attempt(lambda: (make(f"{base}/{name}", "dir", mode), os.chown(f"{base}/{name}", 0, GROUP),
                                               os.chmod(f"{base}/{name}", mode)))
        r[f"setup: {name} stat"] = describe(f"{base}/{name}")
    return r


def member_phase(base: str) -> dict[str, str]:
    """Run as a user with GROUP among its supplementary groups (not its own group)."""
    r: dict[str, str] = {}
    r["read the team file"] = attempt(lambda: open(f"{base}/team.txt", "rb").read())
    r["write the team file"] = attempt(lambda: os.close(os.open(f"{base}/team.txt", os.O_WRONLY)))
    r["create in the setgid folder"] = attempt(lambda: make(f"{base}/project/f-{os.getuid()}", "file", 0o664))
    r["stat what was created in the setgid folder"] = describe(f"{base}/project/f-{os.getuid()}")
    r["mkdir in the setgid folder"] = attempt(lambda: make(f"{base}/project/d-{os.getuid()}", "dir", 0o775))
    r["stat the folder made in the setgid folder"] = describe(f"{base}/project/d-{os.getuid()}")
    r["create in the team-only folder"] = attempt(lambda: make(f"{base}/teamonly/f-{os.getuid()}", "file", 0o644))
    own = f"{base}/project/f-{os.getuid()}"
    r["chown own file to the team's group"] = attempt(lambda: os.chown(own, -1, GROUP))
    r["chown own file to a group not ours"] = attempt(lambda: os.chown(own, -1, 4242))
    r["chmod g+s own file"] = attempt(lambda: os.chmod(own, 0o2664))
    r["stat own file after chmod g+s"] = describe(own)
    suid = f"{base}/project/suid-{os.getuid()}"
    r["create own setuid file"] = attempt(lambda: (make(suid, "file", 0o644), os.chmod(suid, 0o6775)))
    r["write own setuid file"] = attempt(lambda: (lambda fd: (os.write(fd, b"x"), os.close(fd)))(os.open(suid, os.O_WRONLY)))
    r["stat own setuid file after a write"] = describe(suid)
    r["chmod own file 6775 again"] = attempt(lambda: os.chmod(suid, 0o6775))
    r["chown own setuid file to the team's group"] = attempt(lambda: os.chown(suid, -1, GROUP))
    r["stat own setuid file after chown"] = describe(suid)
    return r


def stranger_phase(base: str) -> dict[str, str]:
    """Run as a user without GROUP."""
    r: dict[str, str] = {}
    r["read the team file"] = attempt(lambda: open(f"{base}/team.txt", "rb").read())
    r["create in the setgid folder"] = attempt(lambda: make(f"{base}/project/s-{os.getuid()}", "file", 0o664))
    r["list the team-only folder"] = attempt(lambda: os.listdir(f"{base}/teamonly"))
    r["create in the team-only folder"] = attempt(lambda: make(f"{base}/teamonly/s-{os.getuid()}", "file", 0o644))
    return r


if __name__ == "__main__":
    os.umask(0)
    base, phase = sys.argv[1], sys.argv[2]
    results = {"root": root_phase, "setup-nobody": setup_nobody, "nobody": nobody_phase, "setup-groups": setup_groups,
               "member": member_phase, "stranger": stranger_phase}[phase](base)
    print(json.dumps(results))
