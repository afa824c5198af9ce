#!/usr/bin/env python3
"""docfs against rclone mount and s3fs, on the same S3 server (moto on 127.0.0.1), in one run.

Each scenario runs on a fresh mount with no local state (cold) several times; we print medians
and the ratio of docfs to each peer (< 1 means docfs is faster). moto is a slow, single-process
server: absolute times mean little, the ratios are the figure.

Scenarios:
  list   `ls -lR` of 1,000 small objects in 20 prefixes (most of them small enough to be links,
         so docfs asks about each once: the cost of finding s3fs-style symlinks), no content read
  read   first `cat` of a 64 MiB object to /dev/null

Clients:
  docfs              default: links found with one HEAD per small object, on the first listing
  docfs-no-symlinks  `--no-symlinks`: the listing alone
  rclone             `rclone mount` with --vfs-cache-mode writes (it HEADs each object for its
                     mtime on `ls -l`, as docfs does for links; --use-server-modtime would not)
  s3fs               Debian's s3fs-fuse (HEAD per object, like docfs's default)
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, is_mounted, wait_until  # noqa: E402

KEY, SECRET, REGION = "testing", "testing", "us-east-1"


class Moto:
    def __init__(self, bucket):
        out = subprocess.run(["bash", os.path.join(ROOT, "Tests/support/start-moto.sh"), bucket],
                             capture_output=True, text=True, check=True).stdout.split()
        self.port, self.pid = int(out[0]), int(out[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "Tests/support/start-moto.sh"), "stop", str(self.pid)])


def client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET, config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


def fill(s3, bucket, dirs, files, big_mib):
    from concurrent.futures import ThreadPoolExecutor
    items = [(f"tree/dir{d:03}/file{f:03}.txt", os.urandom(512 + (f * 97) % 4500)) for d in range(dirs) for f in range(files)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), items))
    s3.put_object(Bucket=bucket, Key="big.bin", Body=os.urandom(big_mib << 20))


class Mount:
    """A fresh mount point and fresh state; `command` mounts, `unmount` ends it."""
    def __init__(self, name, work):
        self.name, self.work = name, work

    def __enter__(self):
        self.mnt = tempfile.mkdtemp(dir=self.work, prefix=f"{self.name}-mnt-")
        self.state = tempfile.mkdtemp(dir=self.work, prefix=f"{self.name}-state-")
        self.proc = None
        self.mount()
        wait_until(lambda: is_mounted(self.mnt), 60, f"{self.name} to mount")
        return self.mnt

    def __exit__(self, *exc):
        self.unmount()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt])

    def unmount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)


class Docfs(Mount):
    def __init__(self, docfs, bucket, endpoint, work, options=()):
        super().__init__("docfs" + ("-no-symlinks" if options else ""), work)
        self.docfs, self.bucket, self.endpoint, self.options = docfs, bucket, endpoint, list(options)

    def mount(self):
        self.env = dict(os.environ, XDG_STATE_HOME=self.state + "/state", XDG_CACHE_HOME=self.state + "/cache",
                        AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
        subprocess.run([self.docfs, "mount", f"s3://{self.bucket}/", self.mnt, "--endpoint", self.endpoint] + self.options,
                       env=self.env, check=True)

    def unmount(self):
        subprocess.run([self.docfs, "unmount", self.mnt], env=self.env, capture_output=True, timeout=300)


class Rclone(Mount):
    def __init__(self, bucket, endpoint, work):
        super().__init__("rclone", work)
        self.bucket, self.endpoint = bucket, endpoint

    def mount(self):
        env = dict(os.environ, RCLONE_S3_PROVIDER="Other", RCLONE_S3_ENDPOINT=self.endpoint, RCLONE_S3_REGION=REGION,
                   RCLONE_S3_ACCESS_KEY_ID=KEY, RCLONE_S3_SECRET_ACCESS_KEY=SECRET, RCLONE_S3_FORCE_PATH_STYLE="true")
        env.pop("AWS_CA_BUNDLE", None)  # rclone 1.60's SDK cannot load one into its own transport, and fails
        self.proc = subprocess.Popen(["rclone", "mount", f":s3:{self.bucket}", self.mnt, "--vfs-cache-mode", "writes",
                                      "--vfs-write-back", "0s", "--dir-cache-time", "30s", "--cache-dir", self.state,
                                      "--config", "/dev/null"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class S3fs(Mount):
    def __init__(self, bucket, endpoint, work):
        super().__init__("s3fs", work)
        self.bucket, self.endpoint = bucket, endpoint

    def mount(self):
        passwd = os.path.join(self.state, "passwd")
        with open(passwd, "w") as f:
            f.write(f"{KEY}:{SECRET}\n")
        os.chmod(passwd, 0o600)
        self.proc = subprocess.Popen(["s3fs", self.bucket, self.mnt, "-f", "-o", f"url={self.endpoint}", "-o", "use_path_request_style",
                                      "-o", f"passwd_file={passwd}", "-o", f"endpoint={REGION}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(args):
    work = tempfile.mkdtemp(prefix="docfs-bench-s3-")
    bucket = "bench"
    moto = Moto(bucket)
    results = {}
    try:
        fill(client(moto.endpoint), bucket, args.dirs, args.files, args.big_mib)
        makers = {
            "docfs": lambda: Docfs(args.docfs, bucket, moto.endpoint, work),
            "docfs-no-symlinks": lambda: Docfs(args.docfs, bucket, moto.endpoint, work, ["--no-symlinks"]),
            "rclone": lambda: Rclone(bucket, moto.endpoint, work),
            "s3fs": lambda: S3fs(bucket, moto.endpoint, work),
        }
        for scenario in args.scenarios:
            for name in args.clients:
                times = []
                for _ in range(args.runs):
                    with makers[name]() as mnt:
                        command = ["ls", "-lR", mnt] if scenario == "list" else ["cat", os.path.join(mnt, "big.bin")]
                        start = time.monotonic()
                        subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
                        times.append(time.monotonic() - start)
                results[(scenario, name)] = times
                print(f"  {scenario:5} {name:18} runs: " + " ".join(f"{t:.3f}" for t in times), flush=True)
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)

    print()
    peers = [c for c in args.clients if not c.startswith("docfs")]
    print(f"{'scenario':9} {'client':18} {'median s':>9} " + " ".join(f"{'vs ' + p:>10}" for p in peers))
    for scenario in args.scenarios:
        for name in args.clients:
            median = statistics.median(results[(scenario, name)])
            ratios = " ".join(f"{median / statistics.median(results[(scenario, p)]):10.2f}" for p in peers)
            print(f"{scenario:9} {name:18} {median:9.3f} {ratios}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docfs", default=os.environ.get("DOCFS_BIN", os.path.join(ROOT, ".build/release/docfs")))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dirs", type=int, default=20)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--big-mib", type=int, default=64)
    parser.add_argument("--scenarios", nargs="+", default=["list", "read"])
    parser.add_argument("--clients", nargs="+", default=["docfs", "docfs-no-symlinks", "rclone", "s3fs"])
    run(parser.parse_args())


if __name__ == "__main__":
    main()
