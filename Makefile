# levee — one entry point for the whole repository.
#   make demo     run the main job on an embedded default (engine workload, prints ops/s and latencies)
#   make test     everything CI runs: lint, engine tests (model, crash, corruption), operator, terraform
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
ENGINE := engine
CRASH_KILLS ?= 50

.PHONY: all deps build test demo lint fmt bench bench-maintenance crash-soak manifests \
        engine-test operator-test terraform-test clean

all: build

## deps: install the toolchain pieces the build needs (idempotent)
deps:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
	@rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

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
test: lint engine-test operator-test terraform-test
	@echo "make test: all suites passed"

engine-test: deps
	cd $(ENGINE) && LEVEE_CRASH_KILLS=$(CRASH_KILLS) $(CARGO) test --release --workspace

operator-test:
	$(MAKE) -C operator test

terraform-test:
	$(MAKE) -C terraform test

manifests:
	$(MAKE) -C operator manifests

## demo: open a store in a temp dir and run a seed-like workload (8 KB values, pareto keys, 5 GET : 1 UPDATE)
DEMO_SECS ?= 30
demo: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example demo -- --seconds $(DEMO_SECS)

## bench: engine micro-benchmark (8 KB values: put sync off/on at 1 and 32 writers, get, head)
bench: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example bench

## bench-maintenance: journal compaction MB/s, put p99 with/without compaction, AAE rebuild of 1M keys
bench-maintenance: deps
	cd $(ENGINE) && $(CARGO) run --release -p levee-store --example bench_maintenance

## crash-soak: the SIGKILL crash test with 1000 kills
crash-soak: deps
	cd $(ENGINE) && LEVEE_CRASH_KILLS=1000 $(CARGO) test --release -p levee-store --test crash -- --nocapture

clean:
	cd $(ENGINE) && $(CARGO) clean
	$(MAKE) -C operator clean || true
