// mkimage writes a levee container image as an OCI image-layout archive, without a container
// engine: an empty base plus one layer holding one binary (a dynamically linked one with the
// loader and shared libraries it needs, copied from the host), a non-root user and (for the
// node) the directories the node writes to. `make image` (image.mk) runs it twice: the node image
// (the defaults below) and the operator image (-path /manager -cmd "" -data-dir "" ...);
// `ctr images import` loads the archive.
//
// The layer and config are deterministic: every timestamp is -created (the commit time), so the
// same binary gives the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The node's user (distroless' "nonroot"); the operator's pod securityContext may override it.
const uid = 65532

func main() {
	binary := flag.String("binary", "", "binary to put in the image (a dynamic one brings its loader and shared libraries from the host)")
	out := flag.String("out", "", "archive to write (OCI image layout, tar)")
	repo := flag.String("repo", "docker.io/library/levee", "image repository the tags belong to")
	tags := flag.String("tags", "dev", "comma-separated tags")
	version := flag.String("version", "", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (git commit)")
	source := flag.String("source", "", "org.opencontainers.image.source")
	created := flag.Int64("created", 0, "creation time, Unix seconds (all timestamps in the image)")
	var sp spec
	flag.StringVar(&sp.path, "path", "/usr/local/bin/levee", "absolute path of the binary in the image; also the entrypoint")
	flag.StringVar(&sp.cmd, "cmd", "serve", "default arguments (comma-separated; empty: none)")
	flag.StringVar(&sp.title, "title", "levee", "org.opencontainers.image.title")
	flag.StringVar(&sp.description, "description", "levee key-value node (gRPC) and its CLI", "org.opencontainers.image.description")
	flag.StringVar(&sp.ports, "ports", "8087/tcp,8098/tcp", "exposed ports (comma-separated; empty: none)")
	flag.StringVar(&sp.dataDir, "data-dir", "/var/lib/levee", "directory owned by the non-root user and declared a volume (empty: none)")
	flag.Parse()
	if *binary == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: mkimage -binary FILE -out FILE.tar [-tags a,b] [-version V] [-revision SHA] [-created UNIX] [-path /usr/local/bin/levee] [-cmd serve] [-title T] [-description D] [-ports 8087/tcp] [-data-dir DIR]")
		os.Exit(2)
	}
	if err := sp.check(); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(2)
	}
	if err := run(*binary, *out, *repo, strings.Split(*tags, ","), *version, *revision, *source, time.Unix(*created, 0).UTC(), sp); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

// spec is what differs between the images mkimage builds.
type spec struct {
	path, cmd, title, description, ports, dataDir string
}

func (s spec) check() error {
	for name, p := range map[string]string{"-path": s.path, "-data-dir": s.dataDir} {
		if p == "" && name == "-data-dir" {
			continue
		}
		if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			return fmt.Errorf("%s %q must be a clean absolute path such as /usr/local/bin/levee", name, p)
		}
	}
	for _, p := range list(s.ports) {
		if !strings.HasSuffix(p, "/tcp") && !strings.HasSuffix(p, "/udp") {
			return fmt.Errorf("-ports: %q must look like 8087/tcp", p)
		}
	}
	return nil
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func run(binary, out, repo string, tags []string, version, revision, source string, created time.Time, sp spec) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	libs, err := sharedLibs(bin)
	if err != nil {
		return err
	}
	layerTar, err := rootfs(bin, libs, created, sp)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: createdBy(sp, len(libs) > 0),
			Comment:   "make image",
		},
	})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: created}
	labels := map[string]string{
		"org.opencontainers.image.title":       sp.title,
		"org.opencontainers.image.description": sp.description,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if source != "" {
		labels["org.opencontainers.image.source"] = source
	}
	cf.Config = v1.Config{
		// Node image: `levee` alone is the CLI (the operator's maintenance Jobs run `levee admin
		// ...`); the default command serves with the built-in defaults: gRPC :8087, metrics
		// :8098, data under /var/lib/levee/data. Operator image: /manager and its flags.
		Entrypoint: []string{sp.path},
		Cmd:        list(sp.cmd),
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: "/",
		Labels:     labels,
		StopSignal: "SIGTERM",
	}
	if ports := list(sp.ports); len(ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if sp.dataDir != "" {
		cf.Config.Volumes = map[string]struct{}{sp.dataDir: {}}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	img = mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}).(v1.Image)

	// OCI image layout in a scratch directory, one index entry per tag, then one tar of it.
	dir, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, t := range tags {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          repo + ":" + t, // the name `ctr images import` gives it
			"org.opencontainers.image.ref.name": t,
		})); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarDir(dir, out, created); err != nil {
		return err
	}

	digest, _ := img.Digest()
	lsize, _ := layer.Size()
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("image %s (%s) -> %s\n", repo, strings.Join(tags, ", "), out)
	fmt.Printf("  digest       %s\n", digest)
	fmt.Printf("  binary       %s uncompressed\n", mib(int64(len(bin))))
	for _, l := range libs {
		fmt.Printf("  library      %s %s\n", l.path, mib(int64(len(l.data))))
	}
	fmt.Printf("  layer        %s gzip (the image's pull size)\n", mib(lsize))
	fmt.Printf("  archive      %s\n", mib(st.Size()))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n) }

func createdBy(sp spec, dynamic bool) string {
	if dynamic {
		return "mkimage: " + sp.path + " (glibc), its loader and shared libraries, and the nonroot user"
	}
	if sp.path == "/usr/local/bin/levee" {
		return "mkimage: /usr/local/bin/levee (static, musl) and the nonroot user" // as before: same digest
	}
	return "mkimage: " + sp.path + " (static) and the nonroot user"
}

// parents lists the directories leading to p, outermost first, without slashes: /a/b/c -> a, a/b.
func parents(p string) []string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	var out []string
	for i := 1; i < len(parts); i++ {
		out = append(out, strings.Join(parts[:i], "/"))
	}
	return out
}

// rootfs is the single layer: passwd/group naming the nonroot user, /tmp, the binary at sp.path
// (with its parent directories), the shared libraries it loads (libs, at their host paths), and
// sp.dataDir owned by that user (the node's data directory is /var/lib/levee/data). Directories
// already written (/etc, /tmp) are not written twice.
func rootfs(bin []byte, libs []hostFile, mtime time.Time, sp spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode,
			Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode,
			Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte(fmt.Sprintf(
				"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:levee:/var/lib/levee:/sbin/nologin\n", uid, uid)))
		},
		func() error { return file("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid))) },
		func() error { return dir("tmp", 0o1777, 0) },
	}
	written := map[string]bool{"etc": true, "tmp": true}
	mkdirs := func(names []string) {
		for _, d := range names {
			if !written[d] {
				written[d] = true
				steps = append(steps, func() error { return dir(d, 0o755, 0) })
			}
		}
	}
	mkdirs(parents(sp.path))
	steps = append(steps, func() error { return file(strings.TrimPrefix(sp.path, "/"), 0o755, bin) })
	for _, l := range libs {
		mkdirs(parents(l.path))
		steps = append(steps, func() error { return file(strings.TrimPrefix(l.path, "/"), 0o755, l.data) })
	}
	if sp.dataDir != "" {
		mkdirs(parents(sp.dataDir))
		steps = append(steps, func() error { return dir(strings.TrimPrefix(sp.dataDir, "/"), 0o750, uid) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under root into a tar at out, in sorted order with fixed times.
func tarDir(root, out string, mtime time.Time) error {
	var names []string
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if path != root {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, path := range names {
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if info.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
