package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

func TestProxyAndPrefixModes(t *testing.T) {
	data := randomBytes(3<<20+123, 1)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	g := startGateway(t, Config{})
	u := o.base + "/f.bin"

	resp, body := get(t, g.proxyClient(), "GET", u, nil)
	if resp.StatusCode != 200 || resp.Header.Get(Header) != "swarm" {
		t.Fatalf("proxy form: %s, %s=%q", resp.Status, Header, resp.Header.Get(Header))
	}
	mustEqual(t, "proxy form", body, data)
	if got := resp.Header.Get("Content-Type"); got != "application/octet-stream" {
		t.Errorf("Content-Type %q", got)
	}
	if !strings.Contains(resp.Header.Get("Via"), "stampede-") {
		t.Errorf("no Via: %v", resp.Header)
	}
	ranged := o.count("RANGE /f.bin")
	if ranged == 0 {
		t.Fatal("the origin served no pieces: the file did not come through the swarm path")
	}

	// The second time, in prefix form, the file comes from the cache: the
	// origin is asked only to revalidate (HEAD).
	heads := o.count("HEAD /f.bin")
	resp, body = get(t, plainClient(), "GET", g.prefixed(u), nil)
	if resp.StatusCode != 200 || resp.Header.Get(Header) != "swarm" {
		t.Fatalf("prefix form: %s, %s=%q", resp.Status, Header, resp.Header.Get(Header))
	}
	mustEqual(t, "prefix form", body, data)
	if got := o.count("RANGE /f.bin"); got != ranged {
		t.Errorf("the origin served %d more pieces for a cached file", got-ranged)
	}
	if got := o.count("HEAD /f.bin"); got != heads+1 {
		t.Errorf("want one revalidating HEAD, the origin saw %d", got-heads)
	}
}

func TestConditionalAndHead(t *testing.T) {
	data := randomBytes(1<<20, 2)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{})
	g := startGateway(t, Config{})
	u := o.base + "/f.bin"
	c := g.proxyClient()

	// HEAD answers from the origin's headers and downloads nothing.
	resp, body := get(t, c, "HEAD", u, nil)
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(data)) || len(body) != 0 {
		t.Fatalf("HEAD: %s, length %d, %d body bytes", resp.Status, resp.ContentLength, len(body))
	}
	etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if etag == "" || lm == "" {
		t.Fatalf("HEAD lacks validators: %v", resp.Header)
	}
	if st := g.cache.stats(); st.Files != 0 || o.count("RANGE /f.bin") != 0 {
		t.Fatalf("HEAD started a download: %+v", st)
	}
	// So do answers without a body.
	for _, h := range []http.Header{
		{"If-None-Match": {etag}},
		{"If-Modified-Since": {lm}},
	} {
		resp, _ = get(t, c, "GET", u, h)
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%v: %s, want 304", h, resp.Status)
		}
	}
	resp, _ = get(t, c, "GET", u, http.Header{"If-Match": {`"other"`}})
	if resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("If-Match other: %s, want 412", resp.Status)
	}
	resp, _ = get(t, c, "GET", u, http.Header{"Range": {fmt.Sprintf("bytes=%d-", len(data))}})
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("range past the end: %s, want 416", resp.Status)
	}
	if st := g.cache.stats(); st.Files != 0 {
		t.Fatalf("answers without a body started a download: %+v", st)
	}

	// If-Range: the current ETag gets the range, another one the whole file.
	resp, body = get(t, c, "GET", u, http.Header{"Range": {"bytes=10-19"}, "If-Range": {etag}})
	if resp.StatusCode != 206 {
		t.Fatalf("If-Range current: %s", resp.Status)
	}
	mustEqual(t, "If-Range current", body, data[10:20])
	resp, body = get(t, c, "GET", u, http.Header{"Range": {"bytes=10-19"}, "If-Range": {`"stale"`}})
	if resp.StatusCode != 200 {
		t.Fatalf("If-Range stale: %s", resp.Status)
	}
	mustEqual(t, "If-Range stale", body, data)
}

func TestConcurrentClientsShareOneDownload(t *testing.T) {
	data := randomBytes(4<<20, 3)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{rate: 16 << 20})
	g := startGateway(t, Config{})
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	const clients = 8
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for k := range clients {
		wg.Go(func() {
			c := g.proxyClient()
			target := o.base + "/f.bin"
			if k%2 == 1 {
				c, target = plainClient(), g.prefixed(target)
			}
			resp, err := c.Get(target)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- fmt.Errorf("client %d: %v", k, err)
			case !bytes.Equal(body, data):
				errs <- fmt.Errorf("client %d: %d bytes, differs from the file", k, len(body))
			case resp.Header.Get(Header) != "swarm":
				errs <- fmt.Errorf("client %d: answered %q", k, resp.Header.Get(Header))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One download: each piece from the origin about once (a lost race
	// between two requests may fetch a manifest twice, never the file).
	if got := o.count("RANGE /f.bin"); got > m.NumPieces()+2 {
		t.Errorf("the origin served %d pieces of a %d-piece file to %d clients", got, m.NumPieces(), clients)
	}
	if st := g.cache.stats(); st.Files != 1 {
		t.Errorf("cache holds %d files, want 1", st.Files)
	}
}

// The first bytes reach the client while the file is still downloading:
// the body streams as its head pieces arrive.
func TestStreamsBeforeComplete(t *testing.T) {
	data := randomBytes(6<<20, 4)
	// 6 MiB at 4 MiB/s: about 1.5 s for the whole file.
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{rate: 4 << 20})
	g := startGateway(t, Config{})
	start := time.Now()
	resp, err := g.proxyClient().Get(o.base + "/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	ttfb := time.Since(start)
	st := g.cache.stats()
	if st.Complete != 0 {
		t.Fatalf("the first 64 KiB came only after the whole file was in (after %v)", ttfb)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "streamed body", append(first, rest...), data)
	t.Logf("first 64 KiB after %v, whole file after %v", ttfb, time.Since(start))
}

func TestLoopRefused(t *testing.T) {
	g := startGateway(t, Config{})
	resp, body := get(t, g.proxyClient(), "GET", g.base+"/x", nil)
	if resp.StatusCode != http.StatusLoopDetected {
		t.Fatalf("a request to the gateway itself: %s %s", resp.Status, body)
	}
	resp, body = get(t, plainClient(), "GET", g.prefixed(g.base+"/http://example.invalid/"), nil)
	if resp.StatusCode != http.StatusLoopDetected {
		t.Fatalf("a prefixed request to the gateway itself: %s %s", resp.Status, body)
	}
}

func TestBadTargets(t *testing.T) {
	g := startGateway(t, Config{})
	for _, path := range []string{"/not-a-url", "/ftp://example.org/x", "/http://"} {
		resp, body := get(t, plainClient(), "GET", g.base+path, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "stampede gateway") {
			t.Errorf("%s: %s %q, want 400 with a message", path, resp.Status, body)
		}
	}
	resp, body := get(t, plainClient(), "GET", g.base+"/", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "curl -x") {
		t.Errorf("/: %s %q, want the help text", resp.Status, body)
	}
}

func TestOriginDown(t *testing.T) {
	g := startGateway(t, Config{})
	// An address nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/f.bin"
	ln.Close()
	resp, body := get(t, g.proxyClient(), "GET", dead, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "origin") {
		t.Errorf("origin down: %s %q, want 502 naming the origin", resp.Status, body)
	}
	resp, body = get(t, plainClient(), "POST", g.prefixed(dead), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "origin") {
		t.Errorf("origin down, POST: %s %q, want 502 naming the origin", resp.Status, body)
	}
	// A 404 from a live origin is passed on as it is.
	live := serveOn(t, http.NotFoundHandler())
	resp, _ = get(t, g.proxyClient(), "GET", live+"/f.bin", nil)
	if resp.StatusCode != 404 || resp.Header.Get(Header) != "direct" {
		t.Errorf("404: %s %q", resp.Status, resp.Header.Get(Header))
	}
}

// An origin that sends no validators: a changed file of the same size is
// noticed (by its manifest), not served from the cache.
func TestNoValidatorsNoStaleCopy(t *testing.T) {
	versions := [][]byte{randomBytes(200<<10, 60), randomBytes(200<<10, 61)}
	var (
		mu      sync.Mutex
		current int
	)
	base := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		data := versions[current]
		mu.Unlock()
		switch r.URL.Path {
		case "/f.bin":
			w.Header().Set("Link", `</.well-known/stampede/manifest/f.bin>; rel="stampede-manifest"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
		case "/.well-known/stampede/manifest/f.bin":
			m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f.bin")
			if err != nil {
				t.Error(err)
				return
			}
			js, _ := m.MarshalJSON()
			w.Header().Set("Content-Type", "application/vnd.stampede.manifest+json")
			w.Write(js)
		}
	}))
	g := startGateway(t, Config{})
	for k := range versions {
		mu.Lock()
		current = k
		mu.Unlock()
		resp, body := get(t, g.proxyClient(), "GET", base+"/f.bin", nil)
		if resp.Header.Get(Header) != "swarm" {
			t.Fatalf("version %d: answered %q", k, resp.Header.Get(Header))
		}
		mustEqual(t, fmt.Sprintf("version %d", k), body, versions[k])
	}
}

// TestPrivateSwarmPassedThrough: a file whose swarm is private is not
// swarmed, cached or seeded by the gateway (it asks for no token, and
// would hand the file to whoever asks it), but fetched from the origin.
func TestPrivateSwarmPassedThrough(t *testing.T) {
	data := randomBytes(1<<20+5, 7)
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{private: true})
	g := startGateway(t, Config{})
	resp, body := get(t, g.proxyClient(), "GET", o.base+"/f.bin", nil)
	if resp.StatusCode != 200 || resp.Header.Get(Header) == "swarm" {
		t.Fatalf("%s, %s=%q: want the file, not through the swarm", resp.Status, Header, resp.Header.Get(Header))
	}
	mustEqual(t, "private file", body, data)
}
