# levee container image, built without a container engine (no Docker daemon on these machines).
#   make image       out/image/levee-<version>.tar: OCI image archive of the static (musl) `levee`
#                    binary, tagged levee:<version> and levee:dev; prints its size
#   make image-test  imports the archive into a private containerd (`ctr images import`), runs the
#                    image as a container and smoke-tests the node in it; tears containerd down
# Included by the top-level Makefile; on its own: make -f image.mk image
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

IMAGE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
CARGO ?= cargo
GO ?= go

IMAGE_TARGET := x86_64-unknown-linux-musl
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' $(IMAGE_ROOT)/engine/crates/node/Cargo.toml | head -n1)
# containerd's names; the operator's default image is levee:dev (= docker.io/library/levee:dev).
IMAGE_REPO ?= docker.io/library/levee
IMAGE_TAGS ?= $(IMAGE_VERSION),dev
IMAGE_SOURCE ?=
IMAGE_TAR := $(IMAGE_ROOT)/out/image/levee-$(IMAGE_VERSION).tar
IMAGE_BIN := $(IMAGE_ROOT)/engine/target/$(IMAGE_TARGET)/release/levee
# mkimage (image/mkimage, go-containerregistry pinned in its go.mod) writes the archive.
IMAGE_TOOL := $(IMAGE_ROOT)/image/bin/mkimage
IMAGE_TOOL_SRC := $(addprefix $(IMAGE_ROOT)/image/mkimage/,main.go go.mod go.sum)
# ring (rustls' crypto) has C and assembly: musl-gcc compiles it for the musl target.
IMAGE_DEBS := musl-tools

.PHONY: image image-test image-deps image-binary

image-deps:
	@$(IMAGE_ROOT)/hack/ensure-debs.sh $(IMAGE_DEBS)
	@rustup target list --installed | grep -qx '$(IMAGE_TARGET)' || rustup target add $(IMAGE_TARGET)

## image-binary: the static levee binary (release, stripped, no debug info) in engine/target/<musl>/release
image-binary: image-deps
	cd $(IMAGE_ROOT)/engine && CC_x86_64_unknown_linux_musl=musl-gcc \
	  CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
	  $(CARGO) build --release --target $(IMAGE_TARGET) -p levee-node

$(IMAGE_TOOL): $(IMAGE_TOOL_SRC)
	cd $(IMAGE_ROOT)/image/mkimage && $(GO) build -trimpath -o $(IMAGE_TOOL) .

## image: the OCI archive; every timestamp in it is the commit time, so the same binary gives the same digest
image: image-binary $(IMAGE_TOOL)
	@! readelf -l $(IMAGE_BIN) | grep -q 'program interpreter' || { echo "$(IMAGE_BIN) is not statically linked" >&2; exit 1; }
	$(IMAGE_TOOL) -binary $(IMAGE_BIN) -out $(IMAGE_TAR) -repo $(IMAGE_REPO) -tags '$(IMAGE_TAGS)' \
	  -version $(IMAGE_VERSION) -source '$(IMAGE_SOURCE)' \
	  -revision "$$(git -C $(IMAGE_ROOT) describe --always --dirty --abbrev=40 2>/dev/null || echo unknown)" \
	  -created "$${SOURCE_DATE_EPOCH:-$$(git -C $(IMAGE_ROOT) log -1 --format=%ct 2>/dev/null || echo 0)}"

## image-test: import into a private containerd (needs root), run the container, smoke-test, tear down
image-test: image
	$(IMAGE_ROOT)/image/test.sh $(IMAGE_TAR) $(IMAGE_REPO):$(IMAGE_VERSION)
