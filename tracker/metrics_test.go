package tracker

import (
	"bytes"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/internal/golden"
)

// TestMetricsExposition pins the tracker's metrics byte for byte: the
// testbed and dashboards read these names, and the format is Prometheus
// text 0.0.4.
func TestMetricsExposition(t *testing.T) {
	h := newHarness(t, Config{})
	for i := range 5 {
		h.announce(peer(i), EventStarted, 100, 0)
	}
	h.announce(peer(0), EventCompleted, 0, 0)
	h.announce(peer(1), EventNone, 50, 0) // less than a second later: rate limited
	h.clock.Advance(2 * time.Second)
	h.announce(peer(1), EventStopped, 50, 0)
	h.serve("GET", "root=nothex", "192.0.2.1:5000")
	var b bytes.Buffer
	if err := h.tr.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/metrics.golden", b.Bytes())
}
