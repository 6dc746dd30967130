package main

import (
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	got := versionString("v0.4.0", "0123456789abcdef0123")
	if !strings.HasPrefix(got, "troupe v0.4.0 (revision 0123456789ab") || !strings.Contains(got, "linux/") {
		t.Errorf("stamped: %q", got)
	}
	if got := versionString("", ""); !strings.HasPrefix(got, "troupe devel (") {
		t.Errorf("unstamped: %q", got)
	}
}
