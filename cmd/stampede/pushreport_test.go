package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/daemon"
)

func testSnapshot() pushSnapshot {
	return pushSnapshot{Type: "progress", Root: "ab", Size: 1000, Dest: "/srv/a", Elapsed: 1.5, Racks: []pushRack{
		{Rack: "r1", Done: 1, InBytes: 1100, InCopies: 1.1, Hosts: []pushHost{
			{Host: "web-1", Rack: "r1", State: daemon.PushDone, Done: 1000},
			{Host: "web-2", Rack: "r1", State: daemon.PushFetching, Done: 450, Throttled: true},
		}},
		{Rack: "r2", Hosts: []pushHost{{Host: "db-<1>", Rack: "r2", State: daemon.PushFailed, Cause: "host down"}}},
	}, Behind: []pushBehind{
		{Rack: "r1", Seconds: 12.5, TookOver: []string{"web-2"}},
		{Rack: "r2", Seconds: 13, Cause: "no standby representative to take over"},
	}}
}

// TestPushReportBehind: the report says which racks were behind, when,
// and who took over.
func TestPushReportBehind(t *testing.T) {
	var out bytes.Buffer
	p := &pusher{e: &env{stdout: &out}, file: "/tmp/a", dest: "/srv/a"}
	p.printReport(&pushReport{pushSnapshot: testSnapshot()})
	for _, want := range []string{"rack r1 behind at 12.5s: web-2 took over\n", "rack r2 behind at 13.0s: no standby representative to take over\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	p.json = true
	p.printReport(&pushReport{pushSnapshot: testSnapshot()})
	var r pushReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Behind) != 2 || r.Behind[0].TookOver[0] != "web-2" || r.Behind[1].Seconds != 13 {
		t.Errorf("JSON report: %v, %+v", err, r.Behind)
	}
}

func TestPushView(t *testing.T) {
	var out bytes.Buffer
	v := &pushView{p: &pusher{e: &env{stderr: &out, stderrIsTerminal: true}}}
	v.draw(testSnapshot(), false)
	v.draw(testSnapshot(), false)
	got := out.String()
	// Redrawn in place: the second draw moves up over the first's 2 lines.
	if strings.Count(got, "\x1b[2A") != 1 || strings.Count(got, "\x1b[2K") != 4 {
		t.Errorf("terminal view %q", got)
	}
	for _, want := range []string{"r1", "1/2 done: web-1 100% web-2 45% throttled", "0/1 done: db-<1> 0% FAILED"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal view lacks %q: %q", want, got)
		}
	}
	out.Reset()
	v = &pushView{p: &pusher{e: &env{stderr: &out}}}
	v.draw(testSnapshot(), false)
	v.draw(testSnapshot(), false) // within 5 s: not repeated
	if strings.Count(out.String(), "\n") != 2 || strings.Contains(out.String(), "\x1b") {
		t.Errorf("plain view %q", out.String())
	}
}

func TestPushStatusPage(t *testing.T) {
	var out bytes.Buffer
	if err := statusPage.Execute(&out, testSnapshot()); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{"rack r1: 1 of 2 done, 1.10 copies", "<td>web-2</td>", "rack r1 behind at 12.5 s: web-2 took over.", "db-&lt;1&gt;", "host down", `http-equiv="refresh"`} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
}

// TestPushStatusServed: the status page and /status.json as serveStatus
// serves them over HTTP, live (a host's new state shows on the next
// request), and gone once stopped.
func TestPushStatusServed(t *testing.T) {
	c, err := cluster.Parse([]byte(`
[rack.r1]
hosts = ["web-1", "web-2"]
[rack.r2]
hosts = ["db-1"]
[host.web-1]
agent = "10.0.0.1"
[host.web-2]
agent = "10.0.0.2"
[host.db-1]
agent = "10.0.0.3"
`))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	p := &pusher{
		e: &env{stderr: &stderr}, c: c, hosts: []string{"web-1", "web-2", "db-1"}, dest: "/srv/app.bin", statusLn: ln,
		start: time.Now().Add(-2 * time.Second), req: cluster.Request{Root: strings.Repeat("ab", 32), Size: 1000},
		agents: map[string]*agentState{
			"web-1": {st: daemon.PushStatus{State: daemon.PushDone, Role: "rack+dc representative", Done: 1000, FromOrigin: 1000}, accepted: true, final: true},
			"web-2": {st: daemon.PushStatus{State: daemon.PushFetching, Role: "member", Done: 450, FromRack: 450}, accepted: true},
			"db-1":  {st: daemon.PushStatus{State: daemon.PushFailed}, final: true, cause: "host down: connection refused"},
		},
	}
	stop := p.serveStatus(t.Context())
	base := "http://" + ln.Addr().String()
	if !strings.Contains(stderr.String(), "status on "+base+"/") {
		t.Errorf("stderr %q does not say where the status is", stderr.String())
	}
	get := func(path string) (string, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		return resp.Header.Get("Content-Type"), string(body)
	}
	ct, page := get("/")
	if !strings.HasPrefix(ct, "text/html") {
		t.Errorf("/: Content-Type %q", ct)
	}
	for _, want := range []string{"stampede push to /srv/app.bin", "rack r1: 1 of 2 done, 1.00 copies", "rack r2: 0 of 1 done",
		"<td>web-2</td><td>member</td><td>fetching</td><td>450</td>", "host down: connection refused"} {
		if !strings.Contains(page, want) {
			t.Errorf("/ lacks %q:\n%s", want, page)
		}
	}
	ct, body := get("/status.json")
	var s pushSnapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || ct != "application/json" {
		t.Fatalf("/status.json: %q, %v: %s", ct, err, body)
	}
	if s.Type != "progress" || s.Dest != "/srv/app.bin" || s.Size != 1000 || s.Root != p.req.Root || s.Elapsed < 2 || len(s.Racks) != 2 {
		t.Fatalf("/status.json: %+v", s)
	}
	r1, r2 := s.Racks[0], s.Racks[1]
	if r1.Rack != "r1" || r1.Done != 1 || r1.InBytes != 1000 || len(r1.Hosts) != 2 || r1.Hosts[0].Role != "rack+dc representative" ||
		r1.Hosts[1].Done != 450 || r1.Hosts[1].FromRack != 450 {
		t.Errorf("/status.json rack r1: %+v", r1)
	}
	if r2.Rack != "r2" || len(r2.Hosts) != 1 || r2.Hosts[0].State != daemon.PushFailed || r2.Hosts[0].Cause != "host down: connection refused" {
		t.Errorf("/status.json rack r2: %+v", r2)
	}
	// Live: web-2 finishes, and the next request says so.
	p.mu.Lock()
	p.agents["web-2"].st.State, p.agents["web-2"].st.Done = daemon.PushDone, 1000
	p.mu.Unlock()
	if _, page := get("/"); !strings.Contains(page, "rack r1: 2 of 2 done") {
		t.Errorf("/ after web-2 finished:\n%s", page)
	}
	stop()
	if resp, err := http.Get(base + "/status.json"); err == nil {
		resp.Body.Close()
		t.Errorf("the status page still answers after stop: %s", resp.Status)
	}
}
