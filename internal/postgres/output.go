package postgres

import "strings"

// LastLines is the last n lines of a PostgreSQL program's output, joined
// on one line: where its own words for a failure usually are.
func LastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}
