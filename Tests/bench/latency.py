#!/usr/bin/env python3
"""docfs's latency record (`make bench-latency`): docfs and its peers with the store far away.

The record's servers on 127.0.0.1 (`rclone serve webdav`, SeaweedFS's S3 gateway, `docfs serve`),
each behind a delay proxy (delay_proxy.py: DELAY per request/answer exchange and per new
connection, bandwidth not limited). Through the proxy: docfs, `rclone mount` (full; off on
request), davfs2 (WebDAV) or s3fs (S3), `curl` (boto3 for an S3 listing) as the serial limit,
and local disk (the WebDAV store's directory, no mount: what the workload costs here at all).
The bench itself reads the store directly (the WebDAV store's directory, SeaweedFS's filer), so
"until the store has it" is not delayed.

Workloads: the record's ls5k, ls5k-warm, stat5k, find, ttfb, seqread, cat200, write (smaller big
file and write: 256 and 64 MiB) and those of latency_workloads.py: stat5k-cold, cp1k, tarx, git,
grep, photos. Every run is cold (fresh mount, empty cache, caches dropped); each figure is the
median of --runs runs, with the requests and connections that went through the proxy during
the workload, and the workload's serial floor (round trips a one-request-at-a-time client
cannot avoid, times the delay).

Output: Tests/bench/LATENCY.md and latency.json, one section per server and delay; a run
replaces the sections it measured and keeps the others (--fresh drops them). `make bench`
(RESULTS.md, results.json) and this never write each other's files.

    python3 Tests/bench/latency.py [--delays 20,80] [--servers rclone-serve] [--runs 3]
        [--runs-by-delay 80=1] [--clients docfs,rclone-full,davfs2,s3fs,curl,local] [--workloads a,b]
        [--budget 240] [--quick] [--out DIR] [--fresh] [--keep-logs DIR] [--report-only]

The defaults (rclone serve webdav at 20 ms, 3 runs, and 80 ms, 1 run) take about 28 minutes on
2 cores; SeaweedFS (`--servers seaweedfs --delays 20 --runs 1 --budget 120`) about 19 more, where
rclone and s3fs send a HEAD per object and some runs take minutes.

--quick: small sizes, one run, 20 ms, written to /tmp/docfs-latency-quick/ (checks the script).
A run that takes longer than --budget seconds is stopped and shown as "> budget"; the client's
other runs of that workload are skipped. DOCFS_BIN is the docfs binary (.build/release/docfs).
"""
import argparse, contextlib, datetime, json, os, shutil, signal, subprocess, sys, tempfile, time, urllib.error, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))

from procs import drop_caches, cleanup, free_port, port_open, track, wait_until  # noqa: E402
from servers import DocfsServe, RcloneServe, Seaweed, WebDAVServer, ACCESS_KEY, SECRET_KEY, REGION  # noqa: E402
from delay_proxy import DelayProxy  # noqa: E402
from clients import LocalDisk  # noqa: E402
import record, report, workloads, latency_report  # noqa: E402
from workloads import MOUNT_WORKLOADS  # noqa: E402
from latency_workloads import FarSizes, FAR_WORKLOADS, make_far_store, make_fixtures, floor_round_trips, tree_files  # noqa: E402

BASE_WORKLOADS = ["ls5k", "ls5k-warm", "stat5k", "stat5k-cold", "find", "ttfb", "seqread", "cat200", "write"]
ALL_WORKLOADS = BASE_WORKLOADS + ["cp1k", "tarx", "git", "grep", "photos"]
ALL_SERVERS = ["rclone-serve", "seaweedfs", "docfs-serve"]
ALL_CLIENTS = ["docfs", "rclone-full", "rclone-off", "davfs2", "s3fs", "curl", "local"]


class Far:
    """A server as the clients see it: its URL (or S3 endpoint) is the delay proxy's. The rest
    (has_size, remove, requests, store) is the server's own, reached directly, undelayed."""

    def __init__(self, server, proxy):
        self._server = server
        if server.kind == "s3":
            self.endpoint = proxy.endpoint
        else:
            self.url = proxy.url

    def object_url(self, path):
        if self._server.kind == "s3":
            return f"{self.endpoint}/{self._server.bucket}/{path}"
        return self.url + path

    def __getattr__(self, name):
        return getattr(self._server, name)


class FarDocfsServe(DocfsServe):
    """`docfs serve` that also takes requests addressed to the proxy (it checks `Host`)."""

    def __init__(self, docfs, store, work, proxy_port):
        WebDAVServer.__init__(self, store, work)
        self.log = os.path.join(work, "docfs-serve-requests.log")
        self.proc = track(subprocess.Popen([docfs, "serve", store, "--port", str(self.port), "--no-previews", "--request-log", self.log,
                                            "--allow-host", f"127.0.0.1:{proxy_port}"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: port_open(self.port), 30, "docfs serve to listen")


class Context:
    def __init__(self, server, sizes, source, fixtures, budget):
        self.server, self.sizes, self.source, self.fixtures, self.budget = server, sizes, source, fixtures, budget
        self.written = []

    def store_files(self, folder):
        """{relpath: size} of the files the store has under `folder`, read directly."""
        if self.server.kind != "s3":
            return tree_files(os.path.join(self.server.store, folder))
        return filer_files(self.server, folder)


def filer_files(seaweed, folder):
    """The files under bucket/folder, from SeaweedFS's filer (its HTTP API, not through the proxy)."""
    out, stack = {}, [""]
    while stack:
        rel = stack.pop()
        url = f"http://127.0.0.1:{seaweed.ports['filer']}/buckets/{seaweed.bucket}/{folder}/{rel}?limit=100000"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}), timeout=30) as r:
                listing = json.load(r)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                continue
            raise
        for entry in listing.get("Entries") or []:
            name = entry["FullPath"].rsplit("/", 1)[1]
            if entry["Mode"] & (1 << 31):
                stack.append(f"{rel}{name}/")
            else:
                out[rel + name] = entry["FileSize"]
    return out


# --- the serial limits: curl (boto3 for an S3 listing) through the same proxy --------------------

def listing_limit(ctx):
    """The transfer of many/'s listing through the proxy, on a new connection."""
    if ctx.server.kind != "s3":
        return workloads.curl_propfind(ctx)
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=ctx.server.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                      aws_secret_access_key=SECRET_KEY, config=Config(s3={"addressing_style": "path"}))
    start = time.monotonic()
    for _ in s3.get_paginator("list_objects_v2").paginate(Bucket=ctx.server.bucket, Prefix="many/", Delimiter="/"):
        pass
    return {"s": time.monotonic() - start}


LIMITS = {"ls5k": listing_limit, "stat5k-cold": listing_limit, "ttfb": workloads.curl_first_byte,
          "seqread": workloads.curl_read, "cat200": workloads.curl_cat, "write": workloads.curl_put}


# --- one run -----------------------------------------------------------------------------------

@contextlib.contextmanager
def budget(seconds):
    """Raises TimeoutError in this thread once `seconds` have passed (a command it waits for is
    killed by subprocess.run; a stat loop is interrupted between two calls)."""
    def expire(_number, _frame):
        raise TimeoutError(f"stopped after {seconds:.0f} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def one_run(ctx, proxy, make, workload, label):
    if workload == "ls5k-warm":
        return warm_run(ctx, proxy, make, label)
    body = FAR_WORKLOADS.get(workload) or MOUNT_WORKLOADS[workload]
    drop_caches()
    before = ctx.server.requests()
    client = make()
    with client as mnt:
        proxy.note(f"{workload} {label}")
        mark = proxy.mark()
        with budget(ctx.budget):
            result = body(client, mnt, ctx)
        result.update(proxy.since(mark))
    result["server_requests"] = ctx.server.requests() - before
    return result


def warm_run(ctx, proxy, make, label):
    """`ls -l many/` after a remount that keeps the client's state (docfs: its catalog)."""
    first = make()
    with first as mnt, budget(ctx.budget):
        subprocess.run(["ls", "-l", os.path.join(mnt, "many")], stdout=subprocess.DEVNULL, check=True)
    again = record.remount_of(first, make)
    drop_caches()
    with again as mnt:
        proxy.note(f"ls5k-warm {label}")
        mark = proxy.mark()
        with budget(ctx.budget):
            result = {"s": workloads.timed(["ls", "-l", os.path.join(mnt, "many")])}
        result.update(proxy.since(mark))
    return result


def is_timeout(error):
    return isinstance(error, (subprocess.TimeoutExpired, TimeoutError)) or "timed out" in str(error)


def summarize(runs_out, budget):
    good = [r for r in runs_out if "error" not in r]
    summary = {"runs": runs_out, "median": record.median_of(good) if good else {}}
    if good:
        middle = sorted(good, key=lambda r: r["s"])[(len(good) - 1) // 2]
        summary["methods"] = middle.get("methods", {})
    errors = [r["error"] for r in runs_out if "error" in r]
    if errors:
        summary["errors"] = errors
    if any(r.get("timeout") for r in runs_out):
        summary["timeout"] = budget
    return summary


def run_section(server_name, server, delay, runs, ctx_args, makers_for, workloads_wanted, wanted, proxy_port, work, keep_logs):
    log = os.path.join(work, f"proxy-{server_name}-{delay:g}ms.log")
    print(f"latency: {server_name} at {delay:g} ms, {runs} run(s)", flush=True)
    proxy = DelayProxy(server.port, delay, proxy_port, log)
    far = Far(server, proxy)
    ctx = Context(far, *ctx_args)
    results, floors = {}, {}
    try:
        makers = makers_for(far)
        for workload in workloads_wanted:
            rt = floor_round_trips(workload, ctx.sizes, ctx.fixtures["facts"], server.kind == "s3")
            if rt:
                floors[workload] = {"round_trips": rt[0], "what": rt[1], "s": rt[0] * delay / 1000}
            per_client = {}
            for name, make in makers.items():
                if workload in ("ls5k-warm", "stat5k") and name == "curl":
                    continue
                runs_out = []
                for i in range(runs):
                    try:
                        runs_out.append(one_run(ctx, proxy, make, workload, f"{name} run {i + 1}"))
                    except Exception as error:  # noqa: BLE001 - a peer that fails is reported, not fatal
                        timeout = is_timeout(error)
                        runs_out.append({"error": f"{type(error).__name__}: {error}"[:300], "timeout": timeout})
                        print(f"  {workload:11} {name:12} {'timed out' if timeout else 'failed'}: {str(error)[:200]}", flush=True)
                    finally:
                        for written in ctx.written:
                            server.remove(written)
                        ctx.written.clear()
                    if runs_out[-1].get("timeout"):
                        break
                per_client[name] = summarize(runs_out, ctx.budget)
                show(workload, name, per_client[name], floors.get(workload))
            if "curl" in wanted and workload in LIMITS:
                runs_out = []
                for _ in range(runs):
                    drop_caches()
                    try:
                        result = LIMITS[workload](ctx)
                    except Exception as error:  # noqa: BLE001
                        result = {"error": f"{type(error).__name__}: {error}"[:300]}
                    finally:
                        for written in ctx.written:
                            server.remove(written)
                        ctx.written.clear()
                    if result is None:
                        break
                    runs_out.append(result)
                if runs_out:
                    per_client["curl"] = summarize(runs_out, ctx.budget)
                    show(workload, "curl", per_client["curl"], floors.get(workload))
            results[workload] = per_client
    finally:
        proxy.stop()
        if keep_logs:
            os.makedirs(keep_logs, exist_ok=True)
            shutil.copy(log, keep_logs)
    return {"server": server_name, "delay_ms": delay, "runs": runs, "floors": floors, "results": results}


def show(workload, name, summary, floor):
    shown = " ".join(f"{r['s']:.3f}" if "s" in r else ("timeout" if r.get("timeout") else "err") for r in summary["runs"])
    median = summary["median"]
    extra = ""
    if "reqs" in median:
        extra = (f"  {median['reqs']:.0f} req {median.get('conns', 0):.0f} conn, waiting {median.get('wait_s', 0):.2f} s"
                 f" x{median.get('in_flight', 0):.1f}")
    if floor and median.get("s"):
        extra += f"  {median['s'] / floor['s']:.2f}x floor"
    print(f"  {workload:11} {name:12} s: {shown}{extra}", flush=True)


# --- the whole run -----------------------------------------------------------------------------

def ensure_tools(wanted_clients, servers):
    if "davfs2" in wanted_clients and any(s != "seaweedfs" for s in servers) and not record.ensure_davfs2():
        print("latency: warning: davfs2 could not be installed; it is left out", flush=True)
        wanted_clients.remove("davfs2")
    missing = [tool for tool in ("gio", "git", "tar", "curl") if not shutil.which(tool)]
    if missing:
        sys.exit(f"latency: missing {', '.join(missing)} (make setup installs gio: libglib2.0-bin)")


def start_server(name, docfs, store, work, proxy_port):
    if name == "rclone-serve":
        return RcloneServe(store, work)
    if name == "docfs-serve":
        return FarDocfsServe(docfs, store, work, proxy_port)
    if name == "seaweedfs":
        server = Seaweed(work)
        print("latency: uploading the store to SeaweedFS", flush=True)
        server.upload_tree(store, skip=("huge",))
        return server
    raise SystemExit(f"latency: unknown server {name}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delays", default=None, help="round-trip delays in ms (default 20,80; quick 20)")
    parser.add_argument("--servers", default="rclone-serve", help=f"of {','.join(ALL_SERVERS)} (default rclone-serve)")
    parser.add_argument("--clients", default="docfs,rclone-full,davfs2,s3fs,curl,local", help=f"of {','.join(ALL_CLIENTS)}")
    parser.add_argument("--workloads", default=",".join(ALL_WORKLOADS), help=f"of {','.join(ALL_WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default 3; quick 1)")
    parser.add_argument("--runs-by-delay", default="80=1", help="fewer runs at a delay (default 80=1; '' for none)")
    parser.add_argument("--budget", type=float, default=240, help="seconds a run may take before it is stopped")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK", "") not in ("", "0"))
    parser.add_argument("--out", default=None, help="where LATENCY.md and latency.json go (default Tests/bench)")
    parser.add_argument("--fresh", action="store_true", help="drop the sections of earlier runs")
    parser.add_argument("--keep-logs", default=None, help="copy the proxies' request logs (with run markers) here")
    parser.add_argument("--report-only", action="store_true", help="write LATENCY.md again from latency.json; measure nothing")
    args = parser.parse_args()
    split = lambda text: [v.strip() for v in text.split(",") if v.strip()]  # noqa: E731
    args.delays = [float(d) for d in split(args.delays or ("20" if args.quick else "20,80"))]
    args.servers, args.clients, args.workloads = split(args.servers), split(args.clients), split(args.workloads)
    for given, known, what in ((args.servers, ALL_SERVERS, "servers"), (args.clients, ALL_CLIENTS, "clients"),
                               (args.workloads, ALL_WORKLOADS, "workloads")):
        if set(given) - set(known):
            parser.error(f"unknown {what} {sorted(set(given) - set(known))}; known: {', '.join(known)}")
    args.runs = args.runs or (1 if args.quick else 3)
    args.runs_at = {float(k): int(v) for k, v in (item.split("=") for item in split(args.runs_by_delay))}
    args.out = args.out or (os.path.join(tempfile.gettempdir(), "docfs-latency-quick") if args.quick else HERE)
    return args


def main():
    args = parse_args()
    if args.report_only:
        return write_record(args, {}, None)
    sizes = FarSizes.quick() if args.quick else FarSizes()
    docfs = os.environ.get("DOCFS_BIN") or os.path.join(ROOT, ".build/release/docfs")
    if not os.path.exists(docfs):
        sys.exit(f"latency: {docfs} is missing: make release (or set DOCFS_BIN)")
    ensure_tools(args.clients, args.servers)
    if not drop_caches():
        print("latency: warning: cannot write /proc/sys/vm/drop_caches (not root?): runs are not cold", flush=True)
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="docfs-latency-")
    os.chmod(work, 0o755)
    store, local = os.path.join(work, "store"), os.path.join(work, "local")
    header = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "quick": args.quick,
              "sizes": vars(sizes), "machine": report.machine(), "versions": report.versions(docfs),
              "budget": args.budget}
    sections = {}
    try:
        print(f"latency: making the store and the local fixtures in {work}", flush=True)
        workloads.make_store(store, sizes)
        make_far_store(store, sizes)
        fixtures = make_fixtures(local, sizes)
        source = os.path.join(local, "write-source.bin")
        with open(source, "wb") as out:
            for _ in range(sizes.write_mib):
                out.write(os.urandom(1 << 20))
        for server_name in args.servers:
            proxy_port = free_port()
            print(f"latency: starting {server_name}", flush=True)
            server = start_server(server_name, docfs, store, work, proxy_port)
            try:
                wanted = [c for c in args.clients if c != "curl"]

                def makers_for(far):
                    makers = record.client_makers(far, work, docfs, wanted, store)
                    if "local" in wanted and far.kind == "webdav":
                        makers["local disk"] = lambda: LocalDisk(store)  # the WebDAV store's own directory
                    return makers
                for delay in args.delays:
                    runs = args.runs_at.get(delay, args.runs)
                    section = run_section(server_name, server, delay, runs, (sizes, source, fixtures, args.budget),
                                          makers_for, args.workloads, args.clients, proxy_port, work, args.keep_logs)
                    section.update(header)
                    sections[f"{server_name}@{delay:g}"] = section
            finally:
                server.stop()
    finally:
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    minutes = (time.monotonic() - started) / 60
    write_record(args, sections, minutes)


def write_record(args, sections, minutes):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "latency.json")
    kept = {}
    if not args.fresh and os.path.exists(path):
        with open(path) as f:
            kept = json.load(f).get("sections", {})
    for section in sections.values():
        section["minutes"] = minutes
    if not kept and not sections:
        sys.exit(f"latency: nothing to report: no {path}")
    kept.update(sections)
    ordered = dict(sorted(kept.items(), key=lambda kv: (ALL_SERVERS.index(kv[1]["server"]), kv[1]["delay_ms"])))
    data = {"sections": ordered}
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    text = latency_report.markdown(data)
    with open(os.path.join(args.out, "LATENCY.md"), "w") as f:
        f.write(text)
    if minutes is None:
        print(f"latency: wrote {os.path.join(args.out, 'LATENCY.md')} from latency.json")
        return
    print(text)
    print(f"latency: wrote {os.path.join(args.out, 'LATENCY.md')} and latency.json in {minutes:.1f} min")


if __name__ == "__main__":
    main()
