package cdn

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCachingRules: what is cached and shared, and for how long.
func TestCachingRules(t *testing.T) {
	data := randomBytes(300<<10, 5)
	tests := []struct {
		name   string
		hdr    http.Header // the origin's
		req    []string    // the client's headers
		answer string
		// The origin's for two requests in a row, one at each node: the
		// URL's owner asks for the meta, and the other node checks the
		// owner's with a HEAD of its own, once per version of the file;
		// a stale meta costs the owner one more.
		heads, gets int
	}{
		{"max-age", http.Header{"Cache-Control": {"max-age=60"}}, nil, "chunks", 2, 5},
		{"s-maxage over max-age=0", http.Header{"Cache-Control": {"max-age=0, s-maxage=60"}}, nil, "chunks", 2, 5},
		{"no-cache revalidates, bytes cached", http.Header{"Cache-Control": {"no-cache, max-age=60"}}, nil, "chunks", 3, 5},
		{"no freshness revalidates", nil, nil, "chunks", 3, 5},
		{"private", http.Header{"Cache-Control": {"private, max-age=60"}}, nil, "direct", 2, 2},
		{"no-store", http.Header{"Cache-Control": {"no-store"}}, nil, "direct", 3, 2},
		{"Set-Cookie", http.Header{"Set-Cookie": {"a=b"}, "Cache-Control": {"max-age=60"}}, nil, "direct", 2, 2},
		{"Vary: *", http.Header{"Vary": {"*"}, "Cache-Control": {"max-age=60"}}, nil, "direct", 2, 2},
		{"Authorization", http.Header{"Cache-Control": {"max-age=60"}}, []string{"Authorization", "Basic eDp5"}, "direct", 0, 2},
		{"Cookie", http.Header{"Cache-Control": {"max-age=60"}}, []string{"Cookie", "s=1"}, "direct", 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newTestOrigin(t)
			o.add("f", data, false, tt.hdr)
			nodes := startCluster(t, 2, o, nil)
			for i := range 2 {
				resp, body := mustGet(t, nodes[i].url(o.URL+"/f"), 200, tt.req...)
				if !bytes.Equal(body, data) {
					t.Fatalf("request %d: body differs", i)
				}
				if got := resp.Header.Get(Header); got != tt.answer {
					t.Fatalf("request %d answered %q, want %q", i, got, tt.answer)
				}
			}
			if h, g := o.heads.Load(), o.gets.Load(); int(h) != tt.heads || int(g) != tt.gets {
				t.Errorf("the origin had %d HEADs and %d GETs, want %d and %d", h, g, tt.heads, tt.gets)
			}
		})
	}
}

// TestVary: each variant is cached apart, and asked with its request
// header.
func TestVary(t *testing.T) {
	o := newTestOrigin(t)
	en, fr := randomBytes(100<<10, 6), randomBytes(100<<10, 7)
	f := o.add("f", en, false, http.Header{"Vary": {"Accept-Language"}, "Cache-Control": {"max-age=60"}})
	f.variants = map[string][]byte{"en": en, "fr": fr}
	nodes := startCluster(t, 2, o, nil)
	for range 2 {
		for lang, want := range map[string][]byte{"en": en, "fr": fr} {
			for _, n := range nodes {
				resp, body := mustGet(t, n.url(o.URL+"/f"), 200, "Accept-Language", lang)
				if !bytes.Equal(body, want) {
					t.Fatalf("%s: got another variant's body", lang)
				}
				if resp.Header.Get("Vary") != "Accept-Language" {
					t.Fatalf("Vary %q passed on", resp.Header.Get("Vary"))
				}
			}
		}
	}
	if got := o.bodyBytes.Load(); got != int64(len(en)+len(fr)) {
		t.Errorf("the origin sent %d bytes, want one copy of each variant, %d", got, len(en)+len(fr))
	}
}

// TestRangeAndConditional: Range, 416, 304 and HEAD are answered from the
// meta and the chunks the range needs.
func TestRangeAndConditional(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(1<<20, 8)
	o.add("f", data, false, http.Header{"Cache-Control": {"max-age=60"}})
	nodes := startCluster(t, 2, o, nil)
	u := nodes[0].url(o.URL + "/f")
	resp, body := mustGet(t, u, http.StatusPartialContent, "Range", "bytes=70000-70099")
	if !bytes.Equal(body, data[70000:70100]) || resp.Header.Get("Content-Range") != "bytes 70000-70099/1048576" {
		t.Fatalf("range: %d bytes, Content-Range %q", len(body), resp.Header.Get("Content-Range"))
	}
	if got := o.bodyBytes.Load(); got > 64<<10 {
		t.Errorf("a 100-byte range took %d bytes from the origin, want one chunk", got)
	}
	mustGet(t, u, http.StatusRequestedRangeNotSatisfiable, "Range", "bytes=2000000-")
	_, body = mustGet(t, u, http.StatusPartialContent, "Range", "bytes=-10")
	if !bytes.Equal(body, data[len(data)-10:]) {
		t.Fatal("suffix range: wrong bytes")
	}
	resp, _ = mustGet(t, u, 200)
	etag := resp.Header.Get("ETag")
	if etag == "" || resp.Header.Get("Last-Modified") == "" {
		t.Fatalf("validators not passed on: %v", resp.Header)
	}
	mustGet(t, u, http.StatusNotModified, "If-None-Match", etag)
	mustGet(t, u, http.StatusNotModified, "If-Modified-Since", modTime.Format(http.TimeFormat))
	mustGet(t, u, 200, "If-None-Match", `"other"`)
	_, body = mustGet(t, u, 200, "Range", "bytes=0-9", "If-Range", `"other"`)
	if len(body) != len(data) {
		t.Fatal("a stale If-Range did not get the whole file")
	}
	mustGet(t, u, http.StatusPreconditionFailed, "If-Match", `"other"`)
	resp, body = mustGet(t, u, http.StatusPartialContent, "Range", "bytes=0-9,500000-500009")
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("multiple ranges: Content-Type %q", resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for _, want := range [][]byte{data[:10], data[500000:500010]} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, want) {
			t.Fatal("multiple ranges: a part's bytes are wrong")
		}
	}
	req, _ := http.NewRequest(http.MethodHead, u, nil)
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 || hr.ContentLength != int64(len(data)) {
		t.Fatalf("HEAD: %d, length %d", hr.StatusCode, hr.ContentLength)
	}
}

// TestAccess: what a node refuses.
func TestAccess(t *testing.T) {
	o := newTestOrigin(t)
	o.add("f", randomBytes(1000, 9), false, nil)
	nodes := startCluster(t, 1, o, func(_ int, c *Config) {
		c.Origins = map[string]*url.URL{"www.example.test": mustParse(t, o.URL)}
	})
	n := nodes[0]
	tests := []struct {
		name   string
		target string
		status int
	}{
		{"allowed origin", o.URL + "/f", 200},
		{"origin not allowed", "http://example.com/f", http.StatusForbidden},
		{"allowed host, other port", "http://127.0.0.1:1/f", http.StatusForbidden},
		{"no host", "http:///f", http.StatusBadRequest},
		{"credentials in the URL", strings.Replace(o.URL, "http://", "http://u:p@", 1) + "/f", http.StatusBadRequest},
		{"no origin for this Host", "f", http.StatusNotFound},
		{"unknown own page", ".cdn/nothing", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustGet(t, n.url(tt.target), tt.status)
		})
	}
	t.Run("reverse proxy by Host", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, n.url("f"), nil)
		req.Host = "www.example.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(Header) != "chunks" {
			t.Fatalf("status %d, answered %q", resp.StatusCode, resp.Header.Get(Header))
		}
	})
	t.Run("CONNECT", func(t *testing.T) {
		c, err := net.Dial("tcp", n.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("CONNECT: status %d", resp.StatusCode)
		}
	})
	// Clients and nodes from addresses the node does not serve, asked
	// in-process with the address set.
	ask := func(path, from string, hdr ...string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = from
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		n.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := ask("/"+o.URL+"/f", "192.0.2.1:1234"); got != http.StatusForbidden {
		t.Errorf("a client outside --allow got %d", got)
	}
	if got := ask(pathBeat, "192.0.2.1:1234"); got != http.StatusForbidden {
		t.Errorf("a node request from an address not on --nodes got %d", got)
	}
	if got := ask(pathBeat, "127.0.0.1:1234"); got != http.StatusOK {
		t.Errorf("a node request from a node's address got %d", got)
	}
	if got := ask(pathStatus, "192.0.2.1:1234"); got != http.StatusForbidden {
		t.Errorf("the status page to a stranger: %d", got)
	}
}

func mustParse(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestAllowNetworks: --allow replaces loopback.
func TestAllowNetworks(t *testing.T) {
	o := newTestOrigin(t)
	o.add("f", randomBytes(1000, 10), false, nil)
	nodes := startCluster(t, 1, o, func(_ int, c *Config) {
		c.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	mustGet(t, nodes[0].url(o.URL+"/f"), http.StatusForbidden)
}

// TestKey: with a key, node requests need a fresh token of it, from any
// address, and the cluster works on them.
func TestKey(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Unix(1_800_000_000, 0)
	uri := pathChunk + "?i=1"
	tok := makeToken(priv, "GET", uri, now)
	if err := verifyToken(pub, tok, "GET", uri, now.Add(30*time.Second)); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
	for name, bad := range map[string]func() error{
		"expired":       func() error { return verifyToken(pub, tok, "GET", uri, now.Add(2*tokenLife)) },
		"other request": func() error { return verifyToken(pub, tok, "GET", pathChunk+"?i=2", now) },
		"other key":     func() error { return verifyToken(pub, makeToken(other, "GET", uri, now), "GET", uri, now) },
		"none":          func() error { return verifyToken(pub, "", "GET", uri, now) },
		"garbage":       func() error { return verifyToken(pub, "12.x", "GET", uri, now) },
		"far future": func() error {
			return verifyToken(pub, makeToken(priv, "GET", uri, now.Add(time.Hour)), "GET", uri, now)
		},
	} {
		if bad() == nil {
			t.Errorf("%s token accepted", name)
		}
	}

	o := newTestOrigin(t)
	data := randomBytes(512<<10, 11)
	o.add("f", data, true, nil)
	nodes := startCluster(t, 3, o, func(_ int, c *Config) { c.Key = priv })
	for c, err := range downloadAll(t, nodes, o.URL+"/f", 6, data) {
		if err != nil {
			t.Errorf("client %d: %v", c, err)
		}
	}
	var node float64
	for _, n := range nodes {
		node += counterValue(n.met.chunks[srcNode])
	}
	if node == 0 {
		t.Error("no chunk went from node to node")
	}
	resp, _, err := get(t, nodes[0].url(".cdn/beat"))
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a node request without a token: %v %v", resp.StatusCode, err)
	}
}
