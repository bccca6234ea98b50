package instance_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/testpg"
)

// An upgrade stopped between the two renames of its swap (the node died):
// the data directory is missing and the old one waits beside it. The next
// start puts it back instead of making an empty cluster.
func TestInterruptedUpgradeSwapPutsTheOldDataBack(t *testing.T) {
	t.Parallel()
	in, before, _ := upgradeSetup(t, map[string]string{}, nil)
	data := filepath.Join(in.root, "data")
	if err := os.Rename(data, data+".15"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data+".upgrading", "base"), 0o700); err != nil {
		t.Fatal(err)
	}
	testpg.ChownToRunner(t, in.root)
	in.extraFlags = []string{"--bin-dir", testpg.BinDirOf(t, "15")}
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	if after := checksum(t, in); after != before {
		t.Fatalf("checksum %s after the interrupted swap, %s before: the start made a new cluster", after, before)
	}
	for _, left := range []string{".15", ".upgrading"} {
		if _, err := os.Stat(data + left); !os.IsNotExist(err) {
			t.Fatalf("%s left behind (%v)", data+left, err)
		}
	}
	in.stop()
}
