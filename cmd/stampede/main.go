// Command stampede turns a flash crowd into the delivery network: it serves
// files with verified manifests and downloads them in verified pieces.
// Run "stampede help" for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/stampede-dev/stampede/internal/metrics"
)

func main() {
	metrics.Version = version // stampede_build_info's
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], stdEnv())
	stop()
	os.Exit(code)
}

// signalCause is why a command's context ended when SIGINT or SIGTERM
// stopped it. A command that fails because of it exits 128 plus the signal's
// number, as a shell reports a process the signal killed (130 for Ctrl-C).
type signalCause struct{ sig syscall.Signal }

func (c signalCause) Error() string {
	if c.sig == syscall.SIGINT {
		return "interrupted"
	}
	return "terminated"
}

// signalContext returns a context that ends, with a signalCause, on the first
// SIGINT or SIGTERM. Signals are then left to their default action, so a
// second Ctrl-C ends a process whose shutdown hangs.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(signalCause{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
