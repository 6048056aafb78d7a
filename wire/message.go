package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/stampede-dev/stampede/pieceset"
)

// Message is one frame's content. The implementations are the pointer types
// of this file (*Have, *Data, ...), so a type switch on a received message
// reads `case *wire.Have:`; the set is closed by the protocol.
type Message interface {
	// Type is the frame type the message travels as.
	Type() Type
	// appendPayload appends the payload, checking what does not depend on
	// the swarm's geometry.
	appendPayload(b []byte) ([]byte, error)
	// check checks the message against the swarm's geometry.
	check(g *Geometry) error
}

// KeepAlive says "still here" after KeepAliveInterval of silence.
type KeepAlive struct{}

// HaveSet is the sender's whole have-set, its first frame. See appendHaveSet
// for the two encodings.
type HaveSet struct {
	Set *pieceset.Set
}

// Have announces one more verified, stored piece.
type Have struct {
	Piece uint32
}

// Request asks for Length bytes of Piece from Offset. Length may be up to the
// piece's length; the answer comes as DATA frames of at most MaxData bytes.
type Request struct {
	Piece, Offset, Length uint32
}

// Data carries Bytes of Piece at Offset. Received, it belongs to the Reader
// (see Reader.Read).
type Data struct {
	Piece, Offset uint32
	Bytes         []byte
}

// Cancel withdraws an earlier Request with the same fields.
type Cancel struct {
	Piece, Offset, Length uint32
}

// Reject refuses an earlier Request with the same Piece, Offset and Length.
type Reject struct {
	Piece, Offset, Length uint32
	Reason                RejectReason
}

// Start says the sender is fetching Piece (from the origin or a peer), so
// others had better pick another piece. A hint: it may never be followed by
// a HAVE.
type Start struct {
	Piece uint32
}

// Stop withdraws the sender's Start for Piece: that fetch failed or was
// abandoned, and nothing else is fetching the piece for the sender.
type Stop struct {
	Piece uint32
}

// Rate tells the sender's upload capacity as it measures it, in bytes per
// second (0: not measured yet). A neighbour with more of it passes a piece
// on sooner, so the swarm gives it more of the origin's pieces; peers that
// do not know the frame skip it.
type Rate struct {
	Up uint32
}

// Recommend lists peers the sender recently traded with, most recent first.
type Recommend struct {
	Peers []Recommendation
}

// Recommendation is one recommended peer: the address to dial and how long
// ago the sender last traded with it (whole seconds on the wire, at most
// 65535).
type Recommendation struct {
	Addr netip.AddrPort
	Age  time.Duration
}

// Choke says the sender stopped serving the receiver's requests.
type Choke struct{}

// Unchoke says the sender now serves the receiver's requests.
type Unchoke struct{}

// Goodbye says why the sender closes the connection.
type Goodbye struct {
	Reason GoodbyeReason
	Text   string // at most MaxGoodbyeText bytes of UTF-8, for logs
}

// GetLayer asks for Count hashes of the manifest's piece layer, from index
// First. A peer that joined with the manifest's root and geometry alone
// (docs/protocol.md, section 5) fetches the layer this way and checks it
// against the root before it asks for any piece.
type GetLayer struct {
	First, Count uint32
}

// Layer answers a GetLayer with the hashes of the piece layer from index
// First, in order: all those asked, or none when the sender cannot answer
// (stampede never sends none: it holds a GETLAYER until it knows the layer).
type Layer struct {
	First  uint32
	Hashes [][HashLen]byte
}

// RejectReason says why a request was refused. Unknown values mean
// RejectOther.
type RejectReason uint8

const (
	RejectOther    RejectReason = 0
	RejectChoked   RejectReason = 1 // the sender chokes the requester
	RejectDontHave RejectReason = 2 // the sender does not have the piece (any more)
	RejectBusy     RejectReason = 3 // the sender's request queue is full: ask later or elsewhere
)

func (r RejectReason) String() string {
	switch r {
	case RejectChoked:
		return "choked"
	case RejectDontHave:
		return "don't have"
	case RejectBusy:
		return "busy"
	}
	return "other"
}

// GoodbyeReason says why a connection ends. Unknown values mean GoodbyeOther.
type GoodbyeReason uint8

const (
	GoodbyeOther        GoodbyeReason = 0
	GoodbyeWrongSwarm   GoodbyeReason = 1  // root or size differ
	GoodbyeVersion      GoodbyeReason = 2  // no common protocol version
	GoodbyeSelf         GoodbyeReason = 3  // the peer ID is our own: we dialed ourselves
	GoodbyeDuplicate    GoodbyeReason = 4  // another connection joins the same two peers
	GoodbyeProtocol     GoodbyeReason = 5  // the receiver sent a malformed frame
	GoodbyeTimeout      GoodbyeReason = 6  // nothing heard for IdleTimeout
	GoodbyeShutdown     GoodbyeReason = 7  // the sender is stopping
	GoodbyeCorrupt      GoodbyeReason = 8  // the receiver sent a piece that failed verification
	GoodbyeTooManyPeers GoodbyeReason = 9  // the sender has enough connections
	GoodbyeDone         GoodbyeReason = 10 // nothing left to trade (both have the whole file)
	GoodbyeNoSwarm      GoodbyeReason = 11 // the sender holds no swarm of the root the receiver asked for
	GoodbyeUnauthorized GoodbyeReason = 12 // the swarm is private, and the receiver's token is missing or refused
)

var goodbyeNames = [...]string{
	GoodbyeOther:        "other",
	GoodbyeWrongSwarm:   "wrong swarm",
	GoodbyeVersion:      "version",
	GoodbyeSelf:         "self",
	GoodbyeDuplicate:    "duplicate",
	GoodbyeProtocol:     "protocol error",
	GoodbyeTimeout:      "timeout",
	GoodbyeShutdown:     "shutdown",
	GoodbyeCorrupt:      "corrupt data",
	GoodbyeTooManyPeers: "too many peers",
	GoodbyeDone:         "done",
	GoodbyeNoSwarm:      "no such swarm",
	GoodbyeUnauthorized: "unauthorized",
}

func (r GoodbyeReason) String() string {
	if int(r) < len(goodbyeNames) {
		return goodbyeNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

func (*KeepAlive) Type() Type { return TypeKeepAlive }
func (*HaveSet) Type() Type   { return TypeHaveSet }
func (*Have) Type() Type      { return TypeHave }
func (*Request) Type() Type   { return TypeRequest }
func (*Data) Type() Type      { return TypeData }
func (*Cancel) Type() Type    { return TypeCancel }
func (*Reject) Type() Type    { return TypeReject }
func (*Start) Type() Type     { return TypeStart }
func (*Recommend) Type() Type { return TypeRecommend }
func (*Choke) Type() Type     { return TypeChoke }
func (*Unchoke) Type() Type   { return TypeUnchoke }
func (*Goodbye) Type() Type   { return TypeGoodbye }
func (*Stop) Type() Type      { return TypeStop }
func (*GetLayer) Type() Type  { return TypeGetLayer }
func (*Layer) Type() Type     { return TypeLayer }
func (*Rate) Type() Type      { return TypeRate }

// AppendFrame appends m's frame (length, type, payload) to dst. It fails,
// leaving dst as it was, for a message no receiver would accept whatever the
// swarm: an empty or oversized DATA, a zero length, a nil set, a bad address,
// too long a text. The Writer also checks messages against the geometry.
func AppendFrame(dst []byte, m Message) ([]byte, error) {
	if m == nil {
		return dst, fmt.Errorf("wire: nil message")
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(m.Type()))
	dst, err := m.appendPayload(dst)
	if err != nil {
		return dst[:start], err
	}
	l := len(dst) - start - 4
	if l > MaxFrame {
		return dst[:start], fmt.Errorf("wire: %v frame of %d bytes, at most %d", m.Type(), l, MaxFrame)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(l))
	return dst, nil
}

func (*KeepAlive) appendPayload(b []byte) ([]byte, error) { return b, nil }
func (*Choke) appendPayload(b []byte) ([]byte, error)     { return b, nil }
func (*Unchoke) appendPayload(b []byte) ([]byte, error)   { return b, nil }

func (m *HaveSet) appendPayload(b []byte) ([]byte, error) {
	if m.Set == nil {
		return b, fmt.Errorf("wire: HAVESET without a set")
	}
	if m.Set.Len() > MaxPieces {
		return b, fmt.Errorf("wire: HAVESET of %d pieces, at most %d", m.Set.Len(), MaxPieces)
	}
	return appendHaveSet(b, m.Set), nil
}

func (m *Have) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, m.Piece), nil
}

func (m *Start) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, m.Piece), nil
}

func (m *Stop) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, m.Piece), nil
}

func (m *Rate) appendPayload(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, m.Up), nil
}

func appendRange(b []byte, t Type, piece, offset, length uint32) ([]byte, error) {
	if length == 0 {
		return b, fmt.Errorf("wire: %v of length 0", t)
	}
	b = binary.BigEndian.AppendUint32(b, piece)
	b = binary.BigEndian.AppendUint32(b, offset)
	return binary.BigEndian.AppendUint32(b, length), nil
}

func (m *Request) appendPayload(b []byte) ([]byte, error) {
	return appendRange(b, TypeRequest, m.Piece, m.Offset, m.Length)
}

func (m *Cancel) appendPayload(b []byte) ([]byte, error) {
	return appendRange(b, TypeCancel, m.Piece, m.Offset, m.Length)
}

func (m *Reject) appendPayload(b []byte) ([]byte, error) {
	b, err := appendRange(b, TypeReject, m.Piece, m.Offset, m.Length)
	return append(b, byte(m.Reason)), err
}

func (m *Data) appendPayload(b []byte) ([]byte, error) {
	if len(m.Bytes) == 0 || len(m.Bytes) > MaxData {
		return b, fmt.Errorf("wire: DATA of %d bytes outside [1, %d]", len(m.Bytes), MaxData)
	}
	b = binary.BigEndian.AppendUint32(b, m.Piece)
	b = binary.BigEndian.AppendUint32(b, m.Offset)
	return append(b, m.Bytes...), nil
}

func (m *GetLayer) appendPayload(b []byte) ([]byte, error) {
	if m.Count == 0 || m.Count > MaxLayerHashes {
		return b, fmt.Errorf("wire: GETLAYER of %d hashes outside [1, %d]", m.Count, MaxLayerHashes)
	}
	b = binary.BigEndian.AppendUint32(b, m.First)
	return binary.BigEndian.AppendUint32(b, m.Count), nil
}

func (m *Layer) appendPayload(b []byte) ([]byte, error) {
	if len(m.Hashes) > MaxLayerHashes {
		return b, fmt.Errorf("wire: LAYER of %d hashes, at most %d", len(m.Hashes), MaxLayerHashes)
	}
	b = binary.BigEndian.AppendUint32(b, m.First)
	for _, h := range m.Hashes {
		b = append(b, h[:]...)
	}
	return b, nil
}

// maxAge is the largest age RECOMMEND carries; older ones are sent as this.
const maxAge = 1<<16 - 1

// ageSeconds is a recommendation's age as sent: whole seconds, saturating.
func ageSeconds(d time.Duration) uint16 {
	return uint16(min(max(d/time.Second, 0), maxAge))
}

func (m *Recommend) appendPayload(b []byte) ([]byte, error) {
	if len(m.Peers) > MaxRecommend {
		return b, fmt.Errorf("wire: RECOMMEND of %d peers, at most %d", len(m.Peers), MaxRecommend)
	}
	b = append(b, byte(len(m.Peers)))
	prev := uint16(0)
	for _, p := range m.Peers {
		// A zone means nothing to the receiver; a v4-mapped address is
		// sent as IPv4.
		ip := p.Addr.Addr().Unmap().WithZone("")
		if !ip.IsValid() || ip.IsUnspecified() || p.Addr.Port() == 0 {
			return b, fmt.Errorf("wire: RECOMMEND of %v: not a dialable address", p.Addr)
		}
		age := ageSeconds(p.Age)
		if age < prev {
			return b, fmt.Errorf("wire: RECOMMEND not ordered most recent first (%v after %ds)", p.Age, prev)
		}
		prev = age
		if ip.Is4() {
			b = append(b, 4)
		} else {
			b = append(b, 6)
		}
		b = append(b, ip.AsSlice()...)
		b = binary.BigEndian.AppendUint16(b, p.Addr.Port())
		b = binary.BigEndian.AppendUint16(b, age)
	}
	return b, nil
}

func (m *Goodbye) appendPayload(b []byte) ([]byte, error) {
	if len(m.Text) > MaxGoodbyeText || !utf8.ValidString(m.Text) {
		return b, fmt.Errorf("wire: GOODBYE text of %d bytes: not UTF-8 of at most %d bytes", len(m.Text), MaxGoodbyeText)
	}
	return append(append(b, byte(m.Reason)), m.Text...), nil
}

// check methods: what a message must satisfy in the swarm's geometry.

func (*KeepAlive) check(*Geometry) error { return nil }
func (*Choke) check(*Geometry) error     { return nil }
func (*Unchoke) check(*Geometry) error   { return nil }
func (*Recommend) check(*Geometry) error { return nil }
func (*Goodbye) check(*Geometry) error   { return nil }
func (*Rate) check(*Geometry) error      { return nil }

func (m *HaveSet) check(g *Geometry) error {
	if m.Set == nil || m.Set.Len() != g.n {
		n := -1
		if m.Set != nil {
			n = m.Set.Len()
		}
		return malformed("HAVESET over %d pieces, the swarm has %d", n, g.n)
	}
	return nil
}

func (m *Have) check(g *Geometry) error  { return g.checkPiece(TypeHave, m.Piece) }
func (m *Start) check(g *Geometry) error { return g.checkPiece(TypeStart, m.Piece) }
func (m *Stop) check(g *Geometry) error  { return g.checkPiece(TypeStop, m.Piece) }

// checkLayer checks that count hashes from first lie within the piece
// layer, which a file of one piece does not have (its root is its hash).
func (g *Geometry) checkLayer(t Type, first uint32, count int) error {
	if g.n < 2 || int64(first)+int64(count) > int64(g.n) {
		return malformed("%v of hashes [%d,+%d) outside the piece layer of %d", t, first, count, g.n)
	}
	return nil
}

func (m *GetLayer) check(g *Geometry) error {
	if m.Count == 0 || m.Count > MaxLayerHashes {
		return malformed("GETLAYER of %d hashes outside [1, %d]", m.Count, MaxLayerHashes)
	}
	return g.checkLayer(TypeGetLayer, m.First, int(m.Count))
}

func (m *Layer) check(g *Geometry) error {
	if len(m.Hashes) > MaxLayerHashes {
		return malformed("LAYER of %d hashes, at most %d", len(m.Hashes), MaxLayerHashes)
	}
	return g.checkLayer(TypeLayer, m.First, len(m.Hashes))
}

func (m *Request) check(g *Geometry) error {
	return g.checkRange(TypeRequest, m.Piece, m.Offset, int64(m.Length))
}

func (m *Cancel) check(g *Geometry) error {
	return g.checkRange(TypeCancel, m.Piece, m.Offset, int64(m.Length))
}

func (m *Reject) check(g *Geometry) error {
	return g.checkRange(TypeReject, m.Piece, m.Offset, int64(m.Length))
}

func (m *Data) check(g *Geometry) error {
	if len(m.Bytes) > MaxData {
		return malformed("DATA of %d bytes, at most %d", len(m.Bytes), MaxData)
	}
	return g.checkRange(TypeData, m.Piece, m.Offset, int64(len(m.Bytes)))
}

// decodePayload decodes the payload p of a known frame type other than DATA
// and checks it against g. The message owns nothing of p.
func decodePayload(t Type, p []byte, g *Geometry) (Message, error) {
	var m Message
	switch t {
	case TypeKeepAlive:
		m = &KeepAlive{}
	case TypeChoke:
		m = &Choke{}
	case TypeUnchoke:
		m = &Unchoke{}
	case TypeHave:
		m = &Have{Piece: binary.BigEndian.Uint32(p)}
	case TypeStart:
		m = &Start{Piece: binary.BigEndian.Uint32(p)}
	case TypeStop:
		m = &Stop{Piece: binary.BigEndian.Uint32(p)}
	case TypeRate:
		m = &Rate{Up: binary.BigEndian.Uint32(p)}
	case TypeRequest:
		m = &Request{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:]), binary.BigEndian.Uint32(p[8:])}
	case TypeCancel:
		m = &Cancel{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:]), binary.BigEndian.Uint32(p[8:])}
	case TypeReject:
		m = &Reject{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:]), binary.BigEndian.Uint32(p[8:]), RejectReason(p[12])}
	case TypeGetLayer:
		m = &GetLayer{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])}
	case TypeLayer:
		if (len(p)-4)%HashLen != 0 {
			return nil, malformed("LAYER payload of %d bytes is not 4 plus whole hashes", len(p))
		}
		l := &Layer{First: binary.BigEndian.Uint32(p), Hashes: make([][HashLen]byte, (len(p)-4)/HashLen)}
		for i := range l.Hashes {
			copy(l.Hashes[i][:], p[4+i*HashLen:])
		}
		m = l
	case TypeHaveSet:
		s, err := decodeHaveSet(p, g.n)
		if err != nil {
			return nil, err
		}
		m = &HaveSet{Set: s}
	case TypeRecommend:
		r, err := decodeRecommend(p)
		if err != nil {
			return nil, err
		}
		m = r
	case TypeGoodbye:
		if !utf8.Valid(p[1:]) {
			return nil, malformed("GOODBYE text is not UTF-8")
		}
		m = &Goodbye{Reason: GoodbyeReason(p[0]), Text: string(p[1:])}
	default:
		return nil, fmt.Errorf("wire: decodePayload(%v): not a control frame", t) // unreachable: Reader routes
	}
	if err := m.check(g); err != nil {
		return nil, err
	}
	return m, nil
}

// exactPayload is the payload length of the fixed-size frame types; the
// others are -1 (variable) and checked by their decoders.
var exactPayload = [...]int{
	TypeKeepAlive: 0,
	TypeHaveSet:   -1,
	TypeHave:      4,
	TypeRequest:   12,
	TypeData:      -1,
	TypeCancel:    12,
	TypeReject:    13,
	TypeStart:     4,
	TypeRecommend: -1,
	TypeChoke:     0,
	TypeUnchoke:   0,
	TypeGoodbye:   -1,
	TypeStop:      4,
	TypeGetLayer:  8,
	TypeLayer:     -1,
	TypeChallenge: -1,
	TypeAuth:      -1,
	TypeRate:      4,
}

// minPayload is the shortest payload of each type.
var minPayload = [...]int{
	TypeHaveSet:   1,
	TypeData:      9,
	TypeRecommend: 1,
	TypeGoodbye:   1,
	TypeStop:      4,
	TypeGetLayer:  8,
	TypeLayer:     4,
	TypeRate:      4,
}

// checkPayloadLen checks a known type's payload length before it is read.
func checkPayloadLen(t Type, n int) error {
	if e := exactPayload[t]; e >= 0 && n != e {
		return malformed("%v payload of %d bytes, want %d", t, n, e)
	}
	if n < minPayload[t] || n > maxPayload[t] {
		return malformed("%v payload of %d bytes outside [%d, %d]", t, n, minPayload[t], maxPayload[t])
	}
	return nil
}

func decodeRecommend(p []byte) (*Recommend, error) {
	count := int(p[0])
	if count > MaxRecommend {
		return nil, malformed("RECOMMEND of %d peers, at most %d", count, MaxRecommend)
	}
	p = p[1:]
	r := &Recommend{Peers: make([]Recommendation, 0, count)}
	prev := uint16(0)
	for i := range count {
		if len(p) < 1 {
			return nil, malformed("RECOMMEND truncated at peer %d", i)
		}
		var ip netip.Addr
		switch fam := p[0]; {
		case fam == 4 && len(p) >= 1+4+4:
			ip = netip.AddrFrom4([4]byte(p[1:5]))
			p = p[5:]
		case fam == 6 && len(p) >= 1+16+4:
			ip = netip.AddrFrom16([16]byte(p[1:17]))
			p = p[17:]
			if ip.Is4In6() {
				return nil, malformed("RECOMMEND peer %d: IPv4-mapped address %v sent as family 6", i, ip)
			}
		case fam == 4 || fam == 6:
			return nil, malformed("RECOMMEND truncated at peer %d", i)
		default:
			return nil, malformed("RECOMMEND peer %d: address family %d", i, fam)
		}
		port, age := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
		p = p[4:]
		if ip.IsUnspecified() || port == 0 {
			return nil, malformed("RECOMMEND peer %d: %v port %d is not dialable", i, ip, port)
		}
		if age < prev {
			return nil, malformed("RECOMMEND peer %d: age %ds after %ds: not most recent first", i, age, prev)
		}
		prev = age
		r.Peers = append(r.Peers, Recommendation{
			Addr: netip.AddrPortFrom(ip, port),
			Age:  time.Duration(age) * time.Second,
		})
	}
	if len(p) != 0 {
		return nil, malformed("RECOMMEND: %d trailing bytes", len(p))
	}
	return r, nil
}
