package backup

import (
	"regexp"
	"strings"
)

// rowData matches the lines of a PostgreSQL error that can quote table
// rows or statements: DETAIL ("Key (email)=(ann@example.com) already
// exists"), CONTEXT ("COPY t, line 1: \"...\""), the statement pg_restore
// echoes ("Command was: INSERT ..."), and LINE n: with its caret line.
var rowData = regexp.MustCompile(`^\s*(?:pg_restore: )?(?:DETAIL|CONTEXT|Command was|LINE \d+):|^\s*\^\s*$`)

// Scrub drops from PostgreSQL tools' output every line that may carry row
// data, so what reaches a condition, an Event or a termination message
// says what failed without quoting the data.
func Scrub(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !rowData.MatchString(l) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
