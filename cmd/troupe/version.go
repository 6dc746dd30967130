package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print the troupe version", run: func(ctx context.Context, args []string) error {
		v := "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		fmt.Println("troupe", v)
		return nil
	}})
}
