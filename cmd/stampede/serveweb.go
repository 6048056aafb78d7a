package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/webpeer"
)

// webFlags are serve's flags for the browser peer (docs/browser.md).
type webFlags struct {
	peers *string
	stun  *string
}

func addWebFlags(fs *pflag.FlagSet) webFlags {
	return webFlags{
		peers: fs.String("web-peers", "on", "serve the browser peer at /.well-known/stampede/peer.js for sites that opt in with its script tag (docs/browser.md); "+
			"off is the kill switch: installed service workers stand down when they next check"),
		stun: fs.String("stun", "", "answer STUN binding requests on UDP `HOST:PORT` (e.g. :3478), and name it to the browser peers (default: no STUN)"),
	}
}

// handler returns the browser peer's handler for origin.Config.WebPeer.
func (f webFlags) handler() (http.Handler, error) {
	var cfg webpeer.Config
	switch strings.ToLower(*f.peers) {
	case "on":
	case "off":
		cfg.Off = true
	default:
		return nil, usageErrorf("--web-peers %q: want on or off", *f.peers)
	}
	if *f.stun != "" {
		_, port, err := net.SplitHostPort(*f.stun)
		if err != nil {
			return nil, usageErrorf("--stun %q: want HOST:PORT or :PORT", *f.stun)
		}
		cfg.ICEServers = []string{"stun:{host}:" + port}
	}
	return webpeer.Handler(cfg), nil
}

// startSTUN answers STUN on --stun until ctx is done.
func (f webFlags) startSTUN(ctx context.Context, log *slog.Logger) error {
	if *f.stun == "" {
		return nil
	}
	pc, err := net.ListenPacket("udp", *f.stun)
	if err != nil {
		return err
	}
	go func() {
		if err := origin.ServeSTUN(ctx, pc, log); err != nil {
			log.Error("stun server stopped", "err", err)
		}
	}()
	return nil
}
