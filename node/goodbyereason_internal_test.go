package node

import (
	"testing"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// TestGoodbyeReason: the scheduler's disconnects go out with the GOODBYE
// reason of docs/protocol.md.
func TestGoodbyeReason(t *testing.T) {
	for _, c := range []struct {
		d    swarm.Disconnect
		want wire.GoodbyeReason
	}{
		{swarm.Disconnect{Reason: "corrupt", Ban: true}, wire.GoodbyeCorrupt},
		{swarm.Disconnect{Reason: "banned", Ban: true}, wire.GoodbyeCorrupt},
		{swarm.Disconnect{Reason: swarm.DisconnectBadHaveSet}, wire.GoodbyeProtocol},
		{swarm.Disconnect{Reason: swarm.DisconnectBothComplete}, wire.GoodbyeDone},
		{swarm.Disconnect{Reason: swarm.DisconnectTooManyPeers}, wire.GoodbyeTooManyPeers},
		{swarm.Disconnect{Reason: "stalled"}, wire.GoodbyeOther},
		{swarm.Disconnect{Reason: "dont-have"}, wire.GoodbyeOther},
	} {
		if got := goodbyeReason(c.d); got != c.want {
			t.Errorf("goodbyeReason(%+v) = %d, want %d", c.d, got, c.want)
		}
	}
}
