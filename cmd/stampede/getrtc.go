package main

import (
	"context"
	"log/slog"
	"net"

	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/rtcpeer"
)

// webrtcHost is get --webrtc's node.Host: the swarm's peers over TCP (on
// listen, as without it) and over WebRTC data channels, signalled through
// the manifest's trackers, so that visitors' browsers trade pieces with
// this download (docs/browser.md), and so that native peers behind NATs
// reach it and it them, by the site's STUN and TURN (docs/nat.md). It
// runs until ctx ends.
func webrtcHost(ctx context.Context, listen string, upRate int64, log *slog.Logger) (node.Host, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	h, err := rtcpeer.NewHost(ctx, ln, rtcpeer.Config{}, upRate, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return h, nil
}
