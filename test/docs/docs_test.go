// Package docs checks the user documentation (README.md and docs/) as a
// reader would use it: every relative link leads somewhere, and every
// daytwo object in a YAML example is one the API server accepts, schema,
// CEL rules and validating webhook included (a server-side dry run against
// envtest with daytwo's webhook served).
package docs_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daytwo-dev/daytwo/internal/testenv"
)

// pages are the documents a user reads, relative to the repository.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	return append([]string{filepath.Join(testenv.RepoRoot(), "README.md")}, docs...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	link    = regexp.MustCompile(`\]\(([A-Za-z0-9_./#-]+)\)`) // a path and a fragment: not a regular expression in a table
	heading = regexp.MustCompile("(?m)^#{1,6} (.+)$")
	fence   = regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```")
)

// anchors are the fragment names GitHub gives a page's headings: lower
// case, punctuation dropped but hyphens, spaces made hyphens.
func anchors(markdown string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(markdown, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// Every relative link of the README and docs/ names a file of the
// repository, and a #fragment one of that page's headings.
func TestLinksResolve(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		text := read(t, page)
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			rel, _ := filepath.Rel(testenv.RepoRoot(), page)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, target)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors(read(t, path))[frag] {
				t.Errorf("%s links to %s, which has no heading #%s", rel, target, frag)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the pattern is wrong")
	}
	t.Logf("%d relative links resolve", checked)
}

// Every daytwo object in a YAML example of the README and docs/, and every
// sample of config/samples, is accepted by the API server as it stands (a
// dry run: nothing is kept).
// Fragments (a spec: without its object) are left out, and counted.
func TestYAMLExamplesAreAccepted(t *testing.T) {
	env, stop, err := testenv.StartOperator()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	ns := env.Namespace(t)
	ctx := context.Background()
	// The YAML of each page's examples, and each sample of config/samples.
	type example struct{ from, yaml string }
	var examples []example
	for _, page := range pages(t) {
		rel, _ := filepath.Rel(testenv.RepoRoot(), page)
		for _, m := range fence.FindAllStringSubmatch(read(t, page), -1) {
			if m[1] == "yaml" {
				examples = append(examples, example{rel, m[2]})
			}
		}
	}
	samples, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	for _, f := range samples {
		if filepath.Base(f) != "kustomization.yaml" {
			examples = append(examples, example{"config/samples/" + filepath.Base(f), read(t, f)})
		}
	}
	accepted, fragments := 0, 0
	for _, ex := range examples {
		r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(ex.yaml)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", ex.from, err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Errorf("%s: an example that is not YAML: %v\n%s", ex.from, err, doc)
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if !strings.HasPrefix(u.GetAPIVersion(), "daytwo.dev/") || u.GetKind() == "" || u.GetName() == "" {
				fragments++
				continue
			}
			u.SetNamespace(ns)
			// Strict: a misspelled field is an error, not a warning.
			if err := env.Client.Create(ctx, u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s: %s %s is refused: %v", ex.from, u.GetKind(), u.GetName(), err)
				continue
			}
			accepted++
		}
	}
	if accepted == 0 {
		t.Fatal("no daytwo object found in the examples: the pattern is wrong")
	}
	t.Logf("%d daytwo objects accepted; %d fragments and other kinds left out", accepted, fragments)
}
