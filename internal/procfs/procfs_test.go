package procfs

import (
	"os"
	"strconv"
	"testing"
)

func TestStatsSeesThisProcess(t *testing.T) {
	for _, st := range Stats() {
		if st.PID != os.Getpid() {
			continue
		}
		if st.Comm == "" || st.Field(3) == "" || st.Field(4) != strconv.Itoa(os.Getppid()) {
			t.Errorf("this process read as %+v; parent %d", st, os.Getppid())
		}
		if _, err := strconv.ParseFloat(st.Field(14), 64); err != nil {
			t.Errorf("user time %q: %v", st.Field(14), err)
		}
		if st.Field(2) != "" || st.Field(len(st.Fields)+3) != "" {
			t.Error("a field outside the line is not empty")
		}
		return
	}
	t.Fatal("Stats lacks this process")
}
