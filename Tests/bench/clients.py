"""The clients the bench mounts: docfs and its peers, each a context manager that mounts on a fresh
mount point with fresh (empty) caches and unmounts again, also when the workload failed.

- `Docfs`: `docfs mount --foreground` (so the daemon's PID is ours to read VmHWM from); `state`
  reuses a state directory (its catalog) for a warm remount.
- `Rclone`: `rclone mount` with `--vfs-cache-mode full` or `off`, `--vfs-write-back 0s` (upload
  at close, as docfs does; rclone waits 5 s by default) and a 30 s directory cache.
- `Davfs2`: Debian's davfs2 (`mount -t davfs`), non-interactive: a per-mount config with
  `ask_auth 0` and an empty secrets file, `buf_size 1024` (KiB; the default 16 caps every
  read at 16 KiB), `delay_upload 0` (upload at close; the default waits 10 s), `use_locks 0`,
  and a fresh cache directory owned by root:davfs2 with mode 0775 (mount.davfs refuses others).
- `S3fs`: Debian's s3fs-fuse in the foreground, path-style, keys from a 0600 passwd file.
- `LocalDisk`: no mount; the WebDAV store's own directory, the floor every client is held to.
- `FuseFloor`: that directory through `fuse_floor.c`, the least a FUSE file system costs here
  (metadata only: `ls`, `stat`, `find`).

Every client has `pid()` (the daemon, for peak memory) and `cache_files()` (files left in its
cache directory, None when it has none to look at).
"""
import os, subprocess, tempfile, time

from procs import (track, untrack, remember_mount, forget_mount, is_mounted, force_unmount, wait_until)
from servers import ACCESS_KEY, SECRET_KEY, REGION


def count_files(root):
    return sum(len(files) for _, _, files in os.walk(root))


class Mount:
    label = "?"

    def __init__(self, server, work):
        self.server, self.work = server, work
        self.proc = None

    def __enter__(self):
        self.mnt = tempfile.mkdtemp(dir=self.work, prefix=f"{self.label}-mnt-")
        remember_mount(self.mnt)
        try:
            self.mount()
            wait_until(lambda: is_mounted(self.mnt), 60, f"{self.label} to mount")
        except BaseException:
            self.__exit__()
            raise
        return self.mnt

    def __exit__(self, *exc):
        try:
            self.unmount()
        finally:
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
                untrack(self.proc)
            force_unmount(self.mnt)
            forget_mount(self.mnt)
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass

    def unmount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, timeout=300)

    def pid(self):
        return self.proc.pid if self.proc else None

    def cache_files(self):
        return None


class Docfs(Mount):
    label = "docfs"

    def __init__(self, server, work, docfs, state=None, options=()):
        super().__init__(server, work)
        self.docfs, self.options = docfs, list(options)
        self.state = state or tempfile.mkdtemp(dir=work, prefix="docfs-state-")
        self.env = dict(os.environ, XDG_STATE_HOME=os.path.join(self.state, "state"),
                        XDG_CACHE_HOME=os.path.join(self.state, "cache"))
        for name in list(self.env):
            if name.startswith("AWS_"):
                del self.env[name]
        if server.kind == "s3":
            self.env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION,
                            AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")

    def mount(self):
        command = [self.docfs, "mount", self.server.url, self.mnt, "--foreground",
                   "--log-file", os.path.join(self.state, "docfs.log")] + self.options
        if self.server.kind == "s3":
            command += ["--endpoint", self.server.endpoint]
        self.proc = track(subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def unmount(self):
        subprocess.run([self.docfs, "unmount", self.mnt], env=self.env, capture_output=True, timeout=300)

    def catalog(self):
        root = os.path.join(self.state, "state", "docfs")
        found = [os.path.join(root, d, "catalog.sqlite") for d in os.listdir(root)] if os.path.isdir(root) else []
        found = [path for path in found if os.path.isfile(path)]  # the state dir also holds other things
        return found[0] if len(found) == 1 else None

    def cache_files(self):
        return count_files(os.path.join(self.state, "cache"))


class Rclone(Mount):
    def __init__(self, server, work, mode, cache=None):
        super().__init__(server, work)
        self.mode, self.cache = mode, cache
        self.label = f"rclone-{mode}"

    def mount(self):
        self.cache = self.cache or tempfile.mkdtemp(dir=self.work, prefix="rclone-cache-")
        env = dict(os.environ)
        env.pop("AWS_CA_BUNDLE", None)  # rclone 1.60's SDK cannot load one into its own transport
        if self.server.kind == "s3":
            remote = f":s3:{self.server.bucket}"
            env.update(RCLONE_S3_PROVIDER="Other", RCLONE_S3_ENDPOINT=self.server.endpoint, RCLONE_S3_REGION=REGION,
                       RCLONE_S3_ACCESS_KEY_ID=ACCESS_KEY, RCLONE_S3_SECRET_ACCESS_KEY=SECRET_KEY,
                       RCLONE_S3_FORCE_PATH_STYLE="true")
            extra = []
        else:
            remote, extra = ":webdav:", ["--webdav-url", self.server.url]
        self.proc = track(subprocess.Popen(["rclone", "mount", remote, self.mnt, "--vfs-cache-mode", self.mode,
                                            "--vfs-write-back", "0s", "--dir-cache-time", "30s",
                                            "--cache-dir", self.cache, "--config", "/dev/null"] + extra,
                                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def cache_files(self):
        return count_files(os.path.join(self.cache, "vfs")) if self.mode == "full" else None


DAVFS_CONF = """cache_dir {cache}
backup_dir lost+found
buf_size 1024
delay_upload 0
use_locks 0
ask_auth 0
secrets {secrets}
"""


class Davfs2(Mount):
    label = "davfs2"

    def mount(self):
        # mount.davfs (run as root) needs its cache directory as root:davfs2 0775, and every
        # directory above it searchable by the davfs2 user.
        base = os.path.join(self.work, "davfs2")
        os.makedirs(base, exist_ok=True)
        os.chmod(self.work, 0o755)
        os.chmod(base, 0o755)
        self.cache = tempfile.mkdtemp(dir=base, prefix="cache-")
        import grp
        os.chown(self.cache, 0, grp.getgrnam("davfs2").gr_gid)
        os.chmod(self.cache, 0o775)
        secrets = os.path.join(base, "secrets")
        if not os.path.exists(secrets):
            with open(secrets, "w"):
                pass
            os.chmod(secrets, 0o600)
        conf = os.path.join(base, os.path.basename(self.cache) + ".conf")
        with open(conf, "w") as f:
            f.write(DAVFS_CONF.format(cache=self.cache, secrets=secrets))
        subprocess.run(["mount", "-t", "davfs", self.server.url, self.mnt, "-o", f"conf={conf}"],
                       stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=60)

    def unmount(self):
        # umount.davfs waits until mount.davfs has uploaded what is pending and exited.
        subprocess.run(["umount", self.mnt], capture_output=True, timeout=300)

    def pid(self):
        out = subprocess.run(["pgrep", "-f", f"mount.davfs {self.server.url} {self.mnt} "], capture_output=True, text=True).stdout.split()
        return int(out[0]) if out else None

    def cache_files(self):
        return sum(1 for _, _, files in os.walk(self.cache) for name in files if name != "index")


class S3fs(Mount):
    label = "s3fs"

    def mount(self):
        state = tempfile.mkdtemp(dir=self.work, prefix="s3fs-")
        passwd = os.path.join(state, "passwd")
        with open(passwd, "w") as f:
            f.write(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        os.chmod(passwd, 0o600)
        self.proc = track(subprocess.Popen(["s3fs", self.server.bucket, self.mnt, "-f", "-o", f"url={self.server.endpoint}",
                                            "-o", "use_path_request_style", "-o", f"passwd_file={passwd}",
                                            "-o", f"endpoint={REGION}"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


class FuseFloor(Mount):
    """The store's directory through the minimal FUSE file system of fuse_floor.c (read-only,
    metadata only): what a round trip through /dev/fuse per name costs on this machine."""
    label = "fuse-floor"

    def __init__(self, server, work, binary, store):
        super().__init__(server, work)
        self.binary, self.store = binary, store

    def mount(self):
        self.proc = track(subprocess.Popen([self.binary, self.store, self.mnt],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def build_fuse_floor(work):
    """Compiles fuse_floor.c into `work`; None (and a warning) where it cannot be built."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuse_floor.c")
    binary = os.path.join(work, "fuse_floor")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if flags.returncode != 0:
        print("bench: warning: pkg-config finds no fuse3; the FUSE floor is left out", flush=True)
        return None
    built = subprocess.run(["cc", "-O2", "-o", binary, source] + flags.stdout.split() + ["-lpthread"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"bench: warning: fuse_floor.c does not build; the FUSE floor is left out:\n{built.stderr}", flush=True)
        return None
    return binary


class LocalDisk:
    """The store's own directory: no mount, no server; `write` lands where the server would."""
    label = "local disk"

    def __init__(self, store):
        self.store = store

    def __enter__(self):
        return self.store

    def __exit__(self, *exc):
        pass

    def pid(self):
        return None

    def cache_files(self):
        return None
