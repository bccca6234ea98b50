package testpg

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// holderEnv makes the test binary, run again, a process that takes
// FreePort's ports and holds them until its stdin closes.
const holderEnv = "DAYTWO_TEST_FREEPORT_HOLDER"

const heldPorts = 500

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		w := bufio.NewWriter(os.Stdout)
		for range heldPorts {
			_, _ = w.WriteString(strconv.Itoa(FreePort(fatalTB{})) + "\n")
		}
		_ = w.Flush()
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test is done
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fatalTB is the testing.TB of the holder process, which is no test.
type fatalTB struct{ testing.TB }

func (fatalTB) Helper()               {}
func (fatalTB) Fatal(args ...any)     { panic(args) }
func (fatalTB) Fatalf(string, ...any) { panic("fatalf") }

// Test binaries of several packages, and the runs of one package against
// several PostgreSQL versions, run at once (make test): a port FreePort
// gives one process must not be given to another before the first has
// bound it. With 500 ports held by another process out of about 17,000,
// 500 picks here would collide about 15 times if they did not see them.
func TestFreePortIsNotGivenToTwoProcesses(t *testing.T) {
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), holderEnv+"=1")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = holder.Wait()
	}()
	theirs := map[int]bool{}
	lines := bufio.NewScanner(stdout)
	for len(theirs) < heldPorts && lines.Scan() {
		p, err := strconv.Atoi(lines.Text())
		if err != nil {
			t.Fatalf("the holder printed %q", lines.Text())
		}
		theirs[p] = true
	}
	if len(theirs) != heldPorts {
		t.Fatalf("the holder gave %d ports, want %d: %v", len(theirs), heldPorts, lines.Err())
	}
	both := 0
	for range heldPorts {
		if theirs[FreePort(t)] {
			both++
		}
	}
	if both > 0 {
		t.Fatalf("%d of %d ports were given to this process and to another one that holds them", both, heldPorts)
	}
}
