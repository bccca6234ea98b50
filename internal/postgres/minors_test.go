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
