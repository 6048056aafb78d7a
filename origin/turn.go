package origin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/pion/turn/v5"
)

// TURNConfig configures ServeTURN.
type TURNConfig struct {
	// RelayIP is the address relays are allocated on and told to
	// clients: the server's public IP. Required.
	RelayIP net.IP
	// Secret is the shared secret of the time-limited credentials
	// (webpeer hands them out with peer.json; draft-uberti-behave-turn-rest):
	// a TURN server without credentials is an open relay. Required.
	Secret string
	// Realm is the TURN realm. Default "stampede".
	Realm string
}

// ServeTURN runs a TURN server (RFC 8656, pion/turn) on pc until ctx is
// done, for visitors whose NATs let no direct path through. It relays
// only for clients whose credentials check against cfg.Secret, and never
// to a loopback, private, link-local, shared (100.64.0.0/10),
// multicast or unspecified address: a relay must not become a way into
// the server's own networks.
func ServeTURN(ctx context.Context, pc net.PacketConn, cfg TURNConfig, log *slog.Logger) error {
	if cfg.RelayIP == nil || cfg.RelayIP.IsUnspecified() {
		return errors.New("origin: turn: a relay IP is required (the server's public address)")
	}
	if cfg.Secret == "" {
		return errors.New("origin: turn: a secret is required: without credentials a TURN server is an open relay")
	}
	if cfg.Realm == "" {
		cfg.Realm = "stampede"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := turn.NewServer(turn.ServerConfig{
		Realm:       cfg.Realm,
		AuthHandler: turn.LongTermTURNRESTAuthHandler(cfg.Secret, nil),
		PacketConnConfigs: []turn.PacketConnConfig{{
			PacketConn:            pc,
			RelayAddressGenerator: &turn.RelayAddressGeneratorStatic{RelayAddress: cfg.RelayIP, Address: "0.0.0.0"},
			PermissionHandler: func(client net.Addr, peer net.IP) bool {
				ok := relayable(peer)
				if !ok {
					log.Debug("turn: relay refused", "client", client.String(), "peer", peer.String())
				}
				return ok
			},
		}},
	})
	if err != nil {
		return fmt.Errorf("origin: turn: %w", err)
	}
	<-ctx.Done()
	return s.Close()
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598, carrier-grade NAT

// relayable reports whether a TURN relay may send to ip: a public unicast
// address.
func relayable(ip net.IP) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	return a.IsGlobalUnicast() && !a.IsPrivate() && !sharedSpace.Contains(a)
}
