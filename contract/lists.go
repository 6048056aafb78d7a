package contract

import (
	"net/netip"
	"strings"

	"github.com/stampede-dev/stampede/pieceset"
)

// FormatPeers is the value of PeersHeader naming peers: "ip:port" (IPv6 in
// brackets), separated by ", ". It is "" for no peers; send no header then.
func FormatPeers(peers []netip.AddrPort) string {
	var b strings.Builder
	for _, p := range peers {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// ParsePeers reads the peers of PeersHeader's values (every field lines
// of it), at most max of them, skipping anything that is not an "ip:port"
// with a port other than 0: a bad entry costs that entry, not the answer.
func ParsePeers(values []string, max int) []string {
	var out []string
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			ap, err := netip.ParseAddrPort(strings.TrimSpace(f))
			if err != nil || ap.Port() == 0 || len(out) == max {
				continue
			}
			out = append(out, ap.String())
		}
	}
	return out
}

// FormatCandidates is the value of CandidatesHeader for ascending piece
// indexes: indexes and inclusive ranges, "0-2,5,9-10".
func FormatCandidates(pieces []int) string { return pieceset.FormatList(pieces) }

// ParseCandidates reads CandidatesHeader's value for a file of n pieces,
// returning at most max indexes in the order written. Anything malformed
// or outside [0, n) is an error (pieceset.ErrBadList).
func ParseCandidates(v string, n, max int) ([]int, error) { return pieceset.ParseList(v, n, max) }
