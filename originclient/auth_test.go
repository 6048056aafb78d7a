package originclient

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestCredentialsOnlyToTheirHost: Header's Authorization and Cookie go to
// AuthHost and its subdomains, in any letter case, and to no other host,
// however the request's URL was reached; its other fields go everywhere.
func TestCredentialsOnlyToTheirHost(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	hdr := http.Header{"Authorization": {"Basic c2VjcmV0"}, "Cookie": {"s=1"}, "X-Token": {"t"}}
	for _, tc := range []struct {
		authHost, host string
		sent           bool
	}{
		{"localhost", "localhost", true},
		{"LocalHost", "localhost", true},
		{"127.0.0.1", "127.0.0.1", true},
		{"localhost", "127.0.0.1", false},
		{"host.localhost", "localhost", false},
		{"", "127.0.0.1", false},
	} {
		c := New(Config{Client: srv.Client(), Header: hdr, AuthHost: tc.authHost})
		u, _ := url.Parse("http://" + tc.host + port + "/f")
		res, err := c.Do(t.Context(), http.MethodGet, u, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := <-got
		if sent := h.Get("Authorization") != "" || h.Get("Cookie") != ""; sent != tc.sent {
			t.Errorf("AuthHost %q, request to %s: credentials sent %v, want %v", tc.authHost, tc.host, sent, tc.sent)
		}
		if h.Get("X-Token") != "t" {
			t.Errorf("AuthHost %q, request to %s: X-Token %q", tc.authHost, tc.host, h.Get("X-Token"))
		}
	}
	for _, tc := range []struct {
		sub, parent string
		want        bool
	}{
		{"a.example.com", "example.com", true},
		{"badexample.com", "example.com", false},
		{"example.com", "a.example.com", false},
		{"::1%.example.com", "example.com", false},
	} {
		if got := isDomainOrSubdomain(tc.sub, tc.parent); got != tc.want {
			t.Errorf("isDomainOrSubdomain(%q, %q) = %v", tc.sub, tc.parent, got)
		}
	}
}

// TestCredentialsOnlyToTheirOrigin: with an AuthHost that names a scheme
// and a port, credentials go only where the scheme, the host (or a
// subdomain) and the port all match, whether the request is sent there
// or redirected there: never from https to http on the same host, nor to
// another port.
func TestCredentialsOnlyToTheirOrigin(t *testing.T) {
	type seen struct {
		url  string
		auth bool
	}
	got := make(chan seen, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		got <- seen{scheme + "://" + r.Host + r.URL.Path, r.Header.Get("Authorization") != ""}
	})
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()
	// Whatever a URL's host and port, https reaches tlsSrv (its
	// certificate checked as example.com's) and http reaches plain, so
	// that URLs may differ in their scheme or their port alone.
	roots := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, plain.Listener.Addr().String())
		},
		DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: &tls.Config{ServerName: "example.com", RootCAs: roots}}
			return d.DialContext(ctx, network, tlsSrv.Listener.Addr().String())
		},
	}
	defer tr.CloseIdleConnections()
	redirect := func(from, to string) string { return from + "/r?to=" + url.QueryEscape(to) }
	const origin = "https://example.com:8443"
	for _, tc := range []struct {
		authHost, url string
		sent          bool
	}{
		{origin, origin + "/f", true},
		{origin, redirect(origin, origin+"/f"), true},
		{origin, "https://DL.Example.com:8443/f", true},
		{"https://example.com", "https://example.com:443/f", true},
		{"https://example.com:443", "https://example.com/f", true},
		{origin, "http://example.com:8443/f", false},
		{origin, redirect(origin, "http://example.com:8443/f"), false},
		{"https://example.com", redirect("https://example.com", "http://example.com/f"), false},
		{origin, "https://example.com:9443/f", false},
		{origin, redirect(origin, "https://example.com:9443/f"), false},
		{"http://example.com:8080", "http://example.com/f", false},
		{origin, "https://example.org:8443/f", false},
	} {
		c := New(Config{Client: &http.Client{Transport: tr}, Header: http.Header{"Authorization": {"Basic c2VjcmV0"}}, AuthHost: tc.authHost})
		u, _ := url.Parse(tc.url)
		res, err := c.Do(t.Context(), http.MethodGet, u, nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		s := <-got
		if s.auth != tc.sent {
			t.Errorf("AuthHost %q, request to %s, answered by %s: credentials sent %v, want %v", tc.authHost, tc.url, s.url, s.auth, tc.sent)
		}
	}
}
