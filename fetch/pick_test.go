package fetch

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// TestSwarmOriginPicks: peers that cannot see each other, all asking the
// origin for piece 0 and offering every other piece, each get a piece
// nobody got before, until every piece went out once; then they are told
// the pieces are in the swarm.
func TestSwarmOriginPicks(t *testing.T) {
	// A minute: the fetches below must all count as just now.
	o := startOverloadOrigin(t, nil, 4<<20, origin.Config{ResendAfter: time.Minute})
	const peers = 3
	fetchers, m := originFetchers(t, o.url, peers)
	n := m.NumPieces()
	all := make([]int, 0, n-1)
	for i := 1; i < n; i++ {
		all = append(all, i)
	}
	seen := map[int]bool{}
	for k := range n {
		got, _, err := fetchers[k%peers](t.Context(), swarm.FetchOrigin{Piece: 0, Reason: swarm.ReasonNoPeerHasIt, Candidates: all})
		if err != nil {
			t.Fatalf("fetch %d: %v", k, err)
		}
		if seen[got] {
			t.Fatalf("fetch %d got piece %d, sent before while others were not", k, got)
		}
		seen[got] = true
	}
	// Every piece went out just now: the next peer is told to get them from
	// the swarm (within the origin's ResendAfter), not sent a copy.
	_, _, err := fetchers[0](t.Context(), swarm.FetchOrigin{Piece: 0, Reason: swarm.ReasonNoPeerHasIt, Candidates: all})
	ie, ok := errors.AsType[*node.InSwarmError](err)
	if !ok || ie.Wait <= 0 || ie.Wait > time.Minute {
		t.Fatalf("fetch after every piece went out: %v, want an InSwarmError with a wait up to a minute", err)
	}
	// A fetch without candidates (a stalled piece) still gets its copy.
	if got, _, err := fetchers[1](t.Context(), swarm.FetchOrigin{Piece: 0, Reason: swarm.ReasonStalled}); err != nil || got != 0 {
		t.Fatalf("stalled fetch of piece 0: got %d, %v", got, err)
	}
}

// TestSwarmOwnCandidate: a swarm peer whose only eligible piece is the one
// it asks for names it as its own candidate. The first such fetch gets the
// piece; the next one, from another peer while the first copy is recent,
// is told the piece is in the swarm instead of being sent a second copy.
func TestSwarmOwnCandidate(t *testing.T) {
	o := startOverloadOrigin(t, nil, 4<<20, origin.Config{ResendAfter: time.Minute})
	fetchers, _ := originFetchers(t, o.url, 2)
	const piece = 3
	fo := swarm.FetchOrigin{Piece: piece, Reason: swarm.ReasonNoPeerHasIt, Candidates: []int{piece}}
	if got, _, err := fetchers[0](t.Context(), fo); err != nil || got != piece {
		t.Fatalf("first fetch: got piece %d, %v; want %d", got, err, piece)
	}
	_, _, err := fetchers[1](t.Context(), fo)
	if ie, ok := errors.AsType[*node.InSwarmError](err); !ok || ie.Wait <= 0 || ie.Wait > time.Minute {
		t.Fatalf("second fetch: %v, want an InSwarmError with a wait up to a minute", err)
	}
}

// originFetchers returns n origin fetchers of the file at url, each
// storing into a store of its own, and the file's manifest.
func originFetchers(t *testing.T, rawURL string, n int) ([]node.OriginFetcher, *manifest.Manifest) {
	t.Helper()
	var fetchers []node.OriginFetcher
	var m *manifest.Manifest
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		src, err := originclient.New(originclient.Config{Retries: originclient.DefaultRetries}).Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		m = src.Manifest()
		st, err := store.Open(filepath.Join(t.TempDir(), fmt.Sprintf("f%d", k)), m, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fetchers = append(fetchers, src.Fetcher(st, func() *node.Node { return nil }))
	}
	return fetchers, m
}
