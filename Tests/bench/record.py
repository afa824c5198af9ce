#!/usr/bin/env python3
"""docfs's performance record (`make bench`): docfs and its peers on the same servers, in one run.

Servers on 127.0.0.1: `docfs serve` and `rclone serve webdav` (WebDAV, over one store directory),
and SeaweedFS's S3 gateway (the same tree uploaded to a bucket). On each server: docfs, `rclone
mount` (`--vfs-cache-mode full` and `off`), davfs2 (WebDAV) or s3fs (S3), and `curl` against the
same objects as the limit; local disk (the WebDAV store's directory) as the floor, and that
directory through a minimal FUSE file system (fuse_floor.c) as the floor of any FUSE client. Every
measurement starts cold: fresh mount point, empty cache, `sync; echo 3 > /proc/sys/vm/drop_caches`.
Each figure is the median of BENCH_RUNS runs (3), with the requests the server answered between
mount and unmount (also a median).

Workloads (see workloads.py): ls5k (`ls -l` of a 5,000-file folder), ls5k-warm (the same after a
remount that keeps the client's state: docfs's catalog), stat5k, find (of a 1,000+ entry tree),
ttfb (open and read of 1 byte of a 1 GiB file, timed in process), seqread (`cat` of it; MiB/s, daemon peak RSS, files left in
the cache after close), cat200 (`cat` of 200 x 64 KiB files in 40 folders), write (256 MiB: until
close returns, and until the server has it), huge (`ls -l` of 100,000 entries cold and after a
remount, daemon peak RSS, and for docfs the catalog rows a refresh of the unchanged folder wrote).

Output: Tests/bench/RESULTS.md (tables with docfs/peer ratios, the issue's targets, machine and
versions) and Tests/bench/results.json (every run and the medians); BENCH_OUT=DIR writes them
elsewhere (BENCH_QUICK=1 writes them to /tmp/docfs-bench-quick/).

Environment:
  DOCFS_BIN=PATH        the docfs binary (default .build/release/docfs)
  BENCH_QUICK=1         small sizes and 1 run: checks the script itself in a minute or two
  BENCH_RUNS=N          runs per figure (default 3, quick 1)
  BENCH_ONLY=a,b        only these workloads (names above)
  BENCH_SERVERS=a,b     only these servers: docfs-serve, rclone-serve, seaweedfs
  BENCH_CLIENTS=a,b     only these clients: docfs, rclone-full, rclone-off, davfs2, s3fs, curl, local,
                        floor
  BENCH_HUGE_SERVERS=a  servers that get the 100,000-entry folder (default docfs-serve; uploading
                        100,000 objects to SeaweedFS takes minutes)
"""
import datetime, json, os, platform, shutil, sqlite3, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

from procs import drop_caches, peak_rss_kib, wait_until, cleanup  # noqa: E402
from servers import DocfsServe, RcloneServe, Seaweed  # noqa: E402
from clients import Docfs, Rclone, Davfs2, S3fs, LocalDisk, FuseFloor, build_fuse_floor  # noqa: E402
import workloads  # noqa: E402
from workloads import Sizes, MOUNT_WORKLOADS, CURL_WORKLOADS  # noqa: E402
import report  # noqa: E402

ALL_WORKLOADS = ["ls5k", "ls5k-warm", "stat5k", "find", "ttfb", "seqread", "cat200", "write", "huge"]
# What the FUSE floor answers: metadata only (it has no content, no writes and no state to keep).
FLOOR_WORKLOADS = ("ls5k", "stat5k", "find")
# Client names as BENCH_CLIENTS spells them.
WANTED_AS = {"local disk": "local", "fuse floor": "floor"}


def env_list(name, default):
    value = os.environ.get(name, "")
    return [v.strip() for v in value.split(",") if v.strip()] if value else list(default)


class Context:
    def __init__(self, server, sizes, source):
        self.server, self.sizes, self.source = server, sizes, source
        self.written = []


def ensure_davfs2():
    """Installs Debian's davfs2 when it is missing (non-interactive); False if that fails."""
    if shutil.which("mount.davfs"):
        return True
    print("bench: installing davfs2 (apt-get)", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    ok = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "davfs2"], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if not ok:
        subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ok = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "davfs2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    return ok and bool(shutil.which("mount.davfs"))


def client_makers(server, work, docfs, wanted, store, floor=None):
    makers = {"docfs": lambda state=None: Docfs(server, work, docfs, state=state),
              "rclone-full": lambda: Rclone(server, work, "full"),
              "rclone-off": lambda: Rclone(server, work, "off")}
    if server.kind == "webdav":
        makers["davfs2"] = lambda: Davfs2(server, work)
    else:
        makers["s3fs"] = lambda: S3fs(server, work)
    if isinstance(server, DocfsServe):
        makers["local disk"] = lambda: LocalDisk(store)
        if floor:
            makers["fuse floor"] = lambda: FuseFloor(server, work, floor, store)
    return {name: make for name, make in makers.items() if WANTED_AS.get(name, name) in wanted}


def measure(server, make, body):
    """One cold run: drop caches, mount, run `body(client, mnt)`, unmount; the server's requests."""
    drop_caches()
    before = server.requests()
    client = make()
    with client as mnt:
        result = body(client, mnt)
    result["requests"] = server.requests() - before
    return result


def warm_ls(server, make, docfs_client_name):
    """`ls -l many/` after a remount that keeps the client's state (docfs: its catalog)."""
    def body():
        first = make()
        with first as mnt:
            subprocess.run(["ls", "-l", os.path.join(mnt, "many")], stdout=subprocess.DEVNULL, check=True)
        again = remount_of(first, make)
        drop_caches()
        before = server.requests()
        with again as mnt:
            seconds = workloads.timed(["ls", "-l", os.path.join(mnt, "many")])
        return {"s": seconds, "requests": server.requests() - before}
    return body()


def remount_of(client, make):
    """A new mount of the same client that keeps its state where it has any."""
    if isinstance(client, Docfs):
        return Docfs(client.server, client.work, client.docfs, state=client.state)
    if isinstance(client, Davfs2):
        again = Davfs2(client.server, client.work)
        again.mount = lambda: reuse_davfs2(again, client)
        return again
    if isinstance(client, Rclone):
        return Rclone(client.server, client.work, client.mode, cache=client.cache)
    return make()


def reuse_davfs2(again, first):
    """Mounts davfs2 again with the first mount's cache directory and configuration."""
    conf = os.path.join(first.work, "davfs2", os.path.basename(first.cache) + ".conf")
    again.cache = first.cache
    subprocess.run(["mount", "-t", "davfs", again.server.url, again.mnt, "-o", f"conf={conf}"],
                   stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=60)


CATALOG_TRIGGERS = """
CREATE TABLE IF NOT EXISTS bench_write (op TEXT, inode INTEGER, parent INTEGER);
CREATE TRIGGER IF NOT EXISTS bench_insert AFTER INSERT ON item BEGIN
  INSERT INTO bench_write VALUES ('insert', NEW.inode, NEW.parent); END;
CREATE TRIGGER IF NOT EXISTS bench_update AFTER UPDATE ON item BEGIN
  INSERT INTO bench_write VALUES ('update', NEW.inode, NEW.parent); END;
CREATE TRIGGER IF NOT EXISTS bench_delete AFTER DELETE ON item BEGIN
  INSERT INTO bench_write VALUES ('delete', OLD.inode, OLD.parent); END;
"""


def catalog_writes(path):
    """(rows of huge/'s children written, other rows written) since the triggers were installed."""
    with sqlite3.connect(path, timeout=30) as db:
        folder = db.execute("SELECT inode FROM item WHERE path = '/huge'").fetchone()
        inode = folder[0] if folder else -1
        children = db.execute("SELECT count(*) FROM bench_write WHERE parent = ?", (inode,)).fetchone()[0]
        total = db.execute("SELECT count(*) FROM bench_write").fetchone()[0]
    return children, total - children


def huge_run(server, make, label):
    """`ls -l huge/` cold; then remounted with the same state; for docfs, the catalog rows that a
    refresh of the unchanged folder writes (SQLite triggers on `item`, installed between mounts)."""
    result = {}
    drop_caches()
    before = server.requests()
    first = make()
    with first as mnt:
        result["s"] = workloads.timed(["ls", "-l", os.path.join(mnt, "huge")])
        rss = peak_rss_kib(first.pid())
    result["requests"] = server.requests() - before
    if rss:
        result["rss_mib"] = rss / 1024
    catalog = first.catalog() if isinstance(first, Docfs) else None
    if isinstance(first, Docfs) and not catalog:
        result["refresh_error"] = f"no single catalog.sqlite under {first.state}"
    if catalog:
        with sqlite3.connect(catalog, timeout=30) as db:
            db.executescript(CATALOG_TRIGGERS)
    again = remount_of(first, make)
    if isinstance(again, Docfs):
        again.options += ["--dir-cache-ttl", "2"]
    drop_caches()
    with again as mnt:
        result["warm_s"] = workloads.timed(["ls", "-l", os.path.join(mnt, "huge")])
        if catalog:
            try:
                result["refresh_child_rows"], result["refresh_other_rows"] = refresh_writes(server, mnt, catalog)
            except RuntimeError as error:
                result["refresh_error"] = str(error)
                print(f"  huge      {label:12} refresh: {error}", flush=True)
        rss = peak_rss_kib(again.pid())
        if rss:
            result["rss_mib"] = max(result.get("rss_mib", 0), rss / 1024)
    return result


def refresh_writes(server, mnt, catalog):
    """A refresh of the unchanged folder: past the TTL a listing revalidates it; waits for the
    server to be asked and for the catalog to settle, then counts the rows written."""
    time.sleep(2.5)
    asked = server.requests()
    subprocess.run(["ls", "-l", os.path.join(mnt, "huge")], stdout=subprocess.DEVNULL, check=True)
    wait_until(lambda: server.requests() > asked, 60, "docfs to revalidate huge/")
    last, stable_since = None, time.monotonic()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = (catalog_writes(catalog), server.requests())
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since > 2:
            break
        time.sleep(0.25)
    return catalog_writes(catalog)


def run_local(body, cold=True):
    if cold:
        drop_caches()
    result = body()
    result["requests"] = None
    return result


def median_of(runs):
    keys = {k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and v is not None}
    return {k: statistics.median([r[k] for r in runs if r.get(k) is not None]) for k in sorted(keys)}


def main():
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    sizes = Sizes.quick() if quick else Sizes()
    runs = int(os.environ.get("BENCH_RUNS", "1" if quick else "3"))
    only = env_list("BENCH_ONLY", ALL_WORKLOADS)
    unknown = set(only) - set(ALL_WORKLOADS)
    if unknown:
        sys.exit(f"bench: unknown workloads {sorted(unknown)}; known: {', '.join(ALL_WORKLOADS)}")
    server_names = env_list("BENCH_SERVERS", ["docfs-serve", "rclone-serve", "seaweedfs"])
    wanted = env_list("BENCH_CLIENTS", ["docfs", "rclone-full", "rclone-off", "davfs2", "s3fs", "curl", "local", "floor"])
    huge_servers = env_list("BENCH_HUGE_SERVERS", ["docfs-serve"])
    docfs = os.environ.get("DOCFS_BIN") or os.path.join(ROOT, ".build/release/docfs")
    # A quick run only checks the script: it never replaces the record.
    out_dir = os.environ.get("BENCH_OUT") or (os.path.join(tempfile.gettempdir(), "docfs-bench-quick") if quick else HERE)
    if not os.path.exists(docfs):
        sys.exit(f"bench: {docfs} is missing: make release (or set DOCFS_BIN)")
    if "davfs2" in wanted and any(s != "seaweedfs" for s in server_names) and not ensure_davfs2():
        print("bench: warning: davfs2 could not be installed; it is left out", flush=True)
        wanted.remove("davfs2")
    cold = drop_caches()
    if not cold:
        print("bench: warning: cannot write /proc/sys/vm/drop_caches (not root?): runs are not cold", flush=True)

    work = tempfile.mkdtemp(prefix="docfs-bench-")
    os.chmod(work, 0o755)
    store = os.path.join(work, "store")
    started = time.monotonic()
    record = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "quick": quick,
              "runs": runs, "sizes": vars(sizes), "cold": cold, "machine": report.machine(),
              "versions": report.versions(docfs), "servers": {}}
    try:
        print(f"bench: making the store ({sizes.big_mib} MiB file, {sizes.many} + {sizes.huge} files) in {store}", flush=True)
        workloads.make_store(store, sizes)
        floor = build_fuse_floor(work) if "floor" in wanted else None
        source = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else work, f"docfs-bench-src-{os.getpid()}")
        with open(source, "wb") as out:
            for _ in range(sizes.write_mib):
                out.write(os.urandom(1 << 20))
        try:
            for server_name in server_names:
                record["servers"][server_name] = run_server(server_name, docfs, work, store, source, sizes, runs,
                                                            only, wanted, server_name in huge_servers, floor)
        finally:
            os.unlink(source)
    finally:
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    record["minutes"] = (time.monotonic() - started) / 60
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    text = report.markdown(record)
    with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"bench: wrote {os.path.join(out_dir, 'RESULTS.md')} and results.json in {record['minutes']:.1f} min")


def run_server(server_name, docfs, work, store, source, sizes, runs, only, wanted, with_huge, floor=None):
    print(f"bench: starting {server_name}", flush=True)
    if server_name == "docfs-serve":
        server = DocfsServe(docfs, store, work)
    elif server_name == "rclone-serve":
        server = RcloneServe(store, work)
    elif server_name == "seaweedfs":
        server = Seaweed(work)
        skip = () if with_huge else ("huge",)
        print("bench: uploading the store to SeaweedFS", flush=True)
        server.upload_tree(store, skip=skip)
    else:
        raise SystemExit(f"bench: unknown server {server_name}")
    results = {}
    try:
        makers = client_makers(server, work, docfs, wanted, store, floor)
        ctx = Context(server, sizes, source)
        for workload in only:
            if workload == "huge" and not with_huge:
                continue
            per_client = {}
            for name, make in makers.items():
                if workload == "huge" and name not in ("docfs", "rclone-full", "local disk"):
                    continue  # davfs2, rclone off and s3fs at 100,000 entries: minutes each, not a target
                if name == "fuse floor" and workload not in FLOOR_WORKLOADS:
                    continue
                runs_out = []
                for _ in range(runs):
                    try:
                        runs_out.append(one_run(server, make, name, workload, ctx))
                    except Exception as error:  # noqa: BLE001 - a peer that fails is reported, not fatal
                        runs_out.append({"error": f"{type(error).__name__}: {error}"[:300]})
                        print(f"  {workload:9} {name:12} failed: {error}", flush=True)
                    for written in ctx.written:
                        server.remove(written)
                        if name == "local disk":
                            try:
                                os.unlink(os.path.join(store, written))
                            except OSError:
                                pass
                    ctx.written.clear()
                per_client[name] = summarize(workload, name, runs_out)
            if "curl" in wanted and workload in CURL_WORKLOADS:
                runs_out = []
                for _ in range(runs):
                    drop_caches()
                    result = CURL_WORKLOADS[workload](ctx)
                    if result is None:
                        break
                    runs_out.append(result)
                    for written in ctx.written:
                        server.remove(written)
                    ctx.written.clear()
                if runs_out:
                    per_client["curl"] = summarize(workload, "curl", runs_out)
            results[workload] = per_client
    finally:
        server.stop()
    return results


def one_run(server, make, name, workload, ctx):
    if name == "local disk":
        client = make()
        if workload in ("ls5k", "ls5k-warm"):
            return run_local(lambda: workloads.ls_many(client, ctx.server.store, ctx))
        if workload == "huge":
            drop_caches()
            cold_s = workloads.timed(["ls", "-l", os.path.join(ctx.server.store, "huge")])
            return {"s": cold_s, "warm_s": workloads.timed(["ls", "-l", os.path.join(ctx.server.store, "huge")]),
                    "requests": None}
        return run_local(lambda: MOUNT_WORKLOADS[workload](client, ctx.server.store, ctx))
    if workload == "ls5k-warm":
        return warm_ls(server, make, name)
    if workload == "huge":
        return huge_run(server, make, name)
    return measure(server, make, lambda client, mnt: MOUNT_WORKLOADS[workload](client, mnt, ctx))


def summarize(workload, name, runs_out):
    good = [r for r in runs_out if "error" not in r]
    summary = {"runs": runs_out, "median": median_of(good) if good else {}}
    if len(good) < len(runs_out):
        summary["errors"] = [r["error"] for r in runs_out if "error" in r]
    shown = " ".join(f"{r['s']:.3f}" if "s" in r else "err" for r in runs_out)
    print(f"  {workload:9} {name:12} s: {shown}   median {summary['median']}", flush=True)
    return summary


if __name__ == "__main__":
    main()
