package webpeer_test

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestBrowserNoWebRTC: a visitor whose network lets WebRTC make no
// connection (a firewall drops its UDP) gets the object whole from the
// origin, past the deadline, though a peer that has it is there.
func TestBrowserNoWebRTC(t *testing.T) {
	needBrowser(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skipf("no nft (Debian's nftables) to block UDP: %v", err)
	}
	nss := setupNet(t, 2)
	o := startOrigin(t)
	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	// B's UDP out is dropped (in its namespace, which goes with it): ICE's
	// checks, both ways, never complete.
	run(t, "ip", "netns", "exec", nss[1], "nft", "add table inet wp; add chain inet wp out { type filter hook output priority 0; }; add rule inet wp out meta l4proto udp drop")
	b := openBrowser(t, nss[1], "B", o)
	f := b.fetch(o)
	if f.Stats.FromPeers != 0 || f.Stats.FromOrigin != int64(len(o.obj)) {
		t.Errorf("B, WebRTC blocked: %+v, want everything from the origin", f.Stats)
	}
	if s := a.stats(); s.Uploaded != 0 {
		t.Errorf("A uploaded %d bytes to a browser that cannot connect", s.Uploaded)
	}
}

// TestBrowserSaveData: a visitor who asks to save data runs no peer (no
// worker installed) and gets the page's objects from the origin.
func TestBrowserSaveData(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 1)
	o := startOrigin(t)
	b := blank(t, nss[0], "A", o)
	on := true
	if _, err := chromedp.Call(b.ctx, emulation.SetDataSaverOverride, emulation.SetDataSaverOverrideParams{DataSaverEnabled: &on}); err != nil {
		t.Fatalf("data saver: %v", err)
	}
	b.do(chromedp.Navigate(o.url + "/index.html"))
	var ready string
	b.eval(`stampede.ready`, &ready)
	if ready != "save-data" {
		t.Errorf("with Save-Data: the peer is %q, want save-data", ready)
	}
	var regs int
	b.eval(`navigator.serviceWorker.getRegistrations().then((r) => r.length)`, &regs)
	if regs != 0 {
		t.Errorf("with Save-Data: %d service workers registered", regs)
	}
	var f fetched
	b.eval(fetchJSOf("/obj.bin"), &f)
	if f.Len != len(o.obj) || f.Via != "" {
		t.Errorf("with Save-Data: %d bytes via %q, want %d from the origin", f.Len, f.Via, len(o.obj))
	}
}

// TestBrowserPeerOffHeader: a manifest answered with Stampede-Peer: off
// stands the worker down at once: it unregisters, and the object comes
// from the origin.
func TestBrowserPeerOffHeader(t *testing.T) {
	needBrowser(t)
	nss := setupNet(t, 1)
	o := startOrigin(t)
	other := make([]byte, 128<<10) // a manifest the worker has not seen
	rand.Read(other)
	os.WriteFile(filepath.Join(o.www, "other.bin"), other, 0o644)
	a := openBrowser(t, nss[0], "A", o)
	a.fetch(o)
	o.peerOff.Store(true)
	var f fetched
	a.eval(fetchJSOf("/other.bin"), &f)
	if f.Len != len(other) || f.Via != "" {
		t.Errorf("after Stampede-Peer: off: %d bytes via %q, want %d from the origin", f.Len, f.Via, len(other))
	}
	var regs int
	a.eval(`navigator.serviceWorker.getRegistrations().then((r) => r.length)`, &regs)
	if regs != 0 {
		t.Errorf("%d service workers still registered after Stampede-Peer: off", regs)
	}
	a.eval(fetchJSOf("/obj.bin"), &f)
	if f.Via != "" {
		t.Errorf("after Stampede-Peer: off, obj.bin came via %q, want the origin", f.Via)
	}
}
