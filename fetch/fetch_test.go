package fetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// get runs one download of s's file into a temp dir and returns the result,
// the output path and the error.
func get(t *testing.T, s *testServer, mod func(*Config)) (*Result, string, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	cfg := Config{URL: s.url(), Output: out, Logger: testLogger(t), InitialDeadline: 2 * time.Second, Client: s.client}
	if mod != nil {
		mod(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(t.Context())
	return res, cfg.Output, err
}

func mustEqualFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d expected", path, len(got), len(want))
	}
	if _, err := os.Stat(path + store.PartSuffix); !os.IsNotExist(err) {
		t.Errorf("%s%s still exists after success", path, store.PartSuffix)
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s exists after a failed download", path)
	}
}

func TestGetSizes(t *testing.T) {
	for _, n := range []int{0, 1, manifest.BlockSize, manifest.BlockSize + 1, 1<<20 + 123, 33<<20 + 1} {
		t.Run(strings.ReplaceAll(time.Duration(n).String(), "ns", "B"), func(t *testing.T) {
			data := randomData(n, uint64(n))
			s := newTestServer(t, data)
			res, out, err := get(t, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustEqualFile(t, out, data)
			if res.Verified != "merkle" || res.Size != int64(n) {
				t.Errorf("verified %q size %d, want merkle %d", res.Verified, res.Size, n)
			}
			if n > 0 && res.OriginRequests["piece"] < 1 {
				t.Errorf("origin requests %v: no piece requests", res.OriginRequests)
			}
		})
	}
}

func TestCorruptPieceRetried(t *testing.T) {
	data := randomData(300<<10, 1)
	s := newTestServer(t, data)
	var corrupted atomic.Int32
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if rangeStart(r) != 5*manifest.BlockSize || corrupted.Add(1) > 2 {
			return false
		}
		serveRange(w, r, data, func(b []byte) []byte { b[100] ^= 1; return b }, nil)
		return true
	})
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.PiecesRejected != 2 {
		t.Errorf("PiecesRejected = %d, want 2", res.PiecesRejected)
	}
}

func TestCorruptPieceFailsNamingIt(t *testing.T) {
	data := randomData(300<<10, 2)
	s := newTestServer(t, data)
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if rangeStart(r) != 7*manifest.BlockSize {
			return false
		}
		serveRange(w, r, data, func(b []byte) []byte { b[0] ^= 0x80; return b }, nil)
		return true
	})
	_, out, err := get(t, s, func(c *Config) { c.Retries = 2 })
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "piece 7 ") {
		t.Fatalf("err = %v, want ErrVerify naming piece 7", err)
	}
	mustNotExist(t, out)
	if _, err := os.Stat(out + store.PartSuffix); err != nil {
		t.Errorf("part file should be kept for a resume: %v", err)
	}
}

func TestTruncatedBodyRetried(t *testing.T) {
	data := randomData(200<<10, 3)
	s := newTestServer(t, data)
	var cut atomic.Int32
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if rangeStart(r) != 3*manifest.BlockSize || cut.Add(1) > 1 {
			return false
		}
		// Promise the whole range, send half, then hang up.
		serveRange(w, r, data, func(b []byte) []byte { return b[:len(b)/2] }, nil)
		panic(http.ErrAbortHandler)
	})
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.OriginRequests["retry-error"] < 1 {
		t.Errorf("origin requests %v: want a retry-error", res.OriginRequests)
	}
}

func TestWrongContentRange(t *testing.T) {
	data := randomData(100<<10, 4)
	s := newTestServer(t, data)
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if rangeStart(r) != 2*manifest.BlockSize {
			return false
		}
		// The right bytes, labelled as another range.
		serveRange(w, r, data, nil, func(string) string { return "bytes 0-16383/102400" })
		return true
	})
	_, out, err := get(t, s, func(c *Config) { c.Retries = 1 })
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "Content-Range") {
		t.Fatalf("err = %v, want a protocol error about Content-Range", err)
	}
	mustNotExist(t, out)
}

func TestFileChangedMidDownload(t *testing.T) {
	data := randomData(1<<20, 5)
	s := newTestServer(t, data)
	var once sync.Once
	s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n >= 10 { // the operator replaces the file; later requests wait for it
			once.Do(func() { s.setData(randomData(1<<20, 6)) })
		}
		return false
	})
	_, out, err := get(t, s, func(c *Config) { c.MaxParallel = 2 })
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("err = %v, want ErrChanged", err)
	}
	mustNotExist(t, out)
}

func TestNoRangeSupportFallsBackToStream(t *testing.T) {
	data := randomData(500<<10, 7)
	s := newTestServer(t, data)
	s.noRange = true
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.Verified != "merkle" {
		t.Errorf("verified = %q, want merkle (pieces checked as they stream)", res.Verified)
	}
}

func TestServerRangeIgnoredAfterProbeFallsBack(t *testing.T) {
	data := randomData(200<<10, 8)
	s := newTestServer(t, data)
	// Accept-Ranges in HEAD, but GETs ignore Range.
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		r.Header.Del("Range")
		http.ServeContent(w, r, "file", time.Unix(1e9, 0), bytes.NewReader(data))
		return true
	})
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.OriginRequests["stream"] != 1 {
		t.Errorf("origin requests %v: want one stream", res.OriginRequests)
	}
}

func TestPlainServer(t *testing.T) {
	data := randomData(123457, 9)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name         string
		sha256       string
		reprDigest   bool
		wantVerified string
		wantErr      error
	}{
		{"unverified", "", false, "none", nil},
		{"sha256", good, false, "sha256", nil},
		{"sha256 upper case", strings.ToUpper(good), false, "sha256", nil},
		{"repr-digest", "", true, "repr-digest", nil},
		{"sha256 wrong", bad, false, "", ErrVerify},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, data)
			s.noManifest, s.reprDigest = true, tc.reprDigest
			res, out, err := get(t, s, func(c *Config) { c.SHA256 = tc.sha256 })
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				mustNotExist(t, out)
				mustNotExist(t, out+store.PartSuffix) // wrong bytes are not kept for resume
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustEqualFile(t, out, data)
			if res.Verified != tc.wantVerified {
				t.Errorf("verified = %q, want %q", res.Verified, tc.wantVerified)
			}
		})
	}
}

func TestPlainServerTruncationResumes(t *testing.T) {
	data := randomData(300<<10, 10)
	s := newTestServer(t, data)
	s.noManifest, s.reprDigest = true, true
	s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n > 0 {
			return false
		}
		w.Header().Set("Content-Length", "307200")
		w.WriteHeader(http.StatusOK)
		w.Write(data[:100000])
		panic(http.ErrAbortHandler)
	})
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if _, ranges := s.stats(); len(ranges) != 2 || ranges[1] != "bytes=100000-" {
		t.Errorf("requests with ranges %q, want a resume from byte 100000", ranges)
	}
	if res.Verified != "repr-digest" {
		t.Errorf("verified = %q, want repr-digest", res.Verified)
	}
}

// TestPlainPartResumedWhenValidatorsMatch: without a manifest, a part file
// left by an interrupted run is resumed without -c when the server's
// validators match the ones recorded with it, and only then.
func TestPlainPartResumedWhenValidatorsMatch(t *testing.T) {
	data := randomData(300<<10, 21)
	s := newTestServer(t, data)
	s.noManifest, s.reprDigest = true, true
	out := filepath.Join(t.TempDir(), "out")
	cut := func(w http.ResponseWriter, r *http.Request, n int) bool {
		w.Header().Set("Content-Length", "307200")
		w.WriteHeader(http.StatusOK)
		w.Write(data[:100000])
		panic(http.ErrAbortHandler) // the body cut short
	}
	s.setHook(cut)
	d, _ := New(Config{URL: s.url(), Output: out, Logger: testLogger(t), NoRetries: true})
	if _, err := d.Run(t.Context()); err == nil {
		t.Fatal("the interrupted run succeeded")
	}
	s.setHook(nil)
	_, before := s.stats()
	res, _, err := get(t, s, func(c *Config) { c.Output = out })
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if _, ranges := s.stats(); res.BytesResumed != 100000 || len(ranges) != len(before)+1 || ranges[len(before)] != "bytes=100000-" {
		t.Errorf("bytes_resumed %d, requests with ranges %q after %d, want one from byte 100000", res.BytesResumed, ranges, len(before))
	}

	// Once more, and the server now ignores Range: the whole file comes
	// again, and nothing counts as resumed.
	os.Remove(out)
	s.setHook(cut)
	d, _ = New(Config{URL: s.url(), Output: out, Logger: testLogger(t), NoRetries: true})
	if _, err := d.Run(t.Context()); err == nil {
		t.Fatal("the second interrupted run succeeded")
	}
	s.setHook(nil)
	s.noRange = true
	res, _, err = get(t, s, func(c *Config) { c.Output = out })
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.BytesResumed != 0 {
		t.Errorf("bytes_resumed %d after the server sent the whole file again", res.BytesResumed)
	}
}

// TestPlainPartWithoutValidatorsStartsOver: found without -c, a part file
// from a server that gives no validator is not resumed: a new version of
// the same size would be taken for the old one.
func TestPlainPartWithoutValidatorsStartsOver(t *testing.T) {
	data := randomData(300<<10, 22)
	s := newTestServer(t, data)
	s.noManifest, s.noValidators = true, true
	out := filepath.Join(t.TempDir(), "out")
	s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		w.Header().Set("Content-Length", "307200")
		w.WriteHeader(http.StatusOK)
		w.Write(data[:100000])
		panic(http.ErrAbortHandler) // the body cut short
	})
	d, _ := New(Config{URL: s.url(), Output: out, Logger: testLogger(t), NoRetries: true})
	if _, err := d.Run(t.Context()); err == nil {
		t.Fatal("the interrupted run succeeded")
	}
	s.setHook(nil)
	_, before := s.stats()
	var logs syncLog
	d, _ = New(Config{URL: s.url(), Output: out, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	res, err := d.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	_, ranges := s.stats()
	if res.BytesResumed != 0 || ranges[len(before)] != "" || !strings.Contains(logs.String(), "no ETag or Last-Modified") {
		t.Errorf("bytes_resumed %d, ranges %q after %d; log:\n%s", res.BytesResumed, ranges, len(before), logs.String())
	}
}

func TestRetryAfter503(t *testing.T) {
	data := randomData(100<<10, 11)
	s := newTestServer(t, data)
	var busy atomic.Int32
	s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if busy.Add(1) > 3 {
			return false
		}
		w.Header().Set("Retry-After", "0")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	})
	_, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
}

func TestRetryAfter503GivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemTestServer(t, randomData(2<<20, 12))
		// Serve faster and faster until the window has grown (a piece
		// faster than the average opens it), then only 503s: the many
		// parallel 503s share one pause, so patience is spent by the
		// clock, not by the number of answers.
		var (
			mu     sync.Mutex
			busyAt []time.Time // when each 503 was sent
		)
		s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n < 40 {
				time.Sleep(time.Duration(40-n) * time.Millisecond)
				return false
			}
			mu.Lock()
			busyAt = append(busyAt, time.Now())
			mu.Unlock()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		})
		_, _, err := get(t, s, func(c *Config) { c.MaxRetryAfter = 2 * time.Second })
		if se, ok := errors.AsType[*StatusError](err); !ok || se.Code != http.StatusServiceUnavailable {
			t.Fatalf("err = %v, want a 503 StatusError", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < len(busyAt); i++ {
			if gap := busyAt[i].Sub(busyAt[i-1]); gap > 0 && gap < time.Second {
				t.Fatalf("asked again %v after a 503 with Retry-After 1 s", gap)
			}
		}
		// Patience is MaxRetryAfter of pauses, and one pause more when
		// pieces asked for before the first 503 come in after it: a piece
		// starts the count again.
		if d := time.Since(busyAt[0]); d < 2*time.Second || d > 3*time.Second+50*time.Millisecond {
			t.Errorf("gave up %v after the first 503, want after 2 or 3 pauses of the 1 s Retry-After", d)
		}
	})
}

// TestRetryAfter503PatienceResetsOnProgress: 503 waits count against
// MaxRetryAfter only until the next piece comes in. Two 503s (Retry-After
// 1 s each, a pause of all requests) with pieces served in between outlast
// a 1.5 s MaxRetryAfter in total, but not either one alone: the download
// ends. (With the patience counted over the whole download it gave up.)
func TestRetryAfter503PatienceResetsOnProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(2<<20, 14)
		s := newMemTestServer(t, data)
		s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n == 20 || n == 60 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			}
			return false
		})
		start := time.Now()
		_, out, err := get(t, s, func(c *Config) { c.MaxRetryAfter = 1500 * time.Millisecond })
		if err != nil {
			t.Fatalf("a download that moved between two stretches of 503s gave up: %v", err)
		}
		if d := time.Since(start); d < 2*time.Second || d > 2*time.Second+50*time.Millisecond {
			t.Errorf("done after %v, want after the two 1 s pauses of the two 503s", d)
		}
		mustEqualFile(t, out, data)
	})
}

func TestStalledPieceAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(200<<10, 13)
		s := newMemTestServer(t, data)
		var stalled atomic.Int32
		release := make(chan struct{})
		defer close(release)
		s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
			if rangeStart(r) != 4*manifest.BlockSize || stalled.Add(1) > 1 {
				return false
			}
			select { // a connection that never delivers
			case <-release:
			case <-r.Context().Done():
			}
			return true
		})
		const deadline = 300 * time.Millisecond
		start := time.Now()
		res, out, err := get(t, s, func(c *Config) { c.InitialDeadline = deadline })
		if err != nil {
			t.Fatal(err)
		}
		// The pieces measured before it take no time here, so they can
		// only bring its deadline down, to the floor.
		if d := time.Since(start); d > deadline {
			t.Errorf("done after %v: the stalled piece was not asked again within its deadline, %v", d, deadline)
		}
		mustEqualFile(t, out, data)
		if res.OriginRequests["retry-late"] < 1 {
			t.Errorf("origin requests %v: want a retry-late", res.OriginRequests)
		}
	})
}

func TestStdoutInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(700<<10, 14)
		s := newMemTestServer(t, data)
		// Delay early pieces so later ones arrive first.
		s.setHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
			if off := rangeStart(r); off >= 0 && off < 4*manifest.BlockSize {
				time.Sleep(30 * time.Millisecond) // in the bubble's time: later pieces surely come first
			}
			return false
		})
		var buf bytes.Buffer
		res, _, err := get(t, s, func(c *Config) { c.Output = "-"; c.Stdout = &buf; c.MemoryBudget = 8 * manifest.BlockSize })
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("stdout got %d bytes, not equal to the %d sent", buf.Len(), len(data))
		}
		if res.Verified != "merkle" {
			t.Errorf("verified = %q", res.Verified)
		}
	})
}

// TestResume: a part file left by an interrupted run is resumed, with -c
// and without: its pieces are verified again, a damaged one fetched again,
// and the rest not downloaded twice nor counted in the rate.
func TestResume(t *testing.T) {
	for _, cont := range []bool{true, false} {
		t.Run(fmt.Sprintf("continue=%v", cont), func(t *testing.T) { testResume(t, cont) })
	}
}

func testResume(t *testing.T, cont bool) {
	data := randomData(1<<20, 15)
	s := newTestServer(t, data)
	out := filepath.Join(t.TempDir(), "out")

	// First run: the server dies after 20 pieces.
	ctx, cancel := context.WithCancel(t.Context())
	s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n >= 20 {
			cancel()
			<-r.Context().Done()
			return true
		}
		return false
	})
	d, _ := New(Config{URL: s.url(), Output: out, Logger: testLogger(t), MaxParallel: 2})
	if _, err := d.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: err = %v, want context.Canceled", err)
	}
	mustNotExist(t, out)

	// Damage one piece on disk: the resume must notice and fetch it again.
	f, err := os.OpenFile(out+store.PartSuffix, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{^data[5*manifest.BlockSize]}, 5*manifest.BlockSize)
	f.Close()

	s.setHook(nil)
	// A request the first run sent just before it stopped may reach the
	// server after it returned: let it be counted before, not in, the
	// second run's fetches.
	s.quiesce()
	before, _ := s.stats()
	var logs syncLog
	d, _ = New(Config{URL: s.url(), Output: out, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Continue: cont})
	res, err := d.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	after, ranges := s.stats()
	pieces := len(data) / manifest.BlockSize
	if res.PiecesResumed < 10 || res.PiecesResumed > 20 {
		t.Errorf("resumed %d pieces, want 10..20 (20 served, one damaged)", res.PiecesResumed)
	}
	if res.BytesResumed != int64(res.PiecesResumed)*manifest.BlockSize {
		t.Errorf("bytes_resumed %d for %d pieces resumed", res.BytesResumed, res.PiecesResumed)
	}
	if fetched := after - before; fetched != pieces-res.PiecesResumed {
		t.Errorf("second run fetched %d pieces, want %d", fetched, pieces-res.PiecesResumed)
	}
	if !containsString(ranges[before:], "bytes=81920-98303") {
		t.Errorf("damaged piece 5 was not fetched again")
	}
	if said := strings.Contains(logs.String(), "resuming the partial download"); said == cont {
		t.Errorf("continue=%v: said it was resuming: %v; log:\n%s", cont, said, logs.String())
	}
}

// syncLog collects a logger's lines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestContinueAlreadyComplete: -c on a file that is already whole verifies
// it and downloads nothing (wget's "already fully retrieved"); a file that
// differs is downloaded again and replaced.
func TestContinueAlreadyComplete(t *testing.T) {
	data := randomData(300<<10, 16)
	s := newTestServer(t, data)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := s.stats()
	res, _, err := get(t, s, func(c *Config) { c.Output = out; c.Continue = true })
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := s.stats(); !res.AlreadyComplete || after != before || res.BytesResumed != int64(len(data)) {
		t.Errorf("already complete %v, %d piece requests, bytes_resumed %d", res.AlreadyComplete, after-before, res.BytesResumed)
	}
	mustNotExist(t, out+store.PartSuffix)

	other := append([]byte(nil), data...)
	other[len(other)-1] ^= 1
	if err := os.WriteFile(out, other, 0o644); err != nil {
		t.Fatal(err)
	}
	res, _, err = get(t, s, func(c *Config) { c.Output = out; c.Continue = true })
	if err != nil {
		t.Fatal(err)
	}
	if res.AlreadyComplete {
		t.Error("a file differing in its last byte was taken for complete")
	}
	mustEqualFile(t, out, data)

	// With --sha256 the whole download's path runs, and checks it: a
	// digest that disagrees fails, and the file there is left alone.
	_, _, err = get(t, s, func(c *Config) { c.Output = out; c.Continue = true; c.SHA256 = strings.Repeat("0", 64) })
	if !errors.Is(err, ErrVerify) {
		t.Errorf("-c --sha256 wrong on a complete file: %v, want ErrVerify", err)
	}
	if b, _ := os.ReadFile(out); !bytes.Equal(b, data) {
		t.Error("the file was changed by a download that failed its --sha256")
	}

	// -o - is stdout, never a file named "-", even a complete one.
	t.Chdir(t.TempDir())
	if err := os.WriteFile("-", data, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	res, _, err = get(t, s, func(c *Config) { c.Output = "-"; c.Stdout = &stdout; c.Continue = true })
	if err != nil || res.AlreadyComplete || stdout.Len() != len(data) {
		t.Errorf("-c -o -: already complete %v, %d bytes to stdout (%v)", res != nil && res.AlreadyComplete, stdout.Len(), err)
	}
}

// TestPartOfAnotherFileStartsOver: without -c, a part file holding nothing
// of this file is discarded with a warning, and the download is whole.
func TestPartOfAnotherFileStartsOver(t *testing.T) {
	data := randomData(200<<10, 17)
	s := newTestServer(t, data)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(out+store.PartSuffix, randomData(len(data), 18), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	d, _ := New(Config{URL: s.url(), Output: out, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	res, err := d.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.PiecesResumed != 0 || !strings.Contains(logs.String(), "level=WARN msg=\"the part file holds no piece of this file; starting over\"") {
		t.Errorf("resumed %d pieces; log:\n%s", res.PiecesResumed, logs.String())
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "ftp://x/y"},
		{URL: "http:///nohost"},
		{URL: "::::"},
		{URL: "http://x/y", SHA256: "abc"},
		{URL: "http://x/y", Output: "-"},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrUsage) {
			t.Errorf("New(%+v) = %v, want ErrUsage", cfg, err)
		}
	}
}

func TestBadManifestRejected(t *testing.T) {
	data := randomData(100<<10, 16)
	s := newTestServer(t, data)
	s.m.Pieces[1][0] ^= 1 // the piece layer no longer hashes to the root
	_, out, err := get(t, s, nil)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want ErrProtocol", err)
	}
	mustNotExist(t, out)
}

func TestRemoteName(t *testing.T) {
	for in, want := range map[string]string{
		"http://h/a/b.iso":   "b.iso",
		"http://h/":          "index.html",
		"http://h":           "index.html",
		"http://h/dir/":      "index.html",
		"http://h/a%2Fb.iso": "b.iso",
		"http://h/..":        "index.html",
		// A terminal's escape sequences and a newline, written %XX.
		"http://h/evil%1B]0;pwned%07%1B[2Jz": "evil%1B]0;pwned%07%1B[2Jz",
		"http://h/a%0Ab":                     "a%0Ab",
		"http://h/caf%C3%A9":                 "café",
	} {
		u, _ := ParseURL(in)
		if got := RemoteName(u); got != want {
			t.Errorf("RemoteName(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestStdoutFallbackDoesNotRepeat(t *testing.T) {
	data := randomData(300<<10, 17)
	s := newTestServer(t, data)
	// Ranges honoured for a while, then the whole file: the stream must
	// continue where the pieces left off on stdout.
	s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n < 6 {
			return false
		}
		r.Header.Del("Range")
		http.ServeContent(w, r, "file", time.Unix(1e9, 0), bytes.NewReader(data))
		return true
	})
	var buf bytes.Buffer
	_, _, err := get(t, s, func(c *Config) { c.Output = "-"; c.Stdout = &buf; c.MaxParallel = 1 })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("stdout has %d bytes, want exactly the %d of the file", buf.Len(), len(data))
	}
}

func TestSHA256MismatchNotPublished(t *testing.T) {
	s := newTestServer(t, randomData(100<<10, 18))
	_, out, err := get(t, s, func(c *Config) { c.SHA256 = strings.Repeat("0", 64) })
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("err = %v, want ErrVerify", err)
	}
	mustNotExist(t, out)
}

func TestPlainResumeWithoutRecordStartsOver(t *testing.T) {
	data := randomData(200<<10, 19)
	s := newTestServer(t, data)
	s.noManifest = true
	out := filepath.Join(t.TempDir(), "out")
	// A part file left by a manifest download: full size, mostly holes.
	if err := os.WriteFile(out+store.PartSuffix, make([]byte, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := get(t, s, func(c *Config) { c.Output = out; c.Continue = true })
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
}

func TestManifestLinkedButMissing(t *testing.T) {
	data := randomData(100<<10, 20)
	s := newTestServer(t, data)
	s.reprDigest = true
	s.mu.Lock()
	s.m = nil
	s.mu.Unlock()
	s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/") {
			http.NotFound(w, r)
			return
		}
		s.serve(w, r)
	})
	res, out, err := get(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	if res.Verified != "repr-digest" {
		t.Errorf("verified = %q, want repr-digest after falling back to one stream", res.Verified)
	}
}

// TestManifestEncodings: a manifest sent with gzip is decoded; one with an
// encoding not asked for, or gzip cut short, is a protocol error.
func TestManifestEncodings(t *testing.T) {
	data := randomData(300<<10, 22)
	for _, c := range []struct {
		name, encoding string
		cut, ok        bool
	}{
		{"gzip", "gzip", false, true},
		{"x-gzip", "x-gzip", false, true},
		{"not asked", "br", false, false}, // plain JSON: only the label is wrong
		{"gzip cut", "gzip", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestServer(t, data)
			var asked []string
			s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasPrefix(r.URL.Path, "/.well-known/") {
					s.serve(w, r)
					return
				}
				asked = r.Header.Values("Accept-Encoding")
				b, _ := s.m.MarshalJSON()
				if strings.Contains(c.encoding, "gzip") {
					var buf bytes.Buffer
					zw := gzip.NewWriter(&buf)
					zw.Write(b)
					zw.Close()
					b = buf.Bytes()
				}
				if c.cut {
					b = b[:len(b)/2]
				}
				w.Header().Set("Content-Type", "application/vnd.stampede.manifest+json")
				w.Header().Set("Content-Encoding", c.encoding)
				w.Write(b)
			})
			_, out, err := get(t, s, func(cfg *Config) {
				cfg.NoRetries = true // a body cut short is retried as transient: once is enough here
			})
			if !c.ok {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("err = %v, want a protocol error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustEqualFile(t, out, data)
			if len(asked) != 1 || asked[0] != "gzip" {
				t.Errorf("the manifest request asked for Accept-Encoding %q, want gzip", asked)
			}
		})
	}
}

func TestStalledStreamResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := randomData(200<<10, 21)
		s := newMemTestServer(t, data)
		s.noManifest, s.reprDigest = true, true
		s.setHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
			if n > 0 {
				return false
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			w.WriteHeader(http.StatusOK)
			w.Write(data[:50000])
			w.(http.Flusher).Flush()
			<-r.Context().Done() // stall until the client gives up
			return true
		})
		const idle = 300 * time.Millisecond
		start := time.Now()
		res, out, err := get(t, s, func(c *Config) { c.IdleTimeout = idle })
		if err != nil {
			t.Fatal(err)
		}
		if d, want := time.Since(start), idle+originclient.Backoff(1); d != want {
			t.Errorf("done after %v, want after the idle timeout and the first pause, %v", d, want)
		}
		mustEqualFile(t, out, data)
		if _, ranges := s.stats(); len(ranges) != 2 || ranges[1] != "bytes=50000-" {
			t.Errorf("ranges %q: want a resume from byte 50000", ranges)
		}
		_ = res
	})
}

// TestStreamFIFOsRefused: a FIFO at a streamed download's part file ends
// the download with a local error at once, and one at its notes is not
// waited on either.
func TestStreamFIFOsRefused(t *testing.T) {
	data := randomData(100<<10, 9)
	s := newTestServer(t, data)
	s.noRange = true
	for _, suffix := range []string{store.PartSuffix, ".part.meta"} {
		out := filepath.Join(t.TempDir(), "out")
		if err := syscall.Mkfifo(out+suffix, 0o644); err != nil {
			t.Skip("no FIFOs here:", err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := get(t, s, func(c *Config) { c.Output, c.Continue = out, true })
			done <- err
		}()
		select {
		case err := <-done:
			// The notes are only read to decide whether to resume: a FIFO
			// there may also be passed over (and the file fetched whole).
			if !errors.Is(err, ErrLocal) && (suffix == store.PartSuffix || err != nil) {
				t.Errorf("FIFO at %s: %v, want a local error", suffix, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("FIFO at %s: the download still waits after 10 s", suffix)
		}
	}
}
