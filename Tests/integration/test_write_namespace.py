"""Write path, names: mkdir/rmdir/unlink/rename (files and directories, across directories,
replacing a target, RENAME_NOREPLACE/RENAME_EXCHANGE), rename without re-upload (one MOVE, no
PUT), and the errno of every refused or failing call compared to the same call on a local
ext4/tmpfs directory."""
from __future__ import annotations

import errno
import os

import pytest

from write_support import (RENAME_EXCHANGE, RENAME_NOREPLACE, SEED_FILES, compare_errno, errno_name, errno_of,
                           make_store, methods_log, moves, puts, renameat2, requests_for, server_files,
                           wait_server_bytes)
from helpers import wait_until

pytestmark = pytest.mark.fuse


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


@pytest.fixture
def local(tmp_path):
    """A local directory on the same kind of filesystem the tests run on (ext4 or tmpfs)."""
    d = tmp_path / "local-ref"
    d.mkdir()
    return d


def wait_gone(path, timeout=15):
    wait_until(lambda: not os.path.lexists(path), timeout, f"{path} to disappear from the store")


def wait_exists(path, timeout=15):
    wait_until(lambda: os.path.lexists(path), timeout, f"{path} to appear on the store")


def test_mkdir_rmdir_unlink(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.mkdir(m / "newdir")
    assert (store / "newdir").is_dir()
    # Below a folder this mount just made, folders are made ahead: the store gets them after mkdir returns.
    os.makedirs(m / "newdir/a/b/c")
    wait_until(lambda: (store / "newdir/a/b/c").is_dir(), 30, "the store to have newdir/a/b/c")
    with open(m / "newdir/a/b/c/f.txt", "wb") as f:
        f.write(b"x")
    wait_server_bytes(server, "newdir/a/b/c/f.txt", b"x")
    assert errno_of(lambda: os.rmdir(m / "newdir/a/b/c")) == errno.ENOTEMPTY
    assert (store / "newdir/a/b/c/f.txt").exists()
    os.unlink(m / "newdir/a/b/c/f.txt")
    assert not (store / "newdir/a/b/c/f.txt").exists()
    os.rmdir(m / "newdir/a/b/c")
    assert not (store / "newdir/a/b/c").exists()
    os.unlink(m / "hello.txt")            # a placeholder: no download needed
    assert not (store / "hello.txt").exists()
    assert not requests_for(server, "hello.txt", "GET"), methods_log(server)
    assert "hello.txt" not in os.listdir(m.path)
    assert errno_of(lambda: os.stat(m / "hello.txt")) == errno.ENOENT
    assert errno_of(lambda: os.mkdir(m / "docs")) == errno.EEXIST


def test_rmdir_of_dir_with_only_remote_children(store_server, store, mount):
    """docs/sub was never listed through the mount: rmdir must still see it is not empty."""
    server = store_server(store)
    m = mount(server.url)
    assert errno_of(lambda: os.rmdir(m / "docs/sub")) == errno.ENOTEMPTY
    assert (store / "docs/sub/deep.txt").exists()


def test_rename_file_across_dirs_keeps_content_without_upload(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.rename(m / "docs/report.txt", m / "other/report-moved.txt")
    assert not (store / "docs/report.txt").exists()
    assert (store / "other/report-moved.txt").read_bytes() == SEED_FILES["docs/report.txt"]
    m.wait_idle()   # barrier: an upload or a download it caused would be in the log by then
    assert moves(server), f"no MOVE in the log:\n{methods_log(server)}"
    assert not puts(server, "other/report-moved.txt"), f"rename re-uploaded:\n{methods_log(server)}"
    assert not requests_for(server, "docs/report.txt", "GET"), f"rename downloaded:\n{methods_log(server)}"
    assert (m / "other/report-moved.txt").read_bytes() == SEED_FILES["docs/report.txt"]


def test_rename_of_a_just_written_file(store_server, store, mount):
    """Write, close, rename at once: the content must end under the new name (one PUT in all)."""
    server = store_server(store)
    m = mount(server.url)
    data = os.urandom(50_000)
    with open(m / "draft.bin", "wb") as f:
        f.write(data)
    os.rename(m / "draft.bin", m / "docs/final.bin")
    wait_server_bytes(server, "docs/final.bin", data)
    m.wait_uploads_done()   # barrier: a second upload (under either name) would be in the log by then
    assert not (store / "draft.bin").exists(), f"store: {sorted(server_files(store))}"
    n_puts = len(puts(server, "draft.bin")) + len(puts(server, "docs/final.bin"))
    assert n_puts == 1, f"expected one PUT in all, got {n_puts}:\n{methods_log(server)}"


def test_rename_directory_across_dirs(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m / "docs")
    os.rename(m / "docs", m / "other/docs-moved")
    assert not (store / "docs").exists()
    assert (store / "other/docs-moved/sub/deep.txt").read_bytes() == SEED_FILES["docs/sub/deep.txt"]
    assert sorted(os.listdir(m / "other/docs-moved")) == ["report.txt", "sub"]
    assert (m / "other/docs-moved/sub/deep.txt").read_bytes() == SEED_FILES["docs/sub/deep.txt"]
    m.wait_uploads_done()   # barrier: an upload it caused would be in the log by then
    assert moves(server), methods_log(server)
    assert not any(r.method == "PUT" for r in server.requests()), f"dir rename uploaded:\n{methods_log(server)}"


def test_rename_replaces_existing_file(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.rename(m / "notes.md", m / "hello.txt")
    assert (store / "hello.txt").read_bytes() == SEED_FILES["notes.md"]
    assert not (store / "notes.md").exists()
    assert sorted(os.listdir(m.path)) == sorted(os.listdir(store))
    assert (m / "hello.txt").read_bytes() == SEED_FILES["notes.md"]
    m.wait_uploads_done()   # barrier: an upload it caused would be in the log by then
    assert not any(r.method == "PUT" for r in server.requests()), methods_log(server)


def test_rename_over_empty_dir_and_errnos_vs_local(store_server, store, mount, local):
    server = store_server(store)
    m = mount(server.url)

    def setup(base):
        os.makedirs(base / "src/inner", exist_ok=True)
        (base / "src/inner/f").write_bytes(b"f")
        os.makedirs(base / "full/x", exist_ok=True)
        os.makedirs(base / "empty", exist_ok=True)
        (base / "file").write_bytes(b"file")

    cases = {
        "rename dir over non-empty dir": lambda b: os.rename(b / "src", b / "full"),
        "rename dir over file": lambda b: os.rename(b / "src", b / "file"),
        "rename file over dir": lambda b: os.rename(b / "file", b / "empty"),
        "rename dir into itself": lambda b: os.rename(b / "src", b / "src/inner/x"),
        "rename missing source": lambda b: os.rename(b / "missing", b / "y"),
        "rename into missing dir": lambda b: os.rename(b / "file", b / "nodir/y"),
        "rename dir over empty dir": lambda b: os.rename(b / "src", b / "empty"),
    }
    report = []
    for i, (what, op) in enumerate(cases.items()):
        lres, mres = compare_errno(setup, op, local / f"c{i}", m.path / f"c{i}")
        report.append(f"{what}: local {errno_name(lres)}, docfs {errno_name(mres)}")
    print("\n".join(report))
    for line, (what, _) in zip(report, cases.items()):
        local_name, docfs_name = line.split(": local ")[1].split(", docfs ")
        assert local_name == docfs_name, f"errno differs from local fs: {line}"
    # the successful one moved src into empty on the store too
    i = list(cases).index("rename dir over empty dir")
    assert (store / f"c{i}/empty/inner/f").read_bytes() == b"f"
    assert not (store / f"c{i}/src").exists()


def test_renameat2_noreplace_and_exchange(store_server, store, mount, local):
    server = store_server(store)
    m = mount(server.url)
    with pytest.raises(OSError) as info:
        renameat2(m / "notes.md", m / "hello.txt", RENAME_NOREPLACE)
    assert info.value.errno == errno.EEXIST
    assert (store / "hello.txt").read_bytes() == SEED_FILES["hello.txt"]
    assert (store / "notes.md").read_bytes() == SEED_FILES["notes.md"]
    renameat2(m / "notes.md", m / "notes-new.md", RENAME_NOREPLACE)     # no target: succeeds
    assert (store / "notes-new.md").read_bytes() == SEED_FILES["notes.md"]
    with pytest.raises(OSError) as info:
        renameat2(m / "notes-new.md", m / "hello.txt", RENAME_EXCHANGE)
    assert info.value.errno == errno.EINVAL, f"RENAME_EXCHANGE: {info.value!r}"
    assert (store / "hello.txt").read_bytes() == SEED_FILES["hello.txt"]
    # For the record: ext4/tmpfs support RENAME_EXCHANGE (docfs may refuse it with EINVAL).
    (local / "a").write_bytes(b"a")
    (local / "b").write_bytes(b"b")
    print(f"RENAME_EXCHANGE on local fs: {errno_name(errno_of(lambda: renameat2(local / 'a', local / 'b', RENAME_EXCHANGE)))}")


def test_refused_and_failing_ops_errno_vs_local(store_server, store, mount, local):
    server = store_server(store)
    m = mount(server.url)

    def setup(base):
        os.makedirs(base / "d/sub", exist_ok=True)
        (base / "f").write_bytes(b"file")

    must_match = {
        "rmdir of a file": lambda b: os.rmdir(b / "f"),
        "unlink of a dir": lambda b: os.unlink(b / "d"),
        "open(O_DIRECTORY) of a file": lambda b: os.close(os.open(b / "f", os.O_RDONLY | os.O_DIRECTORY)),
        "rmdir of a non-empty dir": lambda b: os.rmdir(b / "d"),
        "mkdir of an existing file": lambda b: os.mkdir(b / "f"),
        "O_CREAT|O_EXCL on existing": lambda b: os.close(os.open(b / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
        "open a dir for writing": lambda b: os.close(os.open(b / "d", os.O_WRONLY)),
        "unlink missing": lambda b: os.unlink(b / "missing"),
        "create under a file": lambda b: os.close(os.open(b / "f/x", os.O_CREAT | os.O_WRONLY)),
        "rmdir '.'-like: rmdir of missing": lambda b: os.rmdir(b / "nope"),
        # Special files are kept (issue 12): an empty resource docfs knows the type of.
        "mkfifo": lambda b: os.mkfifo(b / "fifo"),
        "mknod (char device)": lambda b: os.mknod(b / "dev", 0o600 | 0o020000, os.makedev(1, 3)),
    }
    # docfs refuses these on a WebDAV store; ext4 would succeed (0).
    refused = {
        "link": (lambda b: os.link(b / "f", b / "f-hardlink"), errno.EPERM),
        "symlink (refused on WebDAV stores)": (lambda b: os.symlink("f", b / "f-symlink"), errno.EPERM),
    }
    report, mismatches = [], []
    for i, (what, op) in enumerate(must_match.items()):
        lres, mres = compare_errno(setup, op, local / f"m{i}", m.path / f"m{i}")
        report.append(f"{what}: local {errno_name(lres)}, docfs {errno_name(mres)}")
        if lres != mres:
            mismatches.append(report[-1])
    for i, (what, (op, want)) in enumerate(refused.items()):
        lres, mres = compare_errno(setup, op, local / f"r{i}", m.path / f"r{i}")
        report.append(f"{what}: local {errno_name(lres)}, docfs {errno_name(mres)} (expected {errno_name(want)})")
        if mres != want:
            mismatches.append(report[-1])
    print("\n".join(report))
    assert not mismatches, "errno mismatches:\n" + "\n".join(mismatches)
    # Nothing of the refused ops reached the store.
    leftovers = {p for p in server_files(store) if p.split("/")[-1] in ("f-hardlink", "f-symlink")}
    assert not leftovers, leftovers


def test_read_only_mount_refuses_with_erofs(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url, "--read-only")
    ops = {
        "create": lambda: os.close(os.open(m / "new.txt", os.O_CREAT | os.O_WRONLY, 0o644)),
        "open for writing": lambda: os.close(os.open(m / "hello.txt", os.O_WRONLY)),
        "O_TRUNC": lambda: os.close(os.open(m / "hello.txt", os.O_WRONLY | os.O_TRUNC)),
        "truncate": lambda: os.truncate(m / "hello.txt", 0),
        "mkdir": lambda: os.mkdir(m / "nd"),
        "rmdir": lambda: os.rmdir(m / "docs/sub"),
        "unlink": lambda: os.unlink(m / "hello.txt"),
        "rename": lambda: os.rename(m / "hello.txt", m / "x.txt"),
        "chmod": lambda: os.chmod(m / "hello.txt", 0o600),
        "utime": lambda: os.utime(m / "hello.txt", (1, 1)),
        "symlink": lambda: os.symlink("hello.txt", m / "ln"),
        "link": lambda: os.link(m / "hello.txt", m / "hl"),
    }
    got = {what: errno_name(errno_of(op)) for what, op in ops.items()}
    print(got)
    assert all(v == "EROFS" for v in got.values()), got
    assert sorted(server_files(store)) == sorted(server_files(store))
    assert not any(r.method in ("PUT", "MOVE", "DELETE", "MKCOL", "PROPPATCH") for r in server.requests())


def test_lockfile_pattern_create_close_rename_over_repeatedly(store_server, store, mount):
    """git's lockfile pattern, many times in a row, for three files at once (config, HEAD, index):
    create NAME.lock (O_EXCL), write, close, chmod, rename over NAME, read NAME back at once.
    Every read must see the last content, and the store must end with exactly NAME holding it:
    no NAME.lock, no conflict copy (an upload must never go to a stale path)."""
    import threading
    server = store_server(store)
    m = mount(server.url)
    os.mkdir(m / "g")
    names = ["config", "HEAD", "index"]
    rounds = 40
    problems: list[str] = []
    last: dict[str, bytes] = {}

    def worker(name):
        for i in range(rounds):
            body = f"[{name}]\n\tgeneration = {i}\n".encode() * (1 + i % 3)
            try:
                fd = os.open(m / f"g/{name}.lock", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
                try:
                    os.write(fd, body)
                finally:
                    os.close(fd)
                os.chmod(m / f"g/{name}.lock", 0o644)
                os.rename(m / f"g/{name}.lock", m / f"g/{name}")
                last[name] = body
                got = (m / f"g/{name}").read_bytes()
                if got != body:
                    problems.append(f"{name} round {i}: read {len(got)} bytes {got[:30]!r}, expected {len(body)}")
            except OSError as error:
                problems.append(f"{name} round {i}: {error!r}")
                try:
                    os.unlink(m / f"g/{name}.lock")
                except OSError:
                    pass

    threads = [threading.Thread(target=worker, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    for name in names:
        if name in last:
            wait_server_bytes(server, f"g/{name}", last[name], timeout=60)
    m.wait_uploads_done(120)   # barrier: every upload has ended; a stray NAME.lock or copy would be there now
    left = sorted(os.listdir(store / "g"))
    assert left == sorted(names), f"store dir g/ holds {left}\n{methods_log(server, 60)}"
    assert not problems, "\n".join(problems[:10]) + f"\n({len(problems)} problems)\n{m.log_tail(3000)}"
