package rtcpeer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/origin"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/webpeer"
)

// nativeOrigin serves obj.bin (1 MiB) with a tracker and peer.json; once
// blocked, it refuses the object's bodies as an origin past its budget
// does, so that a download must get it from peers.
type nativeOrigin struct {
	url     string
	sha     string
	size    int64
	blocked atomic.Bool
	bodies  atomic.Int64 // bytes of obj.bin sent
}

func startNativeOrigin(t *testing.T, log *slog.Logger) *nativeOrigin {
	t.Helper()
	www := t.TempDir()
	obj := make([]byte, 1<<20)
	rand.Read(obj)
	sum := sha256.Sum256(obj)
	o := &nativeOrigin{sha: hex.EncodeToString(sum[:]), size: int64(len(obj))}
	if err := os.WriteFile(filepath.Join(www, "obj.bin"), obj, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := origin.New(origin.Config{Dir: www, CacheDir: t.TempDir(), Tracker: tracker.New(tracker.Config{Logger: log}), Logger: log,
		WebPeer: webpeer.Handler(webpeer.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/obj.bin" && r.Method == http.MethodGet {
			if o.blocked.Load() {
				w.Header().Set("Retry-After", "60")
				w.Header().Set(contract.BudgetHeader, "spent, left=0, reset=60")
				http.Error(w, "blocked by the test", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(&countingWriter{ResponseWriter: w, n: &o.bodies}, r)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	o.url = "http://" + ln.Addr().String()
	return o
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// webrtcOnly is a host that carries peers over WebRTC alone (loopback
// candidates), so that two of them can meet in no other way.
func webrtcOnly(t *testing.T, ctx context.Context, log *slog.Logger) *host.Host {
	t.Helper()
	rt := New(Config{Logger: log})
	rt.api = loopbackAPI(true)
	h, err := host.New(host.Config{Transports: []host.Transport{rt}, OnAttach: rt.JoinNode, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go h.Run(ctx)
	return h
}

// TestNativePair: two native peers, with no way to reach each other but
// WebRTC, pair through the tracker's signalling (the offerer sends its
// handshake first, as a dialer: neither waits for the other's), and one
// downloads the whole object from the other while the origin refuses it;
// the download counts the neighbour as direct (loopback host candidates).
func TestNativePair(t *testing.T) {
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := startNativeOrigin(t, log)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	sctx, stop := context.WithCancel(ctx)
	seeded := make(chan error, 1)
	go func() {
		d, err := fetch.New(fetch.Config{URL: o.url + "/obj.bin", Output: filepath.Join(t.TempDir(), "obj.bin"), SHA256: o.sha, Logger: log,
			Swarm: fetch.SwarmConfig{SeedForever: true, Node: node.Config{Host: webrtcOnly(t, sctx, log)}}})
		if err == nil {
			_, err = d.Run(sctx)
		}
		seeded <- err
	}()
	defer func() {
		stop()
		<-seeded
	}()
	for o.bodies.Load() < o.size {
		select {
		case err := <-seeded:
			t.Fatalf("the seed ended: %v", err)
		case <-ctx.Done():
			t.Fatal("the seed did not get the object")
		case <-time.After(20 * time.Millisecond): // the origin's count is all there is to watch
		}
	}
	o.blocked.Store(true)

	d, err := fetch.New(fetch.Config{URL: o.url + "/obj.bin", Output: filepath.Join(t.TempDir(), "obj.bin"), SHA256: o.sha, Logger: log,
		Swarm: fetch.SwarmConfig{Node: node.Config{Host: webrtcOnly(t, ctx, log)}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(ctx)
	if err != nil {
		t.Fatalf("download from the native seed: %v", err)
	}
	if res.BytesFromPeers != o.size {
		t.Errorf("%d bytes from peers, want %d", res.BytesFromPeers, o.size)
	}
	if res.Swarm == nil {
		t.Fatal("no swarm account")
	}
	if n := res.Swarm.Neighbours; n.Direct < 1 || n.Punched != 0 || n.Relayed != 0 || n.RelayedBytes != 0 {
		t.Errorf("neighbours %+v, want direct ones only", n)
	}
}
