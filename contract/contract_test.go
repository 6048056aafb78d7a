package contract

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestPaths(t *testing.T) {
	if got, want := ManifestPath("/a b/f.iso"), "/.well-known/stampede/manifest/a%20b/f.iso"; got != want {
		t.Errorf("ManifestPath = %q, want %q", got, want)
	}
	if got, want := Link(BundlePath("/index.html"), BundleRel), `</.well-known/stampede/bundle/index.html>; rel="stampede-bundle"`; got != want {
		t.Errorf("bundle Link = %q, want %q", got, want)
	}
	if got, ok := BundleIndexPath("/.well-known/stampede/bundle/d/p%20q.html"); !ok || got != "/.well-known/stampede/bundle-index/d/p%20q.html" {
		t.Errorf("BundleIndexPath = %q, %v", got, ok)
	}
	for _, p := range []string{"/.well-known/stampede/bundle", "/.well-known/stampede/bundle-index/p.html", "/p.html"} {
		if got, ok := BundleIndexPath(p); ok {
			t.Errorf("BundleIndexPath(%q) = %q, want refused", p, got)
		}
	}
}

func TestPeers(t *testing.T) {
	peers := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.7:7000"), netip.MustParseAddrPort("[2001:db8::5]:7000")}
	v := FormatPeers(peers)
	if v != "192.0.2.7:7000, [2001:db8::5]:7000" {
		t.Errorf("FormatPeers = %q", v)
	}
	if FormatPeers(nil) != "" {
		t.Error("FormatPeers(nil) is not empty")
	}
	got := ParsePeers([]string{v, "junk, 192.0.2.8:0, 192.0.2.9:1, host:80"}, 10)
	want := []string{"192.0.2.7:7000", "[2001:db8::5]:7000", "192.0.2.9:1"}
	if !slices.Equal(got, want) {
		t.Errorf("ParsePeers = %q, want %q", got, want)
	}
	if got := ParsePeers([]string{v}, 1); len(got) != 1 {
		t.Errorf("ParsePeers with max 1 = %q", got)
	}
}

func TestCandidates(t *testing.T) {
	ps := []int{0, 1, 2, 5, 9, 10}
	v := FormatCandidates(ps)
	if v != "0-2,5,9-10" {
		t.Errorf("FormatCandidates = %q", v)
	}
	got, err := ParseCandidates(v, 11, 100)
	if err != nil || !slices.Equal(got, ps) {
		t.Errorf("ParseCandidates(%q) = %v, %v", v, got, err)
	}
	if _, err := ParseCandidates(v, 10, 100); err == nil {
		t.Error("a candidate past the last piece accepted")
	}
}

func TestManifestHead(t *testing.T) {
	m, err := manifest.FromReader(strings.NewReader(strings.Repeat("x", 40000)), 40000, "f")
	if err != nil {
		t.Fatal(err)
	}
	head, err := m.Head().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := EncodeManifestHead(head)
	if !ok {
		t.Fatalf("a %d-byte head does not fit", len(head))
	}
	got, err := DecodeManifestHead(v)
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != m.Root || got.Size != m.Size {
		t.Errorf("decoded head has root %s and size %d, want %s and %d", got.Root, got.Size, m.Root, m.Size)
	}
	if _, ok := EncodeManifestHead(make([]byte, MaxInlineHead)); ok {
		t.Error("a head longer than MaxInlineHead encoded")
	}
	if _, err := DecodeManifestHead("!" + v); err == nil {
		t.Error("a garbled head decoded")
	}
	if _, err := DecodeManifestHead(strings.Repeat("A", MaxInlineHead+4)); err == nil {
		t.Error("a head longer than MaxInlineHead decoded")
	}
}

// TestHeadURL: the head's parameter is added to the manifest URL's query,
// which stays as the origin sent it (it may be an upstream's signature).
func TestHeadURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://o/.well-known/stampede/manifest/f":            "http://o/.well-known/stampede/manifest/f?piece_layer=0",
		"http://o/.well-known/stampede/manifest/f?b=2&a=%2F1": "http://o/.well-known/stampede/manifest/f?b=2&a=%2F1&piece_layer=0",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ManifestHeadURL(u).String(); got != want {
			t.Errorf("ManifestHeadURL(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestBundleIndexRoundTrip(t *testing.T) {
	idx := &BundleIndex{Version: BundleIndexVersion, Bundle: BundlePath("/p.html"), Size: 10, Members: []BundleMember{
		{Path: "/p.html", Offset: 0, Size: 6, ContentType: "text/html", ETag: `"1"`, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT"},
		{Path: "/a.css", Offset: 6, Size: 4, ContentType: "text/css", ETag: `"2"`},
	}}
	b, err := idx.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "last_modified") != 1 {
		t.Errorf("an empty last_modified is sent: %s", b)
	}
	got, err := DecodeBundleIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != idx.Version || got.Bundle != idx.Bundle || got.Size != idx.Size || !slices.Equal(got.Members, idx.Members) {
		t.Errorf("round trip: got %+v, want %+v", got, idx)
	}
	if _, err := DecodeBundleIndex(make([]byte, MaxBundleIndexBytes+1)); err == nil {
		t.Error("an index larger than MaxBundleIndexBytes decoded")
	}
}

func TestBundleIndexChecks(t *testing.T) {
	bu := mustURL(t, "http://o/.well-known/stampede/bundle/p.html")
	iu := mustURL(t, "http://o/.well-known/stampede/bundle-index/p.html")
	good := func() *BundleIndex {
		return &BundleIndex{Version: 1, Bundle: "/.well-known/stampede/bundle/p.html", Size: 10,
			Members: []BundleMember{{Path: "/p.html", Offset: 0, Size: 6}, {Path: "/a.css", Offset: 6, Size: 4}}}
	}
	if err := good().Check(iu, bu); err != nil {
		t.Fatalf("good index refused: %v", err)
	}
	spaced := good()
	spaced.Members[1].Path = "/a b.css" // paths are not escaped
	if err := spaced.Check(iu, bu); err != nil {
		t.Fatalf("a path with a space refused: %v", err)
	}
	for name, breakIt := range map[string]func(*BundleIndex){
		"version":        func(x *BundleIndex) { x.Version = 2 },
		"other bundle":   func(x *BundleIndex) { x.Bundle = "/.well-known/stampede/bundle/q.html" },
		"no members":     func(x *BundleIndex) { x.Members = nil },
		"past the end":   func(x *BundleIndex) { x.Members[1].Size = 5 },
		"negative":       func(x *BundleIndex) { x.Members[1].Offset = -1 },
		"relative path":  func(x *BundleIndex) { x.Members[1].Path = "a.css" },
		"other host":     func(x *BundleIndex) { x.Members[1].Path = "//evil/a.css" },
		"control char":   func(x *BundleIndex) { x.Members[1].Path = "/a\nb.css" },
		"duplicate path": func(x *BundleIndex) { x.Members[1].Path = "/p.html" },
		"zero size":      func(x *BundleIndex) { x.Size = 0 },
	} {
		x := good()
		breakIt(x)
		if err := x.Check(iu, bu); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
