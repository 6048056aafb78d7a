// Package manifest is stampede's content addressing: a SHA-256 merkle tree over
// 16 KiB blocks laid out exactly as in BitTorrent v2 (BEP 52), cut into pieces
// of a power-of-two number of blocks, and the manifest that carries a file's
// piece-layer hashes, its root and the validators of its source.
//
// A manifest's identity is its root together with its size (as in a v2
// torrent, the root alone does not pin the length of the last block); the
// root equals the "pieces root" libtorrent computes for the same file. Everything stampede moves (from an origin, from a
// peer, from disk on resume) is checked with [Manifest.VerifyPiece] before it is
// written or served. A decoded manifest whose piece layer does not hash to its
// root is rejected, so a manifest can be fetched from anyone who has it as long
// as the root came from somewhere trusted.
//
// The package uses the standard library only.
package manifest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Version is the manifest format this package writes and reads.
const Version = 1

// Piece size bounds. Small files get 16 KiB pieces; large ones up to 4 MiB.
const (
	MinPieceSize = BlockSize
	MaxPieceSize = 4 << 20
	// targetPieces is the piece count PieceSizeFor stays under while the
	// piece size may still grow: enough pieces for a swarm to spread (the
	// discrete optimum is about 1 + log2(N)/M file-times for N peers and M
	// pieces: 1.01 for 50 peers), few enough that per-piece overhead stays
	// small. Every downloader used to fetch the manifest (32 bytes a piece,
	// 43 in its JSON) from the origin (swarm peers now fetch its head and
	// get the hashes from each other), and every piece costs a HAVE to every
	// neighbour and an HTTP request at the origin: with 2048 pieces a flash
	// crowd of 50 spent an eighth of a 32 MiB file's origin bytes on
	// manifests alone, and the peers' CPU on HAVEs.
	targetPieces = 512
)

// MaxSize is the largest file a manifest describes (1 PiB); it keeps piece
// arithmetic far from overflow whatever a decoded manifest claims.
const MaxSize = 1 << 50

// MaxEncodedSize bounds what Decode reads: a manifest of a 1 TiB file with
// 4 MiB pieces is about 11 MiB of JSON.
const MaxEncodedSize = 64 << 20

// ErrCorruptPiece is wrapped by every error reporting a piece whose bytes do
// not match its hash.
var ErrCorruptPiece = errors.New("piece failed verification")

// PieceError reports a piece that failed verification.
type PieceError struct {
	Index  int
	Reason string
}

func (e *PieceError) Error() string {
	return fmt.Sprintf("piece %d failed verification: %s", e.Index, e.Reason)
}

// Unwrap lets callers test with errors.Is(err, ErrCorruptPiece).
func (e *PieceError) Unwrap() error { return ErrCorruptPiece }

// Manifest describes one file: its size, its piece geometry, the hash of every
// piece and the merkle root over them, plus the HTTP validators of the source
// it was computed from.
type Manifest struct {
	Name      string // file name, informational; never trusted as a path
	Size      int64
	PieceSize int64
	Root      Hash
	// Pieces is the piece layer: the root of each piece's subtree. For a file
	// of one piece it holds the root itself.
	Pieces []Hash

	// Validators of the source, so a client can tell the file changed.
	ETag         string
	LastModified string

	// Trackers lists tracker URLs for the swarm of this file, if any.
	Trackers []string
}

// PieceSizeFor returns the piece size for a file of size bytes: the smallest
// power of two in [MinPieceSize, MaxPieceSize] that keeps the piece count at
// or below 512.
func PieceSizeFor(size int64) int64 {
	ps := int64(MinPieceSize)
	for ps < MaxPieceSize && (size+ps-1)/ps > targetPieces {
		ps *= 2
	}
	return ps
}

// NumPieces returns the number of pieces; 0 for an empty file.
func (m *Manifest) NumPieces() int { return numPieces(m.Size, m.PieceSize) }

func numPieces(size, pieceSize int64) int { return int((size + pieceSize - 1) / pieceSize) }

// PieceOffset returns the byte offset at which piece i starts.
func (m *Manifest) PieceOffset(i int) int64 { return int64(i) * m.PieceSize }

// PieceLen returns the length of piece i; only the last piece may be short.
func (m *Manifest) PieceLen(i int) int64 {
	return min(m.PieceSize, m.Size-m.PieceOffset(i))
}

// leafWidth is the number of leaves a piece's subtree is padded to. A file of
// a single piece has no piece layer in BEP 52: its tree is padded only to the
// next power of two of its block count.
func leafWidth(size, pieceSize int64) int {
	if size <= pieceSize {
		return nextPow2(int((size + BlockSize - 1) / BlockSize))
	}
	return int(pieceSize / BlockSize)
}

// VerifyPiece checks that data is exactly piece i. It returns a *PieceError
// (wrapping ErrCorruptPiece) when the index, the length or the hash is wrong.
func (m *Manifest) VerifyPiece(i int, data []byte) error {
	if i < 0 || i >= m.NumPieces() || i >= len(m.Pieces) {
		return &PieceError{Index: i, Reason: fmt.Sprintf("index out of range [0,%d)", len(m.Pieces))}
	}
	if want := m.PieceLen(i); int64(len(data)) != want {
		return &PieceError{Index: i, Reason: fmt.Sprintf("got %d bytes, want %d", len(data), want)}
	}
	got, _ := subtreeRoot(data, leafWidth(m.Size, m.PieceSize), make([]Hash, 0, m.PieceSize/BlockSize))
	if got != m.Pieces[i] {
		return &PieceError{Index: i, Reason: fmt.Sprintf("hash %s, want %s", got.String()[:16], m.Pieces[i].String()[:16])}
	}
	return nil
}

// rootOf computes the file root from a piece layer.
func rootOf(pieces []Hash, pieceSize int64) Hash {
	switch len(pieces) {
	case 0:
		return Hash{}
	case 1:
		return pieces[0]
	}
	layer := append([]Hash(nil), pieces...)
	return merkleRoot(layer, nextPow2(len(layer)), padHash(int(pieceSize/BlockSize)))
}

// Validate checks the manifest's geometry and that its piece layer hashes to
// its root.
func (m *Manifest) Validate() error {
	if err := m.validateHead(); err != nil {
		return err
	}
	return m.checkLayer(m.Pieces)
}

// checkLayer checks that pieces are m's piece layer: one hash a piece,
// hashing to m's root.
func (m *Manifest) checkLayer(pieces []Hash) error {
	if len(pieces) != m.NumPieces() {
		return fmt.Errorf("manifest: %d piece hashes for %d pieces", len(pieces), m.NumPieces())
	}
	if got := rootOf(pieces, m.PieceSize); got != m.Root {
		return fmt.Errorf("manifest: piece layer hashes to %s, not to root %s", got, m.Root)
	}
	return nil
}

// validateHead checks what a manifest head holds: the geometry and the name.
func (m *Manifest) validateHead() error {
	if err := checkGeometry(m.Size, m.PieceSize); err != nil {
		return err
	}
	if strings.ContainsAny(m.Name, "/\\\x00") {
		return fmt.Errorf("manifest: name %q contains a path separator or NUL", m.Name)
	}
	return nil
}

func checkGeometry(size, pieceSize int64) error {
	if size < 0 || size > MaxSize {
		return fmt.Errorf("manifest: size %d outside [0, %d]", size, int64(MaxSize))
	}
	if pieceSize < MinPieceSize || pieceSize > MaxPieceSize || pieceSize&(pieceSize-1) != 0 {
		return fmt.Errorf("manifest: piece size %d is not a power of two in [%d, %d]", pieceSize, MinPieceSize, MaxPieceSize)
	}
	return nil
}

// wireManifest is the JSON form. The piece layer travels as one base64 string
// of concatenated hashes: a third smaller than hex and trivially split.
type wireManifest struct {
	Version      int      `json:"version"`
	Name         string   `json:"name"`
	Size         int64    `json:"size"`
	PieceSize    int64    `json:"piece_size"`
	Root         Hash     `json:"root"`
	PieceLayer   *string  `json:"piece_layer,omitempty"` // absent in a head
	ETag         string   `json:"etag,omitempty"`
	LastModified string   `json:"last_modified,omitempty"`
	Trackers     []string `json:"trackers,omitempty"`
}

// MarshalJSON encodes the manifest in its versioned JSON form.
func (m *Manifest) MarshalJSON() ([]byte, error) {
	var enc *string
	if m.HasLayer() { // a head has none
		layer := make([]byte, 0, len(m.Pieces)*len(Hash{}))
		for _, h := range m.Pieces {
			layer = append(layer, h[:]...)
		}
		e := base64.StdEncoding.EncodeToString(layer)
		enc = &e
	}
	return json.Marshal(wireManifest{
		Version:      Version,
		Name:         m.Name,
		Size:         m.Size,
		PieceSize:    m.PieceSize,
		Root:         m.Root,
		PieceLayer:   enc,
		ETag:         m.ETag,
		LastModified: m.LastModified,
		Trackers:     m.Trackers,
	})
}

// HasLayer reports whether m holds its piece layer: a manifest decoded
// with [UnmarshalHead] from a head has only its root until [Manifest.SetLayer].
func (m *Manifest) HasLayer() bool { return len(m.Pieces) == m.NumPieces() }

// Head returns a copy of m without its piece layer, which MarshalJSON
// encodes as a manifest head: the JSON without "piece_layer". A file of one
// piece or none keeps its layer (the root, or nothing), so its head is the
// whole manifest.
func (m *Manifest) Head() *Manifest {
	h := *m
	if m.NumPieces() > 1 {
		h.Pieces = nil
	}
	return &h
}

// SetLayer checks that pieces hash to m's root and makes them m's piece
// layer. It is for a manifest decoded from a head, whose layer came from
// elsewhere (a peer, in stampede's swarm): nothing may read m.Pieces while
// it runs.
func (m *Manifest) SetLayer(pieces []Hash) error {
	if err := m.checkLayer(pieces); err != nil {
		return err
	}
	m.Pieces = pieces
	return nil
}

// Unmarshal decodes and validates a manifest. Unknown fields are ignored so
// later versions can add some.
func Unmarshal(data []byte) (*Manifest, error) {
	return unmarshal(data, false)
}

// UnmarshalHead decodes and validates a manifest or a manifest head (a
// manifest without "piece_layer", see [Manifest.Head]); a head's Pieces
// are nil, and [Manifest.HasLayer] is false until [Manifest.SetLayer].
func UnmarshalHead(data []byte) (*Manifest, error) {
	return unmarshal(data, true)
}

func unmarshal(data []byte, head bool) (*Manifest, error) {
	var w wireManifest
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("manifest: decode: %w", err)
	}
	if w.Version != Version {
		return nil, fmt.Errorf("manifest: version %d, this stampede reads version %d", w.Version, Version)
	}
	var enc string
	if w.PieceLayer != nil {
		enc = *w.PieceLayer
	}
	layer, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("manifest: piece layer: %w", err)
	}
	if len(layer)%len(Hash{}) != 0 {
		return nil, fmt.Errorf("manifest: piece layer of %d bytes is not a whole number of hashes", len(layer))
	}
	m := &Manifest{
		Name:         w.Name,
		Size:         w.Size,
		PieceSize:    w.PieceSize,
		Root:         w.Root,
		Pieces:       make([]Hash, len(layer)/len(Hash{})),
		ETag:         w.ETag,
		LastModified: w.LastModified,
		Trackers:     w.Trackers,
	}
	for i := range m.Pieces {
		copy(m.Pieces[i][:], layer[i*len(Hash{}):])
	}
	if head && w.PieceLayer == nil && m.validateHead() == nil && m.NumPieces() > 1 {
		// A head, without "piece_layer" (an empty one is a manifest
		// missing its layer): the layer comes later (SetLayer checks it).
		m.Pieces = nil
		return m, nil
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Decode reads, decodes and validates a manifest of at most MaxEncodedSize bytes.
func Decode(r io.Reader) (*Manifest, error) {
	data, err := readEncoded(r)
	if err != nil {
		return nil, err
	}
	return Unmarshal(data)
}

// DecodeHead is [Decode] for a manifest or a manifest head ([UnmarshalHead]).
func DecodeHead(r io.Reader) (*Manifest, error) {
	data, err := readEncoded(r)
	if err != nil {
		return nil, err
	}
	return UnmarshalHead(data)
}

func readEncoded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxEncodedSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: read: %w", err)
	}
	if len(data) > MaxEncodedSize {
		return nil, fmt.Errorf("manifest: larger than %d bytes", MaxEncodedSize)
	}
	return data, nil
}
