// Package dashboardtest loads a server's dashboard (package
// internal/dashboard) in headless Chromium, for the tests of the servers
// that serve one: the page must work in a real browser, its script
// included, not only render on the server.
//
// Chromium is Debian's chromium package, driven over its DevTools
// protocol by github.com/chromedp/chromedp (docs/dependencies.md). A test
// skips without it, unless STAMPEDETEST_REQUIRE_CHROMIUM=1 (scripts/test.sh
// sets it when chromium is installed).
package dashboardtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stampede-dev/stampede/internal/dashboard"
)

// RequireEnv, set to 1, makes a missing Chromium a failure.
const RequireEnv = "STAMPEDETEST_REQUIRE_CHROMIUM"

// Timeout bounds each wait for the page.
const Timeout = 10 * time.Second

// Page is a dashboard loaded in a headless Chromium of its own, which is
// killed when the test ends.
type Page struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex // guards problems
	problems []string   // console errors and uncaught exceptions
}

// Open starts Chromium, loads the page at url and waits for its script's
// first update. It skips the test when there is no Chromium.
func Open(t testing.TB, url string) *Page {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("no chromium, and %s=1: %v", RequireEnv, err)
		}
		t.Skipf("no chromium (Debian's chromium package; scripts/install-test-deps.sh installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1200, 800))
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox on; the page
		// is our own.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	p := &Page{t: t, ctx: ctx}
	// Start the browser with no deadline: a deadline on the first call
	// would bind the browser's life to it.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("chromium: %v", err)
	}
	console := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				p.mu.Lock()
				p.problems = append(p.problems, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m.Text))
				p.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()      // closes the tab and the browser
		cancelAlloc() // and waits for the processes to end
		wg.Wait()
	})
	p.do(chromedp.Navigate(url))
	p.WaitUpdates(1)
	return p
}

func (p *Page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("chromium: %v", err)
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its
// value into v.
func (p *Page) Eval(expr string, v any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		p.t.Fatalf("chromium: %s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		p.t.Fatalf("chromium: %s: %q: %v", expr, raw, err)
	}
}

// WaitFor waits until the JavaScript expression is true in the page, and
// fails the test after Timeout, saying what.
func (p *Page) WaitFor(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			p.t.Fatalf("the page did not show %s within %v (%s)", what, Timeout, p.Live())
		}
		p.t.Fatalf("chromium: waiting for %s: %v", what, err)
	}
}

// Updates is how many snapshots the script has drawn.
func (p *Page) Updates() int {
	p.t.Helper()
	var n int
	p.Eval(`Number(document.getElementById("live").dataset.updates)`, &n)
	return n
}

// WaitUpdates waits until the script has drawn n snapshots.
func (p *Page) WaitUpdates(n int) {
	p.t.Helper()
	p.WaitFor(fmt.Sprintf("%d updates", n), fmt.Sprintf(`Number(document.getElementById("live").dataset.updates) >= %d`, n))
}

// Live is what the page says of its connection.
func (p *Page) Live() string {
	var s string
	ctx, cancel := context.WithTimeout(p.ctx, time.Second)
	defer cancel()
	s, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("live").textContent`))
	return s
}

// Figure is a figure as the page shows it.
type Figure struct {
	Value float64 `json:"value"` // data-value: the number the server sent
	Text  string  `json:"text"`  // the value as printed
	Rate  string  `json:"rate"`  // a counter's rate as printed
	Max   string  `json:"max"`   // "of ..." as printed
}

// Figure returns the figure of the id, failing the test if the page does
// not show it.
func (p *Page) Figure(id string) Figure {
	p.t.Helper()
	var f *Figure
	p.Eval(fmt.Sprintf(`(() => {
		const f = document.querySelector('.figure[data-id="' + CSS.escape(%s) + '"]');
		const text = (sel) => f.querySelector(sel)?.textContent ?? "";
		return f && { value: Number(f.dataset.value), text: text(".value"), rate: text(".rate"), max: text(".max") };
	})()`, quote(id)), &f)
	if f == nil {
		p.t.Fatalf("the page shows no figure %q", id)
	}
	return *f
}

// WaitFigure waits until the figure's value is want.
func (p *Page) WaitFigure(id string, want float64) {
	p.t.Helper()
	p.WaitFor(fmt.Sprintf("%s = %s", id, strconv.FormatFloat(want, 'f', -1, 64)), fmt.Sprintf(
		`Number(document.querySelector('.figure[data-id="' + CSS.escape(%s) + '"]')?.dataset.value) === %v`, quote(id), want))
}

// Table returns the cells of the table under the title, as the page shows
// them (trimmed), or nil when it shows none.
func (p *Page) Table(title string) [][]string {
	p.t.Helper()
	var rows [][]string
	p.Eval(fmt.Sprintf(`(() => {
		const h = [...document.querySelectorAll("#tables h2")].find((h) => h.textContent === %s);
		const t = h?.nextElementSibling;
		if (!t || t.tagName !== "TABLE") return null;
		return [...t.rows].slice(1).map((r) => [...r.cells].map((c) => c.textContent.trim()));
	})()`, quote(title)), &rows)
	return rows
}

// ChartPoints is how many points the chart has for the figure.
func (p *Page) ChartPoints(id string) int {
	p.t.Helper()
	var n int
	p.Eval(fmt.Sprintf(`Number(document.querySelector('#plot polyline[data-id="' + CSS.escape(%s) + '"]')?.dataset.points ?? 0)`, quote(id)), &n)
	return n
}

// Format prints values as the page's script does (its fmt).
func (p *Page) Format(values []float64, unit string) []string {
	p.t.Helper()
	vs, _ := json.Marshal(values)
	var out []string
	p.Eval(fmt.Sprintf(`%s.map((v) => fmt(v, %s))`, vs, quote(unit)), &out)
	return out
}

// Text is the page's text, for a test's failure message.
func (p *Page) Text() string {
	p.t.Helper()
	var s string
	p.Eval(`document.body.innerText`, &s)
	return s
}

// Screenshot writes a PNG of the whole page.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// CheckConsole fails the test if the page logged an error or threw: a
// script that fails, or a resource the page's policy refused.
func (p *Page) CheckConsole() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.problems) > 0 {
		p.t.Errorf("the page's console:\n%s", strings.Join(p.problems, "\n"))
	}
}

// Snapshot gets the JSON snapshot of the dashboard at base with c, and
// returns it decoded and as it came.
func Snapshot(t testing.TB, c *http.Client, base string) (dashboard.Snapshot, string) {
	t.Helper()
	res, err := c.Get(base + dashboard.SnapshotPath)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	var s dashboard.Snapshot
	if err != nil || res.StatusCode != http.StatusOK || json.Unmarshal(body, &s) != nil {
		t.Fatalf("snapshot: %s, %v: %s", res.Status, err, body)
	}
	return s, string(body)
}

// quote makes s a JavaScript string literal.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
