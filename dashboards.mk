# Grafana dashboards and Prometheus alert rules (dashboards/). Included by the top-level Makefile.
#   make dashboards-test   grafana's dashboard-linter on every dashboard; promtool check rules and the
#                          rule unit tests (each alert firing and quiet); the Go tests of dashboards/:
#                          JSON current with its generator, dashboard model, every PromQL expression
#                          parses (Prometheus' parser), panels scoped by the template variables, only
#                          documented metrics; the Helm chart's copies (charts/levee-operator/files)
#                          equal to grafana/ and alerts/; and the metric contract against a real
#                          `levee serve` (builds the release node binary; set LEVEE_BIN to use another one)
#   make dashboards-gen    regenerate dashboards/grafana/*.json from dashboards/internal/grafana and
#                          copy the dashboards and alerts/levee.rules.yaml into the Helm chart
#                          (charts/levee-operator/files: Helm reads no file outside the chart)
#   make dashboard-linter  build the linter into the cache outside the clone (about 2 min cold)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

DASHBOARDS_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
DASHBOARDS := $(DASHBOARDS_ROOT)/dashboards
# The Helm chart ships the dashboards and the rules from here (written by dashboards-gen).
DASHBOARDS_CHART_FILES := $(DASHBOARDS_ROOT)/charts/levee-operator/files
GO ?= go
CARGO ?= cargo
PROMTOOL ?= promtool
LEVEE_CACHE ?= $(HOME)/.cache/levee
# The version pinned (with its checksums) by dashboards/tools/linter/go.mod and go.sum.
DASHBOARD_LINTER_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/grafana/dashboard-linter" { print $$3 }' $(DASHBOARDS)/tools/linter/go.mod)
DASHBOARD_LINTER := $(LEVEE_CACHE)/bin/dashboard-linter-$(DASHBOARD_LINTER_VERSION)
# The node the contract test starts. Left at its default, dashboards-test builds it first.
LEVEE_BIN ?= $(DASHBOARDS_ROOT)/engine/target/release/levee

.PHONY: dashboard-linter dashboards-deps dashboards-gen dashboards-test dashboards-levee

dashboard-linter: $(DASHBOARD_LINTER)

# Built from the pinning module rather than `go install ...@latest`, which the Go proxy refuses for
# this module. Written under a temporary name, then renamed: an interrupted build leaves nothing.
$(DASHBOARD_LINTER):
	@mkdir -p $(dir $@)
	cd $(DASHBOARDS)/tools/linter && nice -n 10 $(GO) build -o $@.tmp github.com/grafana/dashboard-linter
	mv $@.tmp $@

# promtool comes with Debian's prometheus package.
dashboards-deps:
	@$(DASHBOARDS_ROOT)/hack/ensure-debs.sh prometheus

dashboards-gen:
	cd $(DASHBOARDS) && $(GO) run ./cmd/gen -chart $(DASHBOARDS_CHART_FILES)

dashboards-levee:
ifeq ($(LEVEE_BIN),$(DASHBOARDS_ROOT)/engine/target/release/levee)
	CARGO=$(CARGO) $(DASHBOARDS_ROOT)/hack/fresh-bin.sh $(LEVEE_BIN) -p levee-node --bin levee
endif

dashboards-test: $(DASHBOARD_LINTER) dashboards-deps dashboards-levee
	cd $(DASHBOARDS) && for f in grafana/*.json; do \
	  echo "dashboard-linter $$f"; $(DASHBOARD_LINTER) lint --strict "$$f" | { grep -v '^Checks that' || true; }; done
	cd $(DASHBOARDS) && $(PROMTOOL) check rules alerts/levee.rules.yaml
	cd $(DASHBOARDS) && $(PROMTOOL) test rules alerts/levee.rules.test.yaml
	cd $(DASHBOARDS) && $(GO) vet ./... && LEVEE_BIN=$(LEVEE_BIN) $(GO) test -count=1 ./...
