package fetch

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
	"github.com/stampede-dev/stampede/swarm"
)

// TestOriginFetchIdle: an origin fetch that receives nothing for
// OriginIdleTimeout ends with originclient.ErrIdle, whether the server never answers or
// stops in the middle of the body; each such end doubles the timeout, a
// fetch that completes halves it, and a body that trickles in slowly but
// steadily is never cut.
func TestOriginFetchIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 400 * time.Millisecond
		data := randomData(200_000, 8)
		s := newMemTestServer(t, data)
		u, err := url.Parse(s.url())
		if err != nil {
			t.Fatal(err)
		}
		oc := originclient.New(originclient.Config{Client: s.client, Retries: originclient.DefaultRetries, OriginIdleTimeout: idle})
		src, err := oc.Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		m := src.Manifest()
		st, err := store.Open(filepath.Join(t.TempDir(), "f"), m, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fetch := src.Fetcher(st, func() *node.Node { return nil })

		// answer writes piece i's 206 header, then its body in parts chunks
		// with gap between them; stall > 0 stops after the first half for that
		// long (or until the client goes).
		answer := func(w http.ResponseWriter, r *http.Request, i, parts int, gap, stall time.Duration) {
			off, n := m.PieceOffset(i), m.PieceLen(i)
			body := data[off : off+n]
			w.Header().Set("ETag", s.etag)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, len(data)))
			w.Header().Set("Content-Length", fmt.Sprint(n))
			w.WriteHeader(http.StatusPartialContent)
			rc := http.NewResponseController(w)
			for k := range parts {
				if stall > 0 && k == parts/2 {
					select {
					case <-r.Context().Done():
					case <-time.After(stall):
					}
					return
				}
				w.Write(body[int64(k)*n/int64(parts) : int64(k+1)*n/int64(parts)])
				rc.Flush()
				time.Sleep(gap)
			}
		}
		var mode atomic.Value // string
		mode.Store("")
		s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
			i := int(rangeStart(r) / m.PieceSize)
			switch mode.Load() {
			case "silent":
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			case "stall":
				answer(w, r, i, 8, 0, 10*time.Second)
			case "trickle":
				answer(w, r, i, 8, idle/4, 0)
			default:
				answer(w, r, i, 1, 0, 0)
			}
			return true
		})
		steps := []struct {
			mode    string
			piece   int
			timeout time.Duration // the idle timeout this fetch must use; 0: it succeeds
		}{
			{"trickle", 0, 0}, // 8 gaps of idle/4: longer than idle in all, never idle
			{"silent", 1, idle},
			{"stall", 1, 2 * idle},
			{"ok", 1, 0}, // back to 2×idle
			{"stall", 2, 2 * idle},
			{"ok", 2, 0},
			{"ok", 3, 0}, // back to idle, not below
			{"silent", 4, idle},
		}
		for _, step := range steps {
			mode.Store(step.mode)
			start := time.Now()
			got, _, err := fetch(t.Context(), swarm.FetchOrigin{Piece: step.piece, Reason: swarm.ReasonNoPeerHasIt})
			took := time.Since(start)
			if step.timeout == 0 {
				if err != nil || got != step.piece {
					t.Fatalf("%s piece %d: got %d, %v", step.mode, step.piece, got, err)
				}
				continue
			}
			if !errors.Is(err, originclient.ErrIdle) {
				t.Fatalf("%s piece %d: %v, want an idle error", step.mode, step.piece, err)
			}
			if want := step.timeout.String(); !strings.Contains(err.Error(), want) {
				t.Errorf("%s piece %d: %q does not name the timeout used, %s", step.mode, step.piece, err, want)
			}
			// Time is the bubble's: nothing but the timeout can take any.
			if took != step.timeout {
				t.Errorf("%s piece %d: ended after %v, want its timeout, %v", step.mode, step.piece, took, step.timeout)
			}
		}
		if !st.Has(0) || !st.Has(1) || !st.Has(3) {
			t.Errorf("pieces 0, 1 and 3 were fetched but not all stored")
		}
	})
}
