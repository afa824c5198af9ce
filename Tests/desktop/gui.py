"""A throwaway desktop session for real file managers: Xvfb, a private D-Bus session bus (that
activates no service: no gvfs, no Tracker, nothing left running), a private HOME with docfs's
extensions installed for that user (`make install-desktop-user`), and the file manager run in
it; screenshots through GDK; keys through xdotool. Everything started is stopped by PID."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
#: What a session needs, by command, with the Debian package that has it.
TOOLS = {"Xvfb": "xvfb", "xdotool": "xdotool", "dbus-daemon": "dbus"}
MANAGERS = {"nautilus": "nautilus", "nemo": "nemo", "caja": "caja"}

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""

SHOT = """import sys, gi
gi.require_version('Gdk', '3.0')
from gi.repository import Gdk
w = Gdk.get_default_root_window()
Gdk.pixbuf_get_from_window(w, 0, 0, w.get_width(), w.get_height()).savev(sys.argv[1], 'png', [], [])
"""


def missing_tools(manager: str | None = None) -> list[str]:
    tools = dict(TOOLS)
    if manager:
        tools[manager] = MANAGERS[manager]
    return sorted({package for tool, package in tools.items() if shutil.which(tool) is None})


def free_display() -> int:
    for n in range(90, 300):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise RuntimeError("no free X display number")


class Session:
    def __init__(self, work: Path, size: str = "1024x700"):
        self.work = work
        self.size = size
        self.processes: list[subprocess.Popen] = []
        self.manager: subprocess.Popen | None = None
        home, runtime = work / "home", work / "runtime"
        for d in (home, runtime, work / "services", work / "config"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(runtime, 0o700)
        # Settings of this session only (GSettings' keyfile backend): Nautilus's window fills the screen.
        keyfile = work / "config" / "glib-2.0" / "settings" / "keyfile"
        keyfile.parent.mkdir(parents=True, exist_ok=True)
        width, height = size.split("x")
        keyfile.write_text(f"[org/gnome/nautilus/window-state]\ninitial-size=({width}, {height})\n")
        self.display = free_display()
        self.bus = runtime / "bus"
        self.env = dict(os.environ, HOME=str(home), XDG_RUNTIME_DIR=str(runtime), XDG_CONFIG_HOME=str(work / "config"),
                        DISPLAY=f":{self.display}", DBUS_SESSION_BUS_ADDRESS=f"unix:path={self.bus}",
                        NO_AT_BRIDGE="1", GTK_A11Y="none", GSETTINGS_BACKEND="keyfile", GIO_USE_VFS="local",
                        LANG="C.UTF-8", LC_ALL="C.UTF-8")
        # The file managers embed Debian's Python: a PATH leading to another python3 (pyenv's,
        # running the tests) makes it look for its modules there.
        self.env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        for name in list(self.env):
            if name.startswith(("PYENV", "_PYENV", "PYTHON", "VIRTUAL_ENV")) or name in (
                    "XDG_DATA_HOME", "XDG_SESSION_TYPE", "WAYLAND_DISPLAY"):
                del self.env[name]

    def start(self) -> "Session":
        result = subprocess.run(["make", "-s", "-C", str(REPO), "install-desktop-user"], env=self.env,
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"make install-desktop-user: {result.stderr}")
        config = self.work / "bus.conf"
        config.write_text(BUS_CONFIG.format(socket=self.bus, services=self.work / "services"))
        self._spawn(["dbus-daemon", "--config-file", str(config), "--nofork", "--nopidfile"], "dbus")
        # -noreset: an X server resets when its last client leaves, and closes the connections
        # that arrive meanwhile. The readiness check below and `open`'s window search are such
        # clients: a file manager connecting as one of them left was dropped at once ("nemo
        # exited 1: Cannot open display", half the runs under CI load).
        xvfb = self._spawn(["Xvfb", f":{self.display}", "-screen", "0", f"{self.size}x24", "-nolisten", "tcp", "-noreset"],
                           "xvfb")
        deadline = time.monotonic() + 20
        # Until the server answers a client, not until its socket exists.
        while not (self.bus.exists() and Path(f"/tmp/.X11-unix/X{self.display}").exists()
                   and self.xdotool("getdisplaygeometry", check=False).strip()):
            if xvfb.poll() is not None:
                raise RuntimeError(f"Xvfb exited {xvfb.returncode}: {self.log('xvfb')[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Xvfb or dbus-daemon did not start: {self.log('xvfb')[-2000:]}")
            time.sleep(0.1)
        return self

    def _spawn(self, argv, name) -> subprocess.Popen:
        process = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=open(self.work / f"{name}.log", "ab"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def open(self, manager: str, folder: Path) -> int:
        """Runs the file manager on `folder`; returns its window id once it is shown."""
        argv = {"nautilus": ["nautilus", "--new-window", str(folder)],
                "nemo": ["nemo", "--no-desktop", f"--geometry={self.size}+0+0", str(folder)],
                "caja": ["caja", "--no-desktop", f"--geometry={self.size}+0+0", str(folder)]}[manager]
        self.manager = self._spawn(argv, manager)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.manager.poll() is not None:
                raise RuntimeError(f"{manager} exited {self.manager.returncode}: {self.log(manager)[-2000:]}")
            found = self.xdotool("search", "--onlyvisible", "--pid", str(self.manager.pid), check=False).split()
            if found:
                return int(found[0])
            time.sleep(0.2)
        raise RuntimeError(f"no window of {manager} within 30 s: {self.log(manager)[-2000:]}")

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def xdotool(self, *args, check=True) -> str:
        result = subprocess.run(["xdotool", *args], env=self.env, capture_output=True, text=True, timeout=30)
        if check and result.returncode != 0:
            raise RuntimeError(f"xdotool {args}: {result.stderr}")
        return result.stdout

    def screenshot(self, out: Path) -> Path:
        script = self.work / "shot.py"
        script.write_text(SHOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([SYSTEM_PYTHON, str(script), str(out)], env=self.env, check=True, timeout=30,
                       capture_output=True)
        return out

    def close_manager(self) -> None:
        if self.manager is not None:
            self._stop(self.manager)
            self.manager = None

    def _stop(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def stop(self) -> None:
        for process in reversed(self.processes):
            self._stop(process)
        # Anything still holding the private bus was started by this session.
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    mine = f"DBUS_SESSION_BUS_ADDRESS=unix:path={self.bus}".encode() in f.read().split(b"\0")
            except OSError:
                continue
            if mine:
                try:
                    os.kill(int(entry), signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
