"""The store every server serves, and the workloads timed on it through a mount or with curl.

Store layout (sizes from `Sizes`; BENCH_QUICK=1 makes them small):
  big.bin                     a file of random bytes (1 GiB)
  many/f00000.txt ...         5,000 tiny files in one folder
  tree/dNN/fN.bin             200 files of 64 KiB in 40 folders (`cat`)
  tree/dNN/sN/fNN.txt         two subfolders of 10 tiny files in each (more for `find`)
  huge/hNNNNNN                100,000 empty files in one folder (WebDAV only by default)

A workload runs on a fresh mount after `sync; echo 3 > /proc/sys/vm/drop_caches` and returns
its figures as a dict: seconds ("s"), and where it means something "MiB/s", "rss_mib" (the
daemon's VmHWM) or "cache_left" (files in the client's cache once every handle is closed).
"""
import dataclasses, glob, os, subprocess, time

from procs import drop_caches, peak_rss_kib, wait_until


@dataclasses.dataclass
class Sizes:
    big_mib: int = 1024
    many: int = 5000
    tree_dirs: int = 40
    cat_files: int = 200
    cat_kib: int = 64
    write_mib: int = 256
    huge: int = 100_000

    @classmethod
    def quick(cls):
        return cls(big_mib=64, many=500, tree_dirs=8, cat_files=40, cat_kib=64, write_mib=16, huge=3000)


def make_store(store, sizes):
    os.makedirs(os.path.join(store, "many"))
    for i in range(sizes.many):
        with open(os.path.join(store, "many", f"f{i:05}.txt"), "wb") as out:
            out.write(b"%d\n" % i)
    per_dir = sizes.cat_files // sizes.tree_dirs
    for d in range(sizes.tree_dirs):
        folder = os.path.join(store, "tree", f"d{d:02}")
        for s in range(2):
            os.makedirs(os.path.join(folder, f"s{s}"))
            for f in range(10):
                with open(os.path.join(folder, f"s{s}", f"f{f:02}.txt"), "wb") as out:
                    out.write(b"x" * (100 + f))
        for f in range(per_dir):
            with open(os.path.join(folder, f"f{f}.bin"), "wb") as out:
                out.write(os.urandom(sizes.cat_kib << 10))
    os.makedirs(os.path.join(store, "huge"))
    for i in range(sizes.huge):
        open(os.path.join(store, "huge", f"h{i:06}"), "wb").close()
    with open(os.path.join(store, "big.bin"), "wb") as out:
        for _ in range(sizes.big_mib):
            out.write(os.urandom(1 << 20))


def cat_paths(root, sizes):
    per_dir = sizes.cat_files // sizes.tree_dirs
    return [os.path.join(root, "tree", f"d{d:02}", f"f{f}.bin") for d in range(sizes.tree_dirs) for f in range(per_dir)]


def timed(command, **kwargs):
    start = time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True, **kwargs)
    return time.monotonic() - start


# --- through a mount -----------------------------------------------------------------------------

def ls_many(client, mnt, ctx):
    return {"s": timed(["ls", "-l", os.path.join(mnt, "many")])}


def stat_many(client, mnt, ctx):
    """stat of every name of many/ once the folder is listed, the kernel's names dropped first."""
    folder = os.path.join(mnt, "many")
    names = os.listdir(folder)
    subprocess.run(["sh", "-c", "echo 2 > /proc/sys/vm/drop_caches"], stderr=subprocess.DEVNULL)
    start = time.monotonic()
    for name in names:
        os.stat(os.path.join(folder, name))
    return {"s": time.monotonic() - start}


def find_tree(client, mnt, ctx):
    return {"s": timed(["find", os.path.join(mnt, "tree")])}


def first_byte(client, mnt, ctx):
    """open, read of 1 byte and close, timed in this process: curl's `time_total`, the figure it
    is held against, counts no process start either (`head -c 1` spent ~10 ms starting, as much
    on local disk as on any mount, and hid the difference)."""
    start = time.monotonic()
    fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
    try:
        got = os.read(fd, 1)
    finally:
        os.close(fd)
    seconds = time.monotonic() - start
    if len(got) != 1:
        raise RuntimeError(f"first byte: read {len(got)} bytes")
    return {"s": seconds}


def after_close(client):
    """Files left in the client's cache once the last handle closed (eviction may lag a moment)."""
    left = client.cache_files()
    deadline = time.monotonic() + 2
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = client.cache_files()
    return left


def sequential_read(client, mnt, ctx):
    seconds = timed(["cat", os.path.join(mnt, "big.bin")])
    result = {"s": seconds, "MiB/s": ctx.sizes.big_mib / seconds}
    rss = peak_rss_kib(client.pid())
    if rss:
        result["rss_mib"] = rss / 1024
    left = after_close(client)
    if left is not None:
        result["cache_left"] = left
    return result


def cat_small(client, mnt, ctx):
    return {"s": timed(["cat"] + cat_paths(mnt, ctx.sizes))}


def write_big(client, mnt, ctx):
    """dd of the source file into the mount: until close returns, and until the server has it all."""
    name = f"written-{client.label}-{time.monotonic_ns()}.bin"
    ctx.written.append(name)
    size = ctx.sizes.write_mib << 20
    start = time.monotonic()
    subprocess.run(["dd", f"if={ctx.source}", f"of={os.path.join(mnt, name)}", "bs=1M", "status=none"], check=True)
    closed = time.monotonic() - start
    if client.label == "local disk":
        subprocess.run(["sync", "-f", os.path.join(mnt, name)], check=True)
    else:
        wait_until(lambda: ctx.server.has_size(name, size), 600, f"the server to have {name}")
    stored = time.monotonic() - start
    return {"s": stored, "close_s": closed}


MOUNT_WORKLOADS = {
    "ls5k": ls_many,
    "stat5k": stat_many,
    "find": find_tree,
    "ttfb": first_byte,
    "seqread": sequential_read,
    "cat200": cat_small,
    "write": write_big,
}


# --- curl: the limit any client of the same server can reach -------------------------------------

def curl(ctx, *args):
    """curl's own time_total (no process start), summed over the transfers of one command."""
    out = subprocess.run(["curl", "-s", "-f", "-o", "/dev/null", "-w", "%{time_total}\\n"] + ctx.server.curl_auth() + list(args),
                         capture_output=True, text=True, check=True).stdout
    return sum(float(v.replace(",", ".")) for v in out.split())


def curl_first_byte(ctx):
    return {"s": curl(ctx, "-r", "0-0", ctx.server.object_url("big.bin"))}


def curl_read(ctx):
    seconds = curl(ctx, ctx.server.object_url("big.bin"))
    return {"s": seconds, "MiB/s": ctx.sizes.big_mib / seconds}


def curl_cat(ctx):
    urls = [ctx.server.object_url(os.path.relpath(p, "/")) for p in cat_paths("/", ctx.sizes)]
    args = []
    for url in urls:
        args += ["-o", "/dev/null", url]
    start = time.monotonic()
    subprocess.run(["curl", "-s", "-f"] + ctx.server.curl_auth() + args, check=True)
    return {"s": time.monotonic() - start}


def curl_put(ctx):
    name = f"written-curl-{time.monotonic_ns()}.bin"
    ctx.written.append(name)
    seconds = curl(ctx, "-T", ctx.source, ctx.server.object_url(name))
    return {"s": seconds, "close_s": seconds}


def curl_propfind(ctx):
    if ctx.server.kind != "webdav":
        return None
    return {"s": curl(ctx, "-X", "PROPFIND", "-H", "Depth: 1", ctx.server.object_url("many/"))}


CURL_WORKLOADS = {
    "ls5k": curl_propfind,
    "ttfb": curl_first_byte,
    "seqread": curl_read,
    "cat200": curl_cat,
    "write": curl_put,
}
