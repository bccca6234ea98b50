package upgrade

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A bundle is one PostgreSQL major's programs made to run inside another
// image: the old image's init container copies its programs, their data
// files and every shared library they load (C library and dynamic loader
// included) into a volume, and writes a wrapper per program that starts
// it through the bundled loader with the bundled libraries only. The new
// image's programs never see those libraries, and the old ones never see
// the new image's: images of different Debian releases work together.
//
// Layout under the bundle directory, for major 15:
//
//	root/usr/lib/postgresql/15/bin/   wrappers (what pg_upgrade runs)
//	root/usr/lib/postgresql/15/real/  the programs
//	root/usr/lib/postgresql/15/lib/   extension modules
//	root/usr/share/postgresql/15/     data files, found from the program's path
//	lib/                              the shared libraries and the loader
//
// The wrappers pass the wrapper's own path as argv[0], so PostgreSQL finds
// its share and lib directories relative to it, and pg_ctl finds the
// postgres wrapper beside it. The bundle must be used at the path it was
// written for: the wrappers name it.

// libDirs are where Debian's loader looks for libraries.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib",
	"lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"}

// jitOnly are modules left out: the JIT provider alone needs LLVM (a
// hundred megabytes), and pg_upgrade's servers never compile a query.
var jitOnly = map[string]bool{"llvmjit.so": true, "llvmjit_types.bc": true}

// Bundle copies major's programs from the file system at root (the old
// image's "/") into dir, and returns the directory of the wrappers, the
// Plan's OldBin.
func Bundle(root, major, dir string) (string, error) {
	pg := filepath.Join("usr/lib/postgresql", major)
	if _, err := os.Stat(filepath.Join(root, pg, "bin", "postgres")); err != nil {
		return "", fmt.Errorf("this image has no PostgreSQL %s programs: %w", major, err)
	}
	dst := filepath.Join(dir, "root")
	// dir may be a mount point: what an earlier run left inside goes, not dir.
	for _, sub := range []string{"root", "lib"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return "", err
		}
	}
	if err := copyTree(filepath.Join(root, pg, "bin"), filepath.Join(dst, pg, "real"), nil); err != nil {
		return "", err
	}
	if err := copyTree(filepath.Join(root, pg, "lib"), filepath.Join(dst, pg, "lib"), jitOnly); err != nil {
		return "", err
	}
	share := filepath.Join("usr/share/postgresql", major)
	if err := copyTree(filepath.Join(root, share), filepath.Join(dst, share), nil); err != nil {
		return "", err
	}
	libs, loader, err := closure(root, filepath.Join(dst, pg, "real"), filepath.Join(dst, pg, "lib"))
	if err != nil {
		return "", err
	}
	libDir := filepath.Join(dir, "lib")
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		return "", err
	}
	for name, path := range libs {
		if err := copyFile(path, filepath.Join(libDir, name)); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dst, pg, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	progs, err := os.ReadDir(filepath.Join(dst, pg, "real"))
	if err != nil {
		return "", err
	}
	for _, p := range progs {
		wrapper := fmt.Sprintf("#!/bin/sh\nexec %s --library-path %s --argv0 \"$0\" %s \"$@\"\n",
			filepath.Join(libDir, filepath.Base(loader)), libDir, filepath.Join(dst, pg, "real", p.Name()))
		if err := os.WriteFile(filepath.Join(bin, p.Name()), []byte(wrapper), 0o755); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// closure resolves, in root, every library the ELF files under dirs need,
// and the dynamic loader they name. A program's missing library is an
// error; an extension module's is not (that module cannot load, as in its
// own image without the package that brings the library).
func closure(root string, dirs ...string) (map[string]string, string, error) {
	libs := map[string]string{}
	loader := ""
	var queue []string
	var missing []string
	need := func(name string, required bool, by string) {
		if _, ok := libs[name]; ok {
			return
		}
		path := findLib(root, name)
		if path == "" {
			if required {
				missing = append(missing, name+" (needed by "+by+")")
			}
			return
		}
		libs[name] = path
		queue = append(queue, path)
	}
	for i, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, "", err
		}
		for _, e := range entries {
			path := filepath.Join(d, e.Name())
			needed, interp, err := elfDeps(path)
			if err != nil || needed == nil && interp == "" {
				continue // not an ELF file (a script, a .bc)
			}
			if interp != "" && loader == "" {
				loader = interp
				need(filepath.Base(interp), true, e.Name())
			}
			for _, n := range needed {
				need(n, i == 0, e.Name())
			}
		}
	}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		needed, _, err := elfDeps(path)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		for _, n := range needed {
			need(n, true, filepath.Base(path))
		}
	}
	if loader == "" {
		return nil, "", errors.New("no program names a dynamic loader")
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, "", fmt.Errorf("libraries not found in the image: %s", strings.Join(missing, ", "))
	}
	return libs, loader, nil
}

// elfDeps is an ELF file's needed libraries and its interpreter; neither
// for a file that is not ELF.
func elfDeps(path string) ([]string, string, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) {
			return nil, "", nil
		}
		return nil, "", err
	}
	defer f.Close() //nolint:errcheck // opened read-only
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, "", err
	}
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, "", err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	return needed, interp, nil
}

// findLib is the file a library name resolves to in root's library
// directories, symbolic links followed; "" when none has it.
func findLib(root, name string) string {
	for _, d := range libDirs {
		path := filepath.Join(root, d, name)
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
			return path
		}
	}
	return ""
}

// copyTree copies the regular files and directories under src to dst,
// following symbolic links (Debian's share directory links into
// /usr/share), except the names in skip.
func copyTree(src, dst string, skip map[string]bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip[d.Name()] {
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		st, err := os.Stat(path)
		if err != nil {
			return nil //nolint:nilerr // a dangling link: nothing PostgreSQL can use
		}
		switch {
		case st.IsDir() && d.Type()&fs.ModeSymlink != 0:
			return copyTree(path, target, skip)
		case st.IsDir():
			return os.MkdirAll(target, 0o755)
		case st.Mode().IsRegular():
			return copyFile(path, target)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close() //nolint:errcheck // opened read-only
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm()|0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
