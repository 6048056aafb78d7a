package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/contract"
)

var adminLine = regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`)

func httpStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestAdminListener: with --admin, /metrics and the health checks are on
// that address alone, for serve and the tracker; the public address has
// none, and a site's own /metrics file is served as a file.
func TestAdminListener(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "metrics", []byte("the site's own page"))
	for _, c := range []struct {
		args   []string
		series string
	}{
		{[]string{"serve", www, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--admin", "127.0.0.1:0"}, "stampede_origin_bytes_sent_total"},
		{[]string{"tracker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, "stampede_tracker_announces_total"},
	} {
		addr, r := startDaemon(t, c.args...)
		m := adminLine.FindStringSubmatch(r.stderr.String())
		if m == nil {
			t.Fatalf("%s: no admin address in %q", c.args[0], r.stderr.String())
		}
		admin := m[1]
		if code, body := httpStatus(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, c.series) || !strings.Contains(body, "stampede_build_info") {
			t.Errorf("%s: admin /metrics: %d, %.200q", c.args[0], code, body)
		}
		if c.args[0] == "serve" {
			if !strings.Contains(r.stderr.String(), "dashboard on http://"+admin+"/") {
				t.Errorf("serve does not say where its dashboard is: %q", r.stderr.String())
			}
			if code, body := httpStatus(t, "http://"+admin+"/"); code != 200 || !strings.Contains(body, "stampede serve") {
				t.Errorf("serve: admin dashboard: %d, %.200q", code, body)
			}
		}
		for _, p := range []string{contract.HealthzPath, contract.ReadyzPath} {
			if code, _ := httpStatus(t, "http://"+admin+p); code != 200 {
				t.Errorf("%s: admin %s: %d", c.args[0], p, code)
			}
			if code, _ := httpStatus(t, "http://"+addr+p); code == 200 {
				t.Errorf("%s: public %s answered 200 with --admin", c.args[0], p)
			}
		}
		code, body := httpStatus(t, "http://"+addr+"/metrics")
		switch c.args[0] {
		case "serve":
			if code != 200 || body != "the site's own page" {
				t.Errorf("serve: public /metrics: %d %q, want the site's file", code, body)
			}
		default:
			if code == 200 {
				t.Errorf("tracker: public /metrics: %d", code)
			}
		}
	}
}

// TestLogFormatJSON: --log-format json writes one JSON object per line;
// another format is refused.
func TestLogFormatJSON(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "f", []byte("x"))
	addr, r := startDaemon(t, "serve", www, "--listen", "127.0.0.1:0", "--cache-dir", t.TempDir(), "--log-format", "json", "-v")
	httpStatus(t, "http://"+addr+"/f")
	var lines int
	for line := range strings.Lines(r.stderr.String()) {
		if !strings.HasPrefix(line, "{") {
			continue // the address lines serve prints for people
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", line, err)
		}
		lines++
	}
	if lines == 0 {
		t.Errorf("no JSON log lines in %q", r.stderr.String())
	}
	if code, _, stderr := runCmd(t, "serve", www, "--log-format", "xml"); code != exitUsage || !strings.Contains(stderr, "--log-format") {
		t.Errorf("--log-format xml: exit %d: %s", code, stderr)
	}
}
