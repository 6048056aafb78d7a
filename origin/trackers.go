package origin

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/tracker"
)

// Trackers in manifests. A manifest's trackers are not part of its root, so
// they are filled in as each manifest goes out: the embedded tracker is named
// by the scheme and Host the client used to reach this origin, which only
// the request knows. The cached manifests (in memory and on disk) never carry
// trackers, so a changed Host, flag or restart can never serve a stale one.

// checkTrackerURLs checks the announce URLs of Config.Trackers.
func checkTrackerURLs(urls []string) error {
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("origin: tracker %q: want an http:// or https:// URL", s)
		}
	}
	return nil
}

// admit has the embedded tracker track e's file (tracker.Tracker.Admit):
// one given tracker.Config.OnlyAdmitted, as "stampede serve" runs it
// unless told --open-tracker, tracks the files this origin serves, and
// no other. Every manifest sent out is admitted, before the client can
// announce to its swarm.
func (s *Server) admit(e *entry) {
	if t := s.cfg.Tracker; t != nil {
		t.Admit(e.m.Root, e.m.Size)
	}
}

// trackersFor returns the trackers to name in a manifest served for r.
func (s *Server) trackersFor(r *http.Request) []string {
	if s.cfg.Tracker == nil {
		return s.cfg.Trackers
	}
	host := r.Host
	if host == "" { // HTTP/1.0 without Host: name the address it came in on
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			host = a.String()
		}
	}
	if host == "" {
		return s.cfg.Trackers
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	// Behind a proxy that terminates TLS, r.TLS is nil and the scheme comes
	// out as http: publish the proxy's URL with Config.Trackers instead.
	u := url.URL{Scheme: scheme, Host: host, Path: tracker.WellKnownPath}
	return append([]string{u.String()}, s.cfg.Trackers...)
}

// publishedBody is a manifest's JSON with a list of trackers in it, and
// the same compressed with gzip for the clients that accept it.
type publishedBody struct {
	trackers string // joined by newlines
	body     []byte
	gzipped  []byte
	head     []byte // the manifest head (HeadQuery)
}

// bodyWith returns e's manifest as served with trackers. The last such body
// is kept, compressed once: almost every request names the same Host, and
// at the start of a crowd they all come at once (the manifest of a 100 GiB
// file is about a megabyte).
func (e *entry) bodyWith(trackers []string) (*publishedBody, error) {
	key := strings.Join(trackers, "\n")
	if p := e.published.Load(); p != nil && p.trackers == key {
		return p, nil
	}
	body := e.body
	m := *e.m
	m.Trackers = trackers
	if len(trackers) > 0 {
		var err error
		if body, err = m.MarshalJSON(); err != nil {
			return nil, fmt.Errorf("origin: encode manifest: %w", err)
		}
	}
	head, err := m.Head().MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("origin: encode manifest head: %w", err)
	}
	p := &publishedBody{trackers: key, body: body, gzipped: gzipped(body), head: head}
	e.published.Store(p)
	return p, nil
}

// addManifestHead answers a full response to a HEAD that asks for it
// (contract.WantHeader) with the head of the manifest entry looks up, as its
// manifest URL serves it to r, in contract.ManifestHeadHeader. entry returns the
// manifest of the version being answered if it is known (cached), else nil:
// the head is never computed for this, and without it the client asks the
// manifest URL as before. Piece answers never carry it.
func (s *Server) addManifestHead(h http.Header, r *http.Request, entry func() *entry) {
	if r.Method != http.MethodHead || !httphdr.HasToken(r.Header.Values(contract.WantHeader), contract.WantManifestHead) {
		return
	}
	e := entry()
	if e == nil {
		return
	}
	pub, err := e.bodyWith(s.trackersFor(r))
	if err != nil {
		s.log.Warn("answering without the manifest's head", "err", err)
		return
	}
	s.admit(e)
	if v, ok := contract.EncodeManifestHead(pub.head); ok {
		h.Set(contract.ManifestHeadHeader, v)
		s.vouch(h, r, e.m)
	}
}

// gzipped returns b compressed with gzip.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b) // writes to a bytes.Buffer do not fail
	zw.Close()
	return buf.Bytes()
}
