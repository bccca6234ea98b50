package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLSN reads PostgreSQL's "X/Y" WAL position.
func ParseLSN(s string) (uint64, bool) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return h<<32 | l, true
}

// FormatLSN writes a WAL position as PostgreSQL does.
func FormatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn))
}
