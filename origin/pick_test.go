package origin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
)

func TestSentLedgerChoose(t *testing.T) {
	l := newSentLedger(8)
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	// Unsent: the asked piece wins, candidates or not.
	if p, _, _ := l.choose(2, []int{5, 6}, at(0), 0); p != 2 {
		t.Fatalf("unsent piece asked: got %d, want 2", p)
	}
	// Sent once: the first unsent candidate.
	if p, _, _ := l.choose(2, []int{2, 5, 6}, at(1), 0); p != 5 {
		t.Fatalf("asked piece sent, candidates unsent: got %d, want 5", p)
	}
	if p, _, _ := l.choose(2, []int{5, 6}, at(2), 0); p != 6 {
		t.Fatalf("got %d, want 6", p)
	}
	// All sent once: the one sent longest ago (2 at 0 s; 5 at 1 s).
	if p, _, _ := l.choose(6, []int{5, 2}, at(3), 0); p != 2 {
		t.Fatalf("all sent once: got %d, want 2, the oldest", p)
	}
	// Undo takes a send back: 7 is unsent again afterwards.
	p, undo, _ := l.choose(7, nil, at(4), 0)
	if p != 7 {
		t.Fatalf("got %d, want 7", p)
	}
	undo()
	if l.count[7] != 0 || l.last[7] != 0 {
		t.Fatalf("after undo: count %d last %d", l.count[7], l.last[7])
	}
	if p, _, _ := l.choose(0, []int{7}, at(5), 0); p != 0 {
		t.Fatalf("got %d, want 0 (asked, unsent)", p)
	}
}

// TestSentLedgerResendAfter: a request with candidates whose pieces all went
// out less than resendAfter ago gets nothing (and how long to wait); one
// without candidates, or once resendAfter passed, gets a copy.
func TestSentLedgerResendAfter(t *testing.T) {
	l := newSentLedger(4)
	t0 := time.Unix(1000, 0)
	const after = 3 * time.Second
	// send is a choose whose body goes out at once.
	send := func(l *sentLedger, asked int, cands []int, at time.Time) (int, time.Duration) {
		p, undo, wait := l.choose(asked, cands, at, after)
		if undo != nil {
			l.delivered(p, len(cands) > 0, at)
		}
		return p, wait
	}
	if p, wait := send(l, 0, []int{1}, t0); p != 0 || wait != 0 {
		t.Fatalf("unsent: got %d, wait %v", p, wait)
	}
	if p, wait := send(l, 0, []int{1}, t0.Add(time.Second)); p != 1 || wait != 0 {
		t.Fatalf("one unsent candidate: got %d, wait %v", p, wait)
	}
	// 0 went out at 0 s and 1 at 1 s: at 2 s the oldest may go at 3 s.
	p, undo, wait := l.choose(1, []int{0}, t0.Add(2*time.Second), after)
	if wait != time.Second || undo != nil {
		t.Fatalf("all sent just now: got %d, wait %v, want a 1s wait and no send", p, wait)
	}
	if l.count[0] != 1 || l.count[1] != 1 {
		t.Fatalf("a refused request counted as sent: counts %v", l.count)
	}
	// No candidates: not a swarm peer's pick, the piece asked goes.
	if p, wait := send(l, 1, nil, t0.Add(2*time.Second)); p != 1 || wait != 0 {
		t.Fatalf("no candidates: got %d, wait %v", p, wait)
	}
	// Past resendAfter the copy sent longest ago goes again.
	if p, wait := send(l, 1, []int{0}, t0.Add(3*time.Second)); p != 0 || wait != 0 {
		t.Fatalf("after resendAfter: got %d, wait %v, want piece 0 at once", p, wait)
	}
	// Fewer sends do not outweigh being on its way: 0 went to swarm peers
	// twice long ago, 1 once just now; 0 goes.
	l = newSentLedger(2)
	send(l, 0, []int{0}, t0)
	send(l, 0, []int{0}, t0.Add(5*time.Second))
	send(l, 1, []int{1}, t0.Add(9*time.Second))
	if p, wait := send(l, 0, []int{1}, t0.Add(10*time.Second)); p != 0 || wait != 0 {
		t.Fatalf("asked piece old, candidate recent but sent fewer times: got %d, wait %v, want 0 at once", p, wait)
	}
	// A send still under way keeps its piece off past the window, for at
	// most sendingHold windows from its request.
	l = newSentLedger(1)
	l.choose(0, []int{0}, t0, after)
	if _, _, wait := l.choose(0, []int{0}, t0.Add(4*time.Second), after); wait != after {
		t.Fatalf("piece still being sent after 4 s: wait %v, want %v", wait, after)
	}
	if p, _, wait := l.choose(0, []int{0}, t0.Add(sendingHold*after), after); p != 0 || wait != 0 {
		t.Fatalf("piece still being sent after %d windows: got %d, wait %v, want it sent again", sendingHold, p, wait)
	}
	// Undoing a send leaves a later send's record alone: 0 went to A at
	// 0 s, to B at 13 s (A's send stuck past sendingHold windows), B's body
	// was out at 14 s, then A's is cut short at 15 s: 0 is still on its
	// way through the swarm.
	l = newSentLedger(1)
	_, undoA, _ := l.choose(0, []int{0}, t0, after)
	if _, _, wait := l.choose(0, []int{0}, t0.Add(13*time.Second), after); wait != 0 {
		t.Fatalf("second send at 13 s refused (wait %v)", wait)
	}
	l.delivered(0, true, t0.Add(14*time.Second))
	undoA()
	if _, _, wait := l.choose(0, []int{0}, t0.Add(15*time.Second), after); wait != 2*time.Second {
		t.Fatalf("after B's delivery at 14 s and A's undo: wait %v, want 2s", wait)
	}
	if l.count[0] != 1 || l.sending[0] != 0 {
		t.Fatalf("after the undo: count %d, sending %d; want 1 and 0", l.count[0], l.sending[0])
	}
	// Sends to plain clients (no candidates) do not put a piece in the
	// swarm: 1 went to a plain client just now, and a swarm peer gets it.
	l = newSentLedger(2)
	send(l, 1, nil, t0)
	if p, wait := send(l, 1, []int{1}, t0.Add(time.Second)); p != 1 || wait != 0 {
		t.Fatalf("piece sent to a plain client just now: got %d, wait %v, want 1 at once", p, wait)
	}
}

// TestPickInSwarm: a swarm peer asking for pieces the origin sent just now
// gets 503 "in swarm" with a Retry-After, no body of the file, and the
// piece is not counted as sent; the same request without candidates (not a
// swarm peer), or from a peer that knows no other, still gets it.
func TestPickInSwarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 31)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, ResendAfter: time.Minute})
		m := ts.manifest(t, "/f")
		if _, p := ts.pieceGet(t, m, data, 0, "1"); p != 0 {
			t.Fatalf("first request: got piece %d", p)
		}
		if _, p := ts.pieceGet(t, m, data, 0, "1"); p != 1 {
			t.Fatalf("second request: got piece %d, want the unsent candidate 1", p)
		}
		res, p := ts.pieceGet(t, m, data, 1, "0")
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(contract.InSwarmHeader) != "1" || p != -1 {
			t.Fatalf("all sent just now: %s, %s %q", res.Status, contract.InSwarmHeader, res.Header.Get(contract.InSwarmHeader))
		}
		if ra := res.Header.Get("Retry-After"); ra != "60" {
			t.Errorf("Retry-After %q, want 60 (ResendAfter)", ra)
		}
		if res.Header.Get("Etag") != "" || res.Header.Get("Content-Range") != "" {
			t.Errorf("the 503 carries the file's headers: %v", res.Header)
		}
		if _, p := ts.pieceGet(t, m, data, 1, ""); p != 1 {
			t.Errorf("no candidates: got piece %d, want 1", p)
		}
		// A peer that knows no other peer has no swarm to leave them to.
		if res, p := ts.pieceGet(t, m, data, 1, "0", contract.ReasonHeader, reasonNoPeers); p < 0 {
			t.Errorf("a peer without peers: %s, %s %q", res.Status, contract.InSwarmHeader, res.Header.Get(contract.InSwarmHeader))
		}
		for series, want := range map[string]int64{
			`stampede_origin_piece_sends_total{copy="first"}`:   2,
			`stampede_origin_piece_sends_total{copy="again"}`:   2,
			`stampede_origin_rejected_total{reason="in-swarm"}`: 1,
		} {
			if got := ts.metric(t, series); got != want {
				t.Errorf("%s = %d, want %d", series, got, want)
			}
		}
	})
}

// TestPickInSwarmCountsFromDelivery: the resend window starts when a
// piece's body has gone out, not when it was asked for: a piece that took
// longer than the window to send is still refused right after.
func TestPickInSwarmCountsFromDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 37)
		writeFile(t, dir, "f", data, t0)
		const window = 300 * time.Millisecond
		ts := startMem(t, memnet.New(), Config{Dir: dir, ResendAfter: window, Rate: 16 << 10})
		m := ts.manifest(t, "/f")
		// A first piece empties the rate limiter's burst; the next is shaped.
		if _, p := ts.pieceGet(t, m, data, 1, ""); p != 1 {
			t.Fatalf("warm-up request: got piece %d", p)
		}
		begin := time.Now()
		if _, p := ts.pieceGet(t, m, data, 0, "0"); p != 0 {
			t.Fatalf("first request: got piece %d", p)
		}
		if took := time.Since(begin); took < 2*window {
			t.Fatalf("piece 0 took %v to send; the test needs over %v", took, 2*window)
		}
		if res, _ := ts.pieceGet(t, m, data, 0, "0"); res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(contract.InSwarmHeader) == "" {
			t.Errorf("right after a slow send: %s, want 503 in swarm (the window counts from the end of the body)", res.Status)
		}
	})
}

// TestPickInSwarmCutShort: a piece whose body the peer stopped taking did
// not go out: it is not "in the swarm", and the next swarm peer gets it.
func TestPickInSwarmCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(32<<20, 41) // 64 KiB pieces: several limiter chunks each
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, ResendAfter: time.Minute, Rate: 64 << 10})
		m := ts.manifest(t, "/f")
		if _, p := ts.pieceGet(t, m, data, 1, ""); p != 1 { // empties the limiter's burst
			t.Fatalf("warm-up request: got piece %d", p)
		}
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, "GET", ts.url+"/f", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=0-%d", m.PieceLen(0)-1))
		req.Header.Set(contract.CandidatesHeader, "0")
		res, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusPartialContent {
			t.Fatalf("first request: %s", res.Status)
		}
		if _, err := io.ReadFull(res.Body, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		cancel() // the peer gives up a few bytes into the piece
		res.Body.Close()
		// The origin notices as soon as the connection is gone (net/http ends
		// the request's context); until then the piece is on its way and
		// refused. Let it notice.
		synctest.Wait()
		if res, p := ts.pieceGet(t, m, data, 0, "0"); p != 0 {
			t.Fatalf("after the first body was cut short: %s (in swarm %q), want piece 0", res.Status, res.Header.Get(contract.InSwarmHeader))
		}
	})
}

// pieceGet asks for piece i offering cands, as a stampede peer does, and
// returns the piece the response carries.
func (ts *testServer) pieceGet(t *testing.T, m *manifest.Manifest, data []byte, i int, cands string, extra ...string) (*http.Response, int) {
	t.Helper()
	off := m.PieceOffset(i)
	h := append([]string{"Range", fmt.Sprintf("bytes=%d-%d", off, off+m.PieceLen(i)-1)}, extra...)
	if cands != "" {
		h = append(h, contract.CandidatesHeader, cands)
	}
	res, body := ts.do(t, "GET", "/f", h...)
	if res.StatusCode != http.StatusPartialContent {
		return res, -1
	}
	p := i
	if v := res.Header.Get(contract.PieceHeader); v != "" {
		var err error
		if p, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s %q", contract.PieceHeader, v)
		}
		if p == i {
			t.Errorf("%s names the piece asked", contract.PieceHeader)
		}
	}
	off, n := m.PieceOffset(p), m.PieceLen(p)
	if cr := res.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, m.Size) {
		t.Errorf("piece %d: Content-Range %q", p, cr)
	}
	if string(body) != string(data[off:off+n]) || (m.Root != manifest.Hash{} && m.VerifyPiece(p, body) != nil) {
		t.Errorf("piece %d: body does not verify", p)
	}
	if res.Header.Get("Retry-After") != "" {
		t.Errorf("piece %d: a pick answer with Retry-After (reads as an overload answer)", p)
	}
	return res, p
}

func TestPickPiece(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(fileSize, 29)
	writeFile(t, dir, "f", data, t0)
	// Every piece may be sent again at once here; TestPickInSwarm tests
	// ResendAfter.
	ts := start(t, Config{Dir: dir, ResendAfter: -1})

	// Before the manifest is computed the origin knows no pieces: the
	// range asked is served.
	probe := manifest.Manifest{Size: int64(len(data)), PieceSize: manifest.PieceSizeFor(int64(len(data)))}
	if _, p := ts.pieceGet(t, &probe, data, 1, "0-3"); p != 1 {
		t.Fatalf("no manifest yet: got piece %d, want 1", p)
	}

	m := ts.manifest(t, "/f")
	n := m.NumPieces()
	if n < 6 {
		t.Fatalf("test file has %d pieces", n)
	}
	all := fmt.Sprintf("0-%d", n-1)
	// Peers that all want piece 0 and would take any: each gets a piece
	// nobody got before, until every piece went out once.
	got := map[int]bool{}
	for range n {
		_, p := ts.pieceGet(t, m, data, 0, all)
		if got[p] {
			t.Fatalf("piece %d sent twice before every piece went out once", p)
		}
		got[p] = true
	}
	// Now every piece went out once: the asked one unless a candidate is
	// older; piece 0 went out first, so asking 3 offering 0 gets 0.
	if _, p := ts.pieceGet(t, m, data, 3, "0"); p != 0 {
		t.Errorf("all sent once, asked 3 offering 0 (sent first): got %d", p)
	}
	// Without candidates, or with malformed ones, the piece asked.
	if _, p := ts.pieceGet(t, m, data, 4, ""); p != 4 {
		t.Errorf("no candidates: got %d, want 4", p)
	}
	if _, p := ts.pieceGet(t, m, data, 4, "1,zz"); p != 4 {
		t.Errorf("malformed candidates: got %d, want 4", p)
	}
	// A stale If-Range gets the whole file (200), without contract.PieceHeader,
	// and the piece does not count as sent.
	before := ts.metric(t, `stampede_origin_piece_sends_total{copy="again"}`)
	res, _ := ts.pieceGet(t, m, data, 5, all, "If-Range", `"stale"`)
	if res.StatusCode != http.StatusOK || res.Header.Get(contract.PieceHeader) != "" {
		t.Errorf("stale If-Range: %s, %s %q", res.Status, contract.PieceHeader, res.Header.Get(contract.PieceHeader))
	}
	if after := ts.metric(t, `stampede_origin_piece_sends_total{copy="again"}`); after != before {
		t.Errorf("a 200 counted as a piece sent again (%d -> %d)", before, after)
	}

	for series, want := range map[string]int64{
		// n first copies; piece 0, then 4 twice, again.
		`stampede_origin_piece_sends_total{copy="first"}`: int64(n),
		`stampede_origin_piece_sends_total{copy="again"}`: 3,
		`stampede_origin_piece_picks_total`:               int64(n - 1 + 1),
	} {
		if got := ts.metric(t, series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
}

// TestPickThenOverloadAnswer: past MaxTransfers, a capable request whose
// pick chose another piece gets an overload answer for the piece it asked
// for (the handout prefers it), not for the piece the pick chose: the
// pick is taken back with the request's own Range.
func TestPickThenOverloadAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 31)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, OverloadWindow: time.Hour})
		m := ts.manifest(t, "/f")
		if _, p := ts.pieceGet(t, m, data, 0, ""); p != 0 { // piece 0 sent once
			t.Fatalf("got piece %d", p)
		}
		holdHog(t, ts, dir)
		off := m.PieceOffset(0)
		res, _ := ts.do(t, "GET", "/f", "Range", fmt.Sprintf("bytes=%d-%d", off, off+m.PieceLen(0)-1),
			contract.CandidatesHeader, "1-3", contract.CapabilitiesHeader, contract.CapabilityOverload)
		if res.StatusCode != http.StatusPartialContent || res.Header.Get("Retry-After") == "" {
			t.Fatalf("capable client past the limit: %s, Retry-After %q", res.Status, res.Header.Get("Retry-After"))
		}
		if got := res.Header.Get(contract.PieceHeader); got != "0" {
			t.Errorf("overload answer carries piece %s, want 0, the piece asked", got)
		}
		// The pick's choice was taken back: piece 1 is still unsent.
		if n := ts.metric(t, `stampede_origin_piece_picks_total`); n != 0 {
			t.Errorf("%d picks counted, want 0", n)
		}
	})
}
