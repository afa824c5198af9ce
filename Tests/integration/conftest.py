"""Fixtures for docfs's integration tests: real mounts through /dev/fuse against real servers.

- `docfs` binary: $DOCFS_BIN, default .build/debug/docfs.
- `xdg`: per-test XDG_STATE_HOME / XDG_CACHE_HOME, so the catalog and the cache dir can be inspected.
- `docfs_serve(tree)`, `rclone_serve(tree)`, and `store_server(tree)` parametrized over both.
  Each server keeps a request log the tests read to count GETs.
- `mount(store, ...)`: mounts on a fresh temp mount point and ALWAYS unmounts at teardown
  (`docfs unmount`, then `fusermount3 -uz`, then kill the daemon), then asserts nothing is left
  in /proc/mounts.
- A per-test watchdog (DOCFS_TEST_TIMEOUT, default 300 s) aborts the FUSE connection of a hung
  mount, so a docfs bug fails a test instead of hanging CI.

Set DOCFS_NO_FUSE=1 on a machine without /dev/fuse: the mount tests are then skipped, loudly.
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from helpers import (Request, Tree, abort_fuse_connection, docfs_bin, downloads_under_way, free_port,
                     is_mounted, make_big_tree, make_content_tree, mount_entries, normalize_path,
                     pids_for, port_open, proc_mounts_lines, process_alive, regular_files_under,
                     summarize, wait_until)

TEST_TIMEOUT = float(os.environ.get("DOCFS_TEST_TIMEOUT", "300"))
NO_FUSE = os.environ.get("DOCFS_NO_FUSE", "") not in ("", "0")


# --- collection: the `fuse` marker, the loud skip ------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "fuse: the test mounts through /dev/fuse")
    # A private base temp dir per session: pytest's shared /tmp/pytest-of-USER/pytest-N dirs are
    # rotated (deleted) by *other* pytest sessions running at the same time, which would pull
    # the session-scoped store trees out from under us (and walk into live mounts).
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="docfs-integration-")
        config._docfs_private_basetemp = config.option.basetemp


def pytest_sessionfinish(session, exitstatus):
    base = getattr(session.config, "_docfs_private_basetemp", None)
    if not base:
        return
    with open("/proc/self/mountinfo") as f:
        live = [line.split()[4] for line in f if line.split()[4].startswith(base)]
    if live:
        sys.stderr.write(f"\nkeeping {base}: still mounted below it: {live}\n")
    elif exitstatus == 0:
        shutil.rmtree(base, ignore_errors=True)
    else:
        sys.stderr.write(f"\ntest files kept in {base}\n")


def pytest_collection_modifyitems(config, items):
    if not NO_FUSE:
        return
    skip = pytest.mark.skip(reason="DOCFS_NO_FUSE is set: this machine has no FUSE, mount tests skipped")
    for item in items:
        if "fuse" in item.keywords:
            item.add_marker(skip)


# Figures a test measured (one line each), shown at the end of the run even when it passes.
FIGURES = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter):
    if NO_FUSE:
        terminalreporter.write_sep("!", "DOCFS_NO_FUSE is set: every test that mounts was SKIPPED", red=True)
    figures = terminalreporter.config.stash.get(FIGURES, [])
    if figures:
        terminalreporter.write_sep("-", "figures measured")
        for line in figures:
            terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture(scope="session", autouse=True)
def _check_binary():
    binary = docfs_bin()
    if not os.access(binary, os.X_OK):
        pytest.exit(f"docfs binary not found at {binary}: run `swift build` or set DOCFS_BIN", returncode=2)
    if not NO_FUSE and not os.path.exists("/dev/fuse"):
        pytest.exit("/dev/fuse is missing: set DOCFS_NO_FUSE=1 to skip the mount tests explicitly",
                    returncode=2)


# --- running things with timeouts ----------------------------------------------------------

def run(cmd, timeout=60, env=None, check=False, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command with a timeout; output captured as text (undecodable bytes replaced)."""
    try:
        result = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env,
                                stdin=subprocess.DEVNULL, **kwargs)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"{cmd!r} did not finish within {timeout} s "
                             f"(stdout so far: {error.stdout!r}, stderr: {error.stderr!r})") from None
    result.stdout = result.stdout.decode(errors="replace") if isinstance(result.stdout, bytes) else result.stdout
    result.stderr = result.stderr.decode(errors="replace") if isinstance(result.stderr, bytes) else result.stderr
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd!r} exited {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}")
    return result


# --- per-test state dirs -------------------------------------------------------------------

class XDG:
    def __init__(self, base: Path):
        self.base = base
        self.state_home = base / "state"
        self.cache_home = base / "cache"
        self.state_home.mkdir(parents=True)
        self.cache_home.mkdir(parents=True)
        self.env = dict(os.environ, XDG_STATE_HOME=str(self.state_home), XDG_CACHE_HOME=str(self.cache_home))
        self.env.pop("DOCFS_USER", None)
        self.env.pop("DOCFS_PASSWORD", None)

    @property
    def cache_root(self) -> Path:
        return self.cache_home / "docfs"

    def another_machine(self, name: str) -> None:
        """From now on, new state and cache directories: a machine with no catalog of any store."""
        self.state_home = self.base / f"{name}-state"
        self.cache_home = self.base / f"{name}-cache"
        self.state_home.mkdir(parents=True)
        self.cache_home.mkdir(parents=True)
        self.env.update(XDG_STATE_HOME=str(self.state_home), XDG_CACHE_HOME=str(self.cache_home))

    def cache_files(self) -> list[str]:
        """Regular files in the cache dir's mount-key subdirectories: local copies."""
        files = []
        if self.cache_root.is_dir():
            for key in self.cache_root.iterdir():
                if key.is_dir():
                    files += regular_files_under(key)
        return files

    def docfs(self, *args, timeout=60) -> subprocess.CompletedProcess:
        return run([docfs_bin(), *map(str, args)], timeout=timeout, env=self.env)


@pytest.fixture
def xdg(tmp_path) -> XDG:
    return XDG(tmp_path / "xdg")


# --- servers -------------------------------------------------------------------------------

class Server:
    kind = "?"

    def __init__(self, root: Path, workdir: Path):
        self.root = root
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.port = 0
        self.log_path = workdir / "requests.log"
        self.out_path = workdir / "stdout.log"
        self.err_path = workdir / "stderr.log"

    def requests(self) -> list[Request]:
        """What docfs asked, less its one probe per mount of how the server takes `If-Match` on
        PUT (a PUT and a DELETE of `.docfs-probe-…`): housekeeping no test counts."""
        return [r for r in self.logged() if "/.docfs-probe-" not in r.path]

    def logged(self) -> list[Request]:
        """Every request the server logged."""
        raise NotImplementedError

    def log_lines(self) -> list[str]:
        """The lines of the server's request log so far (none before its first request)."""
        return self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []

    def gets(self, rel: str | None = None) -> list[Request]:
        want = None if rel is None else normalize_path("/" + rel, decode=False)
        return [r for r in self.requests() if r.method == "GET" and (want is None or r.path == want)]

    def wait_for_gets(self, rel: str, count: int, mount: "Mount", timeout: float = 20) -> list[Request]:
        """Waits until `count` GETs of rel are logged, then until `mount` has no download under
        way (so a GET more, a retry or a read-ahead, would be in the log by then: `docfs serve`
        and rclone log a request before its answer ends); returns the GETs of rel."""
        wait_until(lambda: len(self.gets(rel)) >= count, timeout,
                   lambda: f"{count} GET(s) of /{rel} in the {self.kind} log (have: {summarize(self.requests())})")
        mount.wait_downloads_done(timeout)
        return self.gets(rel)

    def _spawn(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "wb"), stderr=open(self.err_path, "wb"),
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_listening(self, what: str):
        """Waits until the spawned server accepts connections on self.port; stops it and fails if it exits."""
        def listening():
            if not self.alive():
                raise AssertionError(f"{what} exited {self.proc.returncode}\n{self.diagnostics()}")
            return port_open(self.port)

        try:
            wait_until(listening, 30, f"{what} to listen on {self.url}")
        except AssertionError as error:
            self.stop()
            raise AssertionError(f"{error}\n{self.diagnostics()}") from None
        return self

    def diagnostics(self) -> str:
        out = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        err = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        return f"{self.kind} server stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"

    def stop(self):
        """Stops the server by its PID (SIGTERM, then SIGKILL)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


class DocfsServer(Server):
    """`docfs serve DIR --port 0 --request-log FILE`; the URL is parsed from its first stdout line."""
    kind = "docfs-serve"
    LINE = re.compile(r"docfs serve: serving .* at (https?://\S+)")

    #: Whether it makes previews of images and videos (`has-preview`): off, so that a mount
    #: fetches no preview a test does not count on (a preview GET's logged path is the file's,
    #: with `?preview=1`); test_thumbnails.py turns them on, kept in the server's workdir.
    previews = False

    def start(self):
        previews = ["--preview-cache", str(self.workdir / "previews")] if self.previews else ["--no-previews"]
        self._spawn([docfs_bin(), "serve", str(self.root), "--port", "0", "--host", "127.0.0.1",
                     "--request-log", str(self.log_path), *previews])

        def listening():
            if not self.alive():
                raise AssertionError(f"docfs serve exited {self.proc.returncode}\n{self.diagnostics()}")
            m = self.LINE.search(self.out_path.read_text(errors="replace"))
            return m.group(1) if m else None

        try:
            self.url = wait_until(listening, 30, "docfs serve's 'serving ... at URL' line on stdout")
        except AssertionError as error:
            self.stop()
            raise AssertionError(f"{error}\n{self.diagnostics()}") from None
        if not self.url.endswith("/"):
            self.url += "/"
        self.port = int(re.search(r":(\d+)/", self.url).group(1))
        return self

    def logged(self) -> list[Request]:
        out = []
        for line in self.log_lines():
            fields = line.split("\t")
            if len(fields) < 5:
                continue
            method, path, status, sent, rng = fields[:5]
            out.append(Request(method, normalize_path(path, decode=True),
                               int(status) if status.isdigit() else None, None if rng == "-" else rng,
                               int(sent) if sent.isdigit() else None))
        return out


class RcloneServer(Server):
    """`rclone serve webdav DIR --addr 127.0.0.1:PORT -v --log-file FILE`.

    rclone 1.60 logs one INFO line per HTTP request once it is handled, e.g.
        2026/11/22 05:41:28 INFO  : /sub/b c.txt: GET from 127.0.0.1:53756
    with the path decoded and the method exact (GET and HEAD are distinct), which is all we
    need to count content GETs — so no counting proxy is needed. It does not log the status.
    """
    kind = "rclone"
    LINE = re.compile(r"^\S+ \S+ INFO\s+: (.*): ([A-Z]+) from (\S+)\s*$")

    def start(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self._spawn(["rclone", "serve", "webdav", str(self.root), "--addr", f"127.0.0.1:{self.port}",
                     "-v", "--log-file", str(self.log_path), "--config", str(self.workdir / "rclone.conf")])
        return self._wait_listening("rclone serve webdav")

    def logged(self) -> list[Request]:
        out = []
        for line in self.log_lines():
            m = self.LINE.match(line)
            if m:
                out.append(Request(m.group(2), normalize_path(m.group(1), decode=False), None, None))
        return out

    def diagnostics(self) -> str:
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return super().diagnostics() + f"\nlog:\n{log[-3000:]}"


class WsgidavServer(Server):
    """WsgiDAV (`pip install wsgidav cheroot`), a third-party WebDAV server that can keep dead
    properties: with `keep_properties` it runs its in-memory property manager, without it it
    refuses every PROPPATCH property with 403, as rclone does.

    With `verbose: 3` it logs one line per request once answered, e.g.
        13:06:23.085 - INFO    : 127.0.0.1 - (anonymous) - [2026-11-23 13:06:23] "PROPPATCH /a.txt" length=153, depth=0, elap=0.001sec -> 207 Multi-Status
    """
    kind = "wsgidav"
    LINE = re.compile(r'"([A-Z]+) (/.*?)" .*-> (\d+)')
    keep_properties = True

    def start(self):
        import json
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        config = {
            "host": "127.0.0.1", "port": self.port, "server": "cheroot", "verbose": 3,
            "provider_mapping": {"/": str(self.root)},
            "property_manager": True if self.keep_properties else None,
            "http_authenticator": {"domain_controller": None, "accept_basic": True, "accept_digest": False,
                                   "default_to_digest": False},
            "simple_dc": {"user_mapping": {"*": True}},
        }
        (self.workdir / "wsgidav.json").write_text(json.dumps(config))
        self._spawn(["wsgidav", "-c", str(self.workdir / "wsgidav.json")])
        return self._wait_listening("wsgidav")

    def logged(self) -> list[Request]:
        out = []
        for path in (self.out_path, self.err_path):
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    m = self.LINE.search(line)
                    if m:
                        out.append(Request(m.group(1), normalize_path(m.group(2), decode=True), int(m.group(3)), None))
        return out


class WsgidavServerWithoutProperties(WsgidavServer):
    kind = "wsgidav-without-properties"
    keep_properties = False


class ConfiguredServer(Server):
    """A third-party server run in the foreground from a configuration file of the test's own
    (`CONF`, formatted with workdir, port, root and log) on a free port, never the system's
    service, whose request log has one `METHOD<TAB>PATH<TAB>STATUS` line per request."""
    program = ""          # the server's executable; the test skips when it is not installed
    conf_name = "server.conf"
    run_as: str | None = None   # the user its workers run as, who is given the tree
    paths_encoded = True  # the log's paths are as sent (percent-encoded), not decoded
    CONF = ""

    def command(self, conf: Path) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """What the server needs besides its configuration."""

    def start(self):
        if not Path(self.program).exists():
            pytest.skip(f"{self.program} is not installed (Tests/support/setup.sh installs it)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.prepare()
        if self.run_as:
            _give_to(self.run_as, self.root, self.workdir)
        conf = self.workdir / self.conf_name
        conf.write_text(self.CONF.format(workdir=self.workdir, port=self.port, root=self.root, log=self.log_path))
        self._spawn(self.command(conf))
        return self._wait_listening(self.kind)

    def logged(self) -> list[Request]:
        out = []
        for line in self.log_lines():
            fields = line.split("\t")
            if len(fields) == 3:
                out.append(Request(fields[0], normalize_path(fields[1], decode=self.paths_encoded),
                                   int(fields[2]) if fields[2].isdigit() else None, None))
        return out

    def diagnostics(self) -> str:
        error = self.workdir / "error.log"
        return super().diagnostics() + f"\nerror.log:\n{error.read_text(errors='replace')[-3000:] if error.exists() else ''}"


class ApacheServer(ConfiguredServer):
    """Apache httpd 2.4 with `mod_dav` and `mod_dav_fs` (Debian's `apache2`), the WebDAV server of
    most NAS boxes and self-hosted set-ups, run in the foreground from a configuration of its
    own on a free port (never the system's service). Its children run as www-data, who is given
    the store's tree. Within a second of a change its ETags are weak (`W/"…"`)."""
    kind = "apache"
    CONF = """ServerRoot "{workdir}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile {workdir}/httpd.pid
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule dav_module /usr/lib/apache2/modules/mod_dav.so
LoadModule dav_fs_module /usr/lib/apache2/modules/mod_dav_fs.so
ErrorLog {workdir}/error.log
LogFormat "%m\t%U\t%>s" docfs
CustomLog {log} docfs
DavLockDB {workdir}/davlock
DocumentRoot "{root}"
User www-data
Group www-data
<Directory "{root}">
  Dav On
  AllowOverride None
  Require all granted
</Directory>
"""

    program = "/usr/sbin/apache2"
    conf_name = "httpd.conf"
    run_as = "www-data"
    paths_encoded = False  # %U is decoded

    def command(self, conf: Path) -> list[str]:
        return [self.program, "-f", str(conf), "-DFOREGROUND"]



def _give_to(user: str, *paths: Path) -> None:
    """Lets a server running as `user` reach and write `paths` (pytest's folders are 0700)."""
    for path in paths:
        for parent in [path, *path.parents]:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)
    subprocess.run(["chown", "-R", f"{user}:{user}", *map(str, paths)], check=True)


class NginxServer(ConfiguredServer):
    """nginx 1.22 (Debian's `nginx-light`) with its `dav` module and `dav-ext`
    (`libnginx-mod-http-dav-ext`, for PROPFIND, OPTIONS and LOCK), in the foreground from a
    configuration of its own. It wants a trailing slash on a folder's MOVE target and keeps
    no dead properties; its ETags are strong (mtime-size)."""
    kind = "nginx"
    CONF = """daemon off;
master_process off;
worker_processes 1;
user root;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log info;
load_module /usr/lib/nginx/modules/ngx_http_dav_ext_module.so;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {workdir}/body;
  log_format docfs "$request_method\t$request_uri\t$status";
  access_log {log} docfs;
  dav_ext_lock_zone zone=docfs:1m;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    client_max_body_size 0;
    location / {{
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS LOCK UNLOCK;
      dav_ext_lock zone=docfs;
      create_full_put_path on;
      dav_access user:rw group:rw all:r;
      autoindex on;
    }}
  }}
}}
"""

    program = "/usr/sbin/nginx"
    conf_name = "nginx.conf"

    def command(self, conf: Path) -> list[str]:
        return [self.program, "-c", str(conf), "-p", str(self.workdir), "-e", str(self.workdir / "error.log")]


class NginxServerWithoutLocks(NginxServer):
    """nginx with `dav-ext` for PROPFIND and OPTIONS but no lock zone: a server that neither
    checks the conditions of a PUT nor has WebDAV locks."""
    kind = "nginx-without-locks"
    CONF = (NginxServer.CONF.replace("      dav_ext_lock zone=docfs;\n", "")
            .replace("  dav_ext_lock_zone zone=docfs:1m;\n", "")
            .replace("dav_ext_methods PROPFIND OPTIONS LOCK UNLOCK;", "dav_ext_methods PROPFIND OPTIONS;"))


class LighttpdServer(ConfiguredServer):
    """lighttpd 1.4.69 with `mod_webdav` (Debian's `lighttpd-mod-webdav`), in the foreground
    (`-D`) from a configuration of its own. Built with SQLite, it keeps dead properties and
    locks; it wants a trailing slash on a folder's MOVE target."""
    kind = "lighttpd"
    CONF = """server.document-root = "{root}"
server.port = {port}
server.bind = "127.0.0.1"
server.username = "www-data"
server.groupname = "www-data"
server.errorlog = "{workdir}/error.log"
server.modules = ("mod_webdav", "mod_accesslog", "mod_staticfile")
server.upload-dirs = ("{workdir}/uploads")
server.max-request-size = 0
accesslog.filename = "{log}"
accesslog.format = "%m\t%U\t%s"
webdav.activate = "enable"
webdav.is-readonly = "disable"
webdav.sqlite-db-name = "{workdir}/webdav.db"
"""

    program = "/usr/sbin/lighttpd"
    conf_name = "lighttpd.conf"
    run_as = "www-data"

    def prepare(self) -> None:
        (self.workdir / "uploads").mkdir()

    def command(self, conf: Path) -> list[str]:
        return [self.program, "-D", "-f", str(conf)]


class SabreServer(Server):
    """sabre/dav (Debian's `php-sabre-dav`, the engine inside Nextcloud and ownCloud) behind
    PHP's built-in web server (`php -S`, four workers), with its file-system tree, its PDO lock
    backend on SQLite (as a deployment keeps locks in its database; the file backend reads and
    rewrites one file unlocked, so concurrent workers bring back released locks for 30 minutes)
    and a router script of our own that logs each request once answered."""
    kind = "sabre"
    ROUTER = r"""<?php
require_once '/usr/share/php/Sabre/autoload.php';
$root = getenv('DOCFS_SABRE_ROOT');
$work = getenv('DOCFS_SABRE_WORK');
$server = new Sabre\DAV\Server(new Sabre\DAV\FS\Directory($root));
$server->setBaseUri('/');
$pdo = new PDO('sqlite:' . $work . '/locks.sqlite');
$pdo->setAttribute(PDO::ATTR_ERRMODE, PDO::ERRMODE_EXCEPTION);
$pdo->exec('PRAGMA busy_timeout = 10000');
$pdo->exec('CREATE TABLE IF NOT EXISTS locks (id integer primary key asc, owner text, timeout integer, created integer, token text, scope integer, depth integer, uri text)');
$server->addPlugin(new Sabre\DAV\Locks\Plugin(new Sabre\DAV\Locks\Backend\PDO($pdo)));
$server->exec();
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
file_put_contents($work . '/requests.log',
    $_SERVER['REQUEST_METHOD'] . "	" . $path . "	" . http_response_code() . "
", FILE_APPEND | LOCK_EX);
return true;
"""

    def start(self):
        if not Path("/usr/share/php/Sabre/autoload.php").exists() or not shutil.which("php"):
            pytest.skip("sabre/dav is not installed (Tests/support/setup.sh installs php-cli and php-sabre-dav)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        router = self.workdir / "router.php"
        router.write_text(self.ROUTER)
        env = dict(os.environ, DOCFS_SABRE_ROOT=str(self.root), DOCFS_SABRE_WORK=str(self.workdir),
                   PHP_CLI_SERVER_WORKERS="4")
        self.proc = subprocess.Popen(["php", "-S", f"127.0.0.1:{self.port}", str(router)],
                                     stdout=open(self.out_path, "wb"), stderr=open(self.err_path, "wb"),
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env, cwd=self.workdir)
        return self._wait_listening("php -S (sabre/dav)")

    def stop(self):
        """Stops `php -S` and the workers it forked (PHP_CLI_SERVER_WORKERS): its process group,
        which is its own (start_new_session), by its PID."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        super().stop()

    paths_encoded = True
    logged = ConfiguredServer.logged


def _server_factory(cls, tmp_path):
    servers: list[Server] = []

    def start(tree: Tree | Path) -> Server:
        root = tree.root if isinstance(tree, Tree) else Path(tree)
        workdir = tmp_path / f"{cls.kind}-{len(servers)}"
        workdir.mkdir()
        server = cls(root, workdir)
        servers.append(server)
        return server.start()

    return start, servers


def _serving(cls, tmp_path):
    """A fixture's body: start(tree) -> a running server of `cls`; every one stopped at teardown."""
    start, servers = _server_factory(cls, tmp_path)
    yield start
    for s in servers:
        s.stop()


def _serving_fixture(cls, name: str):
    """A fixture `name`: start(tree) -> a running server of `cls`, every one stopped at teardown."""
    @pytest.fixture(name=name)
    def serving(tmp_path):
        yield from _serving(cls, tmp_path)
    return serving


docfs_serve = _serving_fixture(DocfsServer, "docfs_serve")
rclone_serve = _serving_fixture(RcloneServer, "rclone_serve")
apache_serve = _serving_fixture(ApacheServer, "apache_serve")
nginx_serve = _serving_fixture(NginxServer, "nginx_serve")
nginx_without_locks_serve = _serving_fixture(NginxServerWithoutLocks, "nginx_without_locks_serve")
lighttpd_serve = _serving_fixture(LighttpdServer, "lighttpd_serve")
sabre_serve = _serving_fixture(SabreServer, "sabre_serve")


#: The fixture that starts each WebDAV server, by its kind.
WEBDAV_FIXTURES = {"docfs-serve": "docfs_serve", "rclone": "rclone_serve", "wsgidav": "wsgidav_serve",
                   "apache": "apache_serve", "nginx": "nginx_serve", "lighttpd": "lighttpd_serve",
                   "sabre": "sabre_serve"}


@pytest.fixture
def wsgidav_serve(tmp_path):
    """wsgidav_serve(tree, keep_properties=True) -> a running WsgiDAV over the tree."""
    keeping, keeping_servers = _server_factory(WsgidavServer, tmp_path)
    refusing, refusing_servers = _server_factory(WsgidavServerWithoutProperties, tmp_path)
    yield lambda tree, keep_properties=True: (keeping if keep_properties else refusing)(tree)
    for s in keeping_servers + refusing_servers:
        s.stop()


@pytest.fixture(params=["docfs-serve", "rclone"])
def store_server(request, tmp_path):
    """Parametrizes a test over both WebDAV servers: call it with a tree to start one."""
    cls = DocfsServer if request.param == "docfs-serve" else RcloneServer
    start, servers = _server_factory(cls, tmp_path)
    yield start
    for s in servers:
        s.stop()


# --- trees (built once per session, read-only for the tests) -------------------------------

@pytest.fixture(scope="session")
def reachable_base():
    """A directory every user can reach (pytest's temp dirs are 0700), removed once the session's
    mounts are gone: a test's own directory in it is often torn down before its mount is."""
    path = Path(tempfile.mkdtemp(prefix="docfs-shared-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def reachable_dir(reachable_base):
    """A directory of this test that `nobody` can reach."""
    path = Path(tempfile.mkdtemp(dir=reachable_base))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def big_tree(tmp_path_factory) -> Tree:
    return make_big_tree(tmp_path_factory.mktemp("big-tree") / "store")


@pytest.fixture(scope="session")
def content_tree(tmp_path_factory) -> Tree:
    return make_content_tree(tmp_path_factory.mktemp("content-tree") / "store")


# --- mounts --------------------------------------------------------------------------------

_ACTIVE_MOUNTS: set[str] = set()


class Mount:
    def __init__(self, path: Path, store: str, xdg: XDG, log_file: Path):
        self.path = path
        self.store = store
        self.xdg = xdg
        self.log_file = log_file
        # The environment it was mounted with: `docfs status` finds it in that state directory's
        # registry, also after the test moved xdg to another machine.
        self.env = dict(xdg.env)

    def __truediv__(self, rel) -> Path:
        return self.path / rel

    def is_mounted(self) -> bool:
        return is_mounted(self.path)

    def daemon_pids(self) -> list[int]:
        return pids_for(str(self.path))

    def log_tail(self, n=4000) -> str:
        if self.log_file.exists():
            return self.log_file.read_text(errors="replace")[-n:]
        return "(no log file)"

    def unmount(self, timeout=60) -> subprocess.CompletedProcess:
        return self.xdg.docfs("unmount", self.path, timeout=timeout)

    # --- barriers: what the daemon says it is doing ---------------------------------------

    def status(self) -> dict:
        """This mount's record in `docfs status --json` (read from its catalog): files per
        state, pending uploads, transfers, upload errors."""
        result = run([docfs_bin(), "status", "--json", str(self.path)], timeout=30, env=self.env)
        assert result.returncode == 0, f"docfs status {self.path}: exit {result.returncode}: {result.stderr}"
        mounts = json.loads(result.stdout)["mounts"]
        assert len(mounts) == 1, f"docfs status {self.path}: {mounts}"
        return mounts[0]

    def downloads_under_way(self) -> list[str]:
        return downloads_under_way(self.path)

    def wait_downloads_done(self, timeout: float = 30) -> None:
        """Until the mount has no download under way: every GET it sent was answered, and none
        is retried or read ahead any more."""
        wait_until(lambda: not self.downloads_under_way(), timeout,
                   lambda: f"{self.path} to finish its downloads (under way: {self.downloads_under_way()})")

    def wait_uploads_done(self, timeout: float = 60) -> dict:
        """Until no file of the mount is `modified` or `uploading` (`docfs status`: no pending
        upload): every change has reached the store and been recorded, and the uploader has
        nothing left to send, so an upload that has not come by then does not come. Returns
        the status."""
        last: dict = {}

        def done():
            last.update(self.status())
            return last["pendingUploads"] == 0 and not any(t["state"] == "uploading" for t in last["transfers"]) \
                and last
        return wait_until(done, timeout, lambda: f"{self.path} to have no upload pending (status: "
                                                 f"pending {last.get('pendingUploads')}, states {last.get('states')}, "
                                                 f"transfers {last.get('transfers')}, errors {last.get('errors')})")

    def wait_log_line(self, *parts: str, timeout: float = 20) -> str:
        """Until the daemon's log has a line holding every one of `parts` (what it did, as it
        says); returns that line."""
        def found():
            text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
            return next((line for line in text.splitlines() if all(p in line for p in parts)), None)
        return wait_until(found, timeout, lambda: f"a line with {parts} in the daemon's log:\n{self.log_tail(2000)}")

    def wait_idle(self, timeout: float = 60) -> dict:
        """Both: no upload pending and no download under way."""
        status = self.wait_uploads_done(timeout)
        self.wait_downloads_done(timeout)
        return status


def cleanup_mount(mountpoint: Path, xdg: XDG) -> list[str]:
    """Unmounts by every means available; returns what had to be done beyond `docfs unmount`."""
    notes = []
    if is_mounted(mountpoint):
        try:
            result = xdg.docfs("unmount", mountpoint, timeout=60)
            if result.returncode != 0:
                notes.append(f"`docfs unmount` exited {result.returncode}: {result.stderr.strip()}")
        except AssertionError as error:
            notes.append(str(error))
            abort_fuse_connection(mountpoint)
    if is_mounted(mountpoint):
        notes.append("still mounted after `docfs unmount`: used fusermount3 -uz")
        run(["fusermount3", "-uz", str(mountpoint)], timeout=30)
    pids = pids_for(str(mountpoint))
    if pids:
        try:
            wait_until(lambda: not any(process_alive(p) for p in pids_for(str(mountpoint))), 10,
                       "the docfs daemon to exit after unmount")
        except AssertionError:
            notes.append(f"docfs daemon still running after unmount (pids {pids}): killed")
            for pid in pids_for(str(mountpoint)):
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        wait_until(lambda: not process_alive(pid), 5, f"daemon {pid} to end after {sig.name}")
                        break
                    except AssertionError:
                        continue
    if is_mounted(mountpoint):
        run(["fusermount3", "-uz", str(mountpoint)], timeout=30)
    return notes


@pytest.fixture
def mount(request, tmp_path, xdg):
    """mount(store, *options, mountpoint=None) -> Mount; always unmounted at teardown."""
    mounts: list[Mount] = []

    def do_mount(store, *options, mountpoint: Path | None = None, timeout=60) -> Mount:
        mp = mountpoint or tmp_path / f"mnt{len(mounts)}"
        mp.mkdir(exist_ok=True)
        log = tmp_path / f"mount{len(mounts)}.log"
        m = Mount(mp, str(store), xdg, log)
        mounts.append(m)
        _ACTIVE_MOUNTS.add(str(mp))
        result = xdg.docfs("mount", store, mp, "--log-file", log, *options, timeout=timeout)
        assert result.returncode == 0, (
            f"docfs mount {store} {mp} exited {result.returncode}\nstderr: {result.stderr}\n"
            f"stdout: {result.stdout}\nlog:\n{m.log_tail()}")
        assert m.is_mounted(), (f"docfs mount returned 0 but {mp} is not in /proc/self/mountinfo yet "
                                f"(it must return once the mount is ready)\nlog:\n{m.log_tail()}")
        return m

    yield do_mount

    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    problems = []
    for m in mounts:
        if failed:
            sys.stderr.write(f"\n--- docfs log for {m.path} ---\n{m.log_tail()}\n")
        notes = cleanup_mount(m.path, xdg)
        _ACTIVE_MOUNTS.discard(str(m.path))
        if notes and not failed:
            problems += [f"{m.path}: {n}" for n in notes]
        left = proc_mounts_lines(m.path)
        if left:
            problems.append(f"{m.path} is still in /proc/mounts after cleanup: {left}")
    assert not problems, "teardown: " + "; ".join(problems)


# --- watchdog ------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _watchdog(request):
    """If a test runs longer than DOCFS_TEST_TIMEOUT, abort its FUSE connections so it fails."""
    fired = threading.Event()

    def on_timeout():
        fired.set()
        sys.__stderr__.write(f"\n!!! {request.node.nodeid} exceeded {TEST_TIMEOUT:.0f} s: "
                             f"aborting FUSE connections {sorted(_ACTIVE_MOUNTS)}\n")
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
        for mp in list(_ACTIVE_MOUNTS):
            abort_fuse_connection(mp)

    timer = threading.Timer(TEST_TIMEOUT, on_timeout)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
    assert not fired.is_set(), f"test exceeded {TEST_TIMEOUT:.0f} s (DOCFS_TEST_TIMEOUT) and was aborted"
