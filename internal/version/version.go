// Package version is cdplane's version. Its one source is the file VERSION beside this package:
// every binary reports it (--version, and its start-up log line), `make image` tags the image with
// it, and both Helm charts carry it as appVersion and version (a test holds them equal).
//
// The commit comes from the build: `make` sets it with
//
//	go build -ldflags "-X cdplane/internal/version.Commit=$(git rev-parse --short=12 HEAD)"
//
// and a plain `go build` in a git checkout records it in the build info, read here.
package version

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// Version is cdplane's version, e.g. "0.1.0": the image tag and the charts' appVersion.
var Version = strings.TrimSpace(file)

// Commit is the commit the binary was built from; empty when not set at build time (String then
// falls back to the build info's VCS revision).
var Commit = ""

// String is the line a binary prints for --version: "<name> <version> (commit <c>, <go version>)".
func String(name string) string {
	return fmt.Sprintf("%s %s (commit %s, %s)", name, Version, commit(), runtime.Version())
}

// commit is Commit, else the VCS revision that `go build` recorded (with "-dirty" for a modified
// tree), else "unknown".
func commit() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// Info is what `cdplane version -o json` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's Info.
func Get() Info {
	return Info{Version: Version, Commit: commit(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}
