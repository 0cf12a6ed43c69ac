# levee container images, built without a container engine (no Docker daemon on these machines).
#   make image           both images below
#   make image-node      out/image/levee-<version>.tar: OCI image archive of the release `levee` binary
#                        (the one `make test` builds; glibc, stripped, with its loader and shared
#                        libraries), tagged levee:<version> and levee:dev; prints its size
#   make image-operator  out/image/levee-operator-<version>.tar: the static (CGO off) operator
#                        binary as /manager, tagged levee-operator:<version> and levee-operator:dev
#   make image-test      mkimage's unit tests; imports both archives into a private containerd
#                        (`ctr images import`), runs the node image and smoke-tests the node in it,
#                        runs the operator image's /manager --help; tears containerd down
# Included by the top-level Makefile; on its own: make -f image.mk image
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

IMAGE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
CARGO ?= cargo
GO ?= go

IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' $(IMAGE_ROOT)/engine/crates/node/Cargo.toml | head -n1)
# containerd's names; the operator's default image is levee:dev (= docker.io/library/levee:dev).
IMAGE_REPO ?= docker.io/library/levee
IMAGE_TAGS ?= $(IMAGE_VERSION),dev
IMAGE_SOURCE ?=
IMAGE_TAR := $(IMAGE_ROOT)/out/image/levee-$(IMAGE_VERSION).tar
# The workspace's release build of the node (shared with make test's, so no second compile) and the
# stripped copy that goes into the image.
IMAGE_BUILT_BIN := $(IMAGE_ROOT)/engine/target/release/levee
IMAGE_BIN := $(IMAGE_ROOT)/out/image/levee
# mkimage (image/mkimage, go-containerregistry pinned in its go.mod) writes the archive.
IMAGE_TOOL := $(IMAGE_ROOT)/image/bin/mkimage
IMAGE_TOOL_SRC := $(addprefix $(IMAGE_ROOT)/image/mkimage/,main.go go.mod go.sum)

# The operator image: same tool, same version, one static Go binary at /manager (the path
# kubebuilder layouts and the Helm chart use), no data directory, no default arguments.
OPERATOR_IMAGE_REPO ?= docker.io/library/levee-operator
OPERATOR_IMAGE_TAR := $(IMAGE_ROOT)/out/image/levee-operator-$(IMAGE_VERSION).tar
OPERATOR_IMAGE_BIN := $(IMAGE_ROOT)/operator/bin/manager-linux-amd64

.PHONY: image image-node image-operator image-operator-binary image-test mkimage-test image-binary

## image-binary: the release levee binary (cargo's, as make test builds it), stripped into out/image/levee
image-binary:
	CARGO=$(CARGO) $(IMAGE_ROOT)/hack/fresh-bin.sh $(IMAGE_BUILT_BIN) -p levee-node --bin levee
	@mkdir -p $(dir $(IMAGE_BIN))
	objcopy --strip-all $(IMAGE_BUILT_BIN) $(IMAGE_BIN).tmp && mv $(IMAGE_BIN).tmp $(IMAGE_BIN)

$(IMAGE_TOOL): $(IMAGE_TOOL_SRC)
	cd $(IMAGE_ROOT)/image/mkimage && $(GO) build -trimpath -o $(IMAGE_TOOL) .

IMAGE_REVISION = $$(git -C $(IMAGE_ROOT) describe --always --dirty --abbrev=40 2>/dev/null || echo unknown)
IMAGE_CREATED = $${SOURCE_DATE_EPOCH:-$$(git -C $(IMAGE_ROOT) log -1 --format=%ct 2>/dev/null || echo 0)}

image: image-node image-operator

## image-node: the OCI archive; every timestamp in it is the commit time, so the same binary gives the same digest
image-node: image-binary $(IMAGE_TOOL)
	$(IMAGE_TOOL) -binary $(IMAGE_BIN) -out $(IMAGE_TAR) -repo $(IMAGE_REPO) -tags '$(IMAGE_TAGS)' \
	  -version $(IMAGE_VERSION) -source '$(IMAGE_SOURCE)' \
	  -revision "$(IMAGE_REVISION)" -created "$(IMAGE_CREATED)"

## image-operator-binary: static operator binary (no cgo, stripped, reproducible: -trimpath, no build id)
image-operator-binary:
	cd $(IMAGE_ROOT)/operator && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
	  $(GO) build -trimpath -ldflags "-s -w -buildid=" -o $(OPERATOR_IMAGE_BIN) ./cmd

## image-operator: the operator's OCI archive, built like the node's
image-operator: image-operator-binary $(IMAGE_TOOL)
	@! readelf -l $(OPERATOR_IMAGE_BIN) | grep -q 'program interpreter' || { echo "$(OPERATOR_IMAGE_BIN) is not statically linked" >&2; exit 1; }
	$(IMAGE_TOOL) -binary $(OPERATOR_IMAGE_BIN) -out $(OPERATOR_IMAGE_TAR) -repo $(OPERATOR_IMAGE_REPO) -tags '$(IMAGE_TAGS)' \
	  -path /manager -cmd '' -ports '' -data-dir '' -title levee-operator \
	  -description 'levee operator: runs KVClusters (kv.levee.io) on Kubernetes' \
	  -version $(IMAGE_VERSION) -source '$(IMAGE_SOURCE)' -revision "$(IMAGE_REVISION)" -created "$(IMAGE_CREATED)"

## mkimage-test: the image tool's unit tests (node image byte-for-byte unchanged, operator image layout)
mkimage-test:
	cd $(IMAGE_ROOT)/image/mkimage && $(GO) test -count=1 ./...

## image-test: import into a private containerd (needs root), run the containers, smoke-test, tear down
image-test: mkimage-test image
	$(IMAGE_ROOT)/image/test.sh $(IMAGE_TAR) $(IMAGE_REPO):$(IMAGE_VERSION) \
	  $(OPERATOR_IMAGE_TAR) $(OPERATOR_IMAGE_REPO):$(IMAGE_VERSION)
