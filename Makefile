# docfs: build, run and test.
#   make run    install what is missing, build release, serve a demo store and mount it on Mount/
#   make test   install what is missing, build, unit tests, then integration tests through /dev/fuse
#   make fsx SEEDS=N  the random I/O exerciser (Tests/integration/fsx.py), N more seeds per store;
#               FSX_SEED=S replays one seed, FSX_FIRST_SEED picks the first, FSX_OPS operations per seed
#   make bench  the performance record (Tests/bench/record.py, release build, about 15 min): docfs against
#               rclone mount, davfs2, s3fs, curl and local disk on docfs serve, rclone serve webdav and
#               SeaweedFS; cold medians and ratios written to Tests/bench/RESULTS.md and results.json.
#               BENCH_QUICK=1 checks the script in a minute or two; BENCH_ONLY=ls5k,ttfb picks workloads
#   make bench-latency  the same clients with the store far away (Tests/bench/latency.py: a delay proxy,
#               20 and 80 ms, rclone serve webdav, about 28 min): Tests/bench/LATENCY.md and latency.json;
#               LATENCY_ARGS="--quick" checks the script; LATENCY_ARGS="--servers seaweedfs --delays 20
#               --runs 1 --budget 120" adds S3 to the same record (see latency.py --help)
#   make fuzz   the parsers of what servers and clients write, under libFuzzer, for FUZZ_SECONDS (60);
#               a build of its own in .build-fuzz (every module instrumented), inputs kept in
#               .build-fuzz/corpus, a crash saved as crash-* (rerun: .build/debug/DocFSFuzz FILE)
#   make install   build release, install docfs, the mount.docfs helper and the docfs(1) man page;
#               PREFIX (default /usr/local), DESTDIR (staging), BIN (the binary to install, e.g.
#               BIN=.build/debug/docfs: no release build). `make uninstall` takes the same variables
#               and the file manager extensions (`make install-desktop`; per user: `make install-desktop-user`)

SHELL  := /bin/bash
SWIFT  ?= swift
PYTHON ?= python3

.PHONY: all setup build release run test unit-test integration-test fsx fuzz bench bench-latency clean install uninstall manual-tool

all: build

setup:
	@bash Tests/support/setup.sh

build:
	$(SWIFT) build

release:
	$(SWIFT) build -c release

run: setup release
	@bash Tests/support/run-demo.sh .build/release/docfs

test: setup
	$(SWIFT) build --build-tests
	$(MAKE) --no-print-directory unit-test
	$(MAKE) --no-print-directory integration-test

# The core's tests make a state directory each; they go to a scratch TMPDIR of this run, removed
# when every test passed (kept, and named, when one failed). A crash prints only the crashed
# thread, and a failure ends with what failed, so the last lines of a CI log say which test it was.
unit-test:
	@scratch=$$(mktemp -d -t docfs-unit-XXXXXX); \
	set -o pipefail; \
	TMPDIR=$$scratch SWIFT_BACKTRACE=threads=crashed,registers=none,images=none $(SWIFT) test 2>&1 | tee "$$scratch/unit-tests.log"; \
	status=$$?; \
	if [ $$status -eq 0 ]; then rm -rf "$$scratch"; else \
		echo "--- what failed (the whole log: $$scratch/unit-tests.log)"; \
		grep -E "(✘|Fatal error|Program crashed|Thread [0-9]+ crashed|Signal [0-9]+:| at /.*\.swift:[0-9]+)" "$$scratch/unit-tests.log" | grep -v "^\[" | tail -40; \
	fi; \
	exit $$status

# Two workers: most tests wait on a server, a timeout or a daemon, not on the CPU; each worker
# starts its own servers on free ports. TEST_WORKERS=0 runs them one after another.
TEST_WORKERS ?= 2

integration-test:
	DOCFS_BIN="$(CURDIR)/.build/debug/docfs" $(PYTHON) -m pytest -v -n $(TEST_WORKERS) --dist worksteal --durations=25 Tests/integration Tests/bench/test_report.py
	# A run of its own: two conftest.py in one run share the module name `conftest`, and the
	# integration tests' `from conftest import RcloneServer` then got the desktop one's classes.
	DOCFS_BIN="$(CURDIR)/.build/debug/docfs" $(PYTHON) -m pytest -v --durations=10 Tests/desktop

SEEDS ?= 10

fsx: setup
	$(SWIFT) build
	DOCFS_BIN="$(CURDIR)/.build/debug/docfs" FSX_SEEDS="$(SEEDS)" DOCFS_TEST_TIMEOUT="$$(( $(SEEDS) * 120 + 300 ))" \
		$(PYTHON) -m pytest -v Tests/integration/test_fsx.py -k test_fsx

FUZZ_SECONDS ?= 60

fuzz: setup
	$(SWIFT) build --scratch-path .build-fuzz --product DocFSFuzz -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING
	mkdir -p .build-fuzz/corpus
	cd .build-fuzz && ./debug/DocFSFuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 corpus

bench: setup release
	DOCFS_BIN="$(CURDIR)/.build/release/docfs" $(PYTHON) Tests/bench/record.py

bench-latency: setup release
	DOCFS_BIN="$(CURDIR)/.build/release/docfs" $(PYTHON) Tests/bench/latency.py $(LATENCY_ARGS)

clean:
	$(SWIFT) package clean
	rm -rf demo-store

# --- install -------------------------------------------------------------------------------
# `mount -t fuse.docfs` and fstab lines of type fuse.docfs need only BINDIR/docfs: mount(8)
# runs /sbin/mount.fuse (fuse3's mount.fuse3), which runs `docfs STORE MOUNTPOINT -o OPTIONS`
# through /bin/sh with the shell's default PATH (mount(8) clears PATH), so BINDIR must be one of
# /usr/local/bin, /usr/bin, /bin. No mount.fuse.docfs is installed: it would take fuse.docfs away
# from mount.fuse3 and with it fstab's setuid=USER. `mount -t docfs` (type docfs in fstab)
# runs mount.docfs, a symlink to the binary; mount(8) looks for helpers only in /sbin,
# /sbin/fs.d and /sbin/fs, whatever PREFIX is: hence MOUNTHELPERDIR. The man page is made from
# the binary's own --help by swift-argument-parser's generate-manual (built from the package's
# checkout), so it says what the installed binary does.
PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
MANDIR         ?= $(PREFIX)/share/man
MOUNTHELPERDIR ?= /sbin
BIN            ?= .build/release/docfs
# Built first only when BIN is the default.
INSTALL_BUILD  := $(if $(filter command line environment,$(origin BIN)),,release)

# The man page's tool, from swift-argument-parser's checkout (build it as yourself: sudo's PATH
# may have no swift).
manual-tool:
	test -x .build/debug/generate-manual || $(SWIFT) build --product generate-manual

install: $(INSTALL_BUILD) manual-tool
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man1" "$(DESTDIR)$(MOUNTHELPERDIR)"
	install -m 755 "$(BIN)" "$(DESTDIR)$(BINDIR)/docfs"
	ln -sfn "$(BINDIR)/docfs" "$(DESTDIR)$(MOUNTHELPERDIR)/mount.docfs"
	manual="$$(mktemp -d)" && .build/debug/generate-manual "$(BIN)" --output-directory "$$manual" \
		&& install -m 644 "$$manual/docfs.1" "$(DESTDIR)$(MANDIR)/man1/docfs.1"; status=$$?; rm -rf "$$manual"; exit $$status
	$(MAKE) --no-print-directory install-desktop

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/docfs" "$(DESTDIR)$(MOUNTHELPERDIR)/mount.docfs" "$(DESTDIR)$(MANDIR)/man1/docfs.1"
	$(MAKE) --no-print-directory uninstall-desktop

# --- file manager extensions (Sources/desktop; doc/desktop.md) -------------------------------
# Emblems and a Keep on this device / Free up space menu for Nautilus, Nemo and Caja (their
# Python extensions: python3-nautilus, nemo-python, python3-caja) and a Dolphin service menu.
# nautilus-python finds extensions in every XDG data dir, so under PREFIX; nemo-python and
# caja-python look only in /usr/share and the user's data dir, whatever PREFIX is: hence
# NEMOEXTDIR and CAJAEXTDIR. The adapters and the service menu get DESKTOPLIBDIR (where the
# shared docfs_desktop.py goes) written in. `make install-desktop-user` installs the same into
# the user's data dir (~/.local/share), no root needed.
.PHONY: install-desktop uninstall-desktop install-desktop-user uninstall-desktop-user
DATADIR        ?= $(PREFIX)/share
DESKTOPLIBDIR  ?= $(DATADIR)/docfs/desktop
NAUTILUSEXTDIR ?= $(DATADIR)/nautilus-python/extensions
NEMOEXTDIR     ?= /usr/share/nemo-python/extensions
CAJAEXTDIR     ?= /usr/share/caja-python/extensions
SERVICEMENUDIR ?= $(DATADIR)/kio/servicemenus
EMBLEMDIR      ?= $(DATADIR)/icons/hicolor/scalable/emblems
USERDATADIR    ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)
DESKTOP_FMS    = nautilus:$(NAUTILUSEXTDIR) nemo:$(NEMOEXTDIR) caja:$(CAJAEXTDIR)

install-desktop:
	install -d "$(DESTDIR)$(DESKTOPLIBDIR)" "$(DESTDIR)$(NAUTILUSEXTDIR)" "$(DESTDIR)$(NEMOEXTDIR)" \
		"$(DESTDIR)$(CAJAEXTDIR)" "$(DESTDIR)$(SERVICEMENUDIR)" "$(DESTDIR)$(EMBLEMDIR)"
	install -m 644 Sources/desktop/docfs_desktop.py "$(DESTDIR)$(DESKTOPLIBDIR)/docfs_desktop.py"
	install -m 644 Sources/desktop/emblems/*.svg "$(DESTDIR)$(EMBLEMDIR)/"
	for fm in $(DESKTOP_FMS); do name=$${fm%%:*}; dir=$${fm#*:}; \
		sed 's|@DOCFS_DESKTOP_LIB@|$(DESKTOPLIBDIR)|' "Sources/desktop/docfs_$$name.py" > "$(DESTDIR)$$dir/docfs_$$name.py" || exit 1; done
	sed 's|@DOCFS_DESKTOP_LIB@|$(DESKTOPLIBDIR)|' Sources/desktop/dolphin/docfs-servicemenu.desktop \
		> "$(DESTDIR)$(SERVICEMENUDIR)/docfs.desktop" && chmod 755 "$(DESTDIR)$(SERVICEMENUDIR)/docfs.desktop"

uninstall-desktop:
	for fm in $(DESKTOP_FMS); do name=$${fm%%:*}; dir=$${fm#*:}; \
		rm -f "$(DESTDIR)$$dir/docfs_$$name.py" "$(DESTDIR)$$dir"/__pycache__/docfs_$$name.*.pyc; done
	for emblem in Sources/desktop/emblems/*.svg; do rm -f "$(DESTDIR)$(EMBLEMDIR)/$${emblem##*/}"; done
	rm -f "$(DESTDIR)$(SERVICEMENUDIR)/docfs.desktop"
	rm -rf "$(DESTDIR)$(DESKTOPLIBDIR)"
	rmdir "$(DESTDIR)$(dir $(DESKTOPLIBDIR))" 2>/dev/null || true

USER_DESKTOP = DESTDIR= DATADIR="$(USERDATADIR)" NEMOEXTDIR="$(USERDATADIR)/nemo-python/extensions" \
	CAJAEXTDIR="$(USERDATADIR)/caja-python/extensions"

install-desktop-user:
	$(MAKE) --no-print-directory install-desktop $(USER_DESKTOP)

uninstall-desktop-user:
	$(MAKE) --no-print-directory uninstall-desktop $(USER_DESKTOP)
