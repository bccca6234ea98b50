package instance

import (
	"os"
	"testing"
)

// processes reads this test's own process, with its parent, from /proc.
func TestProcessesSeesItself(t *testing.T) {
	p, ok := processes()[os.Getpid()]
	if !ok {
		t.Fatal("processes() lacks this process")
	}
	if p.PPID != os.Getppid() || p.Comm == "" || p.State == "" {
		t.Errorf("this process read as %+v; parent %d", p, os.Getppid())
	}
}
