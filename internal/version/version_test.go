package version

import (
	"regexp"
	"runtime"
	"testing"
)

// The version is a release version (what the image is tagged with and the charts carry).
func TestVersionIsSemantic(t *testing.T) {
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(Version) {
		t.Errorf("VERSION %q is not a semantic version x.y.z[-pre]", Version)
	}
}

func TestString(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "abc123"
	want := "cdplane-x " + Version + " (commit abc123, " + runtime.Version() + ")"
	if got := String("cdplane-x"); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
