#!/usr/bin/env python3
"""docfs against rclone mount, on the same WebDAV server, in the same run.

Both clients mount `docfs serve` over one store directory on 127.0.0.1. Each scenario runs
on a fresh mount (cold caches) several times; we print medians and the docfs/rclone ratio
(< 1 means docfs is faster). Absolute times on shared machines vary; ratios are the figure.

Scenarios:
  list     `ls -lR` of a tree of 1,000+ entries (placeholders only: no content fetched)
  read     first `cat` of a large file to /dev/null (download + read)
  first-byte  `head -c 1` of the large file on a fresh mount (time to first byte)
  ls-many  `ls -l` of a folder of 5,000 files on a fresh mount (its first listing)
  stat     `stat` of each of those 5,000 names once the folder is listed, with the kernel's
           cached names dropped first (every stat is a lookup)
  seek     one 4 KiB read in the middle of the large file on a fresh mount
  write    write a large file through the mount and wait until the server has all of it
  tree     `cp -r` of many small files into the mount, then wait until the server has them
Also reports the docfs daemon's peak memory (VmHWM) during the read scenario, and, as the
limit any client can reach, `curl` against the same server: a 1-byte ranged GET for
first-byte and seek, a whole GET for read.

rclone runs with --vfs-cache-mode writes (reads stream, writes are cached then uploaded:
the mode rclone recommends for editing files) with --vfs-write-back 0s (upload at close, as docfs;
rclone waits 5 s by default), and the same 30 s directory cache.
"""
import argparse, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Server:
    def __init__(self, docfs, store):
        self.port = free_port()
        self.proc = subprocess.Popen([docfs, "serve", store, "--port", str(self.port), "--no-previews"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "serving" not in line:
            raise RuntimeError(f"docfs serve did not start: {line!r}")
        self.url = f"http://127.0.0.1:{self.port}/"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)


class DocfsMount:
    name = "docfs"

    def __init__(self, docfs, url, work):
        self.docfs, self.url, self.work = docfs, url, work

    def __enter__(self):
        self.mnt = tempfile.mkdtemp(dir=self.work, prefix="docfs-mnt-")
        self.env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(dir=self.work), XDG_CACHE_HOME=tempfile.mkdtemp(dir=self.work))
        subprocess.run([self.docfs, "mount", self.url, self.mnt], env=self.env, check=True)
        return self.mnt

    def pid(self):
        out = subprocess.run(["pgrep", "-f", f"docfs mount .* {self.mnt} "], capture_output=True, text=True).stdout.split()
        out += subprocess.run(["pgrep", "-f", f"{self.mnt} --daemon-child"], capture_output=True, text=True).stdout.split()
        return int(out[0]) if out else None

    def __exit__(self, *exc):
        subprocess.run([self.docfs, "unmount", self.mnt], env=self.env, capture_output=True, timeout=300)
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt])


class RcloneMount:
    name = "rclone"

    def __init__(self, url, work):
        self.url, self.work = url, work

    def __enter__(self):
        self.mnt = tempfile.mkdtemp(dir=self.work, prefix="rclone-mnt-")
        cache = tempfile.mkdtemp(dir=self.work)
        self.proc = subprocess.Popen(["rclone", "mount", ":webdav:", self.mnt, "--webdav-url", self.url,
                                      "--vfs-cache-mode", "writes", "--vfs-write-back", "0s", "--dir-cache-time", "30s", "--cache-dir", cache,
                                      "--config", "/dev/null"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 30, "rclone mount")
        return self.mnt

    def pid(self):
        return self.proc.pid

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt])


MANY = [f"f{i:05}.txt" for i in range(5000)]


def make_store(store, big_mib, tree_dirs, tree_files):
    os.makedirs(store, exist_ok=True)
    os.makedirs(os.path.join(store, "many"), exist_ok=True)
    for name in MANY:
        with open(os.path.join(store, "many", name), "wb") as out:
            out.write(name.encode())
    for d in range(tree_dirs):
        dd = os.path.join(store, "tree", f"dir{d:03}")
        os.makedirs(dd, exist_ok=True)
        for f in range(tree_files):
            with open(os.path.join(dd, f"file{f:03}.txt"), "wb") as out:
                out.write(os.urandom(512 + (f * 37) % 4096))
    with open(os.path.join(store, "big.bin"), "wb") as out:
        for _ in range(big_mib):
            out.write(os.urandom(1 << 20))


def make_source_tree(path, count):
    for i in range(count):
        d = os.path.join(path, f"d{i // 50:02}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:04}"), "wb") as out:
            out.write(os.urandom(100 + (i * 53) % 8000))


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def stat_many(root):
    """Seconds to stat every name of root/many once it is listed, the kernel's names dropped."""
    subprocess.run(["ls", os.path.join(root, "many")], stdout=subprocess.DEVNULL, check=True)
    subprocess.run(["sh", "-c", "echo 2 > /proc/sys/vm/drop_caches"], stderr=subprocess.DEVNULL)
    start = time.monotonic()
    for name in MANY:
        os.stat(os.path.join(root, "many", name))
    return time.monotonic() - start


def curl_time(url, byte_range):
    """Seconds for curl to GET `url` (only `byte_range`, e.g. "0-0", when given) to /dev/null."""
    command = ["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}"]
    if byte_range:
        command += ["-r", byte_range]
    out = subprocess.run(command + [url], capture_output=True, text=True, check=True).stdout
    return float(out.strip().replace(",", "."))


def peak_memory_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None


def run(args):
    work = tempfile.mkdtemp(prefix="docfs-bench-")
    store = os.path.join(work, "store")
    make_store(store, args.big_mib, args.tree_dirs, args.tree_files)
    source = os.path.join(work, "source")
    make_source_tree(source, args.small_files)
    server = Server(args.docfs, store)
    results = {}
    memory = {}
    try:
        clients = [lambda: DocfsMount(args.docfs, server.url, work), lambda: RcloneMount(server.url, work)]
        for scenario in args.scenarios:
            for make in clients:
                times = []
                for run_index in range(args.runs):
                    client = make()
                    with client as mnt:
                        if scenario == "list":
                            start = time.monotonic()
                            subprocess.run(["ls", "-lR", mnt], stdout=subprocess.DEVNULL, check=True)
                            times.append(time.monotonic() - start)
                        elif scenario == "read":
                            start = time.monotonic()
                            subprocess.run(["cat", os.path.join(mnt, "big.bin")], stdout=subprocess.DEVNULL, check=True)
                            times.append(time.monotonic() - start)
                            pid = client.pid()
                            if pid:
                                memory.setdefault(client.name, []).append(peak_memory_kib(pid))
                        elif scenario == "ls-many":
                            start = time.monotonic()
                            subprocess.run(["ls", "-l", os.path.join(mnt, "many")], stdout=subprocess.DEVNULL, check=True)
                            times.append(time.monotonic() - start)
                        elif scenario == "stat":
                            times.append(stat_many(mnt))
                        elif scenario == "first-byte":
                            start = time.monotonic()
                            subprocess.run(["head", "-c", "1", os.path.join(mnt, "big.bin")], stdout=subprocess.DEVNULL, check=True)
                            times.append(time.monotonic() - start)
                        elif scenario == "seek":
                            start = time.monotonic()
                            fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
                            try:
                                os.pread(fd, 4096, (args.big_mib << 19) + 12345)
                            finally:
                                os.close(fd)
                            times.append(time.monotonic() - start)
                        elif scenario == "write":
                            name = f"written-{client.name}-{run_index}.bin"
                            size = args.big_mib << 20
                            start = time.monotonic()
                            subprocess.run(["dd", "if=/dev/zero", f"of={os.path.join(mnt, name)}", "bs=1M",
                                            f"count={args.big_mib}", "status=none"], check=True)
                            wait_until(lambda: file_size(os.path.join(store, name)) == size, 600, "upload")
                            times.append(time.monotonic() - start)
                            os.unlink(os.path.join(store, name))
                        elif scenario == "tree":
                            target = os.path.join(mnt, f"copy-{client.name}-{run_index}")
                            start = time.monotonic()
                            subprocess.run(["cp", "-r", source, target], check=True)
                            server_side = os.path.join(store, os.path.basename(target))
                            wait_until(lambda: sum(len(f) for _, _, f in os.walk(server_side)) == args.small_files, 600, "tree upload")
                            times.append(time.monotonic() - start)
                            shutil.rmtree(server_side)
                results[(scenario, client.name)] = times
                print(f"  {scenario:6} {client.name:7} runs: " + " ".join(f"{t:.3f}" for t in times), flush=True)
            if scenario in ("ls-many", "stat"):
                local = []
                for _ in range(args.runs):
                    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], stderr=subprocess.DEVNULL)
                    if scenario == "ls-many":
                        start = time.monotonic()
                        subprocess.run(["ls", "-l", os.path.join(store, "many")], stdout=subprocess.DEVNULL, check=True)
                        local.append(time.monotonic() - start)
                    else:
                        local.append(stat_many(store))
                results[(scenario, "local disk")] = local
                print(f"  {scenario:6} {'local':7} runs: " + " ".join(f"{t:.3f}" for t in local), flush=True)
            if scenario in ("read", "first-byte", "seek"):
                times = [curl_time(server.url + "big.bin", None if scenario == "read" else "0-0") for _ in range(args.runs)]
                results[(scenario, "curl")] = times
                print(f"  {scenario:6} {'curl':7} runs: " + " ".join(f"{t:.3f}" for t in times), flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'scenario':10} {'docfs (median s)':>18} {'rclone (median s)':>18} {'docfs/rclone':>13} {'curl (median s)':>16} {'docfs/curl':>11}")
    for scenario in args.scenarios:
        d = statistics.median(results[(scenario, "docfs")])
        r = statistics.median(results[(scenario, "rclone")])
        line = f"{scenario:10} {d:18.3f} {r:18.3f} {d / r:13.2f}"
        if (scenario, "curl") in results:
            c = statistics.median(results[(scenario, "curl")])
            line += f" {c:16.3f} {d / c:11.2f}"
        if (scenario, "local disk") in results:
            c = statistics.median(results[(scenario, "local disk")])
            line += f"   local disk {c:.3f} s, docfs/local {d / c:.2f}"
        print(line)
    if "read" in args.scenarios:
        size = args.big_mib
        for name in ("docfs", "rclone", "curl"):
            print(f"sequential read, {name}: {size / statistics.median(results[('read', name)]):.0f} MiB/s")
    for name, values in memory.items():
        values = [v for v in values if v]
        if values:
            print(f"peak memory during read, {name}: {statistics.median(values) / 1024:.0f} MiB (VmHWM, median)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docfs", default=os.environ.get("DOCFS_BIN", os.path.join(ROOT, ".build/release/docfs")))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--tree-dirs", type=int, default=20)
    parser.add_argument("--tree-files", type=int, default=50)
    parser.add_argument("--small-files", type=int, default=500)
    parser.add_argument("--scenarios", nargs="+", default=["list", "ls-many", "stat", "first-byte", "seek", "read", "write", "tree"])
    run(parser.parse_args())


if __name__ == "__main__":
    main()
