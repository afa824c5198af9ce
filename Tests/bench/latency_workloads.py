"""What the latency bench (latency.py) adds to the record's workloads: the things a person at a
distance from the store feels, their fixtures, and the serial floor of every workload.

Store (besides workloads.make_store's many/, tree/ and big.bin; no huge/):
  text/tNN/fNNN.c            source-like text files for `grep -r` (SIZES.grep_files in grep_dirs)
  photos/IMG_NNNN.png        small PNGs (noise, 160 x 120, 57 KiB) for GIO's list + info

Local fixtures (on local disk, outside every mount):
  copy/dNN/fNNNN             copy_files small files (100 B to 8 KiB) in copy_dirs folders (`cp -r`)
  tree.tar.gz                a source tree of tar_files text files in nested folders (`tar x`)
  repo/                      a git repository of git_files text files, packed (`git clone`)

New workloads (each on a fresh, cold mount; through the delay proxy):
  stat5k-cold  `stat` of the 5,000 names of many/ on a fresh mount, no listing first
  cp1k         `cp -r` of copy/ into the mount, until the store has every file (close_s: cp returns)
  tarx         `tar xzf` of the tarball into the mount, until the store has every file
  git          `git clone --no-hardlinks` of repo/ into the mount (s), `git status` in it
               (status_s), and until the store has the work tree (stored_s)
  grep         `grep -r` of a word over text/ (every file read)
  photos       `gio list -a '*'` of photos/, then `gio info -a '*'` of every photo (one process)

The serial floor of a workload is what a client that makes one request at a time cannot avoid:
one listing per folder it walks into (below the root: the root and a connection can be had at
mount time), one GET per file it reads, one PUT per file and one MKCOL per folder it creates
(none on S3), one round trip each, times the delay. `floor_round_trips` says how many.
"""
import dataclasses, math, os, random, shutil, struct, subprocess, tarfile, time, zlib

from procs import wait_until
from workloads import Sizes


@dataclasses.dataclass
class FarSizes(Sizes):
    big_mib: int = 256          # the record's 1 GiB streams at a rate the delay hardly changes
    write_mib: int = 64
    huge: int = 0
    copy_files: int = 1000
    copy_dirs: int = 20
    tar_files: int = 300
    git_files: int = 300
    grep_files: int = 500
    grep_dirs: int = 20
    photos: int = 200

    @classmethod
    def quick(cls):
        return cls(big_mib=16, many=500, tree_dirs=8, cat_files=40, write_mib=8, copy_files=100, copy_dirs=5,
                   tar_files=50, git_files=40, grep_files=50, grep_dirs=5, photos=20)


WORDS = ("buffer offset length window request answer folder listing upload stream catalog entry "
         "version header retry budget socket timer").split()


def source_text(rng, lines):
    return "".join(f"static int {rng.choice(WORDS)}_{rng.choice(WORDS)}_{i}(int {rng.choice(WORDS)}) "
                   f"{{ return {rng.choice(WORDS)} + {rng.randrange(1000)}; }}\n" for i in range(lines))


def png(width, height):
    """A valid PNG of noise (incompressible: its size is what a photo's thumbnail-less head costs)."""
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    raw = b"".join(b"\0" + os.urandom(width * 3) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


def make_far_store(store, sizes):
    """The store's extra folders: text/ for grep and photos/ for GIO."""
    rng = random.Random(34)
    for i in range(sizes.grep_files):
        folder = os.path.join(store, "text", f"t{i % sizes.grep_dirs:02}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i:03}.c"), "w") as out:
            out.write(source_text(rng, 40 + i % 60))
            if i % 10 == 0:
                out.write("/* needle */\n")
    os.makedirs(os.path.join(store, "photos"))
    for i in range(sizes.photos):
        with open(os.path.join(store, "photos", f"IMG_{i:04}.png"), "wb") as out:
            out.write(png(160, 120))


def make_fixtures(local, sizes):
    """The local sources the write workloads copy into the mount; returns their facts."""
    rng = random.Random(9)
    copy = os.path.join(local, "copy")
    for i in range(sizes.copy_files):
        folder = os.path.join(copy, f"d{i % sizes.copy_dirs:02}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i:04}"), "wb") as out:
            out.write(os.urandom(100 + (i * 53) % 8000))
    tree = os.path.join(local, "tar-src", "src-tree")
    for i in range(sizes.tar_files):
        folder = os.path.join(tree, f"mod{i % 10}", f"sub{i % 3}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"file{i:03}.c"), "w") as out:
            out.write(source_text(rng, 20 + i % 80))
    tarball = os.path.join(local, "tree.tar.gz")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(tree, arcname="src-tree")
    repo = os.path.join(local, "repo")
    for i in range(sizes.git_files):
        folder = os.path.join(repo, "src", f"pkg{i % 12}") if i % 5 else os.path.join(repo, "docs")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"m{i:03}.txt"), "w") as out:
            out.write(source_text(rng, 10 + i % 50))
    git = ["git", "-C", repo, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(git[:3] + ["init", "-q", "-b", "main"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "a small repository"], check=True)
    subprocess.run(git + ["repack", "-a", "-d", "-q"], check=True)
    subprocess.run(git + ["prune"], check=True)
    # What a clone writes: cloned once on local disk, counted.
    reference = os.path.join(local, "repo-clone")
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", repo, reference], check=True)
    facts = {"copy": tree_facts(copy), "tar": tree_facts(tree), "clone": tree_facts(reference),
             "worktree": {p: s for p, s in tree_files(reference).items() if not p.startswith(".git/")}}
    shutil.rmtree(reference)
    return {"copy": copy, "tarball": tarball, "repo": repo, "facts": facts}


def tree_files(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = os.path.getsize(path)
    return out


def tree_facts(root):
    files = tree_files(root)
    folders = sum(len(d) for _, d, _ in os.walk(root)) + 1  # the tree's own top folder too
    return {"files": len(files), "folders": folders, "sizes": files}


# --- the serial floor ------------------------------------------------------------------------

def listings(entries, s3):
    """Requests to list one folder of `entries` entries: one PROPFIND, or ListObjectsV2 pages."""
    return max(1, math.ceil(entries / 1000)) if s3 else 1


def floor_round_trips(workload, sizes, facts, s3):
    """(round trips, what they are) a one-request-at-a-time client cannot avoid; None: no floor."""
    per_dir = sizes.cat_files // sizes.tree_dirs
    many = listings(sizes.many, s3)
    tree_folders = 1 + sizes.tree_dirs * 3                     # tree/, dNN/, dNN/s0, dNN/s1
    mk = 0 if s3 else 1
    if workload in ("ls5k", "stat5k-cold"):
        return many, f"{many} listing{'s' if many > 1 else ''} of many/"
    if workload == "find":
        return tree_folders, f"{tree_folders} listings"
    if workload in ("ttfb", "seqread"):
        return 1, "1 GET"
    if workload == "cat200":
        n = 1 + sizes.tree_dirs
        return n + sizes.tree_dirs * per_dir, f"{n} listings + {sizes.tree_dirs * per_dir} GETs"
    if workload == "write":
        return 1, "1 PUT"
    if workload in ("cp1k", "tarx", "git"):
        f = facts[{"cp1k": "copy", "tarx": "tar", "git": "clone"}[workload]]
        made = (f["folders"] + (workload == "tarx")) * mk          # tar's destination folder too
        return made + f["files"], f"{f['files']} PUTs" + (f" + {made} MKCOLs" if made else "")
    if workload == "grep":
        n = 1 + sizes.grep_dirs
        return n + sizes.grep_files, f"{n} listings + {sizes.grep_files} GETs"
    if workload == "photos":
        return 1, "1 listing"
    return None


# --- the workloads ---------------------------------------------------------------------------

def run(command, ctx, **kwargs):
    """A command with the run's time budget (a TimeoutExpired is reported as a timeout); when it
    fails, the error says what it wrote on stderr."""
    got = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=ctx.budget, **kwargs)
    if got.returncode != 0:
        words = [w for w in command if not w.startswith("-") and "=" not in w][:2]
        raise RuntimeError(f"{' '.join(os.path.basename(w) for w in words)} exited {got.returncode}: "
                           f"{got.stderr.decode(errors='replace').strip()[-200:]}")
    return got


def wait_stored(ctx, folder, expected, start):
    """Seconds from `start` until the store has every file of `expected` ({relpath: size}) under folder."""
    wait_until(lambda: stored_matches(ctx.store_files(folder), expected), ctx.budget,
               f"the store to have {len(expected)} files under {folder}", interval=0.05)
    return time.monotonic() - start


def stored_matches(have, expected):
    return len(have) >= len(expected) and all(have.get(path) == size for path, size in expected.items())


def unique(ctx, client, what):
    name = f"{what}-{client.label}-{time.monotonic_ns()}"
    ctx.written.append(name)
    return name


def stat_cold(client, mnt, ctx):
    """stat of every name of many/ on a fresh mount: no listing first, each name looked up."""
    folder = os.path.join(mnt, "many")
    names = [f"f{i:05}.txt" for i in range(ctx.sizes.many)]
    start = time.monotonic()
    for name in names:
        os.stat(os.path.join(folder, name))
        if time.monotonic() - start > ctx.budget:
            raise TimeoutError(f"stat of {ctx.sizes.many} names took over {ctx.budget:.0f} s")
    return {"s": time.monotonic() - start}


def copy_tree(client, mnt, ctx):
    name = unique(ctx, client, "cp")
    start = time.monotonic()
    run(["cp", "-r", ctx.fixtures["copy"], os.path.join(mnt, name)], ctx)
    closed = time.monotonic() - start
    return {"s": wait_stored(ctx, name, ctx.fixtures["facts"]["copy"]["sizes"], start), "close_s": closed}


def untar(client, mnt, ctx):
    name = unique(ctx, client, "tar")
    start = time.monotonic()
    os.mkdir(os.path.join(mnt, name))
    # --no-same-owner: as a user extracts (root would chown every file, which s3fs refuses).
    run(["tar", "xzf", ctx.fixtures["tarball"], "--no-same-owner", "-C", os.path.join(mnt, name)], ctx)
    closed = time.monotonic() - start
    expected = {f"src-tree/{p}": s for p, s in ctx.fixtures["facts"]["tar"]["sizes"].items()}
    return {"s": wait_stored(ctx, name, expected, start), "close_s": closed}


GIT = ["git", "-c", "safe.directory=*", "-c", "advice.detachedHead=false"]


def git_clone_status(client, mnt, ctx):
    name = unique(ctx, client, "git")
    target = os.path.join(mnt, name)
    start = time.monotonic()
    run(GIT + ["clone", "-q", "--no-hardlinks", ctx.fixtures["repo"], target], ctx)
    cloned = time.monotonic() - start
    status_start = time.monotonic()
    got = subprocess.run(GIT + ["-C", target, "status", "--porcelain"], capture_output=True, text=True, timeout=ctx.budget)
    if got.returncode != 0:
        raise RuntimeError(f"git status exited {got.returncode}: {got.stderr.strip()[-200:]}")
    out = got.stdout
    status = time.monotonic() - status_start
    result = {"s": cloned, "status_s": status}
    if out.strip():
        result["status_dirty"] = len(out.splitlines())  # a checkout git finds changed: worth a look
    result["stored_s"] = wait_stored(ctx, name, ctx.fixtures["facts"]["worktree"], start)
    return result


def grep_tree(client, mnt, ctx):
    start = time.monotonic()
    got = subprocess.run(["grep", "-r", "-l", "needle", os.path.join(mnt, "text")], capture_output=True, text=True,
                         timeout=ctx.budget)
    seconds = time.monotonic() - start
    found, wanted = len(got.stdout.splitlines()), math.ceil(ctx.sizes.grep_files / 10)
    if got.returncode not in (0, 1) or found != wanted:
        raise RuntimeError(f"grep found {found} files of {wanted} (exit {got.returncode}): {got.stderr[:200]}")
    return {"s": seconds}


def gio_photos(client, mnt, ctx):
    """What a file manager asks of a folder of photos as it opens it: the listing with every
    attribute, then every attribute of each photo (GIO's local backend, as Nautilus uses it)."""
    folder = os.path.join(mnt, "photos")
    env = dict(os.environ, GIO_USE_VFS="local", GIO_USE_VOLUME_MONITOR="unix")
    start = time.monotonic()
    run(["gio", "list", "-a", "*", folder], ctx, env=env)
    listed = time.monotonic() - start
    names = sorted(os.listdir(folder))
    run(["gio", "info", "-a", "*"] + [os.path.join(folder, n) for n in names], ctx, env=env)
    return {"s": time.monotonic() - start, "list_s": listed}


FAR_WORKLOADS = {
    "stat5k-cold": stat_cold,
    "cp1k": copy_tree,
    "tarx": untar,
    "git": git_clone_status,
    "grep": grep_tree,
    "photos": gio_photos,
}
