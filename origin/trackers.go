package origin

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

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

// publishedBody is a manifest's JSON with a list of trackers in it.
type publishedBody struct {
	trackers string // joined by newlines
	body     []byte
}

// bodyWith returns e's manifest as served with trackers. The last such body
// is kept: almost every request names the same Host.
func (e *entry) bodyWith(trackers []string) ([]byte, error) {
	if len(trackers) == 0 {
		return e.body, nil
	}
	key := strings.Join(trackers, "\n")
	if p := e.published.Load(); p != nil && p.trackers == key {
		return p.body, nil
	}
	m := *e.m
	m.Trackers = trackers
	body, err := m.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("origin: encode manifest: %w", err)
	}
	e.published.Store(&publishedBody{trackers: key, body: body})
	return body, nil
}
