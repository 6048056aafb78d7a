package contract

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// The decoders here read what a server (or a peer posing as one) sends:
// none may panic, and what they accept must survive a round trip.

func FuzzDecodeBundleIndex(f *testing.F) {
	f.Add([]byte(`{"version":1,"bundle":"/.well-known/stampede/bundle/p.html","size":10,` +
		`"members":[{"path":"/p.html","offset":0,"size":6},{"path":"/a.css","offset":6,"size":4}]}`))
	f.Add([]byte(`{"version":1,"bundle":"../bundle/p.html","size":1,"members":[{"path":"/p.html","offset":0,"size":1}]}`))
	f.Add([]byte(`{"members":[{"offset":-1,"size":9223372036854775807}]}`))
	index, _ := url.Parse("http://o/.well-known/stampede/bundle-index/p.html")
	bundle, _ := url.Parse("http://o/.well-known/stampede/bundle/p.html")
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := DecodeBundleIndex(b)
		if err != nil {
			return
		}
		if idx.Check(index, bundle) != nil {
			return
		}
		for _, m := range idx.Members {
			if m.Offset < 0 || m.Size < 0 || m.Offset+m.Size > idx.Size || !strings.HasPrefix(m.Path, "/") {
				t.Fatalf("accepted member %+v of a %d-byte bundle", m, idx.Size)
			}
		}
		enc, err := idx.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeBundleIndex(enc)
		if err != nil || again.Size != idx.Size || !slices.Equal(again.Members, idx.Members) {
			t.Fatalf("round trip of %s: %+v, %v", enc, again, err)
		}
	})
}

func FuzzParsePeers(f *testing.F) {
	f.Add("192.0.2.7:7000, [2001:db8::5]:7000")
	f.Add("1.2.3.4:0,,[::1]:1,host:80")
	f.Add("[fe80::1%eth0]:7000")
	f.Fuzz(func(t *testing.T, v string) {
		got := ParsePeers([]string{v}, 50)
		if len(got) > 50 {
			t.Fatalf("%d peers, more than asked", len(got))
		}
		aps := make([]netip.AddrPort, len(got))
		for k, p := range got {
			ap, err := netip.ParseAddrPort(p)
			if err != nil || ap.Port() == 0 {
				t.Fatalf("returned %q: %v", p, err)
			}
			aps[k] = ap
		}
		if again := ParsePeers([]string{FormatPeers(aps)}, 50); !slices.Equal(again, got) {
			t.Fatalf("round trip: %q, want %q", again, got)
		}
	})
}

func FuzzParseCandidates(f *testing.F) {
	f.Add("0-2,5,9-10", 11)
	f.Add(" 3 , 7-9,120", 121)
	f.Add("5-3,-1,00,999999999", 1000)
	f.Fuzz(func(t *testing.T, v string, n int) {
		if n < 0 || n > 1<<20 {
			return
		}
		got, err := ParseCandidates(v, n, 256)
		if err != nil {
			return
		}
		if len(got) > 256 {
			t.Fatalf("%d candidates, more than asked", len(got))
		}
		for _, i := range got {
			if i < 0 || i >= n {
				t.Fatalf("candidate %d of %d pieces", i, n)
			}
		}
		if slices.IsSorted(got) && len(slices.Compact(slices.Clone(got))) == len(got) {
			again, err := ParseCandidates(FormatCandidates(got), n, 256)
			if err != nil || !slices.Equal(again, got) {
				t.Fatalf("round trip of %v: %v, %v", got, again, err)
			}
		}
	})
}

func FuzzDecodeManifestHead(f *testing.F) {
	f.Add("eyJ2ZXJzaW9uIjoxfQ==")
	f.Add("!!!")
	f.Add(strings.Repeat("A", MaxInlineHead+4))
	f.Fuzz(func(t *testing.T, v string) {
		m, err := DecodeManifestHead(v)
		if err != nil {
			return
		}
		if m.Size < 0 || m.NumPieces() < 0 {
			t.Fatalf("accepted a head with size %d", m.Size)
		}
	})
}

func FuzzParseBudget(f *testing.F) {
	f.Add("left=1048576, reset=42")
	f.Add("spent, left=0, reset=300")
	f.Add("left=1,left=2,spent=,reset=-1,copies=1.5")
	f.Fuzz(func(t *testing.T, v string) {
		b, err := ParseBudget(v)
		if err != nil {
			return
		}
		if b.Left < 0 || b.Reset < 0 || b.Reset > 24*time.Hour {
			t.Fatalf("accepted %q as %+v", v, b)
		}
		again, err := ParseBudget(FormatBudget(b))
		if err != nil || again != b {
			t.Fatalf("round trip of %+v: %+v, %v", b, again, err)
		}
	})
}
