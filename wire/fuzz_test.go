package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

// fuzzGeometries are the swarms FuzzReadFrame decodes in; small pieces make
// valid ranges easy to find.
var fuzzGeometries = [][2]int64{
	{0, 16},                     // empty file
	{1, 16},                     // one byte
	{40, 16},                    // 3 pieces, the last 8 bytes
	{20 * 16, 16},               // 20 pieces
	{10*MiB + 123, MiB},         // 11 pieces, the last 123 bytes
	{1000 * 64 * KiB, 64 * KiB}, // the golden examples' swarm
}

func fuzzGeometry(t testing.TB, sel uint8) wire.Geometry {
	c := fuzzGeometries[int(sel)%len(fuzzGeometries)]
	return mustGeometry(t, c[0], c[1])
}

func FuzzReadFrame(f *testing.F) {
	var all []byte
	for _, m := range everyMessage(f) {
		fr := mustFrame(f, m)
		all = append(all, fr...)
		if m.Type() != wire.TypeHaveSet {
			f.Add(uint8(4), true, fr)
		}
	}
	f.Add(uint8(4), false, all)
	f.Add(uint8(5), false, unhex(f, "00000009 01 01 02 00f303 9003 00 0000000d 03 00000001 00004000 00004000"))
	f.Add(uint8(3), false, unhex(f, "00000005 01 00 f03810 00000005 02 00000013 00000003 c8 abcd 0000000c 04 00000001 00000004 616263"))
	f.Add(uint8(2), true, unhex(f, "00000012 04 00000002 00000000 0102030405060708 00000001 0a"))
	f.Add(uint8(0), false, unhex(f, "00000002 01 00 00000005 0b 07 627965"))
	f.Add(uint8(1), true, unhex(f, "00000000"))
	f.Add(uint8(4), true, unhex(f, "00000020 08 02 04 c0000201 1ae1 0005 06 20010db8000000000000000000000001 01bb 0046"))
	f.Add(uint8(4), true, rawFrame(6, u32(10), u32(0), u32(123), []byte{9}))

	f.Fuzz(func(t *testing.T, sel uint8, prefix bool, data []byte) {
		g := fuzzGeometry(t, sel)
		stream := data
		if prefix {
			stream = append(haveSetFrame(t, g), data...)
		}
		r := wire.NewReader(bytes.NewReader(stream), g)
		var reencoded bytes.Buffer
		w := wire.NewWriter(&reencoded, g)
		var known []byte // the known frames of stream, in order
		off := 0
		for {
			m, err := r.Read()
			if err != nil {
				if m != nil {
					t.Fatalf("Read returned %T with error %v", m, err)
				}
				if errors.Is(err, io.EOF) && off != len(stream) && !onlyUnknown(stream[off:]) {
					t.Fatalf("EOF with %d bytes left", len(stream)-off)
				}
				break
			}
			// The frame it came from: skip unknown types as the Reader did.
			var raw []byte
			for raw == nil {
				l := int(binary.BigEndian.Uint32(stream[off:]))
				if knownType(stream[off+4]) {
					raw = stream[off : off+4+l]
				}
				off += 4 + l
			}
			checkInGeometry(t, m, g)
			re, err := wire.AppendFrame(nil, m)
			if err != nil {
				t.Fatalf("accepted %T %+v does not encode: %v", m, m, err)
			}
			if hs, ok := m.(*wire.HaveSet); ok {
				// Either encoding is accepted; the same set must come back.
				back := decodeOne(t, re, g).(*wire.HaveSet)
				if !reflect.DeepEqual(back.Set, hs.Set) {
					t.Fatal("HAVESET changed in the round trip")
				}
				if raw[5] != re[5] {
					raw = re
				}
			}
			if !bytes.Equal(re, raw) {
				t.Fatalf("%T re-encodes differently:\n% x\n% x", m, raw, re)
			}
			known = append(known, raw...)
			// What the Reader accepts, the Writer sends.
			if err := w.WriteMessage(m); err != nil {
				t.Fatalf("Writer refuses accepted %T %+v: %v", m, m, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(reencoded.Bytes(), known) {
			t.Fatalf("Writer output differs from the accepted frames:\n% x\n% x", reencoded.Bytes(), known)
		}
	})
}

// knownType reports whether t is a frame type of a session (the
// handshake's CHALLENGE and AUTH, 15 and 16, are not).
func knownType(t byte) bool {
	return t <= byte(wire.TypeLayer) || t == byte(wire.TypeRate)
}

// onlyUnknown reports whether b is whole frames of unknown types (which a
// Reader skips before an EOF).
func onlyUnknown(b []byte) bool {
	for len(b) >= 5 {
		l := int(binary.BigEndian.Uint32(b))
		if knownType(b[4]) || l < 1 || 4+l > len(b) {
			return false
		}
		b = b[4+l:]
	}
	return len(b) == 0
}

// decodeOne decodes the HAVESET frame f.
func decodeOne(t *testing.T, f []byte, g wire.Geometry) wire.Message {
	t.Helper()
	m, err := wire.NewReader(bytes.NewReader(f), g).Read()
	if err != nil {
		t.Fatalf("re-encoded frame does not decode: %v\n% x", err, f)
	}
	return m
}

// checkInGeometry checks an accepted message against g independently of the
// package's own checks.
func checkInGeometry(t *testing.T, m wire.Message, g wire.Geometry) {
	t.Helper()
	n := int64(g.NumPieces())
	inRange := func(piece, offset uint32, length int64) {
		if int64(piece) >= n || length < 1 || int64(offset)+length > g.PieceLen(int(piece)) {
			t.Fatalf("accepted %T piece %d [%d,+%d) outside the geometry", m, piece, offset, length)
		}
	}
	switch m := m.(type) {
	case *wire.HaveSet:
		if m.Set.Len() != int(n) {
			t.Fatalf("HAVESET over %d pieces, want %d", m.Set.Len(), n)
		}
		for _, iv := range m.Set.Intervals() {
			if iv.Start < 0 || iv.Len < 1 || int64(iv.Start+iv.Len) > n {
				t.Fatalf("HAVESET holds [%d,+%d) of %d pieces", iv.Start, iv.Len, n)
			}
		}
	case *wire.Have:
		inRange(m.Piece, 0, 1)
	case *wire.Start:
		inRange(m.Piece, 0, 1)
	case *wire.Request:
		inRange(m.Piece, m.Offset, int64(m.Length))
	case *wire.Cancel:
		inRange(m.Piece, m.Offset, int64(m.Length))
	case *wire.Reject:
		inRange(m.Piece, m.Offset, int64(m.Length))
	case *wire.Data:
		inRange(m.Piece, m.Offset, int64(len(m.Bytes)))
		if len(m.Bytes) > wire.MaxData {
			t.Fatalf("DATA of %d bytes", len(m.Bytes))
		}
	case *wire.GetLayer:
		if n < 2 || m.Count < 1 || m.Count > wire.MaxLayerHashes || int64(m.First)+int64(m.Count) > n {
			t.Fatalf("accepted GETLAYER [%d,+%d) of a layer of %d", m.First, m.Count, n)
		}
	case *wire.Layer:
		if n < 2 || len(m.Hashes) > wire.MaxLayerHashes || int64(m.First)+int64(len(m.Hashes)) > n {
			t.Fatalf("accepted LAYER [%d,+%d) of a layer of %d", m.First, len(m.Hashes), n)
		}
	case *wire.Recommend:
		if len(m.Peers) > wire.MaxRecommend {
			t.Fatalf("RECOMMEND of %d peers", len(m.Peers))
		}
		for _, p := range m.Peers {
			if !p.Addr.IsValid() || p.Addr.Port() == 0 || p.Addr.Addr().Is4In6() {
				t.Fatalf("recommended %v", p.Addr)
			}
		}
	case *wire.Goodbye:
		if len(m.Text) > wire.MaxGoodbyeText {
			t.Fatalf("GOODBYE of %d bytes", len(m.Text))
		}
	}
}

func FuzzHaveSet(f *testing.F) {
	f.Add(uint16(1000), unhex(f, "01 02 00f303 9003 00"))
	f.Add(uint16(20), unhex(f, "00 f03810"))
	f.Add(uint16(20), unhex(f, "01 03 0003 0602 0600"))
	f.Add(uint16(0), []byte{0})
	f.Add(uint16(0), []byte{1, 0})
	f.Add(uint16(11), []byte{1, 1, 0, 10})
	f.Add(uint16(11), []byte{1, 2, 0, 0, 0, 0})
	f.Add(uint16(11), []byte{1, 1, 0x80, 0x00, 0})
	f.Add(uint16(11), []byte{0, 0xff, 0xe0})
	f.Add(uint16(300), []byte{1, 3, 0x81, 0x01, 5, 1, 1, 0x90, 0x01, 0})

	f.Fuzz(func(t *testing.T, n16 uint16, payload []byte) {
		n := int(n16)
		g := mustGeometry(t, int64(n), 1)
		m, err := wire.NewReader(bytes.NewReader(rawFrame(1, payload)), g).Read()
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		s := m.(*wire.HaveSet).Set
		if s.Len() != n {
			t.Fatalf("set over %d pieces, want %d", s.Len(), n)
		}
		if ivs := s.Intervals(); len(ivs) > 0 && ivs[len(ivs)-1].Start+ivs[len(ivs)-1].Len > n {
			t.Fatalf("set has pieces past %d", n-1)
		}
		re := mustFrame(t, &wire.HaveSet{Set: s})
		if re[5] == payload[0] && !bytes.Equal(re[5:], payload) {
			t.Fatalf("the same encoding differs:\n% x\n% x", payload, re[5:])
		}
		if re[5] != payload[0] && len(re)-5 > len(payload) {
			t.Fatalf("the canonical encoding (% x) is longer than the one accepted (% x)", re[5:], payload)
		}
		back := decodeOne(t, re, g).(*wire.HaveSet).Set
		if !reflect.DeepEqual(back, s) {
			t.Fatal("decode(encode(set)) != set")
		}
	})
}

func FuzzHaveSetEncode(f *testing.F) {
	f.Add(uint16(0), []byte(nil))
	f.Add(uint16(100), []byte{0xff, 0xff, 0, 0, 0xff})
	f.Add(uint16(2000), []byte{0x55, 0xaa})
	f.Add(uint16(64), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, n16 uint16, bits []byte) {
		n := int(n16)
		// bits says which pieces the set holds, as runs: byte i toggles
		// membership for the next bits[i] pieces.
		s := pieceset.New(n)
		in, p := false, 0
		for _, b := range bits {
			for range int(b) {
				if p >= n {
					break
				}
				if in {
					s.Add(p)
				}
				p++
			}
			in = !in
		}
		fr := mustFrame(t, &wire.HaveSet{Set: s})
		if got, want := len(fr)-6, min((n+7)/8, intervalsLenRef(s)); got != want {
			t.Fatalf("encoded in %d bytes, the smaller encoding takes %d", got, want)
		}
		back := decodeOne(t, fr, mustGeometry(t, int64(n), 1)).(*wire.HaveSet).Set
		if !reflect.DeepEqual(back, s) {
			t.Fatal("decode(encode(set)) != set")
		}
	})
}

func FuzzHandshake(f *testing.F) {
	good, _ := testHandshake().MarshalBinary()
	f.Add(good)
	f.Add(append(bytes.Clone(good), 0, 0, 0, 1, 0))
	v0 := bytes.Clone(good)
	v0[4] = 0
	f.Add(v0)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(good[:40])
	private := bytes.Clone(good)
	private[7] |= byte(wire.CapPrivate)
	f.Add(append(append(private, 0, 0, 0, 1+wire.ChallengeLen, byte(wire.TypeChallenge)), make([]byte, wire.ChallengeLen)...))
	f.Add(private)
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := wire.ReadHandshake(bytes.NewReader(data))
		valid := len(data) >= wire.HandshakeLen && string(data[:4]) == wire.Magic && data[4] >= 1
		if valid && data[7]&byte(wire.CapPrivate) != 0 {
			// A private swarm's CHALLENGE frame must follow, whole.
			const n = wire.HandshakeLen + 5 + wire.ChallengeLen
			valid = len(data) >= n && bytes.Equal(data[wire.HandshakeLen:wire.HandshakeLen+5], []byte{0, 0, 0, 1 + wire.ChallengeLen, byte(wire.TypeChallenge)})
			if valid && !bytes.Equal(h.Challenge[:], data[n-wire.ChallengeLen:n]) {
				t.Fatalf("challenge %x, sent %x", h.Challenge, data[n-wire.ChallengeLen:n])
			}
		}
		if (err == nil) != valid {
			t.Fatalf("ReadHandshake(% x) = %v", data, err)
		}
		if err != nil {
			return
		}
		if h.Version != data[4] {
			t.Fatalf("version %d, sent %d", h.Version, data[4])
		}
		re, _ := h.MarshalBinary()
		want := bytes.Clone(data[:wire.HandshakeLen])
		want[4], want[5] = wire.Version, 0 // ours, and reserved is written 0
		want[7] &^= byte(wire.CapPrivate)  // sent only by a side with Private
		if !bytes.Equal(re, want) {
			t.Fatalf("re-encoded differently:\n% x\n% x", want, re)
		}
	})
}
