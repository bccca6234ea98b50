package instance_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
)

func TestRefusesAnotherMajorVersion(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	data := filepath.Join(in.root, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	in.writeFile("data/PG_VERSION", "14\n")
	testpg.ChownToRunner(t, in.root)
	in.start("orders-0")
	want := "PostgreSQL 14 but this image runs PostgreSQL " + testpg.Major(t)
	eventually(t, 20*time.Second, func() bool {
		resp, err := in.client().Get(in.url(instanceapi.PathStatus))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		s := in.status()
		return s.Phase == instanceapi.PhaseFailed && strings.Contains(s.Message, want)
	}, "phase Failed naming both versions")
	resp, err := in.client().Get(in.url(instanceapi.PathReadyz))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503", resp.StatusCode)
	}
	in.stop()
}
