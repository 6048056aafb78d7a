package cdn

import (
	"fmt"
	"testing"
)

// BenchmarkCluster: 24 clients arriving together at 6 nodes on loopback,
// the hot-spot mix of 4 files (three clients in four want the first).
// It reports the origin's copies of what was asked, the busiest node's
// egress (to clients and nodes) over the mean, and the same of what nodes
// serve each other alone (the part owners decide).
func BenchmarkCluster(b *testing.B) {
	const (
		nodesN  = 6
		clients = 24
		size    = 8 << 20
	)
	for b.Loop() {
		b.StopTimer()
		o := newTestOrigin(b)
		files := make([][]byte, 4)
		for i := range files {
			files[i] = randomBytes(size, uint64(100+i))
			o.add(fmt.Sprintf("f%d", i), files[i], false, nil)
		}
		nodes := startCluster(b, nodesN, o, func(_ int, c *Config) { c.ChunkSize = 256 << 10 })
		b.StartTimer()
		errs := make(chan error, clients)
		asked := map[int]bool{}
		done := make(chan struct{})
		for c := range clients {
			f := 0
			if c%4 == 3 {
				f = 1 + c%3
			}
			asked[f] = true
			go func() {
				resp, body, err := get(b, nodes[c%nodesN].url(fmt.Sprintf("%s/f%d", o.URL, f)))
				switch {
				case err != nil:
					errs <- err
				case resp.StatusCode != 200 || len(body) != size || string(body) != string(files[f]):
					errs <- fmt.Errorf("client %d: status %d, %d bytes", c, resp.StatusCode, len(body))
				default:
					errs <- nil
				}
				done <- struct{}{}
			}()
		}
		for range clients {
			<-done
			if err := <-errs; err != nil {
				b.Error(err)
			}
		}
		b.StopTimer()
		var total, busiest, totalNodes, busiestNodes float64
		for _, n := range nodes {
			toNodes := counterValue(n.met.servedNodes)
			e := counterValue(n.met.clientBytes) + toNodes
			total += e
			busiest = max(busiest, e)
			totalNodes += toNodes
			busiestNodes = max(busiestNodes, toNodes)
		}
		b.ReportMetric(busiestNodes/(totalNodes/nodesN), "busiest-to-nodes/mean")
		var src [numSources]float64
		var refw float64
		for _, n := range nodes {
			for i := range src {
				src[i] += counterValue(n.met.chunks[i])
			}
			refw += counterValue(n.met.reforwards)
		}
		b.Logf("chunks by source %v %v, re-forwards %v", sourceNames, src, refw)
		b.ReportMetric(float64(o.bodyBytes.Load())/float64(len(asked)*size), "origin-copies")
		b.ReportMetric(busiest/(total/nodesN), "busiest/mean")
		b.StartTimer()
	}
}
