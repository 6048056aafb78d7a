package rtcpeer

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/webrtc/v4"
)

// natType is what a peer knows of the NAT in front of it (probeNAT).
type natType int

const (
	natUnknown   natType = iota // no STUN server answered
	natNone                     // a public address: servers see the socket's own
	natMapping                  // behind a NAT that maps a socket to one address for every destination (full-cone, port-restricted)
	natSymmetric                // behind a NAT that maps it anew for each destination
	natBehind                   // behind a NAT, of a kind one server cannot tell
)

func (k natType) String() string {
	return [...]string{"unknown", "none", "mapping", "symmetric", "behind"}[k]
}

// needsRelay reports whether the peer should offer TURN relay candidates.
// Only a peer behind a symmetric NAT needs them: its mapping for a peer
// is not the one STUN saw, so a peer behind a port-restricted or
// symmetric NAT never lets its checks in; its relay (reached from the
// other peer's own mapping) is the path. Any other peer's relay would
// carry nothing the symmetric end's does not, and the relay refuses to
// send to its own address (relay to relay), so it would only use up the
// site's allocations (8 per source). Not knowing, a peer offers them.
func (k natType) needsRelay() bool { return k != natNone && k != natMapping }

// Probe timings: each server is asked again every probeRetry, for
// probeWait at most.
const (
	probeWait  = 2 * time.Second
	probeRetry = 300 * time.Millisecond
)

// probeNAT asks the STUN servers among ice (a TURN server answers STUN
// binding requests too, at its own address) from one UDP socket which
// address each sees it from: RFC 5780's test of the mapping. The same
// address as the socket's own is no NAT; the same other address from two
// servers is a NAT whose mapping does not depend on the destination;
// different ones, a symmetric NAT.
func probeNAT(ctx context.Context, ice []webrtc.ICEServer) natType {
	servers := stunServers(ctx, ice)
	if len(servers) == 0 {
		return natUnknown
	}
	pc, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		return natUnknown
	}
	defer pc.Close()
	seen := probe(ctx, pc, servers)
	if len(seen) == 0 {
		return natUnknown
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if own := localAddrs(); seen[0].Port() == uint16(port) && slices.Contains(own, seen[0].Addr()) {
		return natNone
	}
	switch {
	case len(seen) < 2:
		return natBehind
	case seen[0] == seen[1]:
		return natMapping
	}
	return natSymmetric
}

// probe sends a binding request to each server, again until it answers,
// and returns the mapped addresses answered, one per server that did, in
// the order they came.
func probe(ctx context.Context, pc net.PacketConn, servers []*net.UDPAddr) []netip.AddrPort {
	req := make([]*stun.Message, len(servers))
	for i := range servers {
		req[i] = stun.MustBuild(stun.TransactionID, stun.BindingRequest)
	}
	got := make([]netip.AddrPort, len(servers))
	answered := 0
	end := time.Now().Add(probeWait)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	buf := make([]byte, 1500)
	for answered < len(servers) && time.Now().Before(end) && ctx.Err() == nil {
		for i, s := range servers {
			if !got[i].IsValid() {
				pc.WriteTo(req[i].Raw, s)
			}
		}
		retry := time.Now().Add(probeRetry)
		if end.Before(retry) {
			retry = end
		}
		pc.SetReadDeadline(retry)
		for answered < len(servers) {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				break // the deadline: ask again
			}
			m := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
			if m.Decode() != nil {
				continue
			}
			for i := range req {
				if got[i].IsValid() || m.TransactionID != req[i].TransactionID {
					continue
				}
				var xor stun.XORMappedAddress
				if xor.GetFrom(m) != nil {
					continue
				}
				if a, ok := netip.AddrFromSlice(xor.IP); ok {
					got[i] = netip.AddrPortFrom(a.Unmap(), uint16(xor.Port))
					answered++
				}
			}
		}
	}
	var out []netip.AddrPort
	for _, a := range got {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// stunServers are the distinct UDP addresses of the STUN and TURN servers
// of ice, IPv4 only (the probe's socket).
func stunServers(ctx context.Context, ice []webrtc.ICEServer) []*net.UDPAddr {
	var out []*net.UDPAddr
	for _, s := range ice {
		for _, raw := range s.URLs {
			u, err := stun.ParseURI(raw)
			if err != nil || u.Proto == stun.ProtoTypeTCP || u.Scheme == stun.SchemeTypeSTUNS || u.Scheme == stun.SchemeTypeTURNS {
				continue
			}
			ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", u.Host)
			if err != nil || len(ips) == 0 {
				continue
			}
			a := net.UDPAddrFromAddrPort(netip.AddrPortFrom(ips[0].Unmap(), uint16(u.Port)))
			if !slices.ContainsFunc(out, func(b *net.UDPAddr) bool { return b.String() == a.String() }) {
				out = append(out, a)
			}
		}
	}
	return out
}

// localAddrs are this host's interface addresses.
func localAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
