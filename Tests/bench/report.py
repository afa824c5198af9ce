"""The record's presentation: the machine and versions it ran on, and RESULTS.md (per server a
table of medians with the server's request counts and the docfs/peer ratio of every figure,
then the targets of issue 9 checked against the same figures)."""
import os, platform, re, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SERVER_TITLES = {"docfs-serve": "`docfs serve` (WebDAV)", "rclone-serve": "`rclone serve webdav`",
                 "seaweedfs": "SeaweedFS S3 gateway"}
CLIENT_ORDER = ["docfs", "rclone-full", "rclone-off", "davfs2", "s3fs", "curl", "local disk", "fuse floor"]
CLIENT_TITLES = {"docfs": "docfs", "rclone-full": "rclone mount full", "rclone-off": "rclone mount off",
                 "davfs2": "davfs2", "s3fs": "s3fs", "curl": "curl (limit)", "local disk": "local disk",
                 "fuse floor": "FUSE floor"}

# (workload, metric, row title, unit); ratios are docfs/peer of the figure as shown.
ROWS = [
    ("ls5k", "s", "`ls -l` of {many:,} files, cold", "s"),
    ("ls5k-warm", "s", "`ls -l` of {many:,} files after a remount (state kept)", "s"),
    ("stat5k", "s", "`stat` of the {many:,} names (folder listed)", "s"),
    ("find", "s", "`find` of a tree of {tree_dirs} folders ({find_entries:,} entries)", "s"),
    ("ttfb", "s", "first byte of the {big_mib} MiB file (open, read 1 byte, close; in process)", "s"),
    ("seqread", "MiB/s", "sequential read of it (`cat`)", "MiB/s"),
    ("seqread", "rss_mib", "daemon peak RSS after that read", "MiB"),
    ("seqread", "cache_left", "files in the cache once closed", ""),
    ("cat200", "s", "`cat` of {cat_files} x {cat_kib} KiB in {tree_dirs} folders", "s"),
    ("write", "close_s", "write {write_mib} MiB: close returns", "s"),
    ("write", "s", "write {write_mib} MiB: the server has it", "s"),
    ("huge", "s", "`ls -l` of {huge:,} entries, cold", "s"),
    ("huge", "warm_s", "the same after a remount (state kept)", "s"),
    ("huge", "rss_mib", "daemon peak RSS ({huge:,} entries)", "MiB"),
    ("huge", "refresh_child_rows", "catalog rows a refresh of the unchanged folder wrote", ""),
]


def run_text(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
            mem = f"{kib / 1048576:.0f} GiB"
    except (OSError, StopIteration):
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory": mem, "kernel": platform.release(),
            "system": run_text(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"])}


def versions(docfs):
    def first_line(text):
        return text.splitlines()[0] if text else "missing"
    # The work tree the binary was built in (a release build in another worktree is common),
    # not necessarily this script's.
    tree = run_text(["git", "-C", os.path.dirname(os.path.realpath(docfs)), "rev-parse", "--show-toplevel"]) or ROOT
    commit = run_text(["git", "-C", tree, "log", "-1", "--format=%h %cs"])
    dirty = " (tree has uncommitted changes)" if run_text(["git", "-C", tree, "status", "--porcelain", "--", "Sources"]) else ""
    weed = run_text(["weed", "version"])
    return {"docfs": f"{first_line(run_text([docfs, '--version']))}, commit {commit}{dirty}",
            "rclone": first_line(run_text(["rclone", "version"])),
            "s3fs": first_line(run_text(["s3fs", "--version"])),
            "davfs2": run_text(["dpkg-query", "-W", "-f=${Version}", "davfs2"]) or "missing",
            "SeaweedFS": (re.search(r"version (\S+ \S+)", weed).group(1) if re.search(r"version (\S+ \S+)", weed) else first_line(weed)),
            "curl": first_line(run_text(["curl", "--version"])).split(" (")[0],
            "fuse3": run_text(["dpkg-query", "-W", "-f=${Version}", "fuse3"]) or "?"}


def fmt(value, unit):
    if value is None:
        return "–"
    if unit == "s":
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    if unit == "MiB/s":
        return f"{value:,.0f} MiB/s"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:g}"


def figure(results, workload, client, metric):
    return results.get(workload, {}).get(client, {}).get("median", {}).get(metric)


def cell(results, workload, client, metric, unit, docfs_value):
    entry = results.get(workload, {}).get(client)
    if entry is None:
        return ""
    value = entry.get("median", {}).get(metric)
    if value is None:
        return "failed" if entry.get("errors") else "–"
    text = fmt(value, unit)
    requests = entry.get("median", {}).get("requests")
    if requests is not None and metric in ("s", "MiB/s", "warm_s") and client not in ("curl", "fuse floor"):
        text += f" ({requests:.0f} req)"
    if client != "docfs" and docfs_value is not None and value and unit in ("s", "MiB/s"):
        text += f" · **{docfs_value / value:.2f}**"
    if entry.get("errors"):
        text += f" ({len(entry['errors'])} failed)"
    return text


def server_table(name, results, sizes):
    clients = [c for c in CLIENT_ORDER if any(c in per for per in results.values())]
    lines = [f"### {SERVER_TITLES.get(name, name)}", "",
             "| workload | " + " | ".join(CLIENT_TITLES[c] for c in clients) + " |",
             "|---|" + "---|" * len(clients)]
    for workload, metric, title, unit in ROWS:
        if workload not in results:
            continue
        if not any(figure(results, workload, c, metric) is not None for c in clients):
            continue
        docfs_value = figure(results, workload, "docfs", metric)
        title = title.format(find_entries=sizes["tree_dirs"] * 23 + sizes["cat_files"] + 1, **sizes)
        lines.append(f"| {title} | " + " | ".join(cell(results, workload, c, metric, unit, docfs_value) for c in clients) + " |")
    errors = [(w, c, e) for w, per in results.items() for c, entry in per.items() for e in entry.get("errors", [])]
    lines.append("")
    for workload, client, error in errors[:10]:
        lines.append(f"- {workload} / {client} failed: `{error}`")
    if errors:
        lines.append("")
    return lines


def check(value, limit, op):
    if value is None or limit is None:
        return None
    return value <= limit if op == "<=" else value >= limit


def targets(record):
    """Rows of (target, {server: (met, text)})."""
    servers = record["servers"]
    local = servers.get("docfs-serve", {})
    out = []

    def add(title, compute):
        row = {}
        for name, results in servers.items():
            got = compute(results)
            if got is not None:
                row[name] = got
        out.append((title, row))

    def ratio_target(workload, metric, peer_metric_from, factor, op, peers):
        def compute(results):
            mine = figure(results, workload, "docfs", metric)
            values = [figure(peer_results, workload, p, metric) for p in peers
                      for peer_results in [local if p == "local disk" else results]]
            values = [v for v in values if v is not None]
            if mine is None or not values:
                return None
            best = max(values) if metric == "MiB/s" else min(values)
            met = check(mine, factor * best, op)
            return met, f"{mine / best:.2f}x"
        return compute

    add("first byte <= 1.5x one ranged GET of 1 byte (curl)", ratio_target("ttfb", "s", None, 1.5, "<=", ["curl"]))
    add("sequential read >= 0.8x curl GET", ratio_target("seqread", "MiB/s", None, 0.8, ">=", ["curl"]))
    add("sequential read >= 2x rclone mount full", ratio_target("seqread", "MiB/s", None, 2, ">=", ["rclone-full"]))
    add("`cat` of 200 x 64 KiB <= davfs2", ratio_target("cat200", "s", None, 1, "<=", ["davfs2"]))
    add("`cat` of 200 x 64 KiB <= 0.5x rclone (best mode)", ratio_target("cat200", "s", None, 0.5, "<=", ["rclone-full", "rclone-off"]))
    def with_floor(compute, workload, peers):
        """The verdict, and where the FUSE floor (docfs-serve's run) stands against the same peers:
        a target below it is one no FUSE file system meets on this machine."""
        def wrapped(results):
            got = compute(results)
            floor = figure(local, workload, "fuse floor", "s")
            values = [figure(local if p == "local disk" else results, workload, p, "s") for p in peers]
            values = [v for v in values if v]
            if got is None or floor is None or not values:
                return got
            return got[0], f"{got[1]} (FUSE floor {floor / min(values):.2f}x)"
        return wrapped

    peers = ["rclone-full", "rclone-off", "davfs2", "s3fs"]
    add("cold `ls -l` of 5,000 <= 0.5x the best peer", with_floor(ratio_target("ls5k", "s", None, 0.5, "<=", peers), "ls5k", peers))

    def warm_vs_local(results):
        mine, disk = figure(results, "ls5k-warm", "docfs", "s"), figure(local, "ls5k", "local disk", "s")
        if mine is None or disk is None:
            return None
        return check(mine, 2 * disk, "<="), f"{mine / disk:.2f}x"
    add("`ls -l` of 5,000 after a remount <= 2x local disk", warm_vs_local)
    add("`stat` of 5,000 names <= 2x local disk",
        with_floor(ratio_target("stat5k", "s", None, 2, "<=", ["local disk"]), "stat5k", ["local disk"]))
    add("256 MiB on the server when close returns, <= 1.2x raw PUT", ratio_target("write", "s", None, 1.2, "<=", ["curl"]))

    def huge(results):
        entry = results.get("huge", {}).get("docfs")
        if entry is None:
            return None
        median = entry.get("median", {})
        rss, rows = median.get("rss_mib"), median.get("refresh_child_rows")
        done = not entry.get("errors") and median.get("s") is not None
        met = done and rss is not None and rss <= 64 and rows == 0
        return met, (f"ls {'completes' if done else 'FAILED'}, peak RSS {fmt(rss, 'MiB')}, "
                     f"refresh wrote {fmt(rows, '')} rows (+{fmt(median.get('refresh_other_rows'), '')} of folders)")
    add("100,000 entries: `ls -l` completes, peak RSS <= 64 MiB, a refresh writes no rows", huge)

    def cache_empty(results):
        left = figure(results, "seqread", "docfs", "cache_left")
        if left is None:
            return None
        return left == 0, f"{left:g} files left"
    add("the cache dir is empty once all handles are closed", cache_empty)
    return out


def markdown(record):
    m, v, s = record["machine"], record["versions"], record["sizes"]
    lines = ["# docfs performance record", "",
             "Written by `make bench` (`Tests/bench/record.py`); do not edit by hand. "
             "Raw runs and medians: [results.json](results.json). With the store far away (`make bench-latency`): "
             "[LATENCY.md](LATENCY.md).", ""]
    if record.get("quick"):
        lines += ["**Quick mode (BENCH_QUICK=1): small sizes and one run; these figures only check the script.**", ""]
    lines += [f"- date: {record['date']} ({record.get('minutes', 0):.1f} min)",
              f"- machine: {m['nproc']} cores ({m['cpu']}), {m['memory']}, kernel {m['kernel']}, {m['system']}",
              "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
              f"- sizes: big file {s['big_mib']} MiB, {s['many']:,} files in one folder, {s['cat_files']} x {s['cat_kib']} KiB "
              f"in {s['tree_dirs']} folders, write {s['write_mib']} MiB, {s['huge']:,} entries in one folder",
              f"- every figure: median of {record['runs']} cold runs (fresh mount point, empty cache, "
              f"`sync; echo 3 > /proc/sys/vm/drop_caches`{'' if record.get('cold') else ': NOT possible here, runs were warm'}), "
              "all on 127.0.0.1", "",
              "In each cell: the median, the requests the server answered from mount to unmount (`req`, median), "
              "and in bold the ratio docfs/peer of that figure (for seconds below 1 means docfs is faster, "
              "for MiB/s above 1 does). `curl` times are curl's own `time_total` (no process start): for the first "
              "byte one ranged GET of 1 byte, for the read one GET, for `cat` 200 GETs on one connection, for the "
              "write one PUT, for `ls` one PROPFIND of depth 1. Local disk is the WebDAV store's own directory; "
              "the FUSE floor is that directory through a minimal libfuse file system (`fuse_floor.c`: metadata only, "
              "one round trip through /dev/fuse per name, docfs's timeouts and loop), the least any FUSE client pays "
              "here; in the targets, `FUSE floor Nx` is its figure against the same peer. "
              "rclone mounts use `--vfs-write-back 0s` and a 30 s directory cache; davfs2 `buf_size 1024`, "
              "`delay_upload 0`, `use_locks 0`.", ""]
    rows = targets(record)
    names = list(record["servers"])
    lines += ["## Targets (issue 9)", "",
              "| target | " + " | ".join(SERVER_TITLES.get(n, n) for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for title, row in rows:
        cells = []
        for n in names:
            if n not in row:
                cells.append("–")
            else:
                met, text = row[n]
                cells.append(f"{'met' if met else 'NOT met'}: {text}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += ["", "## Figures", ""]
    for name, results in record["servers"].items():
        lines += server_table(name, results, s)
    return "\n".join(lines) + "\n"
