// Package metricstest checks a server's /metrics page in its tests the
// way Prometheus' own tools would, so that a page Prometheus would choke
// on, or a name against its conventions, fails a test rather than a
// scrape.
package metricstest

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Check fails t unless page, a /metrics page in the text format, parses
// and passes the linter `promtool check metrics` runs (names, units,
// suffixes, help texts), in this process; and then, when promtool is on
// PATH, unless promtool itself passes it. Without promtool that last part
// is skipped, or fails when STAMPEDETEST_REQUIRE_PROMTOOL=1 (scripts/test.sh
// sets it when it installed promtool). It returns the page's families by
// name.
func Check(t testing.TB, page []byte) map[string]bool {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v\n%s", err, page)
	}
	problems, err := promlint.New(bytes.NewReader(page)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	names := make(map[string]bool, len(mfs))
	for name := range mfs {
		names[name] = true
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("STAMPEDETEST_REQUIRE_PROMTOOL") == "1" {
			t.Fatalf("STAMPEDETEST_REQUIRE_PROMTOOL=1 and no promtool: %v", err)
		}
		t.Logf("no promtool (set STAMPEDETEST_REQUIRE_PROMTOOL=1 to fail instead): checked in process only")
		return names
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(page)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return names
}

// Samples returns the samples of page, in the text format, by series:
// "name" or `name{label="value",...}` as the page writes it.
func Samples(t testing.TB, page []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.Lines(string(page)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[series] = f
	}
	return out
}
