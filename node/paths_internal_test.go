package node

import (
	"io"
	"net"
	"testing"
	"time"
)

// fakePath is a connection that answers as a WebRTC channel does.
type fakePath struct {
	net.Conn
	path string
}

func (f fakePath) MinRTT() time.Duration { return 42 * time.Millisecond }
func (f fakePath) Unacked() int          { return 1234 }
func (f fakePath) Path() string          { return f.path }

// TestPathConnAnswers: the node reads a PathConn's round trip and unacked
// bytes where it reads TCP_INFO, counts its neighbours by path, and the
// bytes of a relayed one both ways.
func TestPathConnAnswers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if minRTT(a) != 0 || unacked(a) != -1 || pathOf(a) != PathDirect {
		t.Errorf("a pipe: rtt %v, unacked %d, path %s; want 0, -1, direct", minRTT(a), unacked(a), pathOf(a))
	}
	var n Node
	relayed := n.relayCounted(fakePath{Conn: a, path: PathRelayed})
	if minRTT(relayed) != 42*time.Millisecond || unacked(relayed) != 1234 || pathOf(relayed) != PathRelayed {
		t.Errorf("relayed: rtt %v, unacked %d, path %s; want the PathConn's answers", minRTT(relayed), unacked(relayed), pathOf(relayed))
	}
	if c := n.relayCounted(fakePath{Conn: a, path: PathPunched}); c != (fakePath{Conn: a, path: PathPunched}) {
		t.Error("a punched connection was wrapped")
	}
	go func() {
		b.Write(make([]byte, 100))
		io.ReadFull(b, make([]byte, 30))
	}()
	if _, err := io.ReadFull(relayed, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := relayed.Write(make([]byte, 30)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{a, relayed, fakePath{Conn: a, path: PathPunched}, fakePath{Conn: a, path: PathDirect}} {
		n.countPath(c)
	}
	if got, want := n.paths.snapshot(), (Paths{Direct: 2, Punched: 1, Relayed: 1, RelayedBytes: 130}); got != want {
		t.Errorf("paths %+v, want %+v", got, want)
	}
}
