// Command release builds the images of a daytwo release without Docker,
// with go-containerregistry: the operator image (which is also the
// instance manager's) for each platform, as one multi-platform index,
// each with an SPDX SBOM of its binary attached as an OCI referrer. It
// pushes them to a registry, or keeps them in an OCI layout, and writes
// dist/install.yaml with the image pinned by digest. hack/release.sh
// (make release) runs it, then packages and pushes the chart and builds
// the plugin.
//
// It is its own Go module: the release's tools stay out of the operator's
// dependencies.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type options struct {
	version, repository, image, platforms, dist, root string
	insecure, push                                    bool
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "The release's version, v-prefixed semver (v0.1.0).")
	flag.StringVar(&o.repository, "repository", "", "The image repository, e.g. ghcr.io/daytwo-dev/daytwo or 127.0.0.1:5000/daytwo.")
	flag.StringVar(&o.image, "image", "", "Build this one image (repository:tag, any tag) instead of repository:version, "+
		"with no install.yaml: make docker-build and docker-push IMG=... where Docker does not run.")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "The images' platforms.")
	flag.StringVar(&o.dist, "dist", "dist", "Where the release's files go.")
	flag.StringVar(&o.root, "root", ".", "The repository's root.")
	flag.BoolVar(&o.insecure, "insecure", false, "Push over plain HTTP (always for a registry on 127.0.0.1 or localhost).")
	flag.BoolVar(&o.push, "push", true, "Push the images; false keeps them in <dist>/oci only.")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	ref := o.repository + ":" + o.version
	switch {
	case o.image != "":
		ref = o.image
		if o.version == "" {
			o.version = "dev"
		}
	case !semver(o.version) || strings.Contains(o.version, "+"):
		return fmt.Errorf("--version %q: want a v-prefixed semantic version such as v0.1.0, without build metadata (+...: no image tag holds it)", o.version)
	case o.repository == "":
		return errors.New("--repository is required")
	}
	var opts []name.Option
	if o.insecure || local(ref) {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return fmt.Errorf("the image %s: %w", ref, err)
	}
	created, revision, err := commit(o.root)
	if err != nil {
		return err
	}
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	var sboms []sbomFor
	for _, p := range strings.Split(o.platforms, ",") {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return fmt.Errorf("--platforms %q: %w", p, err)
		}
		bin := filepath.Join(o.dist, "bin", fmt.Sprintf("daytwo_%s_%s", plat.OS, plat.Architecture))
		if err := build(o, plat, bin); err != nil {
			return err
		}
		img, err := image(o, plat, bin, created, revision)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
		doc, err := spdx(bin, o.version, created)
		if err != nil {
			return err
		}
		if err := os.WriteFile(bin+".spdx.json", doc, 0o644); err != nil {
			return err
		}
		sboms = append(sboms, sbomFor{img: img, doc: doc})
		fmt.Printf("release: built %s for %s\n", tag, plat)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	lp, err := layout.Write(filepath.Join(o.dist, "oci"), empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version})); err != nil {
		return err
	}
	pinned := tag.Context().Digest(digest.String()).String()
	if o.push {
		auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
		if err := remote.WriteIndex(tag, idx, auth, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("pushing %s: %w", tag, err)
		}
		for _, s := range sboms {
			if err := s.push(ctx, tag.Context(), auth); err != nil {
				return err
			}
		}
		fmt.Printf("release: pushed %s (%s) with %d SBOMs\n", tag, pinned, len(sboms))
	}
	if err := os.WriteFile(filepath.Join(o.dist, "image.txt"), []byte(pinned+"\n"), 0o644); err != nil {
		return err
	}
	if o.image != "" {
		return nil
	}
	return installYAML(o, pinned)
}

// local is a reference to a registry on this machine, spoken to over
// plain HTTP.
func local(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	host, _, _ = strings.Cut(host, ":")
	return host == "localhost" || host == "127.0.0.1"
}

// semver is a v-prefixed semantic version.
func semver(v string) bool {
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if !strings.HasPrefix(v, "v") || len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 64); err != nil || (len(p) > 1 && p[0] == '0') {
			return false
		}
	}
	return true
}

// commit is the commit's time (the images' creation time, so two builds of
// one commit are the same images) and hash.
func commit(root string) (time.Time, string, error) {
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct %H").Output()
	if err != nil {
		return time.Time{}, "", fmt.Errorf("git log: %w", err)
	}
	f := strings.Fields(string(out))
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	return time.Unix(sec, 0).UTC(), f[1], nil
}

// build cross-compiles the daytwo binary, static, with the version.
func build(o options, p *v1.Platform, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-s -w -X github.com/daytwo-dev/daytwo/internal/version.Version="+o.version, "-o", out, "./cmd/daytwo")
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-buildvcs=false")
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	if abs, err := filepath.Abs(out); err == nil {
		cmd.Args[len(cmd.Args)-2] = abs
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building daytwo for %s: %w", p, err)
	}
	return nil
}

// image is the binary on an empty base, as hack/images.sh and the
// Dockerfile make it: /daytwo, a world-writable /tmp, user 65532.
func image(o options, p *v1.Platform, bin string, created time.Time, revision string) (v1.Image, error) {
	content, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: created},
		{Name: "daytwo", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(content)), ModTime: created},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.Created = p.OS, p.Architecture, p.Variant, v1.Time{Time: created}
	cf.Config.Entrypoint = []string{"/daytwo"}
	cf.Config.User = "65532:65532"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "daytwo",
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/daytwo-dev/daytwo",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// sbomFor is a platform image's SBOM, pushed as an artifact whose subject
// is that image: the OCI referrers API finds it (oras discover, cosign
// tree).
type sbomFor struct {
	img v1.Image
	doc []byte
}

const spdxMediaType = "application/spdx+json"

func (s sbomFor) push(ctx context.Context, repo name.Repository, auth remote.Option) error {
	desc, err := partial(s.img)
	if err != nil {
		return err
	}
	art, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: static.NewLayer(s.doc, spdxMediaType), MediaType: spdxMediaType})
	if err != nil {
		return err
	}
	art = mutate.ConfigMediaType(art, types.MediaType(spdxMediaType))
	art = mutate.Subject(art, desc).(v1.Image)
	d, err := art.Digest()
	if err != nil {
		return err
	}
	return remote.Write(repo.Digest(d.String()), art, auth, remote.WithContext(ctx))
}

// partial is img's descriptor, for a subject.
func partial(img v1.Image) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: d}, nil
}

// installYAML renders config/default with the image pinned by digest.
func installYAML(o options, pinned string) error {
	out, err := exec.Command("kubectl", "kustomize", filepath.Join(o.root, "config", "default")).Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize config/default: %w", err)
	}
	if !bytes.Contains(out, []byte("localhost/daytwo:dev")) {
		return errors.New("config/default names no localhost/daytwo:dev image to replace")
	}
	out = bytes.ReplaceAll(out, []byte("localhost/daytwo:dev"), []byte(pinned))
	// Each release's CRDs say which release they are.
	stamp := regexp.MustCompile(`(?m)^(    controller-gen\.kubebuilder\.io/version: .*)$`)
	if n := len(stamp.FindAll(out, -1)); n != 3 {
		return fmt.Errorf("config/default holds %d CRDs with controller-gen's annotation, want 3", n)
	}
	out = stamp.ReplaceAll(out, []byte("$1\n    daytwo.dev/release: "+o.version))
	header := fmt.Sprintf("# daytwo %s: kubectl apply --server-side -f install.yaml\n", o.version)
	return os.WriteFile(filepath.Join(o.dist, "install.yaml"), append([]byte(header), out...), 0o644)
}

// checksum is a file's SHA-256, for SBOM and checksum lists.
func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
