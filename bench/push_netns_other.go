//go:build !linux

package bench

import (
	"context"
	"log/slog"
)

// pushNet is a push scenario's cluster: Linux only (push_netns_linux.go).
type pushNet struct {
	origin *Host
	racks  [][]*Host
	rackDC []int
	links  []*PushLink
}

func newPushNet(context.Context, *PushTopology, int64, string, *slog.Logger) (*pushNet, error) {
	return nil, errNoNetns
}

func (n *pushNet) Name() string     { return BackendNetns }
func (n *pushNet) AppShaping() bool { return false }
func (n *pushNet) AddHost(context.Context, string, int64, int64) (*Host, error) {
	return nil, errNoNetns
}
func (n *pushNet) Close() error                           { return nil }
func (n *pushNet) all() []*Host                           { return nil }
func (n *pushNet) readLinks(context.Context) []linkSample { return nil }
