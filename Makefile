# levee — one entry point for the whole repository.
#   make demo     build, then a ~2 min seed-style volume test of levee vs RocksDB: ratio table + charts in out/demo
#   make test     everything CI runs: lint, engine + bench + node tests, operator, terraform, image, chart,
#                 dashboards, and the e2e smoke scenario on a real single-node Kubernetes
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
ENGINE := engine
CRASH_KILLS ?= 50

# Every Go build and test here (operator, its image, kube-apiserver and the e2e cluster's binaries,
# helm, the dashboards' tools, the e2e tests) uses the same settings, so Go's build cache compiles a
# package shared between them (the standard library, client-go, apimachinery, ...) once: no cgo
# (static binaries) and -trimpath (no clone path in what is built; the operator image is reproducible).
export CGO_ENABLED := 0
export GOFLAGS := -trimpath $(filter-out -trimpath,$(GOFLAGS))

.PHONY: all deps sys-deps build test demo cluster-demo bench-cluster bench-node-anchor demo-engine lint fmt bench-engine bench-maintenance bench-open crash-soak \
        manifests engine-test operator-test terraform-test clean

# Cargo's output lives in ~/.cache/levee/cargo/<checkout>, linked as engine/target (hack/cargo-target.sh),
# so a fresh clone reuses compiled dependencies.
_ := $(shell $(dir $(lastword $(MAKEFILE_LIST)))hack/cargo-target.sh)

# Debian packages outside the Rust/Go toolchains: the benchmark peers (RocksDB, LevelDB, libclang for
# their bindings, a font for the charts, in bench.mk) and jq (terraform's user-data lint).
SYS_DEBS := jq

all: build

## deps: install the toolchain pieces the build needs (idempotent)
deps: sys-deps bench-deps
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
	@rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

sys-deps:
	@hack/ensure-debs.sh $(SYS_DEBS)

## build: compile the engine workspace (release) and the operator
build: deps
	cd $(ENGINE) && $(CARGO) build --release --workspace --all-targets
	$(MAKE) -C operator build

## lint: rustfmt + clippy with warnings as errors (Go vet runs in the operator's own test target)
lint: deps
	cd $(ENGINE) && $(CARGO) fmt --all -- --check
	cd $(ENGINE) && $(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	cd $(ENGINE) && $(CARGO) fmt --all

## test: the README's test command; CI runs exactly this on a clean clone
# e2e-smoke (e2e.mk) starts a real single-node Kubernetes, installs the chart, runs a KVCluster under
# load and a compaction Job, and removes the cluster again (needs root, as everything here).
# The suites run in this order, each timed (hack/run-suites.sh prints the table, out/test-times.txt keeps it).
TEST_SUITES := lint engine-test operator-test terraform-test image-test chart-test dashboards-test e2e-smoke
test:
	@hack/run-suites.sh $(TEST_SUITES)
	@echo "make test: all suites passed"

# The workspace build makes target/release/levee (levee-node's tests need it); levee-bench's gRPC test
# runs that binary (LEVEE_NODE_BIN) instead of calling cargo again from inside the test.
engine-test: deps
	cd $(ENGINE) && LEVEE_CRASH_KILLS=$(CRASH_KILLS) LEVEE_NODE_BIN=$(CURDIR)/$(ENGINE)/target/release/levee \
	  $(CARGO) test --release --workspace

operator-test:
	$(MAKE) -C operator test

terraform-test: sys-deps
	$(MAKE) -C terraform test

manifests:
	$(MAKE) -C operator manifests

## demo: levee vs RocksDB on e2e/scenarios/demo.toml (bench-demo in bench.mk)
demo: deps bench-demo

## cluster-demo: three local nodes (hack/local-cluster.sh) sharing one member list and claim; a SIGKILL and restart
cluster-demo: deps
	cd $(ENGINE) && $(CARGO) build --release -p levee-node
	hack/cluster-demo.sh

## bench-cluster: levee-bench over gRPC against one node (n_val 1) and a 3-node local cluster (n_val 3, w=r=2); ops/s and node CPU per op
bench-cluster: deps
	cd $(ENGINE) && $(CARGO) build --release -p levee-node -p levee-bench
	hack/cluster-bench.sh

## bench-node-anchor: the node path against a bare tonic server answering levee.v1.KV from memory
## (levee-bench anchor), same grpc client and scenario back to back; ANCHOR_SCENARIO, ANCHOR_ARGS,
## NODE_ARGS (more levee serve options)
ANCHOR_SCENARIO ?= e2e/scenarios/8k_nosync.toml
ANCHOR_ARGS ?= --duration 60s
bench-node-anchor: deps
	cd $(ENGINE) && $(CARGO) build --release -p levee-node -p levee-bench
	e2e/scenarios/node-anchor.sh $(ANCHOR_SCENARIO) $(ANCHOR_ARGS)

## demo-engine: open a store in a temp dir and run a seed-like workload (8 KB values, pareto keys, 5 GET : 1 UPDATE)
DEMO_SECS ?= 30
demo-engine: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example demo -- --seconds $(DEMO_SECS)

## bench-engine: engine micro-benchmark (8 KB values: put sync off/on at 1 and 32 writers, get, head)
bench-engine: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example bench

## bench-maintenance: journal compaction MB/s, put p99 with/without compaction, AAE rebuild of 1M keys
bench-maintenance: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example bench_maintenance

## bench-open: open time vs data held (100 MiB and 10 GiB of 8 KB values): clean reopen, reopen after a crash
bench-open: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example open_time -- $(OPEN_ARGS)

## crash-soak: the SIGKILL crash test with 1000 kills, then the simulated-disk power-loss test with
## 100,000 cut points (make test runs 50 kills and 2,000 cut points)
POWER_CUTS ?= 100000
crash-soak: deps
	cd $(ENGINE) && LEVEE_CRASH_KILLS=1000 $(CARGO) test --release -p levee-store --test crash -- --nocapture
	cd $(ENGINE) && LEVEE_POWER_CUTS=$(POWER_CUTS) $(CARGO) test --release -p levee-store --test power_loss -- --nocapture

clean:
	cd $(ENGINE) && $(CARGO) clean
	$(MAKE) -C operator clean || true

# levee-bench: bench-deps, bench-build, bench-test, bench-demo, bench (the full volume-test matrix)
include bench.mk
# levee container image: image, image-test (the release binary with its shared libraries, OCI archive, private containerd)
include image.mk
# Helm chart of the operator: chart-test, helm (charts/levee-operator)
include charts.mk
# Grafana dashboards and alert rules: dashboards-test, dashboards-gen, dashboard-linter (dashboards/)
include dashboards.mk
# End-to-end on a real single-node Kubernetes: e2e-up, e2e-down, e2e-smoke, e2e-vet (e2e/, docs/e2e.md)
include e2e.mk

## e2e: every end-to-end scenario on a real Kubernetes (e2e-full; docs/e2e.md)
.PHONY: e2e
e2e: e2e-full
