package cdn

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
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
		if rejectedFromNodes(nodes[:3]) == 0 {
			t.Error("no node caught the lying node's chunks")
		}
	})
	t.Run("forged manifest", func(t *testing.T) {
		o := newTestOrigin(t)
		nodes := startCluster(t, 4, o, nil)
		// A file whose meta the lying node owns: the others ask it first.
		name := ownedBy(nodes, o, nodes[3])
		data := randomBytes(256<<10, 13)
		o.add(name, data, true, nil)
		nodes[3].lie.Store(true)
		for c, err := range downloadAll(t, nodes[:3], o.URL+"/"+name, 3, data) {
			if err != nil {
				t.Errorf("client %d: %v", c, err)
			}
		}
		if rejectedFromNodes(nodes[:3]) == 0 {
			t.Error("no node caught the forged manifest")
		}
	})
	t.Run("repr-digest", func(t *testing.T) {
		o := newTestOrigin(t)
		data := randomBytes(1<<20, 4)
		sum := sha256.Sum256(data)
		o.add("f", data, false, http.Header{"Repr-Digest": {httphdr.FormatReprDigestSHA256(sum[:])}})
		nodes := startCluster(t, 4, o, nil)
		nodes[3].lie.Store(true)
		aborted := map[int]bool{} // entries whose body failed
		for c, err := range downloadAll(t, nodes[:3], o.URL+"/f", 6, data) {
			if err != nil {
				if strings.Contains(err.Error(), "differs") {
					t.Errorf("a corrupted body arrived complete: %v", err)
				}
				aborted[c%3] = true
			}
		}
		if len(aborted) == 0 {
			t.Fatal("no response was aborted, though a node lied")
		}
		// An entry that saw a body fail takes the file from the origin
		// alone from then on: its next clients get it whole.
		for e := range aborted {
			for c, err := range downloadAll(t, nodes[e:e+1], o.URL+"/f", 2, data) {
				if err != nil {
					t.Errorf("node %d's client %d after a failed body: %v", e, c, err)
				}
			}
		}
	})
	t.Run("forged validators", func(t *testing.T) {
		// A file without a manifest whose meta the lying node owns; it
		// says another ETag (and ID) than the origin's, for the meta and
		// every chunk.
		o := newTestOrigin(t)
		nodes := startCluster(t, 4, o, nil)
		name := ownedBy(nodes, o, nodes[3])
		data := randomBytes(512<<10, 14)
		o.add(name, data, false, nil)
		nodes[3].lieValidators.Store(true)
		for c, err := range downloadAll(t, nodes[:3], o.URL+"/"+name, 6, data) {
			if err != nil {
				t.Errorf("client %d: %v", c, err)
			}
		}
		if rejectedFromNodes(nodes[:3]) == 0 {
			t.Error("no node caught the forged meta")
		}
	})
}

// ownedBy is the name of a file of o whose meta's owner is node.
func ownedBy(nodes []*testNode, o *testOrigin, node *testNode) string {
	for i := 0; ; i++ {
		if n := fmt.Sprintf("f%d", i); nodes[0].ring().Owner("meta "+o.URL+"/"+n) == node.addr {
			return n
		}
	}
}

// rejectedFromNodes is how many answers of other nodes the nodes rejected.
func rejectedFromNodes(nodes []*testNode) float64 {
	total := 0.0
	for _, n := range nodes {
		total += counterValue(n.met.rejected[fromNode])
	}
	return total
}

// A node's answer for a chunk is checked against what the asking node
// knows of the file: its ID, the chunk's range and the file's size, and,
// without a manifest, the validators.
func TestChunkHeaderChecked(t *testing.T) {
	m := &meta{ID: "r1", Size: 100, ChunkSize: 40, ETag: `"a"`, LastModified: "Fri, 02 Jan 2026 03:04:05 GMT", Cacheable: true}
	good := http.Header{idHeader: {"r1"}, "Content-Range": {"bytes 40-79/100"}, "Etag": {`"a"`}, "Last-Modified": {m.LastModified}}
	if err := m.checkChunkHeader(good, 40, 40); err != nil {
		t.Fatalf("the right header: %v", err)
	}
	for name, edit := range map[string]func(http.Header){
		"id":            func(h http.Header) { h.Set(idHeader, "r2") },
		"no id":         func(h http.Header) { h.Del(idHeader) },
		"range":         func(h http.Header) { h.Set("Content-Range", "bytes 0-39/100") },
		"size":          func(h http.Header) { h.Set("Content-Range", "bytes 40-79/101") },
		"unknown size":  func(h http.Header) { h.Set("Content-Range", "bytes 40-79/*") },
		"etag":          func(h http.Header) { h.Set("ETag", `"b"`) },
		"no etag":       func(h http.Header) { h.Del("ETag") },
		"last-modified": func(h http.Header) { h.Set("Last-Modified", "Sat, 03 Jan 2026 03:04:05 GMT") },
	} {
		h := good.Clone()
		edit(h)
		if err := m.checkChunkHeader(h, 40, 40); !errors.Is(err, errMismatch) {
			t.Errorf("%s: %v, want errMismatch", name, err)
		}
	}
}

// TestPeersByRTT: a node bounding its peers picks the nearest by the RTT
// its heartbeats measure (injected here), and its ring follows.
func TestPeersByRTT(t *testing.T) {
	var mu sync.Mutex
	rtts := map[string]time.Duration{} // filled once the nodes have addresses
	nodes := startCluster(t, 3, nil, func(i int, c *Config) {
		if i != 0 {
			return
		}
		c.Members.MaxPeers = 1
		c.RTT = func(node string, _ time.Duration) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			if r, ok := rtts[node]; ok {
				return r
			}
			return time.Second
		}
	})
	mu.Lock()
	rtts[nodes[1].addr], rtts[nodes[2].addr] = 40*time.Millisecond, time.Millisecond
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := nodes[0].ring()
		if r.Len() == 2 && r.Has(nodes[2].addr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ring %v, want node 0 and its nearest, node 2", r.Nodes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := nodes[0].Status()
	if len(st.Peers) != 2 || !st.Peers[0].Up {
		t.Fatalf("status peers %+v", st.Peers)
	}
}

// TestStatusAndMetrics: the status page and /metrics tell what happened.
func TestStatusAndMetrics(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(512<<10, 12)
	o.add("f", data, false, http.Header{"Cache-Control": {"max-age=60"}})
	nodes := startCluster(t, 2, o, nil)
	// A beat both ways, so that each node has measured the other.
	for _, n := range nodes {
		for {
			n.mu.Lock()
			states := n.members.States()
			n.mu.Unlock()
			if len(states) == 1 && states[0].Beats > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 2 {
		mustGet(t, nodes[0].url(o.URL+"/f"), 200)
	}
	_, body := mustGet(t, nodes[0].url(".cdn/status"), 200)
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.ClientBytes != float64(2*len(data)) || st.OriginOffload < 0.4 || len(st.Ring) != 2 || len(st.RecentChunks) == 0 {
		t.Fatalf("status %s", body)
	}
	// Peers' health, per-node load and chunk owners.
	if len(st.Peers) != 1 || st.Peers[0].Node != nodes[1].addr || !st.Peers[0].Up || st.Peers[0].Beats == 0 || st.Peers[0].RTT <= 0 {
		t.Errorf("status peers %+v", st.Peers)
	}
	if _, ok := st.InFlight[nodes[1].addr]; !ok || len(st.InFlight) != 2 {
		t.Errorf("status inflight %v, want both nodes", st.InFlight)
	}
	owners := map[string]bool{}
	for _, c := range st.RecentChunks {
		owners[c.Owner] = true
		if c.Chunk == "" || c.ServedBy == "" {
			t.Errorf("status chunk %+v", c)
		}
	}
	if !owners[nodes[0].addr] || !owners[nodes[1].addr] {
		t.Errorf("status chunk owners %v, want both nodes", owners)
	}
	if st.HitRatio <= 0 {
		t.Errorf("status hit ratio %v after the file was asked twice", st.HitRatio)
	}
	_, body = mustGet(t, nodes[0].url("metrics"), 200)
	peer := `{node="` + nodes[1].addr + `"}`
	for _, want := range []string{"stampede_cdn_hit_ratio", "stampede_cdn_origin_offload_ratio", "stampede_cdn_peer_up" + peer + " 1",
		"stampede_cdn_peer_rtt_seconds" + peer, "stampede_cdn_peer_load" + peer, "stampede_cdn_node_inflight" + peer,
		`stampede_cdn_requests_total{answer="chunks"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestSlowNodeBypassed: a node that answers chunk requests far past their
// deadline is bypassed for the next node of each chunk's order
// (re-forwarding), and the clients get the file.
func TestSlowNodeBypassed(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(512<<10, 15)
	o.add("f", data, true, nil)
	nodes := startCluster(t, 3, o, func(_ int, c *Config) { c.MinDeadline, c.MaxDeadline = 200*time.Millisecond, time.Second })
	nodes[2].slow.Store(int64(time.Minute))
	for c, err := range downloadAll(t, nodes[:2], o.URL+"/f", 2, data) {
		if err != nil {
			t.Errorf("client %d: %v", c, err)
		}
	}
	if r := counterValue(nodes[0].met.reforwards) + counterValue(nodes[1].met.reforwards); r == 0 {
		t.Error("no chunk was re-forwarded past the slow node")
	}
	if b := counterValue(nodes[2].met.servedNodes); b != 0 {
		t.Errorf("the slow node served %v bytes", b)
	}
}

// TestHotChunksReplicated: a chunk a node's clients ask for
// HotThreshold times is kept there, so its next clients cost its owner
// no upload.
func TestHotChunksReplicated(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(1<<20, 16)
	o.add("f", data, false, http.Header{"Cache-Control": {"max-age=60"}})
	// No overflow to other nodes: each chunk goes to its owner.
	nodes := startCluster(t, 2, o, func(_ int, c *Config) { c.LoadFactor = 100 })
	served := func() float64 { return counterValue(nodes[1].met.servedNodes) }
	var after []float64
	for range 4 {
		mustGet(t, nodes[0].url(o.URL+"/f"), 200)
		after = append(after, served())
	}
	if after[0] == 0 || after[1] <= after[0] {
		t.Fatalf("the owner served %v after each request: not asked for its chunks", after)
	}
	if after[3] != after[2] {
		t.Errorf("the owner served %v after each request: its hot chunks were not kept at the entry", after)
	}
}

// TestRestartKeepsCache: a node restarted on its cache directory serves
// the chunks it had, asking the origin only for the meta.
func TestRestartKeepsCache(t *testing.T) {
	o := newTestOrigin(t)
	data := randomBytes(300<<10, 14)
	o.add("f", data, true, nil)
	dir := t.TempDir()
	cache := func(_ int, c *Config) { c.CacheDir = dir }
	first := startCluster(t, 1, o, cache)
	if _, body := mustGet(t, first[0].url(o.URL+"/f"), 200); !bytes.Equal(body, data) {
		t.Fatal("first body differs")
	}
	first[0].kill()
	sent := o.bodyBytes.Load()
	second := startCluster(t, 1, o, cache)
	if _, body := mustGet(t, second[0].url(o.URL+"/f"), 200); !bytes.Equal(body, data) {
		t.Fatal("body after the restart differs")
	}
	if got := o.bodyBytes.Load(); got != sent {
		t.Errorf("after the restart the origin sent %d more bytes, want none", got-sent)
	}
}
