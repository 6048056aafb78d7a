package main

import (
	"context"
	"net"

	"github.com/spf13/pflag"

	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/rtcpeer"
)

// WebRTC modes of get --webrtc and daemon --webrtc (docs/nat.md).
const (
	webrtcAuto = "auto" // only where the site's STUN sees this peer behind a NAT
	webrtcOn   = "on"   // always: with browsers and every native peer
	webrtcOff  = "off"  // never: TCP only
)

// webrtcUsage is the help of --webrtc.
const webrtcUsage = "trade pieces over WebRTC too, signalled through the trackers, `MODE`: " +
	"auto where this peer cannot be dialled, when the site's STUN server (named in its peer.json) sees it behind a NAT; " +
	"on (--webrtc alone) always, with visitors' browsers too; off: TCP only (docs/nat.md, docs/browser.md)"

// webrtcFlag adds --webrtc to fs: auto by default, on when given alone.
func webrtcFlag(fs *pflag.FlagSet) *string {
	mode := fs.String("webrtc", webrtcAuto, webrtcUsage)
	fs.Lookup("webrtc").NoOptDefVal = webrtcOn
	return mode
}

// parseWebRTC checks --webrtc's mode.
func parseWebRTC(mode string) (string, error) {
	switch mode {
	case webrtcAuto, webrtcOn, webrtcOff:
		return mode, nil
	}
	return "", usageErrorf("--webrtc %q: want auto, on or off", mode)
}

// webrtcHost is get --webrtc's node.Host: the swarm's peers over TCP (on
// listen, as without it) and over WebRTC data channels, signalled through
// the manifest's trackers, so that visitors' browsers trade pieces with
// this download (docs/browser.md), and so that native peers behind NATs
// reach it and it them, by the site's STUN and TURN (docs/nat.md); with
// mode auto, only where the site's STUN sees it behind a NAT. It runs
// until ctx ends.
func webrtcHost(ctx context.Context, listen, mode string, hc host.Config) (node.Host, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	h, err := rtcpeer.NewHost(ctx, ln, rtcpeer.Config{Auto: mode == webrtcAuto}, hc)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return h, nil
}
