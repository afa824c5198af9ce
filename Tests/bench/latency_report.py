"""LATENCY.md, the latency record's presentation (latency.py writes latency.json, this reads it):
issue 34's targets, then per server and delay a table of medians against the serial floor with
the docfs/peer ratio of every figure, and the requests each client made per workload."""
from report import SERVER_TITLES, fmt

CLIENT_ORDER = ["docfs", "rclone-full", "rclone-off", "davfs2", "s3fs", "curl", "local disk"]
CLIENT_TITLES = {"docfs": "docfs", "rclone-full": "rclone mount full", "rclone-off": "rclone mount off",
                 "davfs2": "davfs2", "s3fs": "s3fs", "curl": "curl (serial limit)", "local disk": "local disk"}
PEERS = ["rclone-full", "rclone-off", "davfs2", "s3fs"]

# (workload, metric, row title); the serial floor is shown on the row of FLOOR_METRIC.
ROWS = [
    ("ls5k", "s", "`ls -l` of {many:,} files, cold"),
    ("ls5k-warm", "s", "the same after a remount (state kept)"),
    ("stat5k", "s", "`stat` of the {many:,} names (folder listed first)"),
    ("stat5k-cold", "s", "`stat` of the {many:,} names on a fresh mount (no listing)"),
    ("find", "s", "`find` of {tree_dirs} folders with {tree_dirs} x 2 subfolders"),
    ("ttfb", "s", "first byte of a {big_mib} MiB file"),
    ("seqread", "s", "`cat` of the {big_mib} MiB file"),
    ("cat200", "s", "`cat` of {cat_files} x {cat_kib} KiB in {tree_dirs} folders"),
    ("write", "close_s", "write {write_mib} MiB: close returns"),
    ("write", "s", "... and the store has it"),
    ("cp1k", "close_s", "`cp -r` of {copy_files:,} small files in {copy_dirs} folders: cp returns"),
    ("cp1k", "s", "... and the store has them all"),
    ("tarx", "close_s", "`tar xzf` of {tar_files} source files: tar returns"),
    ("tarx", "s", "... and the store has them all"),
    ("git", "s", "`git clone --no-hardlinks` of {git_files} files: clone returns"),
    ("git", "status_s", "`git status` in the clone"),
    ("git", "stored_s", "... and the store has the work tree"),
    ("grep", "s", "`grep -r` over {grep_files} text files in {grep_dirs} folders"),
    ("photos", "list_s", "GIO: `gio list -a '*'` of {photos} photos"),
    ("photos", "s", "... then `gio info -a '*'` of each"),
]
FLOOR_METRIC = {"git": "stored_s"}


def entry(results, workload, client):
    return results.get(workload, {}).get(client)


def value(results, workload, client, metric):
    e = entry(results, workload, client)
    return None if e is None else e.get("median", {}).get(metric)


def timed_out(results, workload, client):
    e = entry(results, workload, client)
    return e.get("timeout") if e else None


def floor_of(section, workload, metric):
    f = section["floors"].get(workload)
    return f if f and FLOOR_METRIC.get(workload, "s") == metric else None


def cell(section, workload, client, metric, docfs_value):
    results = section["results"]
    e = entry(results, workload, client)
    if e is None:
        return ""
    v = e.get("median", {}).get(metric)
    budget = e.get("timeout")
    if v is None:
        if not budget:
            return "failed" if e.get("errors") else "–"
        if metric != FLOOR_METRIC.get(workload, "s"):
            return "(stopped)"  # the run ended before what this row times, or after: unknown
        text = f"> {budget:.0f} s (stopped)"
        if client != "docfs" and docfs_value is not None:
            text += f" · **< {docfs_value / budget:.2f}**"
        return text
    docfs_budget = timed_out(results, workload, "docfs")
    if client != "docfs" and docfs_value is None and docfs_budget and metric == FLOOR_METRIC.get(workload, "s"):
        return f"{fmt(v, 's')} · **> {docfs_budget / v:.2f}**"
    text = fmt(v, "s")
    median = e["median"]
    if metric == FLOOR_METRIC.get(workload, "s") and "reqs" in median and client != "local disk":
        text += f" ({median['reqs']:.0f} req, {median.get('conns', 0):.0f} conn)"
    if client != "docfs" and docfs_value is not None and v:
        text += f" · **{docfs_value / v:.2f}**"
    if e.get("errors"):
        text += f" ({len(e['errors'])} failed)"
    return text


def section_table(section):
    sizes, results = section["sizes"], section["results"]
    clients = [c for c in CLIENT_ORDER if any(c in per for per in results.values())]
    lines = ["| workload | serial floor | " + " | ".join(CLIENT_TITLES[c] for c in clients) + " | docfs / floor |",
             "|---|---|" + "---|" * len(clients) + "---|"]
    for workload, metric, title in ROWS:
        if workload not in results or not any(entry(results, workload, c) for c in clients):
            continue
        if all(value(results, workload, c, metric) is None and not timed_out(results, workload, c) for c in clients):
            continue
        docfs_value = value(results, workload, "docfs", metric)
        floor = floor_of(section, workload, metric)
        floor_text = f"{fmt(floor['s'], 's')} ({floor['round_trips']:,} RT: {floor['what']})" if floor else ""
        ratio = f"{docfs_value / floor['s']:.2f}" if floor and docfs_value is not None else ""
        lines.append(f"| {title.format(**sizes)} | {floor_text} | "
                     + " | ".join(cell(section, workload, c, metric, docfs_value) for c in clients) + f" | {ratio} |")
    errors = [(w, c, err) for w, per in results.items() for c, e in per.items() for err in e.get("errors", [])
              if not err.startswith("TimeoutError")]  # shown in the table
    if errors:
        lines.append("")
        shown = {}
        for workload, client, error in errors:
            shown.setdefault((workload, client), [error, 0])[1] += 1
        for (workload, client), (error, count) in list(shown.items())[:12]:
            lines.append(f"- {workload} / {client}{f' ({count} runs)' if count > 1 else ''}: `{' '.join(error.split())}`")
    return lines


def requests_table(section):
    """Per workload and client: the requests by kind, the new connections, and how long the client
    waited for answers (at least one request out) against its time, with how many were out."""
    results, delay = section["results"], section["delay_ms"] / 1000
    clients = [c for c in CLIENT_ORDER if c not in ("curl", "local disk") and any(c in per for per in results.values())]
    lines = ["| workload | " + " | ".join(CLIENT_TITLES[c] for c in clients) + " |", "|---|" + "---|" * len(clients)]
    for workload in dict.fromkeys(w for w, _, _ in ROWS):
        if workload not in results:
            continue
        cells = []
        for c in clients:
            e = entry(results, workload, c)
            median = (e or {}).get("median", {})
            if not e or "reqs" not in median:
                cells.append("")
                continue
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(e.get("methods", {}).items(), key=lambda kv: -kv[1]))
            seconds = median.get(FLOOR_METRIC.get(workload, "s"))
            wait = ""
            if "wait_s" in median and seconds:
                delays = round(median['wait_s'] / delay)
                wait = (f"; waiting {fmt(median['wait_s'], 's')} ({delays} delay{'' if delays == 1 else 's'}) of "
                        f"{fmt(seconds, 's')}, {median['in_flight']:.1f} in flight")
            cells.append(f"{kinds or 'none'}; {median.get('conns', 0):.0f} conn{wait}")
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return lines


def targets(data):
    """Rows of (target, {section key: text}) for issue 34's targets."""
    sections = data["sections"]
    out = []

    def ahead(section):
        results, behind, compared = section["results"], [], 0
        for workload, metric, _ in ROWS:
            mine = value(results, workload, "docfs", metric)
            if mine is None:
                stopped = timed_out(results, workload, "docfs")
                if stopped and metric == FLOOR_METRIC.get(workload, "s"):
                    faster = [p for p in PEERS if (value(results, workload, p, metric) or stopped) < stopped]
                    if faster:
                        compared += 1
                        behind.append(f"{workload} (docfs stopped after {stopped:.0f} s, {faster[0]} was not)")
                continue
            peers = [(p, value(results, workload, p, metric)) for p in PEERS if entry(results, workload, p)]
            known = [(p, v) for p, v in peers if v is not None]
            if not peers:
                continue
            compared += 1
            best = min(known, key=lambda pv: pv[1]) if known else None
            if best and mine >= best[1]:
                behind.append(f"{workload}{'' if metric == 's' else ' ' + metric} ({mine / best[1]:.2f}x {best[0]})")
        if not compared:
            return None
        return "met" if not behind else f"NOT met: behind on {', '.join(behind)}"

    def against_floor(workload, factor, only_delay=None):
        def compute(section):
            if only_delay is not None and section["delay_ms"] != only_delay:
                return None
            metric = FLOOR_METRIC.get(workload, "s")
            mine, floor = value(section["results"], workload, "docfs", metric), section["floors"].get(workload)
            stopped = timed_out(section["results"], workload, "docfs")
            if mine is None and stopped and floor:
                return f"NOT met: > {stopped / floor['s']:.2f}x (stopped)"
            if mine is None or not floor:
                return None
            ratio = mine / floor["s"]
            return f"{'met' if ratio <= factor else 'NOT met'}: {ratio:.2f}x"
        return compute

    def stat_vs_listing(section):
        results = section["results"]
        mine, listing = value(results, "stat5k-cold", "docfs", "s"), value(results, "stat5k-cold", "curl", "s")
        stopped = timed_out(results, "stat5k-cold", "docfs")
        if mine is None and stopped and listing:
            return f"NOT met: > {stopped / listing:.2f}x (stopped)"
        if mine is None or listing is None:
            return None
        ratio = mine / listing
        return f"{'met' if ratio <= 1.2 else 'NOT met'}: {ratio:.2f}x"

    for title, compute in [("docfs ahead of every peer on every workload", ahead),
                           ("`cat` of 200 small files at 20 ms <= 0.5x the serial floor", against_floor("cat200", 0.5, 20)),
                           ("`cp -r` of 1,000 small files, until the store has them, <= 0.25x the serial floor",
                            against_floor("cp1k", 0.25)),
                           ("cold `stat` of 5,000 <= 1.2x the transfer of its listing", stat_vs_listing)]:
        out.append((title, {key: got for key, section in sections.items() for got in [compute(section)] if got}))
    return out


def section_title(section):
    return f"{SERVER_TITLES.get(section['server'], section['server'])} at {section['delay_ms']:g} ms"


def markdown(data):
    sections = data["sections"]
    lines = ["# docfs latency record", "",
             "Written by `make bench-latency` (`Tests/bench/latency.py`); do not edit by hand. Raw runs and medians: "
             "[latency.json](latency.json). The loopback record is [RESULTS.md](RESULTS.md); how the two are made: "
             "[doc/performance.md](../../doc/performance.md#with-the-store-far-away).", "",
             "Every server runs on 127.0.0.1 behind `delay_proxy.py`: a TCP relay that delivers each byte half the "
             "delay late in each direction, so a request and its answer cost one delay, and a new connection one "
             "more (its handshake); bandwidth is not limited. Every run is cold (fresh mount, empty cache, "
             "`sync; echo 3 > /proc/sys/vm/drop_caches`).", "",
             "In each cell: the median, on the floor's row the requests and new connections that went through the "
             "proxy during the workload (`req`, `conn`), and in bold the ratio docfs/peer (below 1: docfs is "
             "faster). The **serial floor** is the round trips (RT) a client making one request at a time cannot "
             "avoid (a listing per folder entered below the root, a GET per file read, a PUT per file and a MKCOL "
             "per folder created; the root's listing and the connection can be had at mount time), times the "
             "delay; `docfs / floor` below 1 needs requests in parallel or ahead of time. `curl` is a serial client "
             "that knows the names: for `cat` 200 GETs on one connection, for `ls` and the cold `stat` one PROPFIND "
             "of many/ (on S3 its ListObjectsV2 pages, with boto3), for the first byte a ranged GET, for the write "
             "a PUT. Local disk is the WebDAV store's own directory, no mount and no delay: what the workload costs on "
             "this machine at all (process starts, `git`, `tar`, GIO). A run that took longer than the budget was "
             "stopped: `> N s (stopped)`.", ""]
    rows = targets(data)
    keys = list(sections)
    lines += ["## Targets (issue 34)", "",
              "| target | " + " | ".join(section_title(sections[k]) for k in keys) + " |",
              "|---|" + "---|" * len(keys)]
    for title, row in rows:
        lines.append(f"| {title} | " + " | ".join(row.get(k, "–") for k in keys) + " |")
    lines.append("")
    for key in keys:
        section = sections[key]
        s, v = section["sizes"], section["versions"]
        lines += [f"## {section_title(section)}", ""]
        if section.get("quick"):
            lines += ["**Quick mode: small sizes and one run; these figures only check the script.**", ""]
        lines += [f"- date: {section['date']} (the whole run {section.get('minutes', 0):.0f} min); "
                  f"median of {section['runs']} run{'s' if section['runs'] > 1 else ''}; budget {section['budget']:.0f} s a run",
                  "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
                  f"- machine: {section['machine']['nproc']} cores ({section['machine']['cpu']}), {section['machine']['memory']}, "
                  f"kernel {section['machine']['kernel']}", ""]
        lines += section_table(section)
        lines += ["", "Requests during the workload (median run), by kind (S3: `LIST` is a ListObjectsV2), new "
                  "connections, and the time the client waited for answers: from a request's arrival at the proxy "
                  "until the first byte of its answer reaches the client, counted once while several wait (in "
                  "delays: the round trips it waited for one after the other), against its time on that row; "
                  "`in flight`: the requests waiting at once, on average over that time (1.0: one at a time).", ""]
        lines += requests_table(section)
        lines.append("")
    return "\n".join(lines) + "\n"
