//go:build !linux

package bench

import (
	"context"
	"log/slog"
)

// churnNet is a churn scenario's network: Linux only (churn_net_linux.go).
type churnNet struct {
	origin *Host
	hosts  [][]*Host
}

type originOnly struct{ *churnNet }

func (originOnly) AppShaping() bool { return false }

func newChurnNet(context.Context, []Class, int64, string, *slog.Logger) (*churnNet, error) {
	return nil, errNoNetns
}

func (n *churnNet) Name() string     { return BackendNetns }
func (n *churnNet) AppShaping() bool { return true }
func (n *churnNet) AddHost(context.Context, string, int64, int64) (*Host, error) {
	return nil, errNoNetns
}
func (n *churnNet) Close() error                                        { return nil }
func (n *churnNet) originTxBytes(context.Context) (int64, error)        { return 0, errNoNetns }
func cleanupStaleChurn(context.Context, *slog.Logger) ([]string, error) { return nil, nil }
