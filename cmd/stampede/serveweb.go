package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/webpeer"
)

// webFlags are serve's flags for the browser peer (docs/browser.md).
type webFlags struct {
	peers      *string
	stun       *string
	turn       *string
	turnSecret *string
}

func addWebFlags(fs *pflag.FlagSet) webFlags {
	return webFlags{
		peers: fs.String("web-peers", "on", "serve the browser peer at /.well-known/stampede/peer.js for sites that opt in with its script tag (docs/browser.md); "+
			"off is the kill switch: installed service workers stand down when they next check"),
		stun: fs.String("stun", "", "answer STUN binding requests on UDP `HOST:PORT` (e.g. :3478), and name it to the browser peers (default: no STUN)"),
		turn: fs.String("turn", "", "run a TURN relay on UDP `IP:PORT`, IP the server's public address, for the browser peers no direct path reaches "+
			"(needs --turn-secret-file; never relays to loopback or private addresses; default: none)"),
		turnSecret: fs.String("turn-secret-file", "", "the TURN relay's shared secret, read from `FILE`: browsers get credentials of it valid for a day"),
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
		if err != nil || port == "0" {
			return nil, usageErrorf("--stun %q: want HOST:PORT or :PORT, a fixed port (peer.json names it to the visitors)", *f.stun)
		}
		cfg.ICEServers = []string{"stun:{host}:" + port}
	}
	if *f.turn != "" || *f.turnSecret != "" {
		_, port, err := f.turnAddr()
		if err != nil {
			return nil, err
		}
		secret, err := f.secret()
		if err != nil {
			return nil, err
		}
		cfg.TURN = &webpeer.TURN{URL: "turn:{host}:" + port, Secret: secret}
	}
	return webpeer.Handler(cfg), nil
}

// turnAddr checks --turn: a specific IP (the relays' public address) and
// a port.
func (f webFlags) turnAddr() (net.IP, string, error) {
	host, port, err := net.SplitHostPort(*f.turn)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || ip.IsUnspecified() || port == "0" {
		return nil, "", usageErrorf("--turn %q: want IP:PORT, IP the server's public address (TURN tells it to clients), a fixed port (peer.json names it)", *f.turn)
	}
	return ip, port, nil
}

// secret reads --turn-secret-file.
func (f webFlags) secret() (string, error) {
	if *f.turnSecret == "" {
		return "", usageErrorf("--turn needs --turn-secret-file: a TURN relay without credentials is an open relay")
	}
	b, err := os.ReadFile(*f.turnSecret)
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s, nil
	}
	return "", usageErrorf("--turn-secret-file %s: %v (want a non-empty secret)", *f.turnSecret, err)
}

// startSTUN answers STUN on --stun, and TURN on --turn, until ctx is
// done; srv's /metrics counts the TURN relay's work.
func (f webFlags) startSTUN(ctx context.Context, srv *origin.Server, log *slog.Logger) error {
	if *f.stun != "" {
		pc, err := net.ListenPacket("udp", *f.stun)
		if err != nil {
			return err
		}
		go func() {
			if err := origin.ServeSTUN(ctx, pc, log); err != nil {
				log.Error("stun server stopped", "err", err)
			}
		}()
	}
	if *f.turn == "" {
		return nil
	}
	ip, _, err := f.turnAddr()
	if err != nil {
		return err
	}
	secret, err := f.secret()
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", *f.turn)
	if err != nil {
		return err
	}
	stats := new(origin.TURNStats)
	if err := srv.AddTURN(stats); err != nil {
		pc.Close()
		return err
	}
	go func() {
		if err := origin.ServeTURN(ctx, pc, origin.TURNConfig{RelayIP: ip, Secret: secret, Stats: stats}, log); err != nil {
			log.Error("turn server stopped", "err", err)
		}
	}()
	return nil
}
