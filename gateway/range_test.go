package gateway

import (
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// answer is what a response says about a range request, independent of
// the multipart boundary.
type answer struct {
	status       int
	contentRange string
	parts        []string // "Content-Range|bytes" of each part, for multipart
	body         string
}

func fetchAnswer(t *testing.T, c *http.Client, u, rng string) answer {
	t.Helper()
	resp, body := get(t, c, "GET", u, http.Header{"Range": {rng}})
	a := answer{status: resp.StatusCode, contentRange: resp.Header.Get("Content-Range")}
	mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode == http.StatusPartialContent && mt == "multipart/byteranges" {
		mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: bad multipart body: %v", rng, err)
			}
			b, _ := io.ReadAll(p)
			a.parts = append(a.parts, p.Header.Get("Content-Range")+"|"+string(b))
		}
		return a
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		a.body = string(body)
	}
	return a
}

// randomRange draws a Range header for a file of size bytes: single,
// open-ended, suffix and multiple ranges, now and then unsatisfiable.
func randomRange(rng *rand.Rand, size int64) string {
	pos := func() int64 { return rng.Int64N(size + 2) }
	one := func() string {
		switch rng.IntN(4) {
		case 0:
			return fmt.Sprintf("%d-", pos())
		case 1:
			return fmt.Sprintf("-%d", 1+rng.Int64N(size+1))
		default:
			a := pos()
			return fmt.Sprintf("%d-%d", a, a+rng.Int64N(size/2+1))
		}
	}
	parts := []string{one()}
	if rng.IntN(5) == 0 {
		parts = append(parts, one())
	}
	return "bytes=" + strings.Join(parts, ",")
}

// Range answers through the gateway equal the origin's, for random files
// and random ranges, whether the file is being downloaded (the first range
// of each file comes cold) or cached.
func TestRangesEqualOrigin(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	sizes := []int{1, 16 << 10, 16<<10 + 1, 100_000, 1 << 20, 3<<20 + 4321}
	files := map[string][]byte{}
	for k, n := range sizes {
		files[fmt.Sprintf("f%d.bin", k)] = randomBytes(n, uint64(k)+100)
	}
	// A capped origin, so that cold ranges are answered mid-download.
	o := startOrigin(t, files, originOpts{rate: 32 << 20})
	g := startGateway(t, Config{})
	direct := plainClient()
	for name, data := range files {
		u := o.base + "/" + name
		for k := range 12 {
			r := randomRange(rng, int64(len(data)))
			c, target := g.proxyClient(), u
			if k%2 == 1 {
				c, target = plainClient(), g.prefixed(u)
			}
			got := fetchAnswer(t, c, target, r)
			want := fetchAnswer(t, direct, u, r)
			if got.status != want.status || got.contentRange != want.contentRange || got.body != want.body ||
				fmt.Sprint(got.parts) != fmt.Sprint(want.parts) {
				t.Fatalf("%s (%d bytes), Range %s: gateway %d %q (%d body bytes, %d parts), origin %d %q (%d, %d)",
					name, len(data), r, got.status, got.contentRange, len(got.body), len(got.parts),
					want.status, want.contentRange, len(want.body), len(want.parts))
			}
		}
	}
}

// A range near the end of a large file is answered before the file is
// complete: its pieces are fetched first.
func TestColdRangeFetchedFirst(t *testing.T) {
	data := randomBytes(8<<20, 12)
	// 8 MiB at 4 MiB/s: two seconds for the whole file.
	o := startOrigin(t, map[string][]byte{"f.bin": data}, originOpts{rate: 4 << 20})
	g := startGateway(t, Config{})
	resp, body := get(t, g.proxyClient(), "GET", o.base+"/f.bin", http.Header{"Range": {"bytes=-100000"}})
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("%s", resp.Status)
	}
	mustEqual(t, "tail range", body, data[len(data)-100000:])
	if st := g.cache.stats(); st.Complete != 0 {
		t.Fatal("the tail range was answered only after the whole file was in")
	}
}
