package main

import (
	"context"
	"fmt"
	goruntime "runtime"
	"runtime/debug"
	"strings"
)

// version and revision are stamped by release builds (scripts/release.sh,
// deploy/build-image.sh):
//
//	go build -ldflags "-X main.version=v0.4.0 -X main.revision=$(git rev-parse HEAD)"
//
// Without them, the version is "devel" and the revision comes from what
// go build records of the checkout (vcs.revision; go run records none).
var version, revision string

func runVersion(ctx context.Context, args []string) error {
	fmt.Println(versionString(version, revision))
	return nil
}

// versionString describes this binary: "troupe v0.4.0 (revision
// 1a2b3c4d5e6f, 2026-11-25T10:00:00Z, modified; go1.26.8 linux/amd64)".
func versionString(version, revision string) string {
	var at string
	modified := false
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version // go install troupe/cmd/troupe@v0.4.0
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if revision == "" {
					revision = s.Value
				}
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version == "" {
		version = "devel"
	}
	var parts []string
	if revision != "" {
		parts = append(parts, "revision "+revision[:min(12, len(revision))])
	} else {
		parts = append(parts, "no VCS revision: built by go run, or with -buildvcs=false; scripts/release.sh stamps both")
	}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	goVersion := goruntime.Version()
	if ok && bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	return fmt.Sprintf("troupe %s (%s; %s %s/%s)", version, strings.Join(parts, ", "), goVersion, goruntime.GOOS, goruntime.GOARCH)
}
