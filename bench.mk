# levee-bench targets (included from the Makefile). See docs/benchmarks.md.
#   make bench-deps    Debian packages the peers and the charts need (librocksdb-dev, libclang-dev, ...)
#   make bench-build   build the levee-bench binary (release)
#   make bench-test    levee-bench's tests: generators, scenario files, a short run per driver, charts
#   make bench-demo    ~2 min: levee vs RocksDB on a seed-style workload, ratio table + charts in out/demo
#   make bench         the full matrix (6 scenarios x 5 engines), tables + charts in out/bench
# BENCH_DURATION overrides every scenario's duration (e.g. BENCH_DURATION=60s make bench).
# The matrix scenarios have levee compact its journal every 5 s (compact_journal_every), as
# RocksDB compacts all along. BENCH_COMPACT_EVERY overrides it (e.g. 30s, or off: levee's journal
# then grows with every update, 60+ GB in 5 minutes of 16k_nosync on the reference box).

BENCH_CARGO ?= cargo
BENCH_BIN := engine/target/release/levee-bench
BENCH_OUT ?= out/bench
BENCH_DURATION ?=
BENCH_COMPACT_EVERY ?=
BENCH_SCENARIOS ?= 8k_sync 8k_nosync 4k_nosync 16k_sync 16k_nosync 2i_mix
BENCH_DRIVERS ?= levee rocksdb rocksdb-blob fjall leveldb
BENCH_DEBS := librocksdb-dev libleveldb-dev libclang-dev fonts-dejavu-core
# Link the rocksdb crate against Debian's librocksdb instead of compiling RocksDB from source.
export ROCKSDB_LIB_DIR ?= /usr/lib/x86_64-linux-gnu
export ROCKSDB_INCLUDE_DIR ?= /usr/include

.PHONY: bench-deps bench-build bench-test bench-demo bench

bench-deps:
	@hack/ensure-debs.sh $(BENCH_DEBS)

bench-build: bench-deps
	cd engine && $(BENCH_CARGO) build --release -p levee-bench

bench-test: bench-deps
	cd engine && $(BENCH_CARGO) test --release -p levee-bench

bench-demo: bench-build
	@rm -rf out/demo && mkdir -p out/demo
	$(BENCH_BIN) run e2e/scenarios/demo.toml --driver levee --out out/demo/levee
	$(BENCH_BIN) run e2e/scenarios/demo.toml --driver rocksdb --out out/demo/rocksdb
	$(BENCH_BIN) compare out/demo/levee out/demo/rocksdb --op get --out out/demo/compare_get.png > out/demo/ratios.md
	$(BENCH_BIN) compare out/demo/levee out/demo/rocksdb --op update --out out/demo/compare_update.png > /dev/null
	@cat out/demo/ratios.md
	@echo "charts: out/demo/compare_get.png out/demo/compare_update.png out/demo/*/summary.png"

# Options every matrix cell runs with (the check before the matrix uses the same).
BENCH_RUN_OPTS = $(if $(BENCH_DURATION),--duration $(BENCH_DURATION)) \
	$(if $(BENCH_COMPACT_EVERY),--compact-journal-every $(BENCH_COMPACT_EVERY))

bench: bench-build
	@for s in $(BENCH_SCENARIOS); do for d in $(BENCH_DRIVERS); do \
	  $(BENCH_BIN) run e2e/scenarios/$$s.toml --driver $$d --check $(BENCH_RUN_OPTS) > /dev/null || exit 1; \
	done; done
	@mkdir -p $(BENCH_OUT)
	@: > $(BENCH_OUT)/matrix.md
	@for s in $(BENCH_SCENARIOS); do \
	  for d in $(BENCH_DRIVERS); do \
	    $(BENCH_BIN) run e2e/scenarios/$$s.toml --driver $$d --out $(BENCH_OUT)/$$s/$$d --force \
	      $(BENCH_RUN_OPTS) || exit 1; \
	  done; \
	  runs=""; for d in $(BENCH_DRIVERS); do runs="$$runs $(BENCH_OUT)/$$s/$$d"; done; \
	  echo "### $$s" >> $(BENCH_OUT)/matrix.md; echo >> $(BENCH_OUT)/matrix.md; \
	  $(BENCH_BIN) compare $$runs --op get --out $(BENCH_OUT)/$$s/compare_get.png >> $(BENCH_OUT)/matrix.md || exit 1; \
	  $(BENCH_BIN) compare $$runs --op update --out $(BENCH_OUT)/$$s/compare_update.png > /dev/null || exit 1; \
	  echo >> $(BENCH_OUT)/matrix.md; \
	done
	@cat $(BENCH_OUT)/matrix.md
