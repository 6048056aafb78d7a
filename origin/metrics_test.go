package origin

import (
	"bytes"
	"testing"

	"github.com/stampede-dev/stampede/internal/golden"
)

// TestMetricsExposition pins /metrics byte for byte: dashboards and the
// testbed read these names, and the format is Prometheus text 0.0.4.
func TestMetricsExposition(t *testing.T) {
	var m metrics
	m.bytesSent.Store(123456789)
	for k := range numKinds {
		m.requests[k].Store(int64(10 + k))
	}
	for i := range m.fileReasons {
		m.fileReasons[i].Store(int64(100 + i))
	}
	for _, code := range []int{503, 200, 206, 200, 404, 200} {
		m.countResponse(code)
	}
	m.rejectedOverload.Store(7)
	m.stalled.Store(3)
	for i := range numOutcomes {
		m.overload[i].Store(int64(20 + i))
	}
	m.overloadBytes.Store(1 << 20)
	m.pieceSends[sendFirst].Store(512)
	m.pieceSends[sendAgain].Store(15)
	m.picksSwapped.Store(37)
	m.manifestsComputed.Store(5)
	m.manifestFailures.Store(1)
	m.manifestHits[hitMemory].Store(40)
	m.manifestHits[hitDisk].Store(4)
	m.cacheBytes.Store(22361)
	for i := range numCacheRemoved {
		m.cacheRemoved[i].Store(int64(50 + i))
	}
	for i := range numUpstream {
		m.upstreamRequests[i].Store(int64(30 + i))
	}
	g := newGate(64, 16, 0, 0, testLogger(t))
	g.enter(&transfer{size: 100}, false, 0)
	var b bytes.Buffer
	if err := m.write(&b, g, 1<<20); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/metrics.golden", b.Bytes())
}
