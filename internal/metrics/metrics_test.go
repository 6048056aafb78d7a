package metrics_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/internal/metrics/metricstest"
)

// TestRegistry: a server's page has the Go runtime's, the process's and
// the build's series, and passes Prometheus' checks.
func TestRegistry(t *testing.T) {
	old := metrics.Version
	metrics.Version = "v1.2.3-test"
	defer func() { metrics.Version = old }()
	r := metrics.NewRegistry()
	rec := httptest.NewRecorder()
	metrics.Handler(r, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-store" ||
		!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	page := rec.Body.String()
	names := metricstest.Check(t, []byte(page))
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "stampede_build_info"} {
		if !names[name] {
			t.Errorf("no %s", name)
		}
	}
	if runtime.GOOS == "linux" && !names["process_cpu_seconds_total"] {
		t.Error("no process_cpu_seconds_total")
	}
	want := `stampede_build_info{goversion="` + runtime.Version() + `",version="v1.2.3-test"} 1`
	if !strings.Contains(page, want+"\n") {
		t.Errorf("no %s in\n%s", want, page)
	}

	// Two registries, as two servers in one process have, do not collide.
	metrics.NewRegistry().MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
	metrics.NewRegistry().MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"}))
}

// failing is a collector whose source does not answer.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("down"))
}

// TestPartialPage: a collector that fails leaves its series out, not the
// page.
func TestPartialPage(t *testing.T) {
	r := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	c.Add(3)
	r.MustRegister(c, failing{prometheus.NewDesc("b", "b", nil, nil)})
	rec := httptest.NewRecorder()
	metrics.Handler(r, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "a_total 3\n") {
		t.Errorf("%d %q", rec.Code, rec.Body)
	}

	var b bytes.Buffer
	if err := metrics.WriteText(&b, r, "a_"); err == nil || b.String() != "# HELP a_total a\n# TYPE a_total counter\na_total 3\n" {
		t.Errorf("WriteText: %v %q", err, b.String())
	}
}

// TestCollectors: a Collectors collects its members in order, and a
// CollectFunc what its function sends.
func TestCollectors(t *testing.T) {
	var order []string
	desc := prometheus.NewDesc("g", "g", []string{"l"}, nil)
	mk := func(name string) metrics.CollectFunc {
		return metrics.CollectFunc{Descs: []*prometheus.Desc{desc}, F: func(ch chan<- prometheus.Metric) {
			order = append(order, name)
			metrics.Gauge(ch, desc, 1, name)
		}}
	}
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(metrics.Collectors{mk("first"), mk("second")})
	var b bytes.Buffer
	if err := metrics.WriteText(&b, r, ""); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "first,second" || !strings.Contains(b.String(), `g{l="second"} 1`) {
		t.Errorf("order %v, page %q", order, b.String())
	}
}
