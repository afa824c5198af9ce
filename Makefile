# docfs: build, run and test.
#   make run    install what is missing, build release, serve a demo store and mount it on Mount/
#   make test   install what is missing, build, unit tests, then integration tests through /dev/fuse
#   make fsx SEEDS=N  the random I/O exerciser (Tests/integration/fsx.py), N more seeds per store;
#               FSX_SEED=S replays one seed, FSX_FIRST_SEED picks the first, FSX_OPS operations per seed
#   make bench  docfs against rclone mount (WebDAV) and rclone mount and s3fs (S3) on the same server (release build), medians and ratios

SWIFT  ?= swift
PYTHON ?= python3

.PHONY: all setup build release run test unit-test integration-test fsx bench clean

all: build

setup:
	@bash scripts/setup.sh

build:
	$(SWIFT) build

release:
	$(SWIFT) build -c release

run: setup release
	@bash scripts/run-demo.sh .build/release/docfs

test: setup
	$(SWIFT) build --build-tests
	$(MAKE) --no-print-directory unit-test
	$(MAKE) --no-print-directory integration-test

unit-test:
	$(SWIFT) test

integration-test:
	DOCFS_BIN="$(CURDIR)/.build/debug/docfs" $(PYTHON) -m pytest -v Tests/integration

SEEDS ?= 10

fsx: setup
	$(SWIFT) build
	DOCFS_BIN="$(CURDIR)/.build/debug/docfs" FSX_SEEDS="$(SEEDS)" DOCFS_TEST_TIMEOUT="$$(( $(SEEDS) * 120 + 300 ))" \
		$(PYTHON) -m pytest -v Tests/integration/test_fsx.py -k test_fsx

bench: setup release
	DOCFS_BIN="$(CURDIR)/.build/release/docfs" $(PYTHON) Tests/bench/bench.py
	DOCFS_BIN="$(CURDIR)/.build/release/docfs" $(PYTHON) Tests/bench/bench_s3.py

clean:
	$(SWIFT) package clean
	rm -rf demo-store
