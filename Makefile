# docfs: build, run and test.
#   make run    install what is missing, build release, serve a demo store and mount it on Mount/
#   make test   install what is missing, build, unit tests, then integration tests through /dev/fuse
#   make fsx SEEDS=N  the random I/O exerciser (Tests/integration/fsx.py), N more seeds per store;
#               FSX_SEED=S replays one seed, FSX_FIRST_SEED picks the first, FSX_OPS operations per seed
#   make bench  the performance record (Tests/bench/record.py, release build, about 15 min): docfs against
#               rclone mount, davfs2, s3fs, curl and local disk on docfs serve, rclone serve webdav and
#               SeaweedFS; cold medians and ratios written to Tests/bench/RESULTS.md and results.json.
#               BENCH_QUICK=1 checks the script in a minute or two; BENCH_ONLY=ls5k,ttfb picks workloads

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
	DOCFS_BIN="$(CURDIR)/.build/release/docfs" $(PYTHON) Tests/bench/record.py

clean:
	$(SWIFT) package clean
	rm -rf demo-store
