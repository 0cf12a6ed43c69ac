package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path"
	"sort"
)

// libDirs is where the host's dynamic loader finds shared libraries (Debian's multiarch layout
// first); a library goes into the image at the path it was found at, so the loader finds it there.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// hostFile is a file copied from the host into the image at the same path.
type hostFile struct {
	path string // absolute, in the image and on the host
	data []byte
}

// sharedLibs lists what a dynamically linked binary needs to start in an image with nothing else:
// its program interpreter (the dynamic loader, at the path the binary names) and every shared
// library it loads, directly or through another library, read from the host. A static binary
// (no interpreter), or data that is not ELF, needs none.
func sharedLibs(bin []byte) ([]hostFile, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, nil
	}
	interp, err := interpreter(f)
	if err != nil || interp == "" {
		return nil, err
	}
	data, err := os.ReadFile(interp)
	if err != nil {
		return nil, fmt.Errorf("program interpreter: %w", err)
	}
	files := map[string][]byte{interp: data}
	seen := map[string]bool{}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("reading the binary's needed libraries: %w", err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		p, data, err := findLib(name)
		if err != nil {
			return nil, err
		}
		files[p] = data
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		more, err := lf.ImportedLibraries()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		queue = append(queue, more...)
	}
	out := make([]hostFile, 0, len(files))
	for p, d := range files {
		out = append(out, hostFile{path: p, data: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("reading the program interpreter: %w", err)
		}
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	return "", nil
}

func findLib(name string) (string, []byte, error) {
	if path.Base(name) != name {
		return "", nil, fmt.Errorf("needed library %q is a path; only names are searched for", name)
	}
	for _, d := range libDirs {
		p := path.Join(d, name)
		if data, err := os.ReadFile(p); err == nil {
			return p, data, nil
		}
	}
	return "", nil, fmt.Errorf("needed library %s is in none of %v", name, libDirs)
}
