package instance_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/testpg"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// A primary told to archive does so through its manager: PostgreSQL's
// archive_command asks the manager, which ships each finished segment
// compressed to the archive, where it reads back whole.
func TestPrimaryArchivesWALThroughItsManager(t *testing.T) {
	ctx := context.Background()
	in := newInstance(t)
	archive := t.TempDir()
	testpg.ChownToRunner(t, archive)
	in.writeFile("config/"+instanceapi.ArchiveFile, `{"directory":"`+archive+`","prefix":"orders/"}`)
	in.start("orders-0")
	in.waitReady(90 * time.Second)
	if got := in.show(ctx, "archive_mode"); got != "on" {
		t.Fatalf("archive_mode = %q, want on", got)
	}

	in.exec(ctx, "CREATE TABLE filler (x text)")
	var switched []string
	for range 4 {
		in.exec(ctx, "INSERT INTO filler SELECT md5(g::text) FROM generate_series(1, 5000) g")
		switched = append(switched, in.superuser("SELECT pg_walfile_name(pg_switch_wal())"))
	}
	last := switched[len(switched)-1]
	eventually(t, 30*time.Second, func() bool {
		return in.superuser("SELECT last_archived_wal FROM pg_stat_archiver") == last
	}, "PostgreSQL reporting "+last+" archived")
	if failed := in.superuser("SELECT failed_count FROM pg_stat_archiver"); failed != "0" {
		t.Fatalf("pg_stat_archiver counts %s failures", failed)
	}
	st := backup.NewDir(archive)
	for _, name := range switched {
		dest := filepath.Join(t.TempDir(), name)
		if err := wal.Fetch(ctx, st, "orders/", name, dest); err != nil {
			t.Fatalf("segment %s: %v", name, err)
		}
		if fi, err := os.Stat(dest); err != nil || fi.Size() != 16<<20 {
			t.Fatalf("segment %s came back with %v bytes (%v)", name, fi, err)
		}
	}
	keys, err := st.List(ctx, "orders/wal/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ".zst") {
			t.Fatalf("%s stored uncompressed", k)
		}
	}
}
