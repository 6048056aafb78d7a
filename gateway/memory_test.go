package gateway

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// patternFile is a file of any size that exists only as a function: a
// random 1 MiB block repeated, each 4 KiB stamped with its index in its
// first 8 bytes, so misplaced bytes show. Reading it costs a copy, even
// under the race detector.
type patternFile int64

const stampEvery = 4 << 10

var patternBlock = randomBytes(1<<20, 99)

func (p patternFile) ReadAt(b []byte, off int64) (int, error) {
	if off >= int64(p) {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), int64(p)-off))
	for i := 0; i < n; {
		at := off + int64(i)
		i += copy(b[i:n], patternBlock[at%int64(len(patternBlock)):])
	}
	var stamp [8]byte
	for s := (off + stampEvery - 1) / stampEvery * stampEvery; s < off+int64(n); s += stampEvery {
		binary.LittleEndian.PutUint64(stamp[:], uint64(s/stampEvery))
		copy(b[s-off:n], stamp[:])
	}
	// A stamp that starts before off and ends inside b.
	if first := off / stampEvery * stampEvery; first < off && off-first < 8 {
		binary.LittleEndian.PutUint64(stamp[:], uint64(first/stampEvery))
		copy(b[:n], stamp[off-first:])
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// patternOrigin serves one patternFile at /big.bin with a manifest (no
// tracker: the gateway's node is a lone peer that fetches from the
// origin), so that a file of gigabytes costs no disk at the origin.
func patternOrigin(t *testing.T, size int64) (string, *manifest.Manifest) {
	t.Helper()
	f := patternFile(size)
	start := time.Now()
	m, err := manifest.FromReaderAt(f, size, "big.bin", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manifest of %d bytes computed in %v", size, time.Since(start).Round(time.Millisecond))
	etag := fmt.Sprintf(`"%s"`, m.Root.String()[:16])
	m.ETag = etag
	js, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	base := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big.bin":
			w.Header().Set("ETag", etag)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Link", `</.well-known/stampede/manifest/big.bin>; rel="stampede-manifest"`)
			http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(f, 0, size))
		case "/.well-known/stampede/manifest/big.bin":
			w.Header().Set("Content-Type", "application/vnd.stampede.manifest+json")
			w.Write(js)
		default:
			http.NotFound(w, r)
		}
	}))
	return base, m
}

// heapPeak samples the heap in use until stop is called and returns the
// largest value seen.
func heapPeak() (stop func() uint64) {
	var (
		mu   sync.Mutex
		peak uint64
		done = make(chan struct{})
		over = make(chan struct{})
	)
	go func() {
		defer close(over)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			mu.Lock()
			peak = max(peak, ms.HeapInuse)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-over
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// A 2 GiB file streams through the gateway with the heap bounded by the
// window and a fixed allowance, not by the file: the body goes through
// the cache file on disk. STAMPEDETEST_GATEWAY_BIG=SIZE (bytes, e.g. 8589934592)
// runs it with another size.
func TestBigDownloadMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 2 GiB download")
	}
	size := int64(2 << 30)
	if s := os.Getenv("STAMPEDETEST_GATEWAY_BIG"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("STAMPEDETEST_GATEWAY_BIG=%q: want a size in bytes", s)
		}
		size = n
	}
	base, m := patternOrigin(t, size)
	const window = 16 << 20
	g := startGateway(t, Config{Window: window, CacheSize: size + 1<<20})

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapInuse
	stop := heapPeak()
	start := time.Now()

	resp, err := g.proxyClient().Get(base + "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != size || resp.Header.Get(Header) != "swarm" {
		t.Fatalf("%s, length %d, answered %q", resp.Status, resp.ContentLength, resp.Header.Get(Header))
	}
	// Compare as it streams: chunk by chunk against the pattern, and a
	// digest of the whole, with buffers of our own bounded size.
	buf := make([]byte, 1<<20)
	want := make([]byte, len(buf))
	h := sha256.New()
	var off int64
	var ttfb time.Duration
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if off == 0 {
				ttfb = time.Since(start)
			}
			patternFile(size).ReadAt(want[:n], off)
			if string(buf[:n]) != string(want[:n]) {
				t.Fatalf("bytes %d-%d differ from the origin's", off, off+int64(n)-1)
			}
			h.Write(buf[:n])
			off += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", off, err)
		}
	}
	took := time.Since(start)
	peak := stop()
	if off != size {
		t.Fatalf("got %d bytes, want %d", off, size)
	}
	growth := int64(peak) - int64(baseline)
	// The allowance: the origin fetcher's piece buffers (at most 8 pieces
	// kept, OriginPipeline in use), a reader's piece buffer, HTTP and
	// connection buffers, and the test's own 2 MiB.
	allowance := 10*m.PieceSize + 16<<20
	t.Logf("%d MiB in %v (%.0f MiB/s), first byte after %v; heap in use: baseline %d MiB, peak %d MiB (+%d MiB; window %d MiB, bound %d MiB)",
		size>>20, took.Round(time.Millisecond), float64(size)/took.Seconds()/(1<<20), ttfb.Round(time.Millisecond),
		baseline>>20, peak>>20, growth>>20, window>>20, (window+allowance)>>20)
	if rss := vmHWM(); rss != "" {
		t.Logf("test process peak RSS (VmHWM, origin and client included): %s", rss)
	}
	if growth > window+allowance {
		t.Errorf("the heap grew by %d MiB while streaming %d MiB: more than the window (%d MiB) and the allowance (%d MiB)",
			growth>>20, size>>20, window>>20, allowance>>20)
	}
}

// vmHWM returns this process's peak resident set size as /proc reports
// it, or "" where there is no /proc.
func vmHWM() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// patternFile reads the same bytes whatever the boundaries of the reads.
func TestPatternFile(t *testing.T) {
	const size = 3<<20 + 5
	whole := make([]byte, size)
	if n, err := patternFile(size).ReadAt(whole, 0); n != size || err != nil {
		t.Fatal(n, err)
	}
	if binary.LittleEndian.Uint64(whole[stampEvery*300:]) != 300 {
		t.Fatal("no stamp at chunk 300")
	}
	for _, r := range [][2]int{{1, 7}, {4093, 20}, {stampEvery + 1, 10}, {4095, 1}, {stampEvery*5 + 3, 1 << 20}, {size - 9, 9}} {
		b := make([]byte, r[1])
		patternFile(size).ReadAt(b, int64(r[0]))
		mustEqual(t, "pattern read", b, whole[r[0]:r[0]+r[1]])
	}
}
