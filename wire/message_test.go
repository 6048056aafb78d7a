package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/pieceset"
	"github.com/stampede-dev/stampede/wire"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

func mustGeometry(t testing.TB, size, pieceSize int64) wire.Geometry {
	t.Helper()
	g, err := wire.NewGeometry(size, pieceSize)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// testGeometry has 11 pieces of 1 MiB, the last one 123 bytes: big enough
// for multi-frame DATA, with a short last piece.
func testGeometry(t testing.TB) wire.Geometry { return mustGeometry(t, 10*MiB+123, MiB) }

// unhex decodes hex written with spaces for readability.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// rawFrame builds a frame by hand, whatever its content.
func rawFrame(typ byte, payload ...[]byte) []byte {
	p := bytes.Join(payload, nil)
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(p)))
	return append(append(b, typ), p...)
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func setOf(n int, pieces ...int) *pieceset.Set {
	s := pieceset.New(n)
	for _, p := range pieces {
		s.Add(p)
	}
	return s
}

func mustFrame(t testing.TB, m wire.Message) []byte {
	t.Helper()
	b, err := wire.AppendFrame(nil, m)
	if err != nil {
		t.Fatalf("AppendFrame(%T %+v): %v", m, m, err)
	}
	return b
}

// haveSetFrame is the HAVESET every stream in these tests starts with.
func haveSetFrame(t testing.TB, g wire.Geometry) []byte {
	return mustFrame(t, &wire.HaveSet{Set: pieceset.New(g.NumPieces())})
}

// cloneMessage copies what a Reader owns (a *Data's bytes).
func cloneMessage(m wire.Message) wire.Message {
	if d, ok := m.(*wire.Data); ok {
		return &wire.Data{Piece: d.Piece, Offset: d.Offset, Bytes: bytes.Clone(d.Bytes)}
	}
	return m
}

func readAll(t testing.TB, r *wire.Reader) []wire.Message {
	t.Helper()
	var out []wire.Message
	for {
		m, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Read after %d messages: %v", len(out), err)
		}
		out = append(out, cloneMessage(m))
	}
}

func everyMessage(t testing.TB) []wire.Message {
	payload := make([]byte, 1000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	return []wire.Message{
		&wire.KeepAlive{},
		&wire.HaveSet{Set: setOf(11, 0, 1, 2, 7, 10)},
		&wire.Have{Piece: 3},
		&wire.Request{Piece: 1, Offset: 0, Length: MiB},
		&wire.Request{Piece: 10, Offset: 23, Length: 100},
		&wire.Data{Piece: 2, Offset: 100, Bytes: payload},
		&wire.Data{Piece: 10, Offset: 0, Bytes: payload[:123]},
		&wire.Cancel{Piece: 1, Offset: 0, Length: MiB},
		&wire.Reject{Piece: 4, Offset: 512 * KiB, Length: 512 * KiB, Reason: wire.RejectBusy},
		&wire.Reject{Piece: 4, Offset: 0, Length: 1, Reason: 200}, // unknown reasons travel as they are
		&wire.Start{Piece: 10},
		&wire.Stop{Piece: 10},
		&wire.Rate{Up: 0},
		&wire.Rate{Up: 125000},
		&wire.Recommend{Peers: []wire.Recommendation{
			{Addr: netip.MustParseAddrPort("192.0.2.1:6881"), Age: 0},
			{Addr: netip.MustParseAddrPort("[2001:db8::1]:443"), Age: 70 * time.Second},
			{Addr: netip.MustParseAddrPort("198.51.100.7:1"), Age: 65535 * time.Second},
		}},
		&wire.Recommend{Peers: []wire.Recommendation{}},
		&wire.Choke{},
		&wire.Unchoke{},
		&wire.Goodbye{Reason: wire.GoodbyeShutdown, Text: "stopping: ünïcode ok"},
		&wire.Goodbye{Reason: 99, Text: ""},
		&wire.GetLayer{First: 0, Count: 11},
		&wire.GetLayer{First: 10, Count: 1},
		&wire.Layer{First: 3, Hashes: [][wire.HashLen]byte{{1, 2, 3}, {31: 0xff}}},
		&wire.Layer{First: 0, Hashes: [][wire.HashLen]byte{}}, // "cannot answer"
	}
}

func TestRoundTripEveryMessage(t *testing.T) {
	g := testGeometry(t)
	msgs := everyMessage(t)
	var stream bytes.Buffer
	w := wire.NewWriter(&stream, g)
	var appended []byte
	for _, m := range msgs {
		if err := w.WriteMessage(m); err != nil {
			t.Fatalf("WriteMessage(%T): %v", m, err)
		}
		appended = append(appended, mustFrame(t, m)...)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stream.Bytes(), appended) {
		t.Fatalf("Writer and AppendFrame disagree:\n%x\n%x", stream.Bytes(), appended)
	}
	got := readAll(t, wire.NewReader(&stream, g))
	if !reflect.DeepEqual(got, msgs) {
		for i := range max(len(got), len(msgs)) {
			if i >= len(got) || i >= len(msgs) || !reflect.DeepEqual(got[i], msgs[i]) {
				t.Fatalf("message %d differs after the round trip", i)
			}
		}
	}
	for _, m := range msgs {
		if s := m.Type().String(); strings.HasPrefix(s, "type(") {
			t.Errorf("%T has no name: %s", m, s)
		}
	}
}

// TestGolden pins the byte layout; docs/protocol.md shows the same bytes.
func TestGolden(t *testing.T) {
	g := mustGeometry(t, 1000*64*KiB, 64*KiB) // 1000 pieces of 64 KiB
	for _, c := range []struct {
		name string
		m    wire.Message
		hex  string
	}{
		{"keepalive", &wire.KeepAlive{}, "00000001 00"},
		{"haveset-intervals", &wire.HaveSet{Set: run(1000, 0, 500, 900)},
			"00000009 01 01 02 00f303 9003 00"},
		{"have", &wire.Have{Piece: 3}, "00000005 02 00000003"},
		{"request", &wire.Request{Piece: 1, Offset: 16384, Length: 16384},
			"0000000d 03 00000001 00004000 00004000"},
		{"data", &wire.Data{Piece: 1, Offset: 16384, Bytes: []byte("abc")},
			"0000000c 04 00000001 00004000 616263"},
		{"cancel", &wire.Cancel{Piece: 1, Offset: 16384, Length: 16384},
			"0000000d 05 00000001 00004000 00004000"},
		{"reject", &wire.Reject{Piece: 1, Offset: 0, Length: 16384, Reason: wire.RejectBusy},
			"0000000e 06 00000001 00000000 00004000 03"},
		{"start", &wire.Start{Piece: 7}, "00000005 07 00000007"},
		{"stop", &wire.Stop{Piece: 7}, "00000005 0c 00000007"},
		{"rate", &wire.Rate{Up: 125000}, "00000005 11 0001e848"},
		{"recommend", &wire.Recommend{Peers: []wire.Recommendation{
			{Addr: netip.MustParseAddrPort("192.0.2.1:6881"), Age: 5 * time.Second},
			{Addr: netip.MustParseAddrPort("[2001:db8::1]:443"), Age: 70 * time.Second},
		}}, "00000020 08 02 04 c0000201 1ae1 0005 06 20010db8000000000000000000000001 01bb 0046"},
		{"choke", &wire.Choke{}, "00000001 09"},
		{"unchoke", &wire.Unchoke{}, "00000001 0a"},
		{"goodbye", &wire.Goodbye{Reason: wire.GoodbyeShutdown, Text: "bye"}, "00000005 0b 07 627965"},
		{"getlayer", &wire.GetLayer{First: 0, Count: 1000}, "00000009 0d 00000000 000003e8"},
		{"layer", &wire.Layer{First: 998, Hashes: [][wire.HashLen]byte{{0: 0xab}, {31: 0xcd}}},
			"00000045 0e 000003e6 ab" + strings.Repeat("00", 31) + strings.Repeat("00", 31) + "cd"},
		{"layer-none", &wire.Layer{First: 5, Hashes: [][wire.HashLen]byte{}}, "00000005 0e 00000005"},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := unhex(t, c.hex)
			if got := mustFrame(t, c.m); !bytes.Equal(got, want) {
				t.Fatalf("AppendFrame = % x\nwant           % x", got, want)
			}
			stream := want
			if c.m.Type() != wire.TypeHaveSet {
				stream = append(haveSetFrame(t, g), want...)
			}
			r := wire.NewReader(bytes.NewReader(stream), g)
			got := readAll(t, r)
			if !reflect.DeepEqual(got[len(got)-1], c.m) {
				t.Fatalf("decoded %+v, want %+v", got[len(got)-1], c.m)
			}
		})
	}
	// The bitfield example: 20 pieces, {0,1,2,3,10,11,12,19}.
	g20 := mustGeometry(t, 20*16*KiB, 16*KiB)
	s := setOf(20, 0, 1, 2, 3, 10, 11, 12, 19)
	want := unhex(t, "00000005 01 00 f03810")
	if got := mustFrame(t, &wire.HaveSet{Set: s}); !bytes.Equal(got, want) {
		t.Fatalf("bitfield HAVESET = % x, want % x", got, want)
	}
	if got := readAll(t, wire.NewReader(bytes.NewReader(want), g20)); !reflect.DeepEqual(got[0].(*wire.HaveSet).Set, s) {
		t.Fatal("bitfield HAVESET decodes to another set")
	}
	// The same set as intervals, which a receiver accepts too.
	iv := unhex(t, "00000009 01 01 03 0003 0602 0600")
	if got := readAll(t, wire.NewReader(bytes.NewReader(iv), g20)); !reflect.DeepEqual(got[0].(*wire.HaveSet).Set, s) {
		t.Fatal("interval HAVESET decodes to another set")
	}
}

// run returns the set of n pieces holding [start, end) and the extra pieces.
func run(n, start, end int, extra ...int) *pieceset.Set {
	s := setOf(n, extra...)
	for i := start; i < end; i++ {
		s.Add(i)
	}
	return s
}

func TestMalformed(t *testing.T) {
	g := testGeometry(t) // 11 pieces, the last 123 bytes
	hs := haveSetFrame(t, g)
	addr4 := unhex(t, "04 c0000201 1ae1 0000")
	for _, c := range []struct {
		name   string
		stream []byte
		eof    bool // io.ErrUnexpectedEOF rather than ErrMalformed
	}{
		{"zero length", unhex(t, "00000000"), false},
		{"zero length after haveset", append(hs, 0, 0, 0, 0), false},
		{"oversized length", unhex(t, "00040041 02 00000000"), false},
		{"huge length", unhex(t, "ffffffff 02"), false},
		{"truncated length", unhex(t, "0000"), true},
		{"truncated type", unhex(t, "00000005"), true},
		{"truncated payload", append(hs, unhex(t, "00000005 02 0000")...), true},
		{"truncated unknown frame", unhex(t, "00000010 c8 0000"), true},
		{"unknown frame too long", unhex(t, "00040041 c8"), false},
		{"keepalive with payload", unhex(t, "00000002 00 00"), false},
		{"choke with payload", append(hs, unhex(t, "00000002 09 00")...), false},
		{"have short", append(hs, unhex(t, "00000004 02 000000")...), false},
		{"have trailing byte", append(hs, unhex(t, "00000006 02 00000000 00")...), false},
		{"have out of range", append(hs, rawFrame(2, u32(11))...), false},
		{"have huge index", append(hs, rawFrame(2, u32(0xffffffff))...), false},
		{"start out of range", append(hs, rawFrame(7, u32(11))...), false},
		{"rate short", append(hs, unhex(t, "00000004 11 000000")...), false},
		{"rate trailing byte", append(hs, unhex(t, "00000006 11 00000000 00")...), false},
		{"request length 0", append(hs, rawFrame(3, u32(0), u32(0), u32(0))...), false},
		{"request past piece", append(hs, rawFrame(3, u32(0), u32(MiB-1), u32(2))...), false},
		{"request past short last piece", append(hs, rawFrame(3, u32(10), u32(0), u32(124))...), false},
		{"request offset overflow", append(hs, rawFrame(3, u32(0), u32(0xffffffff), u32(2))...), false},
		{"request bad piece", append(hs, rawFrame(3, u32(11), u32(0), u32(1))...), false},
		{"request trailing", append(hs, rawFrame(3, u32(0), u32(0), u32(1), []byte{0})...), false},
		{"cancel past piece", append(hs, rawFrame(5, u32(0), u32(0), u32(MiB+1))...), false},
		{"reject short", append(hs, rawFrame(6, u32(0), u32(0), u32(1))...), false},
		{"reject length 0", append(hs, rawFrame(6, u32(0), u32(0), u32(0), []byte{1})...), false},
		{"data empty", append(hs, rawFrame(4, u32(0), u32(0))...), false},
		{"data no header", append(hs, rawFrame(4, u32(0))...), false},
		{"data past piece", append(hs, rawFrame(4, u32(10), u32(120), []byte("abcd"))...), false},
		{"data bad piece", append(hs, rawFrame(4, u32(11), u32(0), []byte("a"))...), false},
		{"data over MaxData", append(hs, rawFrame(4, u32(0), u32(0), make([]byte, wire.MaxData+1))...), false},
		{"getlayer count 0", append(hs, rawFrame(13, u32(0), u32(0))...), false},
		{"getlayer past layer", append(hs, rawFrame(13, u32(10), u32(2))...), false},
		{"getlayer short", append(hs, rawFrame(13, u32(0))...), false},
		{"layer partial hash", append(hs, rawFrame(14, u32(0), make([]byte, 33))...), false},
		{"layer past layer", append(hs, rawFrame(14, u32(10), make([]byte, 64))...), false},
		{"layer no first", append(hs, rawFrame(14, []byte{0, 0})...), false},
		{"have before haveset", rawFrame(2, u32(0)), false},
		{"request before haveset", rawFrame(3, u32(0), u32(0), u32(1)), false},
		{"data before haveset", rawFrame(4, u32(0), u32(0), []byte("a")), false},
		{"unchoke before haveset", rawFrame(10), false},
		{"second haveset", append(hs, hs...), false},
		{"haveset empty", rawFrame(1), false},
		{"haveset encoding 2", rawFrame(1, []byte{2, 0}), false},
		{"bitfield short", rawFrame(1, []byte{0, 0xff}), false},
		{"bitfield long", rawFrame(1, []byte{0, 0xff, 0xe0, 0}), false},
		{"bitfield spare bit", rawFrame(1, []byte{0, 0xff, 0xf0}), false},
		{"intervals no count", rawFrame(1, []byte{1}), false},
		{"intervals count too big", rawFrame(1, []byte{1, 5, 0, 0}), false},
		{"intervals touching", rawFrame(1, []byte{1, 2, 0, 0, 0, 0}), false},
		{"intervals past end", rawFrame(1, []byte{1, 1, 5, 6}), false},
		{"intervals past end by gap", rawFrame(1, []byte{1, 1, 11, 0}), false},
		{"intervals length past n", rawFrame(1, []byte{1, 1, 0, 11}), false},
		{"intervals trailing", rawFrame(1, []byte{1, 1, 0, 0, 0}), false},
		{"intervals truncated", rawFrame(1, []byte{1, 2, 0, 0, 1}), false},
		{"intervals non-minimal", rawFrame(1, []byte{1, 1, 0x80, 0x00, 0}), false},
		{"intervals truncated varint", rawFrame(1, []byte{1, 1, 0x80}), false},
		{"intervals varint overflow", rawFrame(1, []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), false},
		{"recommend empty", append(hs, rawFrame(8)...), false},
		{"recommend 33", append(hs, rawFrame(8, []byte{33}, bytes.Repeat(addr4, 33))...), false},
		{"recommend count short", append(hs, rawFrame(8, []byte{2}, addr4)...), false},
		{"recommend count long", append(hs, rawFrame(8, []byte{0}, addr4)...), false},
		{"recommend family 5", append(hs, rawFrame(8, unhex(t, "01 05 c0000201 1ae1 0000"))...), false},
		{"recommend truncated v4", append(hs, rawFrame(8, unhex(t, "01 04 c0000201 1ae1"))...), false},
		{"recommend truncated v6", append(hs, rawFrame(8, unhex(t, "01 06 c0000201 1ae1 0000"))...), false},
		{"recommend port 0", append(hs, rawFrame(8, unhex(t, "01 04 c0000201 0000 0000"))...), false},
		{"recommend unspecified", append(hs, rawFrame(8, unhex(t, "01 04 00000000 1ae1 0000"))...), false},
		{"recommend v4-mapped", append(hs, rawFrame(8, unhex(t, "01 06 00000000000000000000ffffc0000201 1ae1 0000"))...), false},
		{"recommend ages unordered", append(hs, rawFrame(8, unhex(t, "02 04 c0000201 1ae1 0005 04 c0000202 1ae1 0004"))...), false},
		{"goodbye empty", rawFrame(11), false},
		{"goodbye not utf-8", rawFrame(11, []byte{0, 0xff, 0xfe}), false},
		{"goodbye text too long", rawFrame(11, []byte{0}, bytes.Repeat([]byte("a"), wire.MaxGoodbyeText+1)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := wire.NewReader(bytes.NewReader(c.stream), g)
			var err error
			for err == nil {
				_, err = r.Read()
			}
			switch {
			case errors.Is(err, io.EOF):
				t.Fatal("the whole stream was accepted")
			case c.eof && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
			case !c.eof && !errors.Is(err, wire.ErrMalformed):
				t.Fatalf("error %v, want ErrMalformed", err)
			}
			if _, err2 := r.Read(); err2 != err {
				t.Fatalf("error is not sticky: %v, then %v", err, err2)
			}
		})
	}
}

func TestUnknownTypesAreSkipped(t *testing.T) {
	g := testGeometry(t)
	stream := rawFrame(200, []byte("from the future"))
	stream = append(stream, haveSetFrame(t, g)...)
	stream = append(stream, rawFrame(100)...)
	stream = append(stream, rawFrame(255, make([]byte, wire.MaxFrame-1))...)
	stream = append(stream, mustFrame(t, &wire.Have{Piece: 4})...)
	r := wire.NewReader(bytes.NewReader(stream), g)
	got := readAll(t, r)
	want := []wire.Message{&wire.HaveSet{Set: pieceset.New(11)}, &wire.Have{Piece: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if r.Skipped() != 3 {
		t.Fatalf("Skipped = %d, want 3", r.Skipped())
	}
}

func TestEncoderRejects(t *testing.T) {
	addr := netip.MustParseAddrPort("192.0.2.1:6881")
	many := make([]wire.Recommendation, wire.MaxRecommend+1)
	for i := range many {
		many[i] = wire.Recommendation{Addr: addr}
	}
	for _, m := range []wire.Message{
		nil,
		&wire.HaveSet{},
		&wire.HaveSet{Set: pieceset.New(wire.MaxPieces + 1)},
		&wire.Request{Piece: 0, Offset: 0, Length: 0},
		&wire.Cancel{},
		&wire.Reject{Reason: wire.RejectChoked},
		&wire.Data{},
		&wire.Data{Bytes: make([]byte, wire.MaxData+1)},
		&wire.Recommend{Peers: many},
		&wire.Recommend{Peers: []wire.Recommendation{{}}},
		&wire.Recommend{Peers: []wire.Recommendation{{Addr: netip.MustParseAddrPort("192.0.2.1:0")}}},
		&wire.Recommend{Peers: []wire.Recommendation{{Addr: netip.MustParseAddrPort("[::]:80")}}},
		&wire.Recommend{Peers: []wire.Recommendation{{Addr: addr, Age: time.Minute}, {Addr: addr, Age: time.Second}}},
		&wire.Goodbye{Text: strings.Repeat("x", wire.MaxGoodbyeText+1)},
		&wire.Goodbye{Text: "\xff"},
		&wire.GetLayer{Count: 0},
		&wire.GetLayer{Count: wire.MaxLayerHashes + 1},
		&wire.Layer{Hashes: make([][wire.HashLen]byte, wire.MaxLayerHashes+1)},
	} {
		dst := []byte("keep")
		got, err := wire.AppendFrame(dst, m)
		if err == nil {
			t.Errorf("AppendFrame(%T %+v) succeeded: % x", m, m, got)
		}
		if string(got) != "keep" {
			t.Errorf("AppendFrame(%T) left %q in dst after an error", m, got)
		}
	}
}

func TestRecommendNormalizes(t *testing.T) {
	m := &wire.Recommend{Peers: []wire.Recommendation{
		{Addr: netip.MustParseAddrPort("[::ffff:192.0.2.1]:80"), Age: -time.Second},
		{Addr: netip.MustParseAddrPort("[fe80::1%eth0]:80"), Age: 1500 * time.Millisecond},
		{Addr: netip.MustParseAddrPort("[2001:db8::2]:80"), Age: 1000 * time.Hour},
	}}
	g := testGeometry(t)
	stream := append(haveSetFrame(t, g), mustFrame(t, m)...)
	got := readAll(t, wire.NewReader(bytes.NewReader(stream), g))[1].(*wire.Recommend)
	want := []wire.Recommendation{
		{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Age: 0},
		{Addr: netip.MustParseAddrPort("[fe80::1]:80"), Age: time.Second},
		{Addr: netip.MustParseAddrPort("[2001:db8::2]:80"), Age: 65535 * time.Second},
	}
	if !reflect.DeepEqual(got.Peers, want) {
		t.Fatalf("got %v, want %v", got.Peers, want)
	}
}

func TestWriterChecks(t *testing.T) {
	g := testGeometry(t)
	var buf bytes.Buffer
	w := wire.NewWriter(&buf, g)
	for _, m := range []wire.Message{&wire.Have{}, &wire.Unchoke{}, &wire.Data{Bytes: []byte("x")}} {
		if err := w.WriteMessage(m); err == nil {
			t.Errorf("WriteMessage(%T) before HAVESET succeeded", m)
		}
	}
	if err := w.WriteMessage(&wire.KeepAlive{}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.New(12)}); err == nil {
		t.Error("HAVESET of the wrong length accepted")
	}
	if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(11)}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []wire.Message{
		&wire.HaveSet{Set: pieceset.Full(11)},
		&wire.Have{Piece: 11},
		&wire.Start{Piece: 12},
		&wire.Stop{Piece: 11},
		&wire.Request{Piece: 10, Length: 124},
		&wire.Cancel{Piece: 0, Offset: MiB, Length: 1},
		&wire.Reject{Piece: 3},
		&wire.Data{Piece: 10, Offset: 100, Bytes: make([]byte, 24)},
		&wire.Data{Piece: 0, Bytes: make([]byte, wire.MaxData+1)},
		&wire.GetLayer{First: 10, Count: 2},
		&wire.GetLayer{First: 11, Count: 1},
		&wire.Layer{First: 9, Hashes: make([][wire.HashLen]byte, 3)},
	} {
		if err := w.WriteMessage(m); err == nil {
			t.Errorf("WriteMessage(%T %+v) succeeded", m, m)
		}
	}
	if err := w.WriteData(0, 0, nil); err == nil {
		t.Error("WriteData of nothing succeeded")
	}
	if err := w.WriteData(0, MiB-10, make([]byte, 11)); err == nil {
		t.Error("WriteData past the piece succeeded")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// What got through is a valid stream.
	got := readAll(t, wire.NewReader(&buf, g))
	if len(got) != 2 {
		t.Fatalf("%d messages went out, want KEEPALIVE and HAVESET", len(got))
	}
}

// TestWriteDataSplits: a range longer than MaxData goes out as frames of at
// most MaxData at increasing offsets, short payloads are copied, long ones
// not kept.
func TestWriteDataSplits(t *testing.T) {
	g := testGeometry(t)
	piece := make([]byte, MiB)
	for i := range piece {
		piece[i] = byte(i ^ i>>8)
	}
	var buf bytes.Buffer
	w := wire.NewWriter(&buf, g)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteMessage(&wire.HaveSet{Set: pieceset.Full(11)}))
	must(w.WriteMessage(&wire.Have{Piece: 1}))
	must(w.WriteData(5, 0, piece))
	must(w.WriteData(5, 100, piece[100:110])) // short: buffered
	if w.Buffered() == 0 {
		t.Error("a short DATA was not buffered")
	}
	must(w.WriteMessage(&wire.Data{Piece: 10, Offset: 0, Bytes: piece[:123]}))
	must(w.Flush())
	if w.Buffered() != 0 {
		t.Errorf("Buffered = %d after Flush", w.Buffered())
	}
	msgs := readAll(t, wire.NewReader(&buf, g))[2:]
	var offsets []uint32
	for _, m := range msgs[:4] {
		d := m.(*wire.Data)
		if d.Piece != 5 || len(d.Bytes) != wire.MaxData || !bytes.Equal(d.Bytes, piece[d.Offset:int(d.Offset)+len(d.Bytes)]) {
			t.Fatalf("DATA piece %d offset %d: %d bytes, wrong", d.Piece, d.Offset, len(d.Bytes))
		}
		offsets = append(offsets, d.Offset)
	}
	if !reflect.DeepEqual(offsets, []uint32{0, 256 * KiB, 512 * KiB, 768 * KiB}) {
		t.Fatalf("offsets %v", offsets)
	}
	if d := msgs[4].(*wire.Data); d.Offset != 100 || !bytes.Equal(d.Bytes, piece[100:110]) {
		t.Fatalf("short DATA: %+v", d)
	}
	if d := msgs[5].(*wire.Data); d.Piece != 10 || len(d.Bytes) != 123 {
		t.Fatalf("last DATA: %+v", d)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("broken")
	}
	f.n--
	return len(p), nil
}

func TestWriterErrorsAreSticky(t *testing.T) {
	g := testGeometry(t)
	w := wire.NewWriter(&failWriter{n: 1}, g)
	if err := w.WriteMessage(&wire.HaveSet{Set: pieceset.New(11)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteData(0, 0, make([]byte, 64*KiB)); err == nil {
		t.Fatal("write to a broken stream succeeded")
	}
	if err := w.WriteMessage(&wire.Have{}); err == nil {
		t.Fatal("error is not sticky")
	}
	if err := w.Flush(); err == nil {
		t.Fatal("error is not sticky for Flush")
	}
}

// intervalsLenRef is the interval encoding's length, computed the slow way.
func intervalsLenRef(s *pieceset.Set) int {
	iv := s.Intervals()
	b := binary.AppendUvarint(nil, uint64(len(iv)))
	prevEnd := 0
	for _, r := range iv {
		b = binary.AppendUvarint(b, uint64(r.Start-prevEnd))
		b = binary.AppendUvarint(b, uint64(r.Len-1))
		prevEnd = r.Start + r.Len
	}
	return len(b)
}

func TestHaveSetPicksTheSmallerEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int, p float64) *pieceset.Set {
		s := pieceset.New(n)
		for i := range n {
			if rng.Float64() < p {
				s.Add(i)
			}
		}
		return s
	}
	for _, c := range []struct {
		name string
		set  *pieceset.Set
		enc  byte
	}{
		{"empty swarm", pieceset.New(0), 0},
		{"one piece", pieceset.Full(1), 0},
		{"nothing of 2000", pieceset.New(2000), 1},
		{"everything of 2000", pieceset.Full(2000), 1},
		{"sparse", setOf(2000, 5, 700, 1999), 1},
		{"prefix", run(2000, 0, 1500), 1},
		{"nearly full", run(2000, 0, 2000-3, 1999), 1},
		{"dense random", random(2000, 0.5), 0},
		{"alternating", func() *pieceset.Set {
			s := pieceset.New(64)
			for i := 0; i < 64; i += 2 {
				s.Add(i)
			}
			return s
		}(), 0},
		{"max pieces, random", random(wire.MaxPieces, 0.5), 0},
		{"max pieces, full", pieceset.Full(wire.MaxPieces), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mustGeometry(t, int64(c.set.Len())*16*KiB, 16*KiB)
			f := mustFrame(t, &wire.HaveSet{Set: c.set})
			if f[5] != c.enc {
				t.Errorf("encoding %d, want %d", f[5], c.enc)
			}
			if got, want := len(f)-6, min((c.set.Len()+7)/8, intervalsLenRef(c.set)); got != want {
				t.Errorf("set encoded in %d bytes, the smaller encoding takes %d", got, want)
			}
			got := readAll(t, wire.NewReader(bytes.NewReader(f), g))
			if !reflect.DeepEqual(got[0].(*wire.HaveSet).Set, c.set) {
				t.Error("the set changed in the round trip")
			}
		})
	}
	// Random densities: always the smaller one, bitfield on a tie.
	for range 300 {
		n := rng.IntN(300)
		s := random(n, rng.Float64())
		f := mustFrame(t, &wire.HaveSet{Set: s})
		bf, iv := (n+7)/8, intervalsLenRef(s)
		if wantEnc := map[bool]byte{true: 0, false: 1}[bf <= iv]; f[5] != wantEnc || len(f)-6 != min(bf, iv) {
			t.Fatalf("n=%d: encoding %d in %d bytes; bitfield %d, intervals %d", n, f[5], len(f)-6, bf, iv)
		}
	}
}

func TestGeometry(t *testing.T) {
	for _, c := range []struct {
		size, ps int64
		ok       bool
		n        int
	}{
		{0, 16 * KiB, true, 0},
		{1, 16 * KiB, true, 1},
		{16 * KiB, 16 * KiB, true, 1},
		{16*KiB + 1, 16 * KiB, true, 2},
		{int64(wire.MaxPieces) * 16 * KiB, 16 * KiB, true, wire.MaxPieces},
		{int64(wire.MaxPieces)*16*KiB + 1, 16 * KiB, false, 0},
		{1 << 62, wire.MaxPieceSize, false, 0},
		{10, 0, false, 0},
		{10, wire.MaxPieceSize + 1, false, 0},
		{-1, 16 * KiB, false, 0},
	} {
		g, err := wire.NewGeometry(c.size, c.ps)
		if (err == nil) != c.ok || g.NumPieces() != c.n {
			t.Errorf("NewGeometry(%d, %d) = %d pieces, %v", c.size, c.ps, g.NumPieces(), err)
		}
	}
	g := testGeometry(t)
	for i, want := range map[int]int64{-1: 0, 0: MiB, 9: MiB, 10: 123, 11: 0} {
		if got := g.PieceLen(i); got != want {
			t.Errorf("PieceLen(%d) = %d, want %d", i, got, want)
		}
	}
	if g.Size() != 10*MiB+123 || g.PieceSize() != MiB {
		t.Errorf("Size %d, PieceSize %d", g.Size(), g.PieceSize())
	}
	// The zero Geometry is an empty file: only the empty HAVESET is valid.
	var zero wire.Geometry
	stream := append(mustFrame(t, &wire.HaveSet{Set: pieceset.New(0)}), rawFrame(2, u32(0))...)
	r := wire.NewReader(bytes.NewReader(stream), zero)
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("HAVE in an empty swarm: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{wire.TypeRecommend.String(), "RECOMMEND"},
		{wire.Type(99).String(), "type(99)"},
		{wire.RejectDontHave.String(), "don't have"},
		{wire.RejectReason(77).String(), "other"},
		{wire.GoodbyeWrongSwarm.String(), "wrong swarm"},
		{wire.GoodbyeReason(77).String(), "reason(77)"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}
