package postgres

import (
	"strconv"
	"strings"

	_ "embed"
)

// DefaultImage is the image daytwo runs for a major version when the
// Database names none: the stock image, as in the official Docker library,
// pinned to a minor release (minors.txt), so the instances of one Database
// never run different minors because their nodes pulled a moving tag at
// different times. A major without a pinned release gets postgres:<major>.
func DefaultImage(major string) string {
	if release, ok := pinned[major]; ok {
		return "postgres:" + release
	}
	return "postgres:" + major
}

//go:embed minors.txt
var minors string

// pinned maps a major to its default release, from minors.txt.
var pinned = func() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(minors, "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			out[f[0]] = f[1]
		}
	}
	return out
}()

// ImageMajor guesses the major version from an image tag written the way the
// official images are tagged ("postgres:16", "ghcr.io/x/postgres:16.4-bookworm").
// It returns "" when the tag does not start with a number, and the caller
// then trusts spec.version.
func ImageMajor(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon < 0 || colon < slash {
		return ""
	}
	tag := image[colon+1:]
	end := 0
	for end < len(tag) && tag[end] >= '0' && tag[end] <= '9' {
		end++
	}
	return tag[:end]
}

// MajorOf returns the major version of a server_version string such as
// "15.14 (Debian 15.14-0+deb12u1)" or "16.4".
func MajorOf(serverVersion string) string {
	v, _, _ := strings.Cut(strings.TrimSpace(serverVersion), " ")
	major, _, _ := strings.Cut(v, ".")
	return major
}

// MinorOf returns the minor release number of a server_version string
// ("17.12 (Debian ...)" is 12) or of an image tag's release
// ("postgres:17.12" is 12), or -1 when it names none.
func MinorOf(version string) int {
	if i := strings.LastIndex(version, ":"); i >= 0 && !strings.Contains(version[i:], " ") {
		version = version[i+1:]
	}
	v, _, _ := strings.Cut(strings.TrimSpace(version), " ")
	_, minor, ok := strings.Cut(v, ".")
	if !ok {
		return -1
	}
	end := 0
	for end < len(minor) && minor[end] >= '0' && minor[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(minor[:end])
	if err != nil {
		return -1
	}
	return n
}
