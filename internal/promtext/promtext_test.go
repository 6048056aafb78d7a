package promtext_test

import (
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/internal/promtext"
)

func TestPage(t *testing.T) {
	var w promtext.Writer
	w.Family("app_requests_total", promtext.Counter, "Requests, by kind.")
	w.Sample(3, "kind", "file")
	w.Sample(0, "kind", "other")
	w.Family("app_up", promtext.Gauge, "1 if up.")
	w.Sample(1)
	w.Family("app_empty_total", promtext.Counter, "Nothing yet.")
	w.Family("app:ratio", promtext.Gauge, "Two labels.")
	w.Sample(-2, "a", "x", "b_2", "y")
	want := `# HELP app_requests_total Requests, by kind.
# TYPE app_requests_total counter
app_requests_total{kind="file"} 3
app_requests_total{kind="other"} 0
# HELP app_up 1 if up.
# TYPE app_up gauge
app_up 1
# HELP app_empty_total Nothing yet.
# TYPE app_empty_total counter
# HELP app:ratio Two labels.
# TYPE app:ratio gauge
app:ratio{a="x",b_2="y"} -2
`
	if got := string(w.Bytes()); got != want {
		t.Errorf("page:\n%s\nwant:\n%s", got, want)
	}
	var b strings.Builder
	if n, err := w.WriteTo(&b); err != nil || n != int64(len(want)) || b.String() != want {
		t.Errorf("WriteTo: %d, %v, %q", n, err, b.String())
	}
}

// Escaping as the 0.0.4 format has it: HELP escapes backslash and line
// feed, label values also the double quote; nothing else.
func TestEscaping(t *testing.T) {
	var w promtext.Writer
	w.Family("m", promtext.Counter, "a \\ b\nc \"d\" é\t")
	w.Sample(1, "path", "C:\\dir\n\"x\" é\t")
	w.Sample(2, "path", "bad \xff utf-8")
	want := "# HELP m a \\\\ b\\nc \"d\" é\t\n" +
		"# TYPE m counter\n" +
		"m{path=\"C:\\\\dir\\n\\\"x\\\" é\t\"} 1\n" +
		"m{path=\"bad \uFFFD utf-8\"} 2\n"
	if got := string(w.Bytes()); got != want {
		t.Errorf("page:\n%q\nwant:\n%q", got, want)
	}
}

func TestMapSamplesSorted(t *testing.T) {
	for range 20 { // map order varies from run to run
		var w promtext.Writer
		w.Family("r", promtext.Counter, "By code.")
		promtext.MapSamples(&w, "code", map[int]int64{503: 1, 200: 7, 1000: 2, 206: 0})
		want := "# HELP r By code.\n# TYPE r counter\n" +
			"r{code=\"200\"} 7\nr{code=\"206\"} 0\nr{code=\"503\"} 1\nr{code=\"1000\"} 2\n"
		if got := string(w.Bytes()); got != want {
			t.Fatalf("page:\n%s\nwant:\n%s", got, want)
		}
	}
}

// Mistakes in names and structure are the caller's bugs: they panic.
func TestMisusePanics(t *testing.T) {
	for name, f := range map[string]func(w *promtext.Writer){
		"sample before family": func(w *promtext.Writer) { w.Sample(1) },
		"bad metric name":      func(w *promtext.Writer) { w.Family("1abc", promtext.Counter, "") },
		"dash in metric name":  func(w *promtext.Writer) { w.Family("a-b", promtext.Counter, "") },
		"empty metric name":    func(w *promtext.Writer) { w.Family("", promtext.Counter, "") },
		"unknown type":         func(w *promtext.Writer) { w.Family("a", "histogram", "") },
		"family twice": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			w.Family("b", promtext.Counter, "")
			w.Family("a", promtext.Counter, "")
		},
		"odd labels": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			//lint:ignore SA5012 the misuse this test makes sure panics
			w.Sample(1, "kind")
		},
		"colon in label name": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			w.Sample(1, "a:b", "x")
		},
		"reserved label name": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			w.Sample(1, "__name__", "x")
		},
		"series twice": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			w.Sample(1, "k", "x")
			w.Sample(2, "k", "y")
			w.Sample(3, "k", "x")
		},
		"unlabelled series twice": func(w *promtext.Writer) {
			w.Family("a", promtext.Counter, "")
			w.Sample(1)
			w.Sample(2)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f(new(promtext.Writer))
		})
	}
	// The same label set in another family is another series.
	var w promtext.Writer
	w.Family("a", promtext.Counter, "")
	w.Sample(1, "k", "x")
	w.Family("b", promtext.Counter, "")
	w.Sample(1, "k", "x")
}
