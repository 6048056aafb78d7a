package origin

import (
	"crypto/ed25519"
	"net/http"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
)

// DefaultTokenTTL is how long a private swarm's token admits its peer
// (Config.TokenTTL).
const DefaultTokenTTL = 24 * time.Hour

// vouch adds to h, the headers of an answer carrying m's manifest or its
// head, what the origin vouches for it with when it signs: its signature
// of m's root and size, its public key, and, in a private swarm, that it
// is private and a token for the peer whose key the request names
// (contract.PeerKeyHeader; none: no token). An answer with a token is for
// its client alone: no shared cache may keep it.
func (s *Server) vouch(h http.Header, r *http.Request, m *manifest.Manifest) {
	key := s.cfg.SignKey
	if key == nil {
		return
	}
	h.Set(contract.SignatureHeader, sign.SignManifest(key, m.Root, m.Size))
	h.Set(contract.KeyHeader, sign.FormatPublicKey(key.Public().(ed25519.PublicKey)))
	if !s.cfg.Private {
		return
	}
	h.Set(contract.PrivateHeader, "1")
	h.Add("Vary", contract.PeerKeyHeader)
	peer, err := sign.ParsePublicKey([]byte(r.Header.Get(contract.PeerKeyHeader)))
	if err != nil {
		return
	}
	tok := sign.Issue(key, m.Root, m.Size, sign.PeerIDOf(peer), time.Now().Add(s.cfg.TokenTTL))
	h.Set(contract.TokenHeader, tok.String())
	h.Set("Cache-Control", "private, no-cache")
}
