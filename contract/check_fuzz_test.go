package contract

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzBundleIndexCheck: a gateway takes a bundle's index from the origin a
// page came from, and the bundle's link from that page's Link header; both
// are the origin's word. An index Check accepts names the bundle linked,
// has members with distinct absolute paths inside the bundle, and is still
// accepted after its own round trip.
func FuzzBundleIndexCheck(f *testing.F) {
	page := `{"version":1,"bundle":"../bundle/p.html","size":10,` +
		`"members":[{"path":"/p.html","offset":0,"size":6},{"path":"/a.css","offset":6,"size":4}]}`
	f.Add([]byte(page), "/.well-known/stampede/bundle/p.html")
	f.Add([]byte(page), "/.well-known/stampede/bundle/q.html")
	f.Add([]byte(strings.Replace(page, `"../bundle/p.html"`, `"/.well-known/stampede/bundle/p.html"`, 1)), "/.well-known/stampede/bundle/p.html")
	f.Add([]byte(strings.Replace(page, `"/a.css"`, `"/p.html"`, 1)), "/.well-known/stampede/bundle/p.html")
	f.Add([]byte(strings.Replace(page, `"/a.css"`, `"//evil/a.css"`, 1)), "/.well-known/stampede/bundle/p.html")
	f.Add([]byte(strings.Replace(page, `"offset":6`, `"offset":9223372036854775807`, 1)), "/.well-known/stampede/bundle/p.html")
	f.Add([]byte(`{"version":1,"bundle":"http://o/.well-known/stampede/bundle/a%20b.html","size":1,"members":[{"path":"/a b.html","offset":0,"size":1}]}`),
		"/.well-known/stampede/bundle/a%20b.html")
	f.Add([]byte(`{"version":1,"bundle":"//o/.well-known/stampede/bundle/x.html","size":1,"members":[{"path":"/x.html","size":1}]}`),
		"http://o/.well-known/stampede/bundle/x.html")
	base, _ := url.Parse("http://o/dir/page.html")
	f.Fuzz(func(t *testing.T, data []byte, link string) {
		bundle, err := base.Parse(link)
		if err != nil {
			return
		}
		ip, ok := BundleIndexPath(bundle.EscapedPath())
		if !ok {
			return
		}
		index, err := url.Parse(bundle.Scheme + "://" + bundle.Host + ip)
		if err != nil {
			return
		}
		idx, err := DecodeBundleIndex(data)
		if err != nil {
			return
		}
		if err := idx.Check(index, bundle); err != nil {
			return
		}
		if named, err := index.Parse(idx.Bundle); err != nil || named.String() != bundle.String() {
			t.Fatalf("accepted an index naming %q (%v) for the bundle %s", idx.Bundle, named, bundle)
		}
		if idx.Size <= 0 || len(idx.Members) == 0 || len(idx.Members) > MaxBundleMembers {
			t.Fatalf("accepted an index of %d bytes and %d members", idx.Size, len(idx.Members))
		}
		seen := map[string]bool{}
		for _, m := range idx.Members {
			if seen[m.Path] || !strings.HasPrefix(m.Path, "/") || strings.HasPrefix(m.Path, "//") ||
				strings.ContainsFunc(m.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				t.Fatalf("accepted member path %q", m.Path)
			}
			seen[m.Path] = true
			if m.Offset < 0 || m.Size < 0 || m.Offset > idx.Size-m.Size {
				t.Fatalf("accepted member %+v of a %d-byte bundle", m, idx.Size)
			}
			// The member's URL on the origin stays on it.
			if u, err := index.Parse((&url.URL{Path: m.Path}).EscapedPath()); err != nil || u.Host != index.Host || u.Scheme != index.Scheme {
				t.Fatalf("member %q resolves to %v, %v: off the origin %s", m.Path, u, err, index.Host)
			}
		}
		enc, err := idx.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeBundleIndex(enc)
		if err != nil || again.Check(index, bundle) != nil || again.Size != idx.Size || !slices.Equal(again.Members, idx.Members) {
			t.Fatalf("round trip of %s: %+v, %v", enc, again, err)
		}
	})
}
