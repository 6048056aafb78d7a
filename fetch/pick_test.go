package fetch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// sinkDownload is a download of m into a temporary file, with its sink
// open, for tests that hand it origin answers directly.
func sinkDownload(t *testing.T, m *manifest.Manifest) (*Download, sink) {
	t.Helper()
	d, err := New(Config{URL: "http://x/f", Output: filepath.Join(t.TempDir(), "f")})
	if err != nil {
		t.Fatal(err)
	}
	sk, err := d.openSink(m, false)
	if err != nil {
		t.Fatal(err)
	}
	return d, sk
}

func TestReadPickAnswer(t *testing.T) {
	data := randomData(200_000, 6)
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
	answer := func(i int, named string, body []byte) *http.Response {
		h := http.Header{}
		off := m.PieceOffset(i)
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+m.PieceLen(i)-1, m.Size))
		h.Set(contract.PieceHeader, named)
		return &http.Response{StatusCode: 206, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
	}
	// The request asked for piece 1 offering 2 and 4.
	tests := []struct {
		name   string
		res    *http.Response
		got    int // -1: an error
		stored int
		isErr  func(error) bool
	}{
		{"an offered piece", answer(4, "4", piece(4)), 4, 1, nil},
		{"a piece not offered", answer(3, "3", piece(3)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"named one, sent another", answer(2, "4", piece(2)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"not a number", answer(2, "two", piece(2)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"corrupt", answer(2, "2", bytes.Repeat([]byte{7}, int(m.PieceLen(2)))), -1, 0, isCorrupt},
		{"short", answer(2, "2", piece(2)[:10]), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
	}
	for _, tt := range tests {
		d, sk := sinkDownload(t, m)
		a := &attempt{piece: 1, got: 1, buf: make([]byte, m.PieceSize), candidates: []int{2, 4}}
		err := d.readPickAnswer(t.Context(), m, sk, a, make(chan []byte, 1), tt.res)
		switch {
		case tt.isErr == nil && (err != nil || a.got != tt.got):
			t.Errorf("%s: got piece %d, %v; want %d", tt.name, a.got, err, tt.got)
		case tt.isErr != nil && !tt.isErr(err):
			t.Errorf("%s: %v", tt.name, err)
		}
		if n := sk.(*fileSink).st.Count(); n != tt.stored {
			t.Errorf("%s: %d pieces stored, want %d", tt.name, n, tt.stored)
		}
		sk.close()
	}
}

// TestSwarmOriginPicks: peers that cannot see each other, all asking the
// origin for piece 0 and offering every other piece, each get a piece
// nobody got before, until every piece went out once; then they are told
// the pieces are in the swarm.
func TestSwarmOriginPicks(t *testing.T) {
	// A minute: the fetches below must all count as just now.
	o := startOverloadOrigin(t, 4<<20, origin.Config{ResendAfter: time.Minute})
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
	o := startOverloadOrigin(t, 4<<20, origin.Config{ResendAfter: time.Minute})
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
func originFetchers(t *testing.T, url string, n int) ([]node.OriginFetcher, *manifest.Manifest) {
	t.Helper()
	var fetchers []node.OriginFetcher
	var m *manifest.Manifest
	for k := range n {
		src, err := OpenSource(t.Context(), Config{URL: url})
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
		if got := contract.ManifestHeadURL(u).String(); got != want {
			t.Errorf("contract.ManifestHeadURL(%s) = %s, want %s", in, got, want)
		}
	}
}
