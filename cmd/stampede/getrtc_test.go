package main

import (
	"context"
	"testing"

	"github.com/stampede-dev/stampede/host"
)

// TestWebRTCHostPacing: get's --no-pacing reaches the host that --webrtc
// (auto by default) builds, whose pacer every swarm of the process uses.
// Before, that host always paced, and --no-pacing did nothing.
func TestWebRTCHostPacing(t *testing.T) {
	for _, noPacing := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		h, err := webrtcHost(ctx, "127.0.0.1:0", webrtcAuto, host.Config{NoPacing: noPacing})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if paced := h.Pacer() != nil; paced == noPacing {
			t.Errorf("NoPacing %v: the host paces: %v", noPacing, paced)
		}
		cancel()
	}
}
