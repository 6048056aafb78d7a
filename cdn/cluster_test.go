package cdn

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
)

// TestClusterOneCopy: many clients at once on every node, and the origin
// sends about one copy of the file, with a manifest and without.
func TestClusterOneCopy(t *testing.T) {
	for _, withManifest := range []bool{true, false} {
		t.Run(fmt.Sprintf("manifest=%v", withManifest), func(t *testing.T) {
			o := newTestOrigin(t)
			data := randomBytes(4<<20+123, 1)
			o.add("f", data, withManifest, nil)
			nodes := startCluster(t, 4, o, nil)
			const clients = 16
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Go(func() {
					resp, body, err := get(t, nodes[c%len(nodes)].url(o.URL+"/f"))
					switch {
					case err != nil:
						errs <- err
					case resp.StatusCode != 200:
						errs <- fmt.Errorf("status %d", resp.StatusCode)
					case !bytes.Equal(body, data):
						errs <- fmt.Errorf("client %d: body differs (%d bytes)", c, len(body))
					case resp.Header.Get(Header) != "chunks":
						errs <- fmt.Errorf("client %d: answered %q", c, resp.Header.Get(Header))
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			sent := o.bodyBytes.Load() // the manifest is not counted
			if copies := float64(sent) / float64(len(data)); copies > 1.1 {
				t.Errorf("the origin sent %.2f copies, want about 1", copies)
			}
			t.Logf("origin: %d body bytes (%.3f copies), %d HEADs, %d GETs", sent, float64(sent)/float64(len(data)), o.heads.Load(), o.gets.Load())
		})
	}
}

// downloadAll has clients GET target through the nodes given, in turn,
// and reports each body's error: nil only for exactly want.
func downloadAll(t *testing.T, nodes []*testNode, target string, clients int, want []byte) []error {
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := range clients {
		wg.Go(func() {
			resp, body, err := get(t, nodes[c%len(nodes)].url(target))
			switch {
			case err != nil:
				errs[c] = err
			case resp.StatusCode != 200:
				errs[c] = fmt.Errorf("status %d", resp.StatusCode)
			case !bytes.Equal(body, want):
				errs[c] = fmt.Errorf("client %d: a complete body that differs (%d bytes)", c, len(body))
			}
		})
	}
	wg.Wait()
	return errs
}

// TestNodeKilledMidDownload: a node dies while clients download through
// the others; every client completes, every chunk verified.
func TestNodeKilledMidDownload(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(2<<20, 2)
	o.add("f", data, true, nil)
	o.delay.Store(int64(5 * time.Millisecond))
	nodes := startCluster(t, 4, o, nil)
	done := make(chan []error)
	go func() { done <- downloadAll(t, nodes[:3], o.URL+"/f", 9, data) }()
	for o.gets.Load() < 40 {
		time.Sleep(5 * time.Millisecond)
	}
	nodes[3].kill()
	for c, err := range <-done {
		if err != nil {
			t.Errorf("client %d: %v", c, err)
		}
	}
	if copies := float64(o.bodyBytes.Load()) / float64(len(data)); copies > 1.5 {
		t.Errorf("the origin sent %.2f copies", copies)
	}
	// The survivors took the dead node off their rings.
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range nodes[:3] {
		for n.ring().Has(nodes[3].addr) {
			if time.Now().After(deadline) {
				t.Fatalf("node %s still has the dead node on its ring", n.addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestLyingNode: a node that corrupts the chunks it serves other nodes is
// caught by the manifest, and the clients get the file intact; without a
// manifest, the origin's Repr-Digest keeps a corrupted body from ever
// arriving complete.
func TestLyingNode(t *testing.T) {
	t.Run("manifest", func(t *testing.T) {
		o := newTestOrigin(t)
		data := randomBytes(1<<20, 3)
		o.add("f", data, true, nil)
		nodes := startCluster(t, 4, o, nil)
		nodes[3].lie.Store(true)
		for c, err := range downloadAll(t, nodes[:3], o.URL+"/f", 6, data) {
			if err != nil {
				t.Errorf("client %d: %v", c, err)
			}
		}
		rejected := 0.0
		for _, n := range nodes[:3] {
			rejected += counterValue(n.met.rejected[fromNode])
		}
		if rejected == 0 {
			t.Error("no node caught the lying node's chunks")
		}
	})
	t.Run("repr-digest", func(t *testing.T) {
		o := newTestOrigin(t)
		data := randomBytes(1<<20, 4)
		sum := sha256.Sum256(data)
		o.add("f", data, false, http.Header{"Repr-Digest": {httphdr.FormatReprDigestSHA256(sum[:])}})
		nodes := startCluster(t, 4, o, nil)
		nodes[3].lie.Store(true)
		aborted := 0
		for _, err := range downloadAll(t, nodes[:3], o.URL+"/f", 6, data) {
			if err != nil {
				if strings.Contains(err.Error(), "differs") {
					t.Errorf("a corrupted body arrived complete: %v", err)
				}
				aborted++
			}
		}
		if aborted == 0 {
			t.Error("no response was aborted, though a node lied")
		}
	})
}
