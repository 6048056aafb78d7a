package origin

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/internal/memnet"
	"github.com/stampede-dev/stampede/manifest"
)

// TestBudgetCore drives one version's budget through a window: within it
// anything goes; past it a swarm client gets only pieces no swarm client
// got this window, unless alone; plain clients always; what a body did not
// send is given back; a new window starts whole.
func TestBudgetCore(t *testing.T) {
	const (
		window = time.Minute
		limit  = 100
	)
	var b budget
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	swarm := func(piece int) spendAsk { return spendAsk{bytes: 30, swarm: true, pieces: 4, piece: piece} }
	steps := []struct {
		name  string
		a     spendAsk
		at    int
		want  verdict
		spent int64
	}{
		{"piece 0", swarm(0), 0, verdictWithin, 30},
		{"piece 0 again", swarm(0), 1, verdictWithin, 60},
		{"piece 1", swarm(1), 2, verdictWithin, 90},
		{"piece 1 past the budget", swarm(1), 3, verdictSpent, 90},
		{"piece 2, never sent", swarm(2), 4, verdictUnsent, 120},
		{"piece 2, now sent", swarm(2), 5, verdictSpent, 120},
		{"piece 0, alone", spendAsk{bytes: 30, swarm: true, alone: true, pieces: 4, piece: 0}, 6, verdictAlone, 150},
		{"plain, whole file", spendAsk{bytes: 120, pieces: 4, piece: -1}, 7, verdictPlain, 270},
		{"plain sends mark nothing: piece 3 is unsent", swarm(3), 8, verdictUnsent, 300},
		{"a range that is no piece", spendAsk{bytes: 30, swarm: true, pieces: 4, piece: -1}, 9, verdictSpent, 300},
		{"pieces not known", spendAsk{bytes: 30, swarm: true, piece: -1}, 10, verdictUnknown, 330},
		{"a new window", swarm(1), 60, verdictWithin, 30},
	}
	for _, s := range steps {
		v, _ := b.spend(s.a, at(s.at), limit, window)
		if v != s.want || b.spent != s.spent {
			t.Fatalf("%s: verdict %d, spent %d; want %d, %d", s.name, v, b.spent, s.want, s.spent)
		}
	}

	// Settling: a body cut short gives back what it did not send, and its
	// piece is unsent again; one that went out whole keeps its piece sent.
	b = budget{}
	_, whole := b.spend(swarm(0), at(0), limit, window)
	_, cut := b.spend(swarm(1), at(1), limit, window)
	b.settle(whole, 30, true)
	b.settle(cut, 10, false)
	if b.spent != 40 || b.unsent(0) || !b.unsent(1) {
		t.Fatalf("after settling: spent %d, sent %v; want 40, piece 0 sent and 1 not", b.spent, b.sent)
	}
	// A charge of a window that ended is not settled into the next one.
	_, late := b.spend(swarm(2), at(2), limit, window)
	b.spend(swarm(3), at(70), limit, window)
	b.settle(late, 0, false)
	if b.spent != 30 || b.unsent(3) {
		t.Fatalf("a late settle: spent %d, sent %v; want 30 and piece 3 sent", b.spent, b.sent)
	}
	if left, reset := b.left(at(80), limit, window); left != 70 || reset != 50*time.Second {
		t.Errorf("left %d, reset %v; want 70 and 50s", left, reset)
	}
}

// budgetGet asks for piece i of /f as a swarm client does, with extra
// headers, and returns the answer and its body.
func (ts *testServer) budgetGet(t *testing.T, m *manifest.Manifest, i int, extra ...string) (*http.Response, []byte) {
	t.Helper()
	off := m.PieceOffset(i)
	h := append([]string{contract.CapabilitiesHeader, contract.CapabilityOverload, "If-Range", m.ETag,
		"Range", fmt.Sprintf("bytes=%d-%d", off, off+m.PieceLen(i)-1)}, extra...)
	return ts.do(t, "GET", "/f", h...)
}

// budgetLeft reads the answer's Stampede-Budget.
func budgetLeft(t *testing.T, res *http.Response) contract.Budget {
	t.Helper()
	b, err := contract.ParseBudget(res.Header.Get(contract.BudgetHeader))
	if err != nil {
		t.Fatalf("%s: %v", res.Status, err)
	}
	return b
}

// TestBudget: a swarm client is served while the file's budget lasts, each
// answer saying what is left; past it, it is refused with the budget's own
// 503, except for a piece no swarm client got this window and for a client
// alone; a plain client is never refused, and its bytes count; the window
// ends and the budget is whole again; the metrics count every case.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 40)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxCopies: 1.5}) // 1.5 copies per 5 min
		m := ts.manifest(t, "/f")
		n := m.NumPieces()
		limit := int64(math.Ceil(float64(m.Size) * 1.5))
		piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
		served := func(what string, res *http.Response, body []byte, i int) contract.Budget {
			t.Helper()
			if res.StatusCode != http.StatusPartialContent || string(body) != string(piece(i)) {
				t.Fatalf("%s: %s, %d bytes; want piece %d", what, res.Status, len(body), i)
			}
			return budgetLeft(t, res)
		}

		// A copy of every piece but the last, then the first pieces again
		// until the budget would be passed: every answer says what is left.
		spent := int64(0)
		for i := range n - 1 {
			spent += m.PieceLen(i)
			res, body := ts.budgetGet(t, m, i)
			if b := served("first copy", res, body, i); b.Left != limit-spent || b.Spent || b.Reset != DefaultBudgetWindow {
				t.Fatalf("piece %d: budget %+v, want %d left and the window's %v", i, b, limit-spent, DefaultBudgetWindow)
			}
		}
		again := 0
		for ; spent+m.PieceLen(again) <= limit; again++ {
			spent += m.PieceLen(again)
			res, body := ts.budgetGet(t, m, again)
			served("second copy", res, body, again)
		}

		// Past the budget: the same client is refused the next piece it
		// already got, with the budget's 503, not a busy origin's.
		time.Sleep(10 * time.Second)
		res, _ := ts.budgetGet(t, m, again)
		b, err := contract.ParseBudget(res.Header.Get(contract.BudgetHeader))
		if res.StatusCode != http.StatusServiceUnavailable || err != nil || !b.Spent || b.Left != 0 {
			t.Fatalf("past the budget: %s, %s %q", res.Status, contract.BudgetHeader, res.Header.Get(contract.BudgetHeader))
		}
		if ra := res.Header.Get("Retry-After"); ra != strconv.Itoa(int((DefaultBudgetWindow-10*time.Second)/time.Second)) || b.Reset != DefaultBudgetWindow-10*time.Second {
			t.Errorf("past the budget: Retry-After %q and reset %v, want the window's end", ra, b.Reset)
		}
		if res.Header.Get("Etag") != "" || res.Header.Get("Content-Range") != "" {
			t.Errorf("the refusal carries the file's headers: %v", res.Header)
		}

		// The last piece never went out this window: it does.
		res, body := ts.budgetGet(t, m, n-1)
		if b := served("never sent, past the budget", res, body, n-1); b.Left != 0 {
			t.Errorf("past the budget: %d left", b.Left)
		}
		// Now it did: refused like the others.
		if res, _ := ts.budgetGet(t, m, n-1); res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("the last piece again: %s, want 503", res.Status)
		}
		// A client alone is served, by either word for it.
		res, body = ts.budgetGet(t, m, 0, contract.SuppliersHeader, "0")
		served("alone (suppliers 0)", res, body, 0)
		res, body = ts.budgetGet(t, m, 0, contract.ReasonHeader, reasonNoPeers)
		served("alone (no-peers)", res, body, 0)
		// Not a client with peers that deliver.
		if res, _ := ts.budgetGet(t, m, 0, contract.SuppliersHeader, "2"); res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("two suppliers: %s, want 503", res.Status)
		}
		// A plain client is never refused, range or whole file, and is
		// told nothing of the budget.
		res, body = ts.do(t, "GET", "/f", "Range", "bytes=0-99")
		if res.StatusCode != http.StatusPartialContent || string(body) != string(data[:100]) || res.Header.Get(contract.BudgetHeader) != "" {
			t.Errorf("plain range past the budget: %s, %s %q", res.Status, contract.BudgetHeader, res.Header.Get(contract.BudgetHeader))
		}
		res, body = ts.do(t, "GET", "/f")
		if res.StatusCode != http.StatusOK || len(body) != len(data) {
			t.Errorf("plain GET past the budget: %s, %d bytes", res.Status, len(body))
		}
		// Nor a swarm client whose If-Range failed: its 200 tells it the
		// file changed.
		res, _ = ts.do(t, "GET", "/f", contract.CapabilitiesHeader, contract.CapabilityOverload, "If-Range", `"stale"`, "Range", "bytes=0-99")
		if res.StatusCode != http.StatusOK {
			t.Errorf("stale If-Range past the budget: %s, want 200", res.Status)
		}

		for series, want := range map[string]int64{
			`stampede_origin_rejected_total{reason="budget"}`:     3,
			`stampede_origin_responses_total{code="503"}`:         3,
			`stampede_origin_budget_overruns_total{why="unsent"}`: 1,
			`stampede_origin_budget_overruns_total{why="alone"}`:  2,
			`stampede_origin_budget_overruns_total{why="plain"}`:  3,
			`stampede_origin_budget_copies`:                       1, // 1.5, as an integer
			`stampede_origin_budget_window_seconds`:               int64(DefaultBudgetWindow / time.Second),
		} {
			if got := ts.metric(t, series); got != want {
				t.Errorf("%s = %d, want %d", series, got, want)
			}
		}

		// The window ends: the budget is whole again.
		time.Sleep(DefaultBudgetWindow)
		res, body = ts.budgetGet(t, m, again)
		if b := served("in a new window", res, body, again); b.Left != limit-m.PieceLen(again) || b.Reset != DefaultBudgetWindow {
			t.Errorf("in a new window: budget %+v, want %d left", b, limit-m.PieceLen(again))
		}
	})
}

// TestBudgetCountsPlainClients: a plain client's bytes come out of the
// budget swarm clients share, and a body cut short gives back what it did
// not send.
func TestBudgetCountsPlainClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		// Four times the connection's window (memnet.DefaultWindow): a
		// client that stops reading leaves most of it unsent.
		data := randomBytes(4<<20, 41)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxCopies: 2})
		m := ts.manifest(t, "/f")
		limit := 2 * m.Size

		if res, body := ts.do(t, "GET", "/f"); res.StatusCode != http.StatusOK || len(body) != len(data) {
			t.Fatalf("plain GET: %s", res.Status)
		}
		res, _ := ts.budgetGet(t, m, 3)
		if b := budgetLeft(t, res); b.Left != limit-m.Size-m.PieceLen(3) {
			t.Fatalf("after a whole file to a plain client: %d left, want %d", b.Left, limit-m.Size-m.PieceLen(3))
		}

		// A plain client that takes 100 bytes of the file and goes.
		req, err := http.NewRequest("GET", ts.url+"/f", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err = ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		if _, err := res.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		synctest.Wait() // its response ends
		res, _ = ts.budgetGet(t, m, 4)
		// Charged what the connection took before it closed: at least the
		// 100 bytes, about its window.
		left := budgetLeft(t, res).Left
		if full := limit - m.Size - m.PieceLen(3) - m.PieceLen(4); left > full-100 || left < full-2*memnet.DefaultWindow {
			t.Errorf("after a body cut short: %d left, want %d less about %d", left, full, memnet.DefaultWindow)
		}
	})
}

// TestBudgetPicksUnsentCandidate: past the budget a swarm peer asking for a
// piece it could have from the swarm gets one of its candidates that no
// swarm client got this window, rather than a refusal, even where the
// origin would otherwise pick one it sent less often in all.
func TestBudgetPicksUnsentCandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 42)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxCopies: 1, ResendAfter: -1})
		m := ts.manifest(t, "/f")
		n := m.NumPieces()
		get := func(i int) {
			t.Helper()
			if res, _ := ts.budgetGet(t, m, i); res.StatusCode != http.StatusPartialContent {
				t.Fatalf("piece %d: %s", i, res.Status)
			}
		}
		// Piece 9 three times in one window, the most sent in all.
		for range 3 {
			get(9)
		}
		time.Sleep(DefaultBudgetWindow)
		// In the next, every piece but 9 once, then piece 0 until the
		// budget is spent.
		spent := int64(0)
		for i := range n {
			if i != 9 {
				spent += m.PieceLen(i)
				get(i)
			}
		}
		for spent+m.PieceLen(0) <= m.Size {
			spent += m.PieceLen(0)
			get(0)
		}
		if res, _ := ts.budgetGet(t, m, 0); res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("past the budget: %s", res.Status)
		}
		// 12 went out once in all, 9 three times: 9, the one not sent this
		// window, comes.
		swarm := []string{contract.CapabilitiesHeader, contract.CapabilityOverload, "If-Range", m.ETag}
		res, p := ts.pieceGet(t, m, data, 0, "9,12", swarm...)
		if p != 9 || res.Header.Get(contract.PieceHeader) != "9" {
			t.Fatalf("past the budget, offering 9 and 12: %s, piece %d; want 9", res.Status, p)
		}
		// Every piece offered went out this window: refused.
		if res, p := ts.pieceGet(t, m, data, 0, "9,12", swarm...); p != -1 || res.Header.Get(contract.BudgetHeader) == "" {
			t.Errorf("every piece offered went out: %s, piece %d", res.Status, p)
		}
	})
}

// TestBudgetOverloadAnswers: overload answers count against the budget,
// and past it hand out only pieces no swarm client got this window; once
// none is left, the 503 is the budget's.
func TestBudgetOverloadAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		data := randomBytes(fileSize, 43)
		writeFile(t, dir, "f", data, t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxTransfers: 1, OverloadCopies: 3, OverloadWindow: time.Hour, MaxCopies: 1.5})
		m := ts.manifest(t, "/f")
		n := m.NumPieces()
		limit := int64(math.Ceil(float64(m.Size) * 1.5))
		// Every piece but the last two to a swarm client before the crowd
		// comes: the overload answers that walk the file from piece 0 pass
		// the budget before they reach those two.
		spent := int64(0)
		for i := range n - 2 {
			spent += m.PieceLen(i)
			if res, _ := ts.budgetGet(t, m, i); res.StatusCode != http.StatusPartialContent {
				t.Fatalf("piece %d: %s", i, res.Status)
			}
		}
		holdHog(t, ts, dir)

		count := make([]int, n)
		var last *http.Response
		for range 3 * n {
			res, body := ts.capableGet(t, m, 0)
			if res.StatusCode != http.StatusPartialContent {
				last = res
				break
			}
			p, err := strconv.Atoi(res.Header.Get(contract.PieceHeader))
			if err != nil || m.VerifyPiece(p, body) != nil {
				t.Fatalf("overload answer: piece %q does not verify", res.Header.Get(contract.PieceHeader))
			}
			past := spent+m.PieceLen(p) > limit
			if past && (p < n-2 || count[p] > 0) {
				t.Fatalf("past the budget, piece %d went out again", p)
			}
			if b := budgetLeft(t, res); !past && b.Left != limit-spent-m.PieceLen(p) {
				t.Errorf("overload answer, piece %d: %d left, want %d", p, b.Left, limit-spent-m.PieceLen(p))
			}
			count[p]++
			spent += m.PieceLen(p)
		}
		if last == nil {
			t.Fatal("overload answers went on past the budget")
		}
		if b, err := contract.ParseBudget(last.Header.Get(contract.BudgetHeader)); last.StatusCode != http.StatusServiceUnavailable || err != nil || !b.Spent {
			t.Fatalf("the end of overload answers: %s, %s %q", last.Status, contract.BudgetHeader, last.Header.Get(contract.BudgetHeader))
		}
		// Every piece got out in this window, the last two past the budget.
		if count[n-2] != 1 || count[n-1] != 1 {
			t.Errorf("the last two pieces went out %d and %d times in overload answers, want once each", count[n-2], count[n-1])
		}
		if spent <= limit {
			t.Errorf("%d bytes went to swarm clients in all, within the budget %d: the test did not pass it", spent, limit)
		}
		for series, want := range map[string]int64{
			`stampede_origin_overload_answers_total{outcome="budget"}`: 1,
			`stampede_origin_rejected_total{reason="budget"}`:          1,
			`stampede_origin_budget_overruns_total{why="unsent"}`:      2,
		} {
			if got := ts.metric(t, series); got != want {
				t.Errorf("%s = %d, want %d", series, got, want)
			}
		}
	})
}

// TestBudgetOff: with no budget, swarm clients are served whatever they
// take, and told nothing of a budget.
func TestBudgetOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "f", randomBytes(fileSize, 44), t0)
		ts := startMem(t, memnet.New(), Config{Dir: dir, MaxCopies: -1})
		m := ts.manifest(t, "/f")
		for k := range 3 * m.NumPieces() {
			res, _ := ts.budgetGet(t, m, k%m.NumPieces())
			if res.StatusCode != http.StatusPartialContent || res.Header.Get(contract.BudgetHeader) != "" {
				t.Fatalf("answer %d: %s, %s %q", k, res.Status, contract.BudgetHeader, res.Header.Get(contract.BudgetHeader))
			}
		}
		if got := ts.metric(t, "stampede_origin_budget_copies"); got != 0 {
			t.Errorf("budget copies %d, want 0", got)
		}
	})
}

func TestBudgetConfig(t *testing.T) {
	for _, c := range []float64{0.5, 0.999} {
		if _, err := New(Config{Dir: t.TempDir(), CacheDir: t.TempDir(), MaxCopies: c}); err == nil {
			t.Errorf("MaxCopies %v accepted", c)
		}
	}
	if _, err := New(Config{Dir: t.TempDir(), CacheDir: t.TempDir(), BudgetWindow: -time.Second}); err == nil {
		t.Error("a negative BudgetWindow accepted")
	}
}

// TestBudgetUpstream: in front of a web server the budget counts and
// refuses as for a directory.
func TestBudgetUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		up := newMemUpstream(t, nw)
		data := randomBytes(fileSize, 45)
		up.set("/f", upstreamFile{data: data, etag: `"v1"`, modTime: t0})
		ts := startMem(t, nw, Config{Upstream: mustParse(t, up.URL+"/"), MaxCopies: 1})
		m := ts.manifest(t, "/f")
		for i := range m.NumPieces() {
			if res, _ := ts.budgetGet(t, m, i); res.StatusCode != http.StatusPartialContent || res.Header.Get(contract.BudgetHeader) == "" {
				t.Fatalf("piece %d: %s, %s %q", i, res.Status, contract.BudgetHeader, res.Header.Get(contract.BudgetHeader))
			}
		}
		res, _ := ts.budgetGet(t, m, 0)
		if b, err := contract.ParseBudget(res.Header.Get(contract.BudgetHeader)); res.StatusCode != http.StatusServiceUnavailable || err != nil || !b.Spent {
			t.Fatalf("past the budget: %s, %s %q", res.Status, contract.BudgetHeader, res.Header.Get(contract.BudgetHeader))
		}
		if res, _ := ts.do(t, "GET", "/f"); res.StatusCode != http.StatusOK {
			t.Errorf("a plain client past the budget: %s", res.Status)
		}
	})
}
