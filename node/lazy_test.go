package node

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stampede-dev/stampede/wire"
)

// TestHeldStarts: a START that may wait is held with the HAVEs and goes
// out before the next frame sent at once; a HAVE or a STOP of its piece
// while it is held means it never goes out (nor does the STOP); a STOP
// after a START that went out goes at once; a claim the peer need not
// hear goes nowhere.
func TestHeldStarts(t *testing.T) {
	n := &Node{}
	p := &peerConn{n: n, ctrl: make(chan wire.Message, 16), done: make(chan struct{})}
	sent := func() []string {
		var out []string
		for len(p.ctrl) > 0 {
			switch m := (<-p.ctrl).(type) {
			case *wire.Have:
				out = append(out, fmt.Sprint("have ", m.Piece))
			case *wire.Start:
				out = append(out, fmt.Sprint("start ", m.Piece))
			case *wire.Stop:
				out = append(out, fmt.Sprint("stop ", m.Piece))
			default:
				out = append(out, fmt.Sprintf("%T", m))
			}
		}
		return out
	}
	step := func(what string, want ...string) {
		t.Helper()
		if got := sent(); !slices.Equal(got, want) {
			t.Errorf("%s: sent %q, want %q", what, got, want)
		}
	}
	n.announce(p, wire.TypeStart, 1, true, true)
	step("held START")
	n.announce(p, wire.TypeHave, 1, true, false)
	step("HAVE of the held START's piece", "have 1")
	n.announce(p, wire.TypeStart, 2, true, true)
	n.announce(p, wire.TypeStop, 2, true, false)
	step("STOP of a held START")
	n.announce(p, wire.TypeStart, 3, true, false)
	n.announce(p, wire.TypeStop, 3, true, false)
	step("START at once, then STOP", "start 3", "stop 3")
	n.announce(p, wire.TypeHave, 4, true, true)
	n.announce(p, wire.TypeStart, 5, true, true)
	n.announce(p, wire.TypeStart, 6, true, false)
	step("held frames before one at once", "have 4", "start 5", "start 6")
	n.announce(p, wire.TypeStart, 7, false, false)
	n.announce(p, wire.TypeStop, 7, false, false)
	step("claim the peer need not hear")
	n.announce(p, wire.TypeStart, 8, true, true)
	p.sendLazy() // the loop's flush, on its ticks and before an UNCHOKE
	step("flush", "start 8")
	if len(p.lazy) != 0 {
		t.Errorf("%d frames still held after the flush", len(p.lazy))
	}
}
