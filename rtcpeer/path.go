package rtcpeer

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/stampede-dev/stampede/node"
)

// A data channel answers the node's questions of its path (node.PathConn)
// from its peer connection: how ICE reached the peer (the selected
// candidate pair) and the round trip (the least of SCTP's smoothed RTT and
// ICE's consent checks, sampled on each question). The bytes not yet
// acknowledged it does not tell (Unacked).
var _ node.PathConn = (*conn)(nil)

// Path is how the channel reaches its peer: node.PathDirect,
// node.PathPunched or node.PathRelayed, as its ICE candidate pair was when
// it opened.
func (c *conn) Path() string { return c.path }

// Unacked is -1, "cannot tell", though the channel's buffered amount
// counts what the other end has not acknowledged (SCTP keeps a message
// until then, as TCP's send buffer does). The node's upload turns wait on
// that reading before a connection's next piece, and a browser's SCTP
// acknowledges late the end of each piece sent so: one native seed filled
// one browser in 1.28-1.39 s a MiB with the reading and 1.13-1.14 s
// without, the channel's own rate (1135 ms; docs/browser.md, "The p90").
// What a channel holds is bounded without it: writes block once SCTP's
// congestion window is full (EnableDataChannelBlockWrite).
func (c *conn) Unacked() int { return -1 }

// MinRTT is the least round trip sampled so far: SCTP's smoothed RTT
// (which counts the queue ahead of each sample) and ICE's consent checks,
// read now and folded into the minimum.
func (c *conn) MinRTT() time.Duration {
	if sctp := c.pc.SCTP(); sctp != nil {
		c.rtt.sample(time.Duration(sctp.Stats().SmoothedRoundTripTime * float64(time.Second)))
		if s, ok := sctp.Transport().ICETransport().GetSelectedCandidatePairStats(); ok {
			c.rtt.sample(time.Duration(s.CurrentRoundTripTime * float64(time.Second)))
		}
	}
	return c.rtt.get()
}

// minDuration is a running minimum of positive samples; 0 before any.
type minDuration struct{ v atomic.Int64 }

func (m *minDuration) sample(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		old := m.v.Load()
		if old != 0 && time.Duration(old) <= d {
			return
		}
		if m.v.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (m *minDuration) get() time.Duration { return time.Duration(m.v.Load()) }

// pathOf classifies pc's selected candidate pair (classify), the
// descriptions telling whether each end is behind a NAT.
func pathOf(pc *webrtc.PeerConnection) (path string, pair *webrtc.ICECandidatePair) {
	sctp := pc.SCTP()
	if sctp == nil {
		return node.PathDirect, nil
	}
	pair, err := sctp.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || pair == nil || pair.Local == nil || pair.Remote == nil {
		return node.PathDirect, nil
	}
	var myHosts, mine, theirHosts, theirs []string
	if d := pc.LocalDescription(); d != nil {
		myHosts, mine = endOf(d.SDP)
	}
	if d := pc.RemoteDescription(); d != nil {
		theirHosts, theirs = endOf(d.SDP)
	}
	return classify(asSeen(pair.Local, myHosts), asSeen(pair.Remote, theirHosts), mine, theirs), pair
}

// asSeen is c's type, except that a reflexive candidate at one of its
// end's host addresses is that host candidate: ICE learns a
// peer-reflexive candidate when a check comes before the description that
// names it, and a public host's server-reflexive address is its own.
func asSeen(c *webrtc.ICECandidate, hosts []string) webrtc.ICECandidateType {
	if (c.Typ == webrtc.ICECandidateTypeSrflx || c.Typ == webrtc.ICECandidateTypePrflx) && slices.Contains(hosts, c.Address) {
		return webrtc.ICECandidateTypeHost
	}
	return c.Typ
}

// classify is how a candidate pair of types local and remote reaches the
// peer, mine and theirs being the public addresses each end's NAT gave it
// (endOf; none: not behind a NAT, or no STUN to tell):
//   - through a relay on either end: relayed;
//   - to or from an address a NAT mapped (server- or peer-reflexive):
//     punched;
//   - between host addresses: direct when neither end is behind a NAT, or
//     both are behind the same one (a public address in common: the same
//     network); else one end's packets cross its NAT, and the other end
//     sees them come from a mapped address: punched, as it says.
func classify(local, remote webrtc.ICECandidateType, mine, theirs []string) string {
	switch {
	case local == webrtc.ICECandidateTypeRelay || remote == webrtc.ICECandidateTypeRelay:
		return node.PathRelayed
	case local != webrtc.ICECandidateTypeHost || remote != webrtc.ICECandidateTypeHost:
		return node.PathPunched
	case len(mine) == 0 && len(theirs) == 0:
		return node.PathDirect
	}
	for _, a := range mine {
		for _, b := range theirs {
			if a == b {
				return node.PathDirect
			}
		}
	}
	return node.PathPunched
}

// endOf reads the candidates of a session description: the end's host
// addresses, and the public addresses a NAT maps it to, as STUN told it
// (its server-reflexive candidates' that are none of its host
// addresses).
func endOf(sdp string) (hosts, nat []string) {
	var srflx []string
	for line := range strings.Lines(sdp) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "a=candidate:")
		if !ok {
			continue
		}
		// foundation component transport priority address port typ TYPE ...
		f := strings.Fields(rest)
		if len(f) < 8 || f[6] != "typ" {
			continue
		}
		switch f[7] {
		case "host":
			hosts = append(hosts, f[4])
		case "srflx":
			srflx = append(srflx, f[4])
		}
	}
	for _, a := range srflx {
		if !slices.Contains(hosts, a) && !slices.Contains(nat, a) {
			nat = append(nat, a)
		}
	}
	return hosts, nat
}
