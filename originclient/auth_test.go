package originclient

import (
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
