package postgres

import (
	"strings"
	"testing"
)

// The majors daytwo ships run a pinned release of their own major; one
// without a pin keeps the moving tag.
func TestDefaultImagesArePinnedToAMinor(t *testing.T) {
	for _, major := range []string{"15", "17", "18"} {
		image := DefaultImage(major)
		release := strings.TrimPrefix(image, "postgres:")
		if !strings.HasPrefix(release, major+".") || ImageMajor(image) != major {
			t.Errorf("major %s runs %s by default, want postgres:%s.<minor>", major, image, major)
		}
	}
	if got := DefaultImage("16"); got != "postgres:16" {
		t.Errorf("an unpinned major runs %s, want postgres:16", got)
	}
}

func TestMinorOf(t *testing.T) {
	for in, want := range map[string]int{"17.12 (Debian 17.12-0+deb13u1)": 12, "postgres:17.12": 12, "docker.io/library/postgres:18.6-trixie": 6,
		"postgres:17": -1, "16": -1, "localhost:5000/postgres:15.4": 4} {
		if got := MinorOf(in); got != want {
			t.Errorf("MinorOf(%q) = %d, want %d", in, got, want)
		}
	}
}
