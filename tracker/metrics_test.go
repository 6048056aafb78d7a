package tracker

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.golden from the current output")

// golden compares got with the file at path, or rewrites the file with -rewrite.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (review, then run with -rewrite):\n%s", path, got)
	}
}

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
	golden(t, "testdata/metrics.golden", b.Bytes())
}
