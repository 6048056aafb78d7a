package originclient

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHeaderOnEveryRequest: the user's headers go with every request, a
// User-Agent among them replacing stampede's, and a request's own headers
// (its Range) win over them.
func TestHeaderOnEveryRequest(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/f")
	c := New(Config{Client: srv.Client(), Header: http.Header{"User-Agent": {"curl/8"}, "X-Token": {"t"}, "Range": {"bytes=0-0"}}})
	for _, h := range []http.Header{nil, {"Range": {"bytes=5-9"}}} {
		res, err := c.Do(t.Context(), http.MethodGet, u, h, "test")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, h := range got {
		if h.Get("User-Agent") != "curl/8" || h.Get("X-Token") != "t" {
			t.Errorf("request %d: User-Agent %q, X-Token %q", i, h.Get("User-Agent"), h.Get("X-Token"))
		}
	}
	if len(got) != 2 || got[1].Get("Range") != "bytes=5-9" {
		t.Errorf("the request's own Range lost to the user's: %v", got)
	}
}

func TestDefaultUserAgent(t *testing.T) {
	ua := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ua <- r.UserAgent() }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/f")
	c := New(Config{Client: srv.Client()})
	res, err := c.Do(t.Context(), http.MethodGet, u, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := <-ua; got != "stampede" {
		t.Errorf("default User-Agent %q", got)
	}
}

// TestHTTPOptions: a proxy carries the requests; a server's certificate is
// refused unless its authority is given or checking is off; a negative
// connect timeout is refused.
func TestHTTPOptions(t *testing.T) {
	var proxied sync.Map
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Store(r.URL.String(), true) // a proxy is asked for the absolute URL
		w.Write([]byte("via proxy"))
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	c, err := HTTPOptions{Proxy: pu}.Client()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Get("http://origin.invalid/f")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if _, ok := proxied.Load("http://origin.invalid/f"); !ok {
		t.Error("the request did not go through the proxy")
	}

	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	get := func(o HTTPOptions) error {
		c, err := o.Client()
		if err != nil {
			return err
		}
		defer c.CloseIdleConnections()
		res, err := c.Get(tlsSrv.URL)
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	if err := get(HTTPOptions{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an unknown authority was accepted: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(tlsSrv.Certificate())
	if err := get(HTTPOptions{RootCAs: pool}); err != nil {
		t.Errorf("with the server's authority given: %v", err)
	}
	if err := get(HTTPOptions{Insecure: true}); err != nil {
		t.Errorf("with checking off: %v", err)
	}
	if _, err := (HTTPOptions{ConnectTimeout: -time.Second}).Client(); err == nil {
		t.Error("a negative connect timeout was accepted")
	}
}
