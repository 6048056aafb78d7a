package wire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-dev/stampede/wire"
)

func testHandshake() wire.Handshake {
	h := wire.Handshake{Caps: wire.CapSeed, Size: 1000000, ListenPort: 6881}
	for i := range h.Root {
		h.Root[i] = byte(i + 1)
	}
	for i := range h.PeerID {
		h.PeerID[i] = byte(0xa0 + i)
	}
	return h
}

// TestHandshakeGolden pins the layout; docs/protocol.md shows the same bytes.
func TestHandshakeGolden(t *testing.T) {
	want := unhex(t, `53544d50 01 00 0001
		0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20
		00000000000f4240
		a0a1a2a3a4a5a6a7a8a9aaabacadaeaf
		1ae1`)
	h := testHandshake()
	got, err := h.MarshalBinary()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("MarshalBinary = % x, %v\nwant            % x", got, err, want)
	}
	if len(got) != wire.HandshakeLen {
		t.Fatalf("%d bytes, HandshakeLen is %d", len(got), wire.HandshakeLen)
	}
	h.Version = 7 // ignored: we always send our own
	if got, _ := h.AppendBinary([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("AppendBinary = % x", got)
	}
	r := bytes.NewReader(append(want, "next"...))
	back, err := wire.ReadHandshake(r)
	if err != nil {
		t.Fatal(err)
	}
	h.Version = wire.Version
	if !reflect.DeepEqual(back, h) {
		t.Fatalf("ReadHandshake = %+v, want %+v", back, h)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "next" {
		t.Fatalf("ReadHandshake read past the handshake: %q left", rest)
	}
}

func TestReadHandshake(t *testing.T) {
	good, _ := testHandshake().MarshalBinary()
	patch := func(off int, b ...byte) []byte {
		p := bytes.Clone(good)
		copy(p[off:], b)
		return p
	}
	for _, c := range []struct {
		name string
		in   []byte
		want error // nil: accepted
	}{
		{"good", good, nil},
		{"newer version", patch(4, 2), nil},
		{"reserved set", patch(5, 0xff), nil},
		{"unknown caps", patch(6, 0xff, 0xf4), nil},
		{"private, no CHALLENGE", patch(6, 0, 0x08), io.EOF},
		{"private, another frame", append(patch(6, 0, 0x08), 0, 0, 0, 1, 0), wire.ErrMalformed},
		{"private, CHALLENGE too long", append(patch(6, 0, 0x08), 0, 0, 0, 34, 15), wire.ErrMalformed},
		{"private, CHALLENGE short", append(patch(6, 0, 0x08), 0, 0, 0, 2, 15, 1), wire.ErrMalformed},
		{"private, CHALLENGE cut", append(patch(6, 0, 0x08), 0, 0, 0, 33, 15, 1), io.ErrUnexpectedEOF},
		{"version 0", patch(4, 0), wire.ErrVersion},
		{"bad magic", patch(0, 'S', 'T', 'M', 'Q'), wire.ErrNotStampede},
		{"http", []byte("GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl\r\nAccept: */*\r\n\r\n"), wire.ErrNotStampede},
		{"short garbage", []byte("GET /"), wire.ErrNotStampede},
		{"short", good[:65], io.ErrUnexpectedEOF},
		{"empty", nil, io.EOF},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := wire.ReadHandshake(bytes.NewReader(c.in))
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if h.Version != c.in[4] || uint16(h.Caps)>>8 != uint16(c.in[6]) || h.Root != testHandshake().Root {
					t.Fatalf("decoded %+v", h)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
	if !wire.Caps(0xffff).Has(wire.CapSeed|wire.CapStrictTFT) || wire.CapSeed.Has(wire.CapStrictTFT) {
		t.Error("Caps.Has")
	}
}

type exchangeResult struct {
	h   wire.Handshake
	err error
}

// exchangeBoth runs Exchange on both ends at once.
func exchangeBoth(ctx context.Context, a, b io.ReadWriter, ha, hb wire.Handshake) (ra, rb exchangeResult) {
	var wg sync.WaitGroup
	wg.Go(func() { ra.h, ra.err = wire.Exchange(ctx, a, ha) })
	wg.Go(func() { rb.h, rb.err = wire.Exchange(ctx, b, hb) })
	wg.Wait()
	return ra, rb
}

// deadlineConn records the deadlines Exchange sets.
type deadlineConn struct {
	net.Conn
	mu        sync.Mutex
	deadlines []time.Time
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines = append(c.deadlines, t)
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func TestExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c1, c2 := net.Pipe()
		defer c1.Close()
		defer c2.Close()
		a, b := &deadlineConn{Conn: c1}, &deadlineConn{Conn: c2}
		ha, hb := testHandshake(), testHandshake()
		hb.PeerID = wire.NewPeerID()
		hb.Caps, hb.ListenPort = wire.CapStrictTFT|1<<15, 0
		ra, rb := exchangeBoth(t.Context(), a, b, ha, hb)
		if ra.err != nil || rb.err != nil {
			t.Fatalf("Exchange: %v, %v", ra.err, rb.err)
		}
		hb.Version, ha.Version = wire.Version, wire.Version
		if !reflect.DeepEqual(ra.h, hb) || !reflect.DeepEqual(rb.h, ha) {
			t.Fatalf("a heard %+v, want %+v; b heard %+v, want %+v", ra.h, hb, rb.h, ha)
		}
		for _, c := range []*deadlineConn{a, b} {
			if n := len(c.deadlines); n < 2 || !c.deadlines[n-1].IsZero() ||
				!c.deadlines[0].Equal(time.Now().Add(wire.HandshakeTimeout)) {
				t.Fatalf("deadlines %v: want the handshake timeout, then cleared", c.deadlines)
			}
		}
		// Frames follow on the same stream.
		go func() { b.Write(rawFrame(0)) }()
		if m, err := wire.NewReader(a, wire.Geometry{}).Read(); err != nil || m.Type() != wire.TypeKeepAlive {
			t.Fatalf("after the handshake: %v, %v", m, err)
		}
	})
}

func TestExchangeMismatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*wire.Handshake)
		want   error
		said   string
	}{
		{"root", func(h *wire.Handshake) { h.Root[31] ^= 1 }, wire.ErrWrongSwarm, "wrong swarm"},
		{"size", func(h *wire.Handshake) { h.Size++ }, wire.ErrWrongSwarm, "wrong swarm"},
		{"self", func(h *wire.Handshake) {}, wire.ErrSelf, "self"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := net.Pipe()
				defer a.Close()
				defer b.Close()
				ha, hb := testHandshake(), testHandshake()
				c.change(&hb)
				start := time.Now()
				ra, rb := exchangeBoth(t.Context(), a, b, ha, hb)
				for _, r := range []exchangeResult{ra, rb} {
					if !errors.Is(r.err, c.want) {
						t.Fatalf("error %v, want %v", r.err, c.want)
					}
					// Each side read the other's GOODBYE.
					if !strings.Contains(r.err.Error(), "the peer said "+c.said) {
						t.Errorf("error %q does not report the peer's GOODBYE", r.err)
					}
				}
				if ra.h.Size != hb.Size || rb.h.Size != ha.Size {
					t.Error("the peer's handshake is not returned with the error")
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("mismatch took %v: someone waited for a timeout", d)
				}
			})
		})
	}
}

// rawPeer plays the other end by hand: it sends hs, reads our handshake and
// then reads frames until the stream ends.
func rawPeer(t *testing.T, c net.Conn, hs []byte) (frames chan wire.Message) {
	frames = make(chan wire.Message, 8)
	go func() {
		defer close(frames)
		go c.Write(hs)
		if _, err := wire.ReadHandshake(c); err != nil {
			return
		}
		r := wire.NewReader(c, wire.Geometry{})
		for {
			m, err := r.Read()
			if err != nil {
				return
			}
			frames <- m
		}
	}()
	return frames
}

func TestExchangeVersion0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		hs, _ := testHandshake().MarshalBinary()
		hs[4] = 0
		frames := rawPeer(t, b, hs)
		_, err := wire.Exchange(t.Context(), a, testHandshake())
		if !errors.Is(err, wire.ErrVersion) {
			t.Fatalf("error %v, want ErrVersion", err)
		}
		a.Close()
		m := <-frames
		if g, ok := m.(*wire.Goodbye); !ok || g.Reason != wire.GoodbyeVersion {
			t.Fatalf("the peer got %+v, want GOODBYE(version)", m)
		}
	})
}

func TestExchangeNewerVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		h := testHandshake()
		h.PeerID[0] ^= 1
		hs, _ := h.MarshalBinary()
		hs[4] = 9 // it speaks up to 9, and so also 1
		rawPeer(t, b, hs)
		theirs, err := wire.Exchange(t.Context(), a, testHandshake())
		if err != nil || theirs.Version != 9 {
			t.Fatalf("Exchange = %+v, %v", theirs, err)
		}
	})
}

func TestExchangeNotStampede(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		// An HTTP client: it writes its request and never reads.
		go b.Write([]byte("GET /file HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nUser-Agent: x\r\n\r\n"))
		start := time.Now()
		_, err := wire.Exchange(t.Context(), a, testHandshake())
		if !errors.Is(err, wire.ErrNotStampede) {
			t.Fatalf("error %v, want ErrNotStampede", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("took %v: the blocked write was not cut short", d)
		}
	})
}

func TestExchangeTimeoutAndCancel(t *testing.T) {
	t.Run("silent peer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			start := time.Now()
			_, err := wire.Exchange(t.Context(), a, testHandshake())
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("error %v, want a timeout", err)
			}
			if d := time.Since(start); d != wire.HandshakeTimeout {
				t.Errorf("gave up after %v, want %v", d, wire.HandshakeTimeout)
			}
		})
	})
	t.Run("context deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			if _, err := wire.Exchange(ctx, a, testHandshake()); err == nil {
				t.Fatal("Exchange with a silent peer succeeded")
			}
			if d := time.Since(start); d != time.Second {
				t.Errorf("gave up after %v, want 1s", d)
			}
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			_, err := wire.Exchange(ctx, a, testHandshake())
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want context.Canceled", err)
			}
		})
	})
	t.Run("peer closes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			b.Close()
			if _, err := wire.Exchange(t.Context(), a, testHandshake()); err == nil {
				t.Fatal("Exchange with a closed peer succeeded")
			}
		})
	})
}

// pipeRW hides SetDeadline: a stream Exchange cannot cut short.
type pipeRW struct {
	io.Reader
	io.Writer
}

func TestExchangeWithoutDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c1, c2 := net.Pipe()
		a, b := pipeRW{c1, c1}, pipeRW{c2, c2}
		hb := testHandshake()
		hb.PeerID[0] ^= 1
		ra, rb := exchangeBoth(t.Context(), a, b, testHandshake(), hb)
		if ra.err != nil || rb.err != nil {
			t.Fatalf("Exchange: %v, %v", ra.err, rb.err)
		}
		// A silent peer: only the context ends the wait.
		c3, c4 := net.Pipe()
		go io.Copy(io.Discard, c4)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		_, err := wire.Exchange(ctx, pipeRW{c3, c3}, testHandshake())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		// Wrong swarm: GOODBYE is offered for a moment, nothing is read.
		c5, c6 := net.Pipe()
		hb.Size++
		start := time.Now()
		ra, rb = exchangeBoth(t.Context(), pipeRW{c5, c5}, pipeRW{c6, c6}, testHandshake(), hb)
		if !errors.Is(ra.err, wire.ErrWrongSwarm) || !errors.Is(rb.err, wire.ErrWrongSwarm) {
			t.Fatalf("errors %v, %v; want ErrWrongSwarm", ra.err, rb.err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v", d)
		}
		for _, c := range []net.Conn{c1, c2, c3, c4, c5, c6} {
			c.Close() // releases what Exchange left blocked
		}
	})
}

// fakePrivate proves with "proof", the prover's ID and the challenge it
// answers; bad sends garbage instead.
type fakePrivate struct{ bad bool }

func proofOf(id wire.PeerID, challenge [wire.ChallengeLen]byte) []byte {
	return append(append([]byte("proof"), id[:]...), challenge[:]...)
}

func (f fakePrivate) Prove(mine, theirs wire.Handshake) ([]byte, error) {
	if f.bad {
		return []byte("garbage"), nil
	}
	return proofOf(mine.PeerID, theirs.Challenge), nil
}

func (fakePrivate) Admit(mine, theirs wire.Handshake, auth []byte) error {
	if !bytes.Equal(auth, proofOf(theirs.PeerID, mine.Challenge)) {
		return errors.New("not a proof for this connection")
	}
	return nil
}

// TestExchangePrivate: in a private swarm both sides send a challenge
// with their handshake and then a proof answering the other's; a peer
// without one, or with one refused, is told why in a GOODBYE and hears
// nothing else.
func TestExchangePrivate(t *testing.T) {
	private := func() wire.Handshake {
		h := testHandshake()
		h.PeerID = wire.NewPeerID()
		h.Private = fakePrivate{}
		return h
	}
	for _, c := range []struct {
		name string
		b    func(h *wire.Handshake)
		want string // "": admitted
	}{
		{"admitted", func(*wire.Handshake) {}, ""},
		{"public peer", func(h *wire.Handshake) { h.Private = nil }, "without a token"},
		{"bad proof", func(h *wire.Handshake) { h.Private = fakePrivate{bad: true} }, "not a proof"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := net.Pipe()
				defer a.Close()
				defer b.Close()
				ha, hb := private(), private()
				c.b(&hb)
				var ra exchangeResult
				var wg sync.WaitGroup
				wg.Go(func() { ra.h, ra.err = wire.Exchange(t.Context(), a, ha) })
				var rb exchangeResult
				rb.h, rb.err = wire.Exchange(t.Context(), b, hb)
				var said wire.Message
				if rb.err == nil && c.want != "" {
					g, _ := wire.NewGeometry(int64(hb.Size), 1<<20)
					said, _ = wire.NewReader(b, g).Read()
				}
				wg.Wait()
				if c.want == "" {
					if ra.err != nil || rb.err != nil {
						t.Fatalf("Exchange: %v, %v", ra.err, rb.err)
					}
					if !ra.h.Caps.Has(wire.CapPrivate) || ra.h.Challenge == ([wire.ChallengeLen]byte{}) || ra.h.Challenge == rb.h.Challenge {
						t.Fatalf("challenges %x and %x: want two fresh ones", ra.h.Challenge, rb.h.Challenge)
					}
					return
				}
				if !errors.Is(ra.err, wire.ErrUnauthorized) || !strings.Contains(ra.err.Error(), c.want) {
					t.Errorf("the admitting side: %v, want ErrUnauthorized: %s", ra.err, c.want)
				}
				switch bye, ok := said.(*wire.Goodbye); {
				case rb.err != nil && strings.Contains(rb.err.Error(), "unauthorized"):
					// it heard the GOODBYE in the handshake, instead of an AUTH
				case rb.err == nil && ok && bye.Reason == wire.GoodbyeUnauthorized:
				default:
					t.Errorf("the refused side: %v, then %#v; want a GOODBYE unauthorized", rb.err, said)
				}
			})
		})
	}
	h := testHandshake()
	h.Caps |= wire.CapPrivate
	if b, _ := h.MarshalBinary(); len(b) != wire.HandshakeLen || b[7]&byte(wire.CapPrivate) != 0 {
		t.Error("CapPrivate sent without Private")
	}
}
