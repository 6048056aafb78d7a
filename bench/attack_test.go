package bench

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/wire"
)

// BenchmarkAttack measures the aim of hardening (issue #12): 4 honest
// downloads of 64 MiB from an origin capped at 40 Mbit/s (T = F/u_s =
// 13.4 s), on loopback, without an attack, under an announce flood (1,000
// announces/s from one address, random peer IDs, port 0, for the real
// root), under 64 fake wire peers (they announce, accept and dial, send an
// empty have-set and never deliver), and under both. The honest peers and
// the origin are on 127.0.0.1; the flood comes from 127.0.0.2 and the
// fake peers from 127.0.0.3 (Linux routes all of 127/8 to loopback), so
// that a defence that tells sources apart sees the attackers as others. It reports each
// case's slowest and mean download and the origin's copies; the aim is the
// slowest within 1.3 × that of no attack, and at most 1.1 copies.
//
// It takes minutes: it runs only with STAMPEDETEST_ATTACK=1, e.g.
//
//	STAMPEDETEST_ATTACK=1 go test ./bench -run '^$' -bench Attack -benchtime 1x -v
func BenchmarkAttack(b *testing.B) {
	if os.Getenv("STAMPEDETEST_ATTACK") != "1" {
		b.Skip("set STAMPEDETEST_ATTACK=1 to run (minutes)")
	}
	size := int64(64 << 20)
	if s := os.Getenv("STAMPEDETEST_ATTACK_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		size = int64(n) << 20
	}
	bin := stampedeBin(b)
	dir := b.TempDir()
	www := filepath.Join(dir, "www")
	os.Mkdir(www, 0o755)
	file := filepath.Join(www, "file.bin")
	data := make([]byte, size)
	crand.Read(data)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := manifest.FromReaderAt(bytes.NewReader(data), size, "file.bin", 0)
	if err != nil {
		b.Fatal(err)
	}
	want := sha256.Sum256(data)
	for _, c := range []struct {
		name         string
		flood, fakes int
	}{
		{"none", 0, 0},
		{"flood", 1000, 0},
		{"fakes", 0, 64},
		{"both", 1000, 64},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				r := runAttack(b, bin, dir, www, m, want, c.flood, c.fakes)
				b.ReportMetric(r.slowest.Seconds(), "s-slowest")
				b.ReportMetric(r.mean.Seconds(), "s-mean")
				b.ReportMetric(r.copies, "copies")
				b.Logf("%s: slowest %.1f s, mean %.1f s, origin %.2f copies; flood %d sent (%d answered 200, %d 429), fake peers %d connections",
					c.name, r.slowest.Seconds(), r.mean.Seconds(), r.copies, r.floodSent, r.flood200, r.flood429, r.fakeConns)
			}
		})
	}
}

type attackResult struct {
	slowest, mean                 time.Duration
	copies                        float64
	floodSent, flood200, flood429 int64
	fakeConns                     int64
}

func runAttack(b *testing.B, bin, dir, www string, m *manifest.Manifest, want [32]byte, floodRate, fakes int) attackResult {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp(dir, "run")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(work)
	serve := exec.CommandContext(ctx, bin, "serve", www, "--listen", "127.0.0.1:0", "--rate", "40Mbit", "--cache-dir", filepath.Join(work, "cache"))
	stderr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { serve.Process.Kill(); serve.Wait() }()
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`http://[0-9.]+:[0-9]+`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if a := re.FindString(sc.Text()); a != "" {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	var origin string
	select {
	case origin = <-addr:
	case <-time.After(10 * time.Second):
		b.Fatal("serve did not say where it listens")
	}
	announceURL := origin + tracker.WellKnownPath

	var r attackResult
	var wg sync.WaitGroup
	attack, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	if floodRate > 0 {
		wg.Go(func() { flood(attack, announceURL, m, floodRate, &r) })
	}
	for range fakes {
		wg.Go(func() { fakePeer(attack, announceURL, m, &r.fakeConns) })
	}
	if fakes > 0 || floodRate > 0 {
		time.Sleep(2 * time.Second) // the attack is under way when the crowd comes
	}

	const honest = 4
	start := time.Now()
	times := make([]time.Duration, honest)
	var dl sync.WaitGroup
	for i := range honest {
		dl.Go(func() {
			out := filepath.Join(work, fmt.Sprintf("out%d", i))
			cmd := exec.CommandContext(ctx, bin, "get", "-q", "-o", out, origin+"/file.bin")
			cmd.Stderr = io.Discard
			err := cmd.Run()
			times[i] = time.Since(start)
			if err != nil {
				b.Errorf("download %d: %v after %v", i, err, times[i])
				return
			}
			got, err := os.ReadFile(out)
			if err != nil || sha256.Sum256(got) != want {
				b.Errorf("download %d: not the file (%v)", i, err)
			}
		})
	}
	dl.Wait()
	for _, t := range times {
		r.slowest = max(r.slowest, t)
		r.mean += t / honest
	}
	sent, err := originBytes(ctx, origin)
	if err != nil {
		b.Fatal(err)
	}
	r.copies = float64(sent) / float64(m.Size)
	return r
}

// originBytes reads stampede_origin_bytes_sent_total from the origin's
// /metrics, as the testbed does (stampedeOrigin.originBytes).
func originBytes(ctx context.Context, origin string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, origin+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	return bytesSent(body)
}

// flood announces to the tracker at rate per second from one address,
// each time with a new random peer ID and port 0, for m's swarm.
func flood(ctx context.Context, announceURL string, m *manifest.Manifest, rate int, r *attackResult) {
	client := clientFrom("127.0.0.2")
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // 64 under way: the tracker is slower than the rate
		}
		atomic.AddInt64(&r.floodSent, 1)
		wg.Go(func() {
			defer func() { <-sem }()
			var id tracker.PeerID
			crand.Read(id[:])
			_, err := tracker.Announce(ctx, client, announceURL, tracker.AnnounceRequest{
				Root: m.Root, Size: m.Size, ID: id, Left: m.Size, Event: tracker.EventStarted,
			})
			switch {
			case err == nil:
				atomic.AddInt64(&r.flood200, 1)
			case strings.Contains(err.Error(), "429"):
				atomic.AddInt64(&r.flood429, 1)
			}
		})
	}
}

// fakePeer is a peer that joins m's swarm and never delivers: it
// announces itself with a port it listens on, dials the peers the tracker
// hands out, and to every peer, dialled or dialling, completes the
// handshake, sends an empty have-set and reads whatever comes, keeping
// the connection up.
func fakePeer(ctx context.Context, announceURL string, m *manifest.Manifest, conns *int64) {
	ln, err := net.Listen("tcp", fakeAddr+":0")
	if err != nil {
		return
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	g, _ := wire.NewGeometry(m.Size, m.PieceSize)
	hs := wire.Handshake{Root: m.Root, Size: uint64(m.Size), PeerID: wire.NewPeerID(),
		ListenPort: uint16(ln.Addr().(*net.TCPAddr).Port)}
	var wg sync.WaitGroup
	defer wg.Wait()
	serve := func(c net.Conn) {
		defer c.Close()
		context.AfterFunc(ctx, func() { c.Close() })
		if _, err := wire.Exchange(ctx, c, hs); err != nil {
			return
		}
		atomic.AddInt64(conns, 1)
		w := wire.NewWriter(c, g)
		if w.WriteMessage(&wire.HaveSet{Set: pieceset.New(g.NumPieces())}) != nil || w.Flush() != nil {
			return
		}
		go func() { // stay up past the idle timeout
			t := time.NewTicker(wire.KeepAliveInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if w.WriteMessage(&wire.KeepAlive{}) != nil || w.Flush() != nil {
						return
					}
				}
			}
		}()
		rd := wire.NewReader(c, g)
		for {
			if _, err := rd.Read(); err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serve(c) })
		}
	})
	client := clientFrom(fakeAddr)
	dialled := make(map[netip.AddrPort]bool)
	for {
		resp, err := tracker.Announce(ctx, client, announceURL, tracker.AnnounceRequest{
			Root: m.Root, Size: m.Size, ID: tracker.PeerID(hs.PeerID), Port: hs.ListenPort, Left: m.Size, NumWant: 50,
		})
		if err == nil {
			for _, p := range resp.Peers {
				if dialled[p.Addr] || p.Addr.Addr().String() == fakeAddr {
					continue
				}
				dialled[p.Addr] = true
				wg.Go(func() {
					d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fakeAddr)}}
					if c, err := d.DialContext(ctx, "tcp", p.Addr.String()); err == nil {
						serve(c)
					}
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
	}
}

// fakeAddr is the fake wire peers' address.
const fakeAddr = "127.0.0.3"

// clientFrom is an HTTP client whose connections come from the address
// from.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
}
