// Package wire is stampede's peer protocol: the handshake and the frames two
// downloaders of the same file exchange to trade pieces. It knows byte
// layouts and the limits every frame must respect, nothing else: which piece
// to ask for and whom to serve are the swarm package's decisions, sockets and
// timers belong to the peer package. docs/protocol.md is the specification
// (precise enough for the JavaScript browser peer); this file carries the
// same layout next to the code.
//
// The protocol runs over any reliable, ordered byte stream (TCP today). All
// integers are big-endian.
//
// # Protocol flow
//
// Connect:
//   - both sides send their 66-byte handshake at once (see [Handshake]):
//     "STMP", version, reserved, capabilities, root, size, peer ID, port;
//   - each side reads the other's and checks the magic, the version (the
//     session speaks the lower of the two), the swarm (root and size must
//     equal its own) and the peer ID (its own ID means it dialed itself);
//     on a mismatch it sends GOODBYE and closes ([Exchange] does all this).
//
// Steady state (after the handshake, everything is a frame):
//   - each side's first frame is HAVESET, its whole have-set (a second one
//     is an error, as is any other frame before it except KEEPALIVE and
//     GOODBYE);
//   - both sides start choked: a side serves requests only after it sent
//     UNCHOKE, and answers requests while choking with REJECT(choked);
//   - the requester pipelines REQUESTs; the server answers each with DATA
//     frames covering exactly the requested range (at most MaxData bytes
//     each, increasing offsets) or with one REJECT; the requester may CANCEL;
//   - on starting to fetch a piece (from the origin or a peer) a side sends
//     START to everyone, so others pick something else; if the fetch fails
//     and nothing else is fetching the piece for it, STOP withdraws the
//     START; on storing a verified piece it sends HAVE to everyone (to a
//     peer that has more for it and has the piece or is choked by it,
//     possibly a second later, with other HAVEs, and always before an
//     UNCHOKE);
//   - now and then a side sends RECOMMEND: peers it recently traded with;
//   - after KeepAliveInterval without sending anything a side sends
//     KEEPALIVE; a side that hears nothing for IdleTimeout closes;
//   - GOODBYE says why a side leaves; then it closes.
//
// Anything malformed (a bad length, a piece index, offset or length outside
// the swarm's geometry, a bad set encoding, trailing bytes, a frame out of
// order) is an error that ends that connection only. Frames of unknown type
// whose framing is valid are skipped: later versions add types freely.
//
// # Frame layout
//
//	u32 L     length of what follows, 1 <= L <= MaxFrame
//	u8  type
//	[L-1]     payload, laid out per type (see the Type constants)
//
// # Version history
//
//   - 1: the first version (this package).
//
// The handshake's 66-byte layout and the frame header are fixed across all
// versions, and so is GOODBYE, so that a peer can always say why it leaves.
// Each side sends the highest version it speaks; the session uses the lower
// of the two. A version-1 implementation therefore accepts any version >= 1
// and speaks version 1; version 0 is rejected.
//
// # Ownership of buffers
//
// [Reader.Read] returns a fresh message for every frame except DATA: its
// [*Data] and the bytes it points to belong to the Reader and are valid until
// the next call, so reading the data path allocates nothing. [Writer.WriteData]
// sends a payload without copying it (one writev of the header and the
// payload) and never keeps it.
//
// The package uses the standard library only (and the sibling pieceset).
package wire

import (
	"errors"
	"fmt"
	"time"
)

// Version is the protocol version this package speaks.
const Version = 1

// Limits.
const (
	// MaxData is the most payload one DATA frame carries: a requested range
	// larger than this is answered with several DATA frames.
	MaxData = 256 << 10

	// MaxFrame bounds L, the length after the length field of any frame. It
	// leaves room for DATA's header and for a HAVESET bitfield of MaxPieces.
	MaxFrame = MaxData + 64

	// MaxPieces is the most pieces a swarm may have: a HAVESET bitfield of
	// MaxPieces bits (256 KiB) still fits in one frame.
	MaxPieces = 1 << 21

	// MaxPieceSize bounds the piece size, so that offsets and lengths fit a
	// u32 (and a JavaScript peer's signed 32-bit integers).
	MaxPieceSize = 1 << 30

	// MaxRecommend is the most peers one RECOMMEND lists.
	MaxRecommend = 32

	// MaxGoodbyeText is the most bytes of text a GOODBYE carries.
	MaxGoodbyeText = 256

	// HashLen is the length of a piece-layer hash (SHA-256).
	HashLen = 32

	// MaxLayerHashes is the most piece-layer hashes one GETLAYER asks for
	// and one LAYER carries: MaxData bytes of them.
	MaxLayerHashes = MaxData / HashLen
)

// Timeouts. The peer runtime enforces them; they are here because both ends
// must agree on them.
const (
	// KeepAliveInterval: a side that has sent nothing for this long sends
	// KEEPALIVE.
	KeepAliveInterval = 30 * time.Second

	// IdleTimeout: a side that has received nothing (not even KEEPALIVE) for
	// this long closes the connection.
	IdleTimeout = 120 * time.Second

	// HandshakeTimeout bounds Exchange when its context has no earlier
	// deadline.
	HandshakeTimeout = 10 * time.Second

	// goodbyeGrace bounds how long Exchange spends saying GOODBYE after a
	// mismatch.
	goodbyeGrace = time.Second
)

// Type is a frame's type, the byte after the length.
type Type uint8

// Frame types, with their payload layout (after the u32 length and the u8
// type). u32 piece is an index in [0, NumPieces); offset and length are bytes
// within that piece. Every field is required; bytes past the layout are an
// error.
const (
	TypeKeepAlive Type = 0  // empty
	TypeHaveSet   Type = 1  // u8 encoding (0 bitfield, 1 intervals) + the set; see HaveSet
	TypeHave      Type = 2  // u32 piece
	TypeRequest   Type = 3  // u32 piece, u32 offset, u32 length (1..piece length)
	TypeData      Type = 4  // u32 piece, u32 offset, 1..MaxData bytes
	TypeCancel    Type = 5  // u32 piece, u32 offset, u32 length: as the REQUEST it withdraws
	TypeReject    Type = 6  // u32 piece, u32 offset, u32 length, u8 reason
	TypeStart     Type = 7  // u32 piece
	TypeRecommend Type = 8  // u8 count <= 32, then each: u8 family (4|6), 4|16 B IP, u16 port, u16 age (s)
	TypeChoke     Type = 9  // empty
	TypeUnchoke   Type = 10 // empty
	TypeGoodbye   Type = 11 // u8 reason, 0..256 bytes of UTF-8 text
	TypeStop      Type = 12 // u32 piece
	TypeGetLayer  Type = 13 // u32 first, u32 count (1..MaxLayerHashes): piece-layer hashes wanted
	TypeLayer     Type = 14 // u32 first, then 0..MaxLayerHashes hashes of 32 bytes
	// 15 and 16 are the handshake's CHALLENGE and AUTH (handshake.go),
	// which are not frames of the session after it.
	TypeRate Type = 17 // u32 bytes per second: the sender's upload capacity (0: not measured yet)
)

var typeNames = [...]string{
	TypeKeepAlive: "KEEPALIVE",
	TypeHaveSet:   "HAVESET",
	TypeHave:      "HAVE",
	TypeRequest:   "REQUEST",
	TypeData:      "DATA",
	TypeCancel:    "CANCEL",
	TypeReject:    "REJECT",
	TypeStart:     "START",
	TypeRecommend: "RECOMMEND",
	TypeChoke:     "CHOKE",
	TypeUnchoke:   "UNCHOKE",
	TypeGoodbye:   "GOODBYE",
	TypeStop:      "STOP",
	TypeGetLayer:  "GETLAYER",
	TypeLayer:     "LAYER",
	TypeChallenge: "CHALLENGE",
	TypeAuth:      "AUTH",
	TypeRate:      "RATE",
}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// known reports whether this version defines t as a frame of a session;
// frames of other types are skipped (the handshake's CHALLENGE and AUTH
// among them: they have no meaning after it).
func (t Type) known() bool {
	return int(t) < len(typeNames) && t != TypeChallenge && t != TypeAuth
}

// maxPayload is the largest payload (L-1) of each known type, checked before
// the payload is read.
var maxPayload = [...]int{
	TypeKeepAlive: 0,
	TypeHaveSet:   MaxFrame - 1,
	TypeHave:      4,
	TypeRequest:   12,
	TypeData:      8 + MaxData,
	TypeCancel:    12,
	TypeReject:    13,
	TypeStart:     4,
	TypeRecommend: 1 + MaxRecommend*(1+16+2+2),
	TypeChoke:     0,
	TypeUnchoke:   0,
	TypeGoodbye:   1 + MaxGoodbyeText,
	TypeStop:      4,
	TypeGetLayer:  8,
	TypeLayer:     4 + MaxLayerHashes*HashLen,
	TypeChallenge: -1,
	TypeAuth:      -1,
	TypeRate:      4,
}

// ErrMalformed is wrapped by every error reporting a frame that breaks the
// protocol: the caller closes that connection (and may say GOODBYE with
// GoodbyeProtocol first).
var ErrMalformed = errors.New("wire: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Geometry is the shape of the swarm's file, which every piece index, offset
// and length on the wire is checked against. The zero Geometry is an empty
// file (no piece index is valid).
type Geometry struct {
	size, pieceSize int64
	n               int
}

// NewGeometry returns the geometry of a file of size bytes cut into pieces of
// pieceSize (the last one may be short), as a manifest describes it.
func NewGeometry(size, pieceSize int64) (Geometry, error) {
	if size < 0 || pieceSize <= 0 || pieceSize > MaxPieceSize {
		return Geometry{}, fmt.Errorf("wire: geometry: size %d, piece size %d outside [1, %d]", size, pieceSize, MaxPieceSize)
	}
	n := size / pieceSize
	if size%pieceSize != 0 {
		n++
	}
	if n > MaxPieces {
		return Geometry{}, fmt.Errorf("wire: geometry: %d pieces, at most %d", n, MaxPieces)
	}
	return Geometry{size: size, pieceSize: pieceSize, n: int(n)}, nil
}

// Size is the file size in bytes.
func (g Geometry) Size() int64 { return g.size }

// PieceSize is the size of every piece but the last.
func (g Geometry) PieceSize() int64 { return g.pieceSize }

// NumPieces is the number of pieces.
func (g Geometry) NumPieces() int { return g.n }

// PieceLen is the length of piece i, 0 if i is out of range.
func (g Geometry) PieceLen(i int) int64 {
	if i < 0 || i >= g.n {
		return 0
	}
	return min(g.pieceSize, g.size-int64(i)*g.pieceSize)
}

// checkPiece checks a piece index from the wire.
func (g *Geometry) checkPiece(t Type, piece uint32) error {
	if int64(piece) >= int64(g.n) {
		return malformed("%v piece %d out of range [0,%d)", t, piece, g.n)
	}
	return nil
}

// checkRange checks a non-empty byte range within a piece.
func (g *Geometry) checkRange(t Type, piece, offset uint32, length int64) error {
	if err := g.checkPiece(t, piece); err != nil {
		return err
	}
	if pl := g.PieceLen(int(piece)); length <= 0 || int64(offset)+length > pl {
		return malformed("%v piece %d: range [%d,+%d) empty or past the piece length %d", t, piece, offset, length, pl)
	}
	return nil
}
