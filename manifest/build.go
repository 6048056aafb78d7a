package manifest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
)

// Builder computes a manifest from a stream of bytes written to it in order.
// It holds one partial block and the leaf hashes of the current piece, so its
// memory does not depend on the file size beyond the piece layer itself.
type Builder struct {
	size, pieceSize int64
	width           int // leaves per piece subtree

	written int64
	block   []byte // partial block, len < BlockSize
	leaves  []Hash // leaf hashes of the current piece
	pieces  []Hash
}

// NewBuilder returns a Builder for a file of exactly size bytes. pieceSize 0
// picks PieceSizeFor(size).
func NewBuilder(size, pieceSize int64) (*Builder, error) {
	if pieceSize == 0 {
		pieceSize = PieceSizeFor(size)
	}
	if err := checkGeometry(size, pieceSize); err != nil {
		return nil, err
	}
	return &Builder{
		size:      size,
		pieceSize: pieceSize,
		width:     leafWidth(size, pieceSize),
		block:     make([]byte, 0, BlockSize),
		leaves:    make([]Hash, 0, pieceSize/BlockSize),
		pieces:    make([]Hash, 0, numPieces(size, pieceSize)),
	}, nil
}

// Write hashes p. Writing more than the declared size is an error.
func (b *Builder) Write(p []byte) (int, error) {
	if int64(len(p)) > b.size-b.written {
		return 0, fmt.Errorf("manifest: more than the declared %d bytes", b.size)
	}
	n := len(p)
	b.written += int64(n)
	for len(p) > 0 {
		if len(b.block) == 0 && len(p) >= BlockSize {
			b.addLeaf(sha256.Sum256(p[:BlockSize]))
			p = p[BlockSize:]
			continue
		}
		k := copy(b.block[len(b.block):BlockSize], p)
		b.block = b.block[:len(b.block)+k]
		p = p[k:]
		if len(b.block) == BlockSize {
			b.addLeaf(sha256.Sum256(b.block))
			b.block = b.block[:0]
		}
	}
	return n, nil
}

func (b *Builder) addLeaf(h Hash) {
	b.leaves = append(b.leaves, h)
	if int64(len(b.leaves))*BlockSize == b.pieceSize {
		b.closePiece()
	}
}

func (b *Builder) closePiece() {
	b.pieces = append(b.pieces, merkleRoot(b.leaves, b.width, Hash{}))
	b.leaves = b.leaves[:0]
}

// Manifest finishes the tree. It fails if fewer than the declared bytes were
// written.
func (b *Builder) Manifest(name string) (*Manifest, error) {
	if b.written != b.size {
		return nil, fmt.Errorf("manifest: got %d of the declared %d bytes: %w", b.written, b.size, io.ErrUnexpectedEOF)
	}
	if len(b.block) > 0 {
		b.leaves = append(b.leaves, sha256.Sum256(b.block))
		b.block = b.block[:0]
	}
	if len(b.leaves) > 0 {
		b.closePiece()
	}
	m := &Manifest{Name: name, Size: b.size, PieceSize: b.pieceSize, Pieces: b.pieces}
	m.Root = rootOf(m.Pieces, m.PieceSize)
	return m, nil
}

// FromReader computes the manifest of the size bytes read from r. It fails if
// r ends early or holds more than size bytes.
func FromReader(r io.Reader, size int64, name string) (*Manifest, error) {
	b, err := NewBuilder(size, 0)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(b, io.LimitReader(r, size), buf); err != nil {
		return nil, err
	}
	if n, _ := io.ReadFull(r, buf[:1]); n > 0 {
		return nil, fmt.Errorf("manifest: source holds more than the declared %d bytes", size)
	}
	return b.Manifest(name)
}

// FromReaderAt computes the manifest of the first size bytes of r, hashing
// pieces on up to workers goroutines (0 means GOMAXPROCS).
func FromReaderAt(r io.ReaderAt, size int64, name string, workers int) (*Manifest, error) {
	ps := PieceSizeFor(size)
	if err := checkGeometry(size, ps); err != nil {
		return nil, err
	}
	n := numPieces(size, ps)
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, n))
	m := &Manifest{Name: name, Size: size, PieceSize: ps, Pieces: make([]Hash, n)}
	width := leafWidth(size, ps)

	var (
		wg       sync.WaitGroup
		failed   atomic.Bool
		mu       sync.Mutex // guards firstErr
		firstErr error
	)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			buf := make([]byte, ps)
			scratch := make([]Hash, 0, ps/BlockSize)
			for i := range next {
				if failed.Load() {
					continue // drain
				}
				data := buf[:m.PieceLen(i)]
				// ReaderAt may return io.EOF along with a full read that
				// ends at the end of the source.
				if n, err := r.ReadAt(data, m.PieceOffset(i)); n < len(data) {
					if err == nil || errors.Is(err, io.EOF) {
						err = io.ErrUnexpectedEOF
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("manifest: read piece %d: %w", i, err)
					}
					mu.Unlock()
					failed.Store(true)
					continue
				}
				m.Pieces[i], scratch = subtreeRoot(data, width, scratch)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	m.Root = rootOf(m.Pieces, m.PieceSize)
	return m, nil
}
