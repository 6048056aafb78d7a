// Package webpeer is the browser peer: the ES modules (js/) that make a
// site's visitors peers of its swarms over WebRTC data channels, embedded
// in the binary and served by "stampede serve" (docs/browser.md).
//
// A site opts in with one tag, <script type="module"
// src="/.well-known/stampede/peer.js"></script>. peer.js registers the
// service worker (sw.js, served with Service-Worker-Allowed: / so that its
// scope is the whole site) and runs the swarm in the page, since a service
// worker has no RTCPeerConnection. The worker intercepts same-origin GETs
// of objects that have a manifest and asks the page for them; the page
// gets the pieces from other visitors (signalled through the tracker's
// WebSocket, tracker/ws.go), verifies each against the manifest with
// SubtleCrypto SHA-256, and falls back to the origin within a deadline.
//
// The origin controls it with Config: Off is the kill switch. peer.json
// then says so, and every installed worker that reads it (at most
// Config.CheckEvery after) unregisters itself and stands down.
package webpeer

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha1"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed js/peer.js js/sw.js js/wire.js js/swarm.js js/verify.js
var files embed.FS

// Prefix is the path under which the peer is served: PeerPath, the
// worker and modules at Prefix+"peer/", and ConfigPath.
const (
	Prefix     = "/.well-known/stampede/"
	PeerPath   = Prefix + "peer.js"
	WorkerPath = Prefix + "peer/sw.js"
	ConfigPath = Prefix + "peer.json"
)

// Defaults of Config.
const (
	DefaultUploadRate  = 512 << 10
	DefaultUploadTotal = 64 << 20
	DefaultMinSize     = 64 << 10
	DefaultDeadline    = 4 * time.Second
	DefaultHiddenStop  = 60 * time.Second
	DefaultCheckEvery  = 5 * time.Minute
	DefaultMaxPeers    = 8
	DefaultMaxMemory   = 64 << 20
)

// Config is what the origin tells every visitor's peer, in peer.json.
type Config struct {
	// Off is the kill switch: peer.js does nothing, and installed service
	// workers unregister themselves when they next read peer.json.
	Off bool
	// UploadRate caps what one visitor's browser uploads, in bytes per
	// second. Default DefaultUploadRate.
	UploadRate int64
	// UploadTotal caps what it uploads in one page's life. Default
	// DefaultUploadTotal.
	UploadTotal int64
	// MinSize: objects smaller than this go to the origin as before.
	// Default DefaultMinSize.
	MinSize int64
	// Deadline: a piece not verified this long after it was asked of a
	// peer (or, when no peer has it, after the swarm was joined) is
	// fetched from the origin. Default DefaultDeadline.
	Deadline time.Duration
	// HiddenStop: a page hidden this long stops its peer until it is
	// shown again. Default DefaultHiddenStop.
	HiddenStop time.Duration
	// CheckEvery is how often an installed worker reads peer.json again.
	// Default DefaultCheckEvery.
	CheckEvery time.Duration
	// MaxPeers bounds the data channels one page keeps per object.
	// Default DefaultMaxPeers.
	MaxPeers int
	// MaxMemory bounds the bytes of the objects one page holds to serve
	// (and is downloading): a page about to pass it drops the objects it
	// used least recently, and an object it cannot make room for (larger
	// than MaxMemory, or every other one still downloading) goes to the
	// origin as before. Default DefaultMaxMemory.
	MaxMemory int64
	// ICEServers are the STUN (and TURN) URLs the browsers use, e.g.
	// "stun:example.org:3478"; "{host}" in one stands for the host name
	// the visitor reached the site by ("stun:{host}:3478": the origin's
	// own STUN server, origin.ServeSTUN). Empty: host candidates only.
	ICEServers []string
	// TURN, if set, is a TURN server named to the browsers with
	// credentials of its secret, made for each request of peer.json
	// and valid for a day (origin.ServeTURN checks them).
	TURN *TURN
}

// TURN is a TURN server for Config.TURN.
type TURN struct {
	// URL is the server's, e.g. "turn:{host}:3479" ("{host}" as in
	// ICEServers).
	URL string
	// Secret is the shared secret of its time-limited credentials.
	Secret string
}

// turnCredentials are time-limited TURN credentials for secret, as TURN
// servers check them (the TURN REST API draft, draft-uberti-behave-turn-rest):
// the username is the expiry in Unix seconds and a name, the credential
// the base64 HMAC-SHA1 of the username under the secret.
func turnCredentials(secret string, now time.Time) (user, credential string) {
	user = strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10) + ":visitor"
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(user))
	return user, base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func (c Config) withDefaults() Config {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.UploadRate, DefaultUploadRate)
	def(&c.UploadTotal, DefaultUploadTotal)
	def(&c.MinSize, DefaultMinSize)
	def(&c.MaxMemory, DefaultMaxMemory)
	for _, d := range []struct {
		v *time.Duration
		d time.Duration
	}{{&c.Deadline, DefaultDeadline}, {&c.HiddenStop, DefaultHiddenStop}, {&c.CheckEvery, DefaultCheckEvery}} {
		if *d.v <= 0 {
			*d.v = d.d
		}
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	return c
}

// document is peer.json.
type document struct {
	Enabled      bool  `json:"enabled"`
	UploadRate   int64 `json:"upload_rate,omitempty"`
	UploadTotal  int64 `json:"upload_total,omitempty"`
	MinSize      int64 `json:"min_size,omitempty"`
	DeadlineMS   int64 `json:"deadline_ms,omitempty"`
	HiddenStopMS int64 `json:"hidden_stop_ms,omitempty"`
	CheckEveryMS int64 `json:"check_every_ms,omitempty"`
	MaxPeers     int   `json:"max_peers,omitempty"`
	MaxMemory    int64 `json:"max_memory,omitempty"`
	ICEServers   []any `json:"ice_servers,omitempty"` // URLs, and a TURN server as {urls, username, credential}
}

type iceServer struct {
	URLs       string `json:"urls"`
	Username   string `json:"username"`
	Credential string `json:"credential"`
}

// Paths are the patterns (GET) Handler answers, for a ServeMux.
var Paths = []string{PeerPath, ConfigPath, Prefix + "peer/"}

// Handler serves the peer's modules, its worker and peer.json.
func Handler(cfg Config) http.Handler {
	cfg = cfg.withDefaults()
	doc := document{Enabled: !cfg.Off}
	if !cfg.Off {
		doc = document{
			Enabled: true, UploadRate: cfg.UploadRate, UploadTotal: cfg.UploadTotal, MinSize: cfg.MinSize,
			DeadlineMS: cfg.Deadline.Milliseconds(), HiddenStopMS: cfg.HiddenStop.Milliseconds(),
			CheckEveryMS: cfg.CheckEvery.Milliseconds(), MaxPeers: cfg.MaxPeers, MaxMemory: cfg.MaxMemory,
		}
		for _, u := range cfg.ICEServers {
			doc.ICEServers = append(doc.ICEServers, u)
		}
	}
	marshal := func(doc document) []byte {
		b, err := json.Marshal(doc)
		if err != nil {
			panic(fmt.Sprintf("webpeer: %v", err)) // unreachable: plain fields
		}
		return b
	}
	config := marshal(doc)
	configFor := func(*http.Request) []byte { return config }
	if cfg.TURN != nil && !cfg.Off {
		configFor = func(*http.Request) []byte {
			d := doc
			user, cred := turnCredentials(cfg.TURN.Secret, time.Now())
			d.ICEServers = append(slices.Clip(d.ICEServers), iceServer{URLs: cfg.TURN.URL, Username: user, Credential: cred})
			return marshal(d)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Every visitor's worker reads these: they must never be stale
		// for long (the kill switch), and they never carry credentials.
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == ConfigPath {
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "no-store") // TURN credentials are made for each
			w.Write(withHost(configFor(r), r))
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		name = strings.TrimPrefix(name, "peer/")
		f, ok := modules[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Path == WorkerPath {
			h.Set("Service-Worker-Allowed", "/")
		}
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			w.Write(f.gz)
			return
		}
		w.Write(f.plain)
	})
}

// module is one embedded file, as is and gzipped once at start: every
// visitor of a site that opts in loads them.
type module struct{ plain, gz []byte }

var modules = func() map[string]module {
	m := map[string]module{}
	entries, _ := fs.ReadDir(files, "js")
	for _, e := range entries {
		b, _ := fs.ReadFile(files, "js/"+e.Name())
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		m[e.Name()] = module{b, gz.Bytes()}
	}
	return m
}()

// acceptsGzip reports whether r's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(v), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// Weight returns the bytes of the peer's modules a page loads and of its
// worker, gzipped as served.
func Weight() (page, worker int) {
	for name, f := range modules {
		if name == "sw.js" {
			worker += len(f.gz)
		} else {
			page += len(f.gz)
		}
	}
	return page, worker
}

// withHost puts the request's host name for "{host}" in peer.json (a JSON
// string: a host name needs no escaping, and one that would is not put).
func withHost(config []byte, r *http.Request) []byte {
	if !bytes.Contains(config, []byte("{host}")) {
		return config
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	for _, c := range host {
		if !(c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return config
		}
	}
	return bytes.ReplaceAll(config, []byte("{host}"), []byte(host))
}
