package cdn

import (
	"bufio"
	"crypto/ed25519"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Everything here reads what another node or a client sent.

func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"id":"rabc","url":"http://o/f","cacheable":true,"size":10,"chunk_size":4}`))
	f.Add([]byte(`{"id":"m00-1","cacheable":true,"size":1,"manifest":{"version":1}}`))
	f.Add([]byte(`{"cacheable":false,"why":"private"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMeta(data)
		if err != nil || !m.Cacheable {
			return
		}
		// A meta taken must cut its file into chunks that cover it.
		if m.ChunkSize <= 0 || m.ChunkSize > maxChunkSize || m.Size < 0 {
			t.Fatalf("accepted a meta with chunk size %d, size %d", m.ChunkSize, m.Size)
		}
		if n := m.numChunks(); n > 0 {
			off, size := m.chunkRange(n - 1)
			if off+size != m.Size || size <= 0 {
				t.Fatalf("last chunk [%d,+%d) does not end the file of %d", off, size, m.Size)
			}
		}
	})
}

func FuzzToken(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Unix(1_800_000_000, 0)
	f.Add(makeToken(priv, "GET", "/.cdn/beat?", now), "/.cdn/beat?")
	f.Add("1800000060.AAAA", "/")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, tok, uri string) {
		verifyToken(pub, tok, "GET", uri, now) // must not panic on anything
		// The key's own token for the request passes, and not for another.
		good := makeToken(priv, "GET", uri, now)
		if err := verifyToken(pub, good, "GET", uri, now); err != nil {
			t.Fatalf("the key's token for %q refused: %v", uri, err)
		}
		if uri != tok && verifyToken(pub, good, "GET", tok, now) == nil {
			t.Fatalf("a token for %q accepted for %q", uri, tok)
		}
	})
}

func FuzzCacheControl(f *testing.F) {
	f.Add("max-age=60, s-maxage=10")
	f.Add("no-cache, private=\"x\", no-store")
	f.Add("max-age=-1")
	f.Add(`max-age="99999999999999999999"`)
	f.Fuzz(func(t *testing.T, v string) {
		cc := parseCacheControl([]string{v})
		if d := freshness(http.Header{}, cc); d < 0 {
			t.Fatalf("negative freshness %v for %q", d, v)
		}
	})
}

func FuzzTarget(f *testing.F) {
	f.Add("/http://127.0.0.1:8000/f?x=1", "node")
	f.Add("/https://example.com/", "node")
	f.Add("/f", "www.example.test")
	f.Add("/http://u:p@127.0.0.1:8000/", "node")
	f.Add("/http:///x", "node")
	n := &Node{cfg: Config{Origins: map[string]*url.URL{"www.example.test": {Scheme: "http", Host: "10.0.0.5"}}}}
	n.allowedOrigins, _ = allowedOriginSet(map[string]*url.URL{"www.example.test": {Scheme: "http", Host: "www.example.test"}}, []string{"127.0.0.1:8000"})
	f.Fuzz(func(t *testing.T, path, host string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t") {
			return
		}
		req, err := http.ReadRequest(bufioReader("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"))
		if err != nil {
			return
		}
		u, err := n.target(req)
		if err != nil {
			return
		}
		// Whatever the request, the node only goes where it may.
		if !n.originAllowed(u) && n.cfg.Origins[strings.ToLower(u.Hostname())] == nil {
			t.Fatalf("%q (Host %q) reaches %s, not allowed", path, host, u)
		}
		if u.User != nil {
			t.Fatalf("%q reaches %s, with credentials", path, u)
		}
	})
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
