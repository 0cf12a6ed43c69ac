package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var nodeSpec = spec{path: "/usr/local/bin/levee", cmd: "serve", title: "levee",
	description: "levee key-value node (gRPC) and its CLI", ports: "8087/tcp,8098/tcp", dataDir: "/var/lib/levee"}

var operatorSpec = spec{path: "/manager", title: "levee-operator", description: "levee operator"}

// archive reads an OCI layout tar written by run: file name -> content.
func archive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
	}
}

func blob(t *testing.T, files map[string][]byte, d v1.Hash) []byte {
	t.Helper()
	b, ok := files["blobs/"+d.Algorithm+"/"+d.Hex]
	if !ok {
		t.Fatalf("blob %s missing", d)
	}
	return b
}

// build runs mkimage with a fixed fake binary and returns the manifest digest, the config and
// the layer's entries (name -> mode/uid).
func build(t *testing.T, sp spec) (string, v1.ConfigFile, []string) {
	t.Helper()
	return buildWith(t, sp, []byte("fake-binary\n"))
}

// buildWith is build with the binary's bytes given.
func buildWith(t *testing.T, sp spec, binData []byte) (string, v1.ConfigFile, []string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, binData, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	stdout := os.Stdout
	os.Stdout, _ = os.Open(os.DevNull)
	err := run(bin, out, "docker.io/library/x", []string{"0.1.0", "dev"}, "0.1.0", "abc", "", time.Unix(1700000000, 0).UTC(), sp)
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	files := archive(t, out)
	var idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 2 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	var m v1.Manifest
	if err := json.Unmarshal(blob(t, files, idx.Manifests[0].Digest), &m); err != nil {
		t.Fatal(err)
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(blob(t, files, m.Config.Digest), &cf); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, h.Name+" "+strings.TrimLeft(os.FileMode(h.Mode).String(), "-")+" "+string(rune('0'+h.Uid/65532)))
	}
	return idx.Manifests[0].Digest.String(), cf, entries
}

// The node image must not change when the operator image was added: same bytes, same digest
// as before mkimage learnt its options.
func TestNodeImageUnchanged(t *testing.T) {
	digest, cf, entries := build(t, nodeSpec)
	if digest != "sha256:421f800fe59f37d1f771587d1b9321fde02b30de3d4c7d256ae5e6873292a34f" {
		t.Errorf("node image digest changed: %s", digest)
	}
	want := []string{"etc/ rwxr-xr-x 0", "etc/passwd rw-r--r-- 0", "etc/group rw-r--r-- 0", "tmp/ rwxrwxrwx 0",
		"usr/ rwxr-xr-x 0", "usr/local/ rwxr-xr-x 0", "usr/local/bin/ rwxr-xr-x 0", "usr/local/bin/levee rwxr-xr-x 0",
		"var/ rwxr-xr-x 0", "var/lib/ rwxr-xr-x 0", "var/lib/levee/ rwxr-x--- 1"}
	if !reflect.DeepEqual(entries, want) {
		t.Errorf("layer = %q\nwant    %q", entries, want)
	}
	if !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/usr/local/bin/levee"}) || !reflect.DeepEqual(cf.Config.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}

func TestOperatorImage(t *testing.T) {
	_, cf, entries := build(t, operatorSpec)
	want := []string{"etc/ rwxr-xr-x 0", "etc/passwd rw-r--r-- 0", "etc/group rw-r--r-- 0", "tmp/ rwxrwxrwx 0", "manager rwxr-xr-x 0"}
	if !reflect.DeepEqual(entries, want) {
		t.Errorf("layer = %q\nwant    %q", entries, want)
	}
	c := cf.Config
	if !reflect.DeepEqual(c.Entrypoint, []string{"/manager"}) || len(c.Cmd) != 0 || len(c.ExposedPorts) != 0 || len(c.Volumes) != 0 ||
		c.User != "65532:65532" || c.Labels["org.opencontainers.image.title"] != "levee-operator" {
		t.Errorf("config = %+v", c)
	}
}

func TestSpecCheck(t *testing.T) {
	for _, bad := range []spec{
		{path: "manager"}, {path: "/bin/"}, {path: "/a//b"}, {path: "/a/../b"},
		{path: "/manager", dataDir: "var/lib"}, {path: "/manager", ports: "8080"},
	} {
		if err := bad.check(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for _, good := range []spec{nodeSpec, operatorSpec} {
		if err := good.check(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}

// A dynamically linked binary (the host's /bin/true, glibc) brings its loader at the path it names
// and every library it loads, so the image runs with nothing else in it; image-test runs the node
// image built this way under runc.
func TestDynamicBinaryBringsItsLoaderAndLibraries(t *testing.T) {
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true on this host")
	}
	libs, err := sharedLibs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Fatal("/bin/true is dynamically linked on Debian; no libraries found")
	}
	_, cf, entries := buildWith(t, nodeSpec, bin)
	has := map[string]bool{}
	for _, e := range entries {
		has[strings.Fields(e)[0]] = true
	}
	for _, want := range []string{"lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6", "usr/local/bin/levee", "var/lib/levee/"} {
		if !has[want] {
			t.Errorf("layer lacks %s: %q", want, entries)
		}
	}
	if got := cf.History[0].CreatedBy; !strings.Contains(got, "glibc") {
		t.Errorf("history says %q", got)
	}
	// Not ELF: nothing to add (the fake binary above), and no error.
	if l, err := sharedLibs([]byte("fake-binary\n")); l != nil || err != nil {
		t.Errorf("non-ELF: %v %v", l, err)
	}
}
