# levee on a real single-node Kubernetes (e2e/, docs/e2e.md). Included by the top-level Makefile.
#   make e2e-up      etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy,
#                    CoreDNS, levee-nvme/levee-hdd storage (static local PVs); binaries built once into
#                    ~/.cache/levee (k8s from the Go module proxy: ~10-15 min cold on 2 cores); state in ~/.cache/levee/e2e/run.
#                    Prints the KUBECONFIG. Idempotent. Needs root.
#   make e2e-down    removes everything e2e-up started (processes, mounts, interfaces, iptables chains,
#                    cgroups, the run directory). Idempotent.
#   make e2e-smoke   e2e-up, then the smoke scenario (Go test e2e/smoke_test.go): import the node, operator
#                    and levee-bench images, helm install charts/levee-operator, apply the NVMe sample
#                    (3 members, resources scaled to this machine), wait Available, a 60 s in-cluster
#                    levee-bench Job against the client Service (results in out/e2e/smoke/), one compaction
#                    Job created from the CronJob, a member replaced (kv.levee.io/replace-member) and
#                    rebuilt; then e2e-down (E2E_KEEP=1 keeps the cluster up).
#                    Part of make test.
#   make e2e-full    (make e2e) every scenario, e2e/full_test.go: also cert-manager and the Prometheus
#                    Operator (e2e/addons, built once), Prometheus targets and rules, compaction and AAE
#                    Jobs on a store of several GiB, image rollout and member deletion under load, the
#                    HDD sample with TLS from a cert-manager ClusterIssuer. Results in out/e2e/full/.
# On its own: make -f e2e.mk e2e-up / e2e-down (e2e-smoke needs image.mk, bench.mk and charts.mk too).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

E2E_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
GO ?= go
LEVEE_CACHE ?= $(HOME)/.cache/levee
export LEVEE_CACHE
E2E_KUBE := $(E2E_ROOT)/e2e/kube
E2E_OUT ?= $(E2E_ROOT)/out/e2e
E2E_LOAD_SECONDS ?= 60
E2E_KEEP ?=
E2E_BENCH_BIN := $(E2E_ROOT)/engine/target/release/levee-bench
# The CLI the scenarios run on the host (the binary image.mk puts in the node image).
E2E_CLI := $(E2E_ROOT)/out/image/levee
E2E_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' $(E2E_ROOT)/engine/crates/node/Cargo.toml | head -n1)
E2E_HELM_VERSION ?= v3.16.4

.PHONY: e2e-bins e2e-up e2e-down e2e-images e2e-smoke e2e-addons e2e-full e2e-vet

## e2e-bins: build (once) the k8s binaries and CoreDNS into $(LEVEE_CACHE)
e2e-bins:
	$(E2E_KUBE)/build-bins.sh

e2e-up:
	$(E2E_KUBE)/up.sh

e2e-down:
	$(E2E_KUBE)/down.sh

## e2e-images: the node and operator images (image.mk) and the levee-bench load image (make test's release build of levee-bench, hack/fresh-bin.sh)
e2e-images: image bench-deps
	CARGO=$(CARGO) $(E2E_ROOT)/hack/fresh-bin.sh $(E2E_BENCH_BIN) -p levee-bench
	$(E2E_KUBE)/images.sh bench $(E2E_BENCH_BIN)

## e2e-vet: go vet + gofmt of the e2e module, shellcheck of the cluster scripts
e2e-vet:
	cd $(E2E_ROOT)/e2e && $(GO) vet -tags e2e ./... && test -z "$$(gofmt -l .)"
	@$(E2E_ROOT)/hack/ensure-debs.sh shellcheck
	shellcheck -x $(E2E_KUBE)/*.sh $(E2E_ROOT)/e2e/addons/*/*.sh

# e2e-run SCENARIO: up, the Go test $(1) (TestSmoke or TestFull), down (unless E2E_KEEP), with its wall time.
define e2e-run
	@start=$$SECONDS; rc=0; \
	  $(E2E_KUBE)/up.sh && \
	  { cd $(E2E_ROOT)/e2e && E2E_ROOT=$(E2E_ROOT) E2E_OUT=$(E2E_OUT) E2E_LOAD_SECONDS=$(E2E_LOAD_SECONDS) \
	      E2E_VERSION=$(E2E_VERSION) E2E_CLI=$(E2E_CLI) HELM=$(LEVEE_CACHE)/bin/helm-$(E2E_HELM_VERSION) \
	      $(GO) test -tags e2e -count=1 -v -timeout $(2) -run '^$(1)$$' . ; } || rc=$$?; \
	  if [ -z "$(E2E_KEEP)" ]; then $(E2E_KUBE)/down.sh || rc=1; else echo "E2E_KEEP set: cluster left up"; fi; \
	  echo "$@: rc=$$rc in $$((SECONDS - start)) s"; exit $$rc
endef

## e2e-smoke: up -> images -> helm install -> KVCluster Available -> 60 s load -> compaction Job -> replace a member -> down
e2e-smoke: e2e-images helm e2e-vet
	$(call e2e-run,TestSmoke,30m)

## e2e-addons: build (once, cached in $(LEVEE_CACHE)/e2e/addons) cert-manager and the Prometheus Operator + images
e2e-addons:
	$(E2E_ROOT)/e2e/addons/cert-manager/build.sh
	$(E2E_ROOT)/e2e/addons/prometheus/build.sh

## e2e-full: every scenario (e2e/full_test.go): addons, NVMe and HDD+TLS samples, Prometheus, big-store maintenance, faults
e2e-full: e2e-images helm e2e-vet e2e-addons
	$(call e2e-run,TestFull,120m)
