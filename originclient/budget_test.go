package originclient

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// TestFetchPieceBudget: a piece answer's budget is read into the request
// and the client; the budget's 503 is a *BudgetError, which no retry rule
// takes for a failing origin, and not a busy one; a 503 without it is
// still a *BusyError; Alone goes to the origin with a swarm fetch only.
func TestFetchPieceBudget(t *testing.T) {
	data := randomData(200_000, 7)
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	m.ETag = `"v1"`
	var (
		answer    func(w http.ResponseWriter, r *http.Request)
		suppliers []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		suppliers = append(suppliers, r.Header.Get(contract.SuppliersHeader))
		w.Header().Set("Etag", `"v1"`)
		answer(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/f")
	in := &Resource{URL: u, ETag: `"v1"`}
	c, p, st := storeRequest(t, m)
	defer st.Close()
	c.cfg.Client = srv.Client()

	if _, _, ok := c.Budget(); ok {
		t.Fatal("a budget before any answer")
	}
	piece := func(w http.ResponseWriter, budget string) {
		off, n := m.PieceOffset(1), m.PieceLen(1)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, m.Size))
		if budget != "" {
			w.Header().Set(contract.BudgetHeader, budget)
		}
		w.WriteHeader(http.StatusPartialContent)
		w.Write(data[off : off+n])
	}
	answer = func(w http.ResponseWriter, r *http.Request) { piece(w, "left=1000, reset=42") }
	p.Overload, p.Alone = true, true
	if err := c.FetchPiece(t.Context(), m, in, p); err != nil {
		t.Fatal(err)
	}
	want := contract.Budget{Left: 1000, Reset: 42 * time.Second}
	if p.Budget == nil || *p.Budget != want {
		t.Errorf("the request's budget: %+v, want %+v", p.Budget, want)
	}
	if b, at, ok := c.Budget(); !ok || b != want || at.IsZero() {
		t.Errorf("the client's budget: %+v at %v, %v; want %+v", b, at, ok, want)
	}

	// A malformed budget is no budget; the piece is served all the same.
	answer = func(w http.ResponseWriter, r *http.Request) { piece(w, "plenty") }
	p.Alone = false
	if err := c.FetchPiece(t.Context(), m, in, p); err != nil || p.Budget != nil {
		t.Errorf("a malformed budget: %v, budget %+v", err, p.Budget)
	}

	// The budget's refusal.
	answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(contract.BudgetHeader, "spent, left=0, reset=200")
		w.Header().Set(contract.PeersHeader, "192.0.2.7:7000")
		w.Header().Set("Retry-After", "200")
		http.Error(w, "spent", http.StatusServiceUnavailable)
	}
	err = c.FetchPiece(t.Context(), m, in, p)
	be, ok := errors.AsType[*BudgetError](err)
	if !ok || be.Wait != time.Minute || be.Reset != 200*time.Second || !slices.Equal(be.Peers, []string{"192.0.2.7:7000"}) {
		t.Fatalf("the budget's 503: %v (%#v); want a *BudgetError waiting a minute, the window's end in 200 s, one peer", err, be)
	}
	if Transient(err) || Permanent(err) || errors.As(err, new(*BusyError)) || errors.As(err, new(*node.InSwarmError)) {
		t.Errorf("the budget's 503 is classed as another answer: %v", err)
	}
	if p.Budget == nil || !p.Budget.Spent {
		t.Errorf("the refusal's budget: %+v", p.Budget)
	}
	// A budget that is not spent does not make a 503 the budget's.
	answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(contract.BudgetHeader, "left=5, reset=200")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}
	if err := c.FetchPiece(t.Context(), m, in, p); !errors.As(err, new(*BusyError)) {
		t.Errorf("a 503 with budget left: %v, want a *BusyError", err)
	}

	// Alone is said with a swarm fetch, and only then.
	p.Overload, p.Alone = false, true
	answer = func(w http.ResponseWriter, r *http.Request) { piece(w, "") }
	if err := c.FetchPiece(t.Context(), m, in, p); err != nil {
		t.Fatal(err)
	}
	if want := []string{"0", "", "", "", ""}; !slices.Equal(suppliers, want) {
		t.Errorf("%s sent %q, want %q", contract.SuppliersHeader, suppliers, want)
	}
}

// TestFetcherBudget: against a stampede origin whose budget is spent, a
// node's origin fetcher neither fails nor reports a busy origin: it says
// the pieces are in the swarm, for the refusal's wait; a fetch for reason
// no-peers says it is alone and is served; the source keeps the budget the
// answers told.
func TestFetcherBudget(t *testing.T) {
	dir := t.TempDir()
	data := randomData(300_000, 8)
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := origin.New(origin.Config{Dir: dir, CacheDir: t.TempDir(), MaxCopies: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	srv := httptest.NewServer(o.Handler())
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	u, _ := url.Parse(srv.URL + "/f")
	c := New(Config{Client: srv.Client()})
	src, err := c.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	m := src.Manifest()
	peer := func() node.OriginFetcher {
		st, err := store.Open(filepath.Join(t.TempDir(), "f"), m, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return src.Fetcher(st, func() *node.Node { return nil })
	}

	// One peer takes the whole budget: a copy of the file.
	first := peer()
	for i := range m.NumPieces() {
		if got, busy, err := first(t.Context(), swarm.FetchOrigin{Piece: i, Reason: swarm.ReasonNoPeerHasIt}); err != nil || got != i || busy != 0 {
			t.Fatalf("piece %d: got %d, busy %v, %v", i, got, busy, err)
		}
	}
	if b, _, ok := src.Budget(); !ok || b.Left != 0 || b.Spent {
		t.Errorf("after a whole copy: budget %+v, %v; want none left", b, ok)
	}

	// Another is refused piece 0, which the first has.
	second := peer()
	got, busy, err := second(t.Context(), swarm.FetchOrigin{Piece: 0, Reason: swarm.ReasonNoPeerHasIt, Candidates: []int{0}})
	if got != -1 || busy != 0 || !errors.As(err, new(*BudgetError)) {
		t.Fatalf("past the budget: got %d, busy %v, %v; want the budget's refusal, not busy", got, busy, err)
	}
	ie, ok := errors.AsType[*node.InSwarmError](err)
	if !ok || ie.Wait < 59*time.Second || ie.Wait > time.Minute {
		t.Errorf("past the budget: %v; want a *node.InSwarmError for the minute a Retry-After is held to", err)
	}
	var fatal *node.FatalError
	if errors.As(err, &fatal) {
		t.Errorf("past the budget: a fatal error: %v", err)
	}
	if b, _, ok := src.Budget(); !ok || !b.Spent {
		t.Errorf("after the refusal: budget %+v, %v; want spent", b, ok)
	}
	// Alone, it is served.
	if got, _, err := second(t.Context(), swarm.FetchOrigin{Piece: 0, Reason: swarm.ReasonNoPeers}); err != nil || got != 0 {
		t.Errorf("alone past the budget: got %d, %v", got, err)
	}
}
