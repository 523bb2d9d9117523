// Package version is cdplane's version, set at build time:
//
//	go build -ldflags "-X cdplane/internal/version.Version=v0.1.0" ./cmd/...
package version

// Version is the version of this build; "dev" when not set at build time.
var Version = "dev"
