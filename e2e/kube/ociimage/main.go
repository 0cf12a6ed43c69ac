// Command ociimage writes an OCI image archive (for `ctr images import`) whose single layer holds
// files copied from this host, without a container engine. e2e/kube/images.sh uses it for the
// pod sandbox (pause) image and for the levee-bench load image (the bench binary links RocksDB and
// LevelDB dynamically, so its shared libraries and the dynamic loader are copied alongside it).
//
//	ociimage -out x.tar -ref docker.io/library/name:tag -entrypoint /bin/x [-env K=V]... SRC[=DST]...
//
// A SRC without =DST keeps its path. Symlinks are followed (the file's bytes are stored at DST).
// Every timestamp is the Unix epoch, so the same inputs give the same image.
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

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	out := flag.String("out", "", "archive to write")
	ref := flag.String("ref", "", "image name, e.g. docker.io/library/levee-bench:e2e")
	entry := flag.String("entrypoint", "", "entrypoint (comma-separated)")
	user := flag.String("user", "", "user of the image config (empty: root)")
	var env multi
	flag.Var(&env, "env", "environment variable K=V (repeatable)")
	flag.Parse()
	if *out == "" || *ref == "" || *entry == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: ociimage -out X.tar -ref NAME:TAG -entrypoint /path [-env K=V] SRC[=DST]...")
		os.Exit(2)
	}
	if err := run(*out, *ref, strings.Split(*entry, ","), *user, env, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(out, ref string, entry []string, user string, env []string, files []string) error {
	epoch := time.Unix(0, 0).UTC()
	type entryT struct{ src, dst string }
	var es []entryT
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok {
			dst = src
		}
		if !filepath.IsAbs(dst) {
			return fmt.Errorf("destination %q must be absolute", dst)
		}
		es = append(es, entryT{src, filepath.Clean(dst)})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].dst < es[j].dst })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mkdir := func(d string, mode int64) error {
		if d == "." || d == "" || dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	if err := mkdir("tmp", 0o1777); err != nil {
		return err
	}
	for _, e := range es {
		rel := strings.TrimPrefix(e.dst, "/")
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			if err := mkdir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		data, err := os.ReadFile(e.src)
		if err != nil {
			return err
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(st.Mode().Perm()),
			Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "e2e/kube/ociimage"}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{Entrypoint: entry, Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...), User: user, WorkingDir: "/"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("image %s -> %s (%s)\n", ref, out, d)
	return nil
}

// tarDir packs the OCI layout directory into the archive ctr imports.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
