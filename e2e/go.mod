// e2e: the levee end-to-end scenarios on a real single-node Kubernetes (e2e/kube) and the small
// tools the cluster needs (kube/pause, kube/ociimage). See docs/e2e.md.
module github.com/levee-io/levee/e2e

go 1.24.0

require github.com/google/go-containerregistry v0.20.7

require (
	github.com/containerd/stargz-snapshotter/estargz v0.18.1 // indirect
	github.com/klauspost/compress v1.18.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.2 // indirect
	golang.org/x/sync v0.18.0 // indirect
)
