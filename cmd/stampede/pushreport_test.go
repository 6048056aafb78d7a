package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/daemon"
)

func testSnapshot() pushSnapshot {
	return pushSnapshot{Type: "progress", Root: "ab", Size: 1000, Dest: "/srv/a", Elapsed: 1.5, Racks: []pushRack{
		{Rack: "r1", Done: 1, InBytes: 1100, InCopies: 1.1, Hosts: []pushHost{
			{Host: "web-1", Rack: "r1", State: daemon.PushDone, Done: 1000},
			{Host: "web-2", Rack: "r1", State: daemon.PushFetching, Done: 450, Throttled: true},
		}},
		{Rack: "r2", Hosts: []pushHost{{Host: "db-<1>", Rack: "r2", State: daemon.PushFailed, Cause: "host down"}}},
	}}
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
	for _, want := range []string{"rack r1: 1 of 2 done, 1.10 copies", "<td>web-2</td>", "db-&lt;1&gt;", "host down", `http-equiv="refresh"`} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
}
