// Command stampede turns a flash crowd into the delivery network: it serves
// files with verified manifests and downloads them in verified pieces.
// Run "stampede help" for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdEnv())
	stop()
	os.Exit(code)
}
