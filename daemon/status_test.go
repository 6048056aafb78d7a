package daemon_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/daemon"
	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/internal/dashboard/dashboardtest"
)

// TestStatusPagePublic: the API's status page shows the jobs' paths and
// errors; the gateway's, which anyone may load, does not.
func TestStatusPagePublic(t *testing.T) {
	o := startOrigin(t, 0, map[string][]byte{"p.bin": randomBytes(100*KiB, 5)})
	td := startDaemon(t, daemon.Config{Gateway: "127.0.0.1:0", CacheDir: t.TempDir()})
	j, err := td.c.Download(t.Context(), o.url+"/p.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	td.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)

	private, raw := dashboardtest.Snapshot(t, unixClient(td.srv.APIAddr().String()), "http://x")
	if !strings.Contains(raw, j.Path) || private.Tables[0].Columns[3].Name != "path" {
		t.Errorf("the API's status page has no path %s:\n%s", j.Path, raw)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	public, raw := dashboardtest.Snapshot(t, hc, "http://"+td.srv.GatewayAddr().String())
	if strings.Contains(raw, td.allow) || strings.Contains(raw, "p.bin") || public.Tables[0].Note == "" {
		t.Errorf("the gateway's status page shows a path:\n%s", raw)
	}
	if rows := public.Tables[0].Rows; len(rows) != 1 || rows[0][0] != j.ID || rows[0][2] != daemon.StateSeeding || rows[0][3] != 1.0 {
		t.Errorf("the gateway's jobs: %v", rows)
	}
}

// TestStatusPageInBrowser: the gateway's status page, loaded in headless
// Chromium, follows the daemon live: a job added after the load, and a
// second daemon that downloads from this one, show in its table and its
// figures as the API has them, without the jobs' paths.
func TestStatusPageInBrowser(t *testing.T) {
	files := map[string][]byte{"a.bin": randomBytes(2*MiB+3, 1), "b.bin": randomBytes(MiB+7, 2)}
	o := startOrigin(t, 0, files)
	a := startDaemon(t, daemon.Config{Gateway: "127.0.0.1:0", CacheDir: t.TempDir()})
	first, err := a.c.Download(t.Context(), o.url+"/a.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	a.waitState(t, first.ID, daemon.StateSeeding, 30*time.Second)
	p := dashboardtest.Open(t, "http://"+a.srv.GatewayAddr().String()+"/")
	if rows := p.Table("Jobs"); len(rows) != 1 || rows[0][0] != first.ID {
		t.Fatalf("jobs at first: %q", rows)
	}

	// After the load: a second job here, and a second daemon that takes
	// the first file from this one's swarm.
	second, err := a.c.Download(t.Context(), o.url+"/b.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	b := startDaemon(t, daemon.Config{})
	j, err := b.c.Download(t.Context(), o.url+"/a.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	a.waitState(t, second.ID, daemon.StateSeeding, 30*time.Second)
	j = b.waitState(t, j.ID, daemon.StateSeeding, 30*time.Second)
	st, err := a.c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the second daemon got %d bytes from peers; this one sent %d", j.FromPeers, st.BytesToPeers)
	p.WaitFor("the second job, seeding", fmt.Sprintf(
		`[...document.querySelectorAll("#tables tr")].some((tr) => tr.cells[0].textContent === %q && tr.cells[2].textContent === "seeding")`, second.ID))
	p.WaitFigure("bytes_to_peers", float64(st.BytesToPeers))

	jobs, err := a.c.Jobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for _, j := range jobs {
		want = append(want, []string{j.ID, j.Kind, j.State, "100.0%", dashboard.Format(float64(j.Size), dashboard.UnitBytes),
			dashboard.Format(float64(j.FromPeers), dashboard.UnitBytes), dashboard.Format(float64(j.Uploaded), dashboard.UnitBytes), fmt.Sprint(j.Peers)})
	}
	if rows := p.Table("Jobs"); fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("jobs: the page shows\n%q\nthe API has\n%q", rows, want)
	}
	for id, v := range map[string]float64{"bytes_from_peers": float64(st.BytesFromPeers), "downloads": 0, "swarms": float64(st.Peers.Swarms)} {
		if f := p.Figure(id); f.Value != v {
			t.Errorf("%s: the page shows %+v, the API has %v", id, f, v)
		}
	}
	if text := p.Text(); strings.Contains(text, a.allow) || !strings.Contains(text, "Paths and errors are shown on the API's status page only.") {
		t.Errorf("the gateway's status page shows a path, or does not say it leaves them out:\n%s", text)
	}
	p.CheckConsole()
}
