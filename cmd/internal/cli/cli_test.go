package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

type exitErr int

func (e exitErr) Error() string { return "" }
func (e exitErr) ExitCode() int { return int(e) }

func TestProgram(t *testing.T) {
	var ran []string
	p := Program{Name: "prog", About: "prog: a test", Commands: []Command{
		{Name: "zeta", Summary: "last", Run: func(ctx context.Context, args []string) error { ran = append(ran, "zeta"); return nil }},
		{Name: "alpha", Summary: "first", Run: func(ctx context.Context, args []string) error {
			ran = append(ran, "alpha "+strings.Join(args, " "))
			return errors.New("failed")
		}},
		{Name: "usage", Summary: "bad flags", Run: func(ctx context.Context, args []string) error { return ErrUsage }},
		{Name: "exit", Summary: "exits 3", Run: func(ctx context.Context, args []string) error { return exitErr(3) }},
	}}
	var b bytes.Buffer
	p.Usage(&b)
	if u := b.String(); !strings.HasPrefix(u, "prog: a test\n") || strings.Index(u, "alpha") > strings.Index(u, "zeta") || !strings.Contains(u, "  alpha      first\n") {
		t.Errorf("usage:\n%s", u)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 2}, {[]string{"--help"}, 0}, {[]string{"nope"}, 2},
		{[]string{"zeta"}, 0}, {[]string{"alpha", "x", "y"}, 1}, {[]string{"usage"}, 2}, {[]string{"exit"}, 3},
	} {
		if got := p.Main(c.args); got != c.want {
			t.Errorf("Main(%q) = %d, want %d", c.args, got, c.want)
		}
	}
	if strings.Join(ran, ";") != "zeta;alpha x y" {
		t.Errorf("ran %q", ran)
	}
}

func TestParseFlags(t *testing.T) {
	fs := NewFlagSet("prog", "cmd", "[--n N]", "More.")
	var out bytes.Buffer
	fs.SetOutput(&out)
	n := fs.Int("n", 0, "a number")
	if help, err := ParseFlags(fs, []string{"--n", "4"}); help || err != nil || *n != 4 {
		t.Fatalf("parse: %v %v %d", help, err, *n)
	}
	if help, err := ParseFlags(fs, []string{"-h"}); !help || err != nil || !strings.Contains(out.String(), "Usage: prog cmd [--n N]\n\nMore.\nFlags:") {
		t.Errorf("help: %v %v\n%s", help, err, out.String())
	}
	if _, err := ParseFlags(fs, []string{"extra"}); !errors.Is(err, ErrUsage) {
		t.Errorf("an argument: %v, want ErrUsage", err)
	}
	if _, err := ParseFlags(fs, []string{"--bad"}); !errors.Is(err, ErrUsage) {
		t.Errorf("a bad flag: %v, want ErrUsage", err)
	}
}
