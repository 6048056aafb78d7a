package wire_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stampede-dev/stampede/wire"
)

// TestAnswer: a host reads the dialer's handshake first, then answers with
// Answer; the dialer's Exchange sees an ordinary handshake, and a mismatch
// found by Answer is said with GOODBYE on both sides, as with Exchange.
func TestAnswer(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*wire.Handshake)
		want   error
	}{
		{"agree", func(h *wire.Handshake) { h.PeerID[0] ^= 1 }, nil},
		{"size", func(h *wire.Handshake) { h.PeerID[0] ^= 1; h.Size++ }, wire.ErrWrongSwarm},
		{"self", func(h *wire.Handshake) {}, wire.ErrSelf},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := net.Pipe()
				defer a.Close()
				defer b.Close()
				dialer, host := testHandshake(), testHandshake()
				c.change(&host)
				dialed := make(chan error, 1)
				go func() {
					_, err := wire.Exchange(t.Context(), a, dialer)
					dialed <- err
				}()
				theirs, err := wire.ReadHandshake(b)
				if err != nil {
					t.Fatal(err)
				}
				if theirs.PeerID != dialer.PeerID {
					t.Fatalf("read %v, want the dialer's handshake", theirs.PeerID)
				}
				err = wire.Answer(t.Context(), b, theirs, host)
				if !errors.Is(err, c.want) {
					t.Errorf("Answer: %v, want %v", err, c.want)
				}
				if c.want == nil {
					// Frames follow on both sides.
					go b.Write([]byte{0, 0, 0, 1, 0})
				}
				if derr := <-dialed; !errors.Is(derr, c.want) {
					t.Errorf("the dialer's Exchange: %v, want %v", derr, c.want)
				}
				if c.want == nil {
					if m, err := wire.NewReader(a, wire.Geometry{}).Read(); err != nil || m.Type() != wire.TypeKeepAlive {
						t.Errorf("after the handshake: %v, %v", m, err)
					}
				}
			})
		})
	}
}

// TestDecline: a handshake of no swarm and GOODBYE 11 reach the dialer as
// a wrong swarm that names the host's reason.
func TestDecline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		dialed := make(chan error, 1)
		go func() {
			_, err := wire.Exchange(t.Context(), a, testHandshake())
			dialed <- err
		}()
		if _, err := wire.ReadHandshake(b); err != nil {
			t.Fatal(err)
		}
		bye := &wire.Goodbye{Reason: wire.GoodbyeNoSwarm, Text: "not here"}
		if err := wire.Decline(t.Context(), b, wire.Handshake{PeerID: wire.NewPeerID()}, bye); err != nil {
			t.Fatal(err)
		}
		err := <-dialed
		if !errors.Is(err, wire.ErrWrongSwarm) || !strings.Contains(err.Error(), "the peer said no such swarm") {
			t.Errorf("the dialer's Exchange: %v, want a wrong swarm and the host's reason", err)
		}
	})
}
