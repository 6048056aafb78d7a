//go:build !linux

package bench

import (
	"context"
	"errors"
	"log/slog"
)

var errNoNetns = errors.New("the netns backend needs Linux")

func newNetns(context.Context, *slog.Logger) (Network, error) { return nil, errNoNetns }

func inNetns(string, func() error) error { return errNoNetns }

// ListNetns lists the harness's network namespaces: none off Linux.
func ListNetns(context.Context) ([]string, error) { return nil, nil }

// CleanupStale has nothing to clean off Linux.
func CleanupStale(context.Context, *slog.Logger) ([]string, error) { return nil, nil }
