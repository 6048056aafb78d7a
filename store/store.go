// Package store keeps the pieces of one file on disk while it downloads: a
// FILE.part written with positional writes in any order, a record of which
// pieces are present, and an atomic rename to the final name once every piece
// is there. Every piece is verified against the manifest before it is written,
// and pieces found on disk when resuming are verified again before they count.
//
// Later, peers serve pieces out of the same store.
package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/stampede-dev/stampede/manifest"
)

// ErrIncomplete is returned by Commit while pieces are missing.
var ErrIncomplete = errors.New("store: pieces missing")

// PartSuffix is appended to the final path while a download is in progress.
const PartSuffix = ".part"

// File is a partially downloaded file. It is safe for concurrent use.
type File struct {
	m     *manifest.Manifest
	final string
	f     *os.File
	// direct, when the file system allows it, writes whole aligned pieces
	// past the page cache (see openDirect).
	direct *os.File
	wmu    sync.Mutex // serialises buffered writes to f

	mu   sync.Mutex // guards the following
	have []bool
	n    int // number of true entries in have
}

// Open creates or reopens final+".part" for the file m describes. With resume,
// an existing part file is kept and each of its pieces is re-verified (the
// ones that fail are simply missing); otherwise the part file starts empty.
// onVerify, if set, is called after each piece checked during resume, for
// progress display.
func Open(final string, m *manifest.Manifest, resume bool, onVerify func(done, total int)) (*File, error) {
	// A symbolic link at the part file is never written through: it could
	// point anywhere the process may write.
	flags := os.O_RDWR | os.O_CREATE | NoFollow
	if !resume {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(final+PartSuffix, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &File{m: m, final: final, f: f, have: make([]bool, m.NumPieces())}
	if resume {
		if err := s.rescan(onVerify); err != nil {
			f.Close()
			return nil, err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if fi.Size() != m.Size {
		// Reserve the whole file now, so a full disk shows up before any
		// transfer rather than in the middle of one.
		if err := allocate(f, fi.Size(), m.Size); err != nil {
			f.Close()
			return nil, fmt.Errorf("store: reserve %d bytes for %s: %w", m.Size, f.Name(), err)
		}
	}
	s.direct = openDirect(f.Name())
	return s, nil
}

// OpenComplete opens an existing, complete file for seeding. Pieces are
// verified as they are read (ReadPiece), so a file that differs from m is
// never passed on, however it differs.
func OpenComplete(path string, m *manifest.Manifest) (*File, error) {
	// Non-blocking, so that a FIFO put in the file's place cannot hang
	// the open; it is refused below.
	f, err := os.OpenFile(path, os.O_RDONLY|NonBlock, 0)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return OpenCompleteFile(f, m)
}

// OpenCompleteFile is OpenComplete of a file the caller has opened (and
// checked); the File owns f from then on, and closes it on failure too.
func OpenCompleteFile(f *os.File, m *manifest.Manifest) (*File, error) {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("store: %s is not a regular file", path)
	}
	if fi.Size() != m.Size {
		f.Close()
		return nil, fmt.Errorf("store: %s has %d bytes, the manifest says %d", path, fi.Size(), m.Size)
	}
	s := &File{m: m, final: path, f: f, have: make([]bool, m.NumPieces()), n: m.NumPieces()}
	for i := range s.have {
		s.have[i] = true
	}
	return s, nil
}

// IsComplete reports whether the regular file at path is the whole file m
// describes, every piece verified. A file of another size, or another kind
// (a link, a FIFO), is not, and is not read. onVerify is called as in Open.
func IsComplete(path string, m *manifest.Manifest, onVerify func(done, total int)) (bool, error) {
	switch fi, err := os.Lstat(path); {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: %w", err)
	case !fi.Mode().IsRegular() || fi.Size() != m.Size:
		return false, nil
	}
	// Checked again on the open file: the path may have changed since.
	f, err := os.OpenFile(path, os.O_RDONLY|NoFollow|NonBlock, 0)
	if err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != m.Size {
		return false, nil
	}
	buf := make([]byte, m.PieceSize)
	total := m.NumPieces()
	for i := range total {
		data := buf[:m.PieceLen(i)]
		if _, err := f.ReadAt(data, m.PieceOffset(i)); err != nil {
			return false, fmt.Errorf("store: read piece %d of %s: %w", i, path, err)
		}
		if m.VerifyPiece(i, data) != nil {
			return false, nil
		}
		if onVerify != nil {
			onVerify(i+1, total)
		}
	}
	return true, nil
}

// rescan verifies the pieces present in the part file.
func (s *File) rescan(onVerify func(done, total int)) error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	buf := make([]byte, s.m.PieceSize)
	total := s.m.NumPieces()
	for i := range total {
		off, n := s.m.PieceOffset(i), s.m.PieceLen(i)
		if off+n <= fi.Size() {
			data := buf[:n]
			if _, err := s.f.ReadAt(data, off); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("store: resume: read piece %d: %w", i, err)
			}
			if s.m.VerifyPiece(i, data) == nil {
				s.have[i] = true
				s.n++
			}
		}
		if onVerify != nil {
			onVerify(i+1, total)
		}
	}
	if fi.Size() > s.m.Size {
		if err := s.f.Truncate(s.m.Size); err != nil {
			return fmt.Errorf("store: %w", err)
		}
	}
	return nil
}

// Manifest returns the manifest the store was opened with.
func (s *File) Manifest() *manifest.Manifest { return s.m }

// Has reports whether piece i is present and verified.
func (s *File) Has(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.have[i]
}

// Count returns how many pieces are present.
func (s *File) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Missing returns the indexes of the pieces not yet present, in order.
func (s *File) Missing() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i, ok := range s.have {
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

// WritePiece verifies data as piece i and writes it. A piece that fails
// verification is not written and the error wraps manifest.ErrCorruptPiece.
// Writing a piece already present is a no-op.
func (s *File) WritePiece(i int, data []byte) error {
	if err := s.m.VerifyPiece(i, data); err != nil {
		return err
	}
	if s.Has(i) {
		return nil
	}
	if err := s.writeAt(data, s.m.PieceOffset(i)); err != nil {
		return fmt.Errorf("store: write piece %d: %w", i, err)
	}
	s.mu.Lock()
	if !s.have[i] {
		s.have[i] = true
		s.n++
	}
	s.mu.Unlock()
	return nil
}

func (s *File) writeAt(data []byte, off int64) error {
	if s.direct != nil && directOK(data, off) {
		_, err := s.direct.WriteAt(data, off)
		return err
	}
	// One buffered writer at a time: concurrent writes to one file contend
	// on its inode lock in the kernel, which burns more CPU than it saves.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.f.WriteAt(data, off)
	return err
}

// ReadPiece reads piece i into buf (which must hold PieceLen(i) bytes) and
// verifies it, so a piece damaged on disk is never passed on.
func (s *File) ReadPiece(i int, buf []byte) ([]byte, error) {
	if !s.Has(i) {
		return nil, fmt.Errorf("store: piece %d not present", i)
	}
	data := buf[:s.m.PieceLen(i)]
	if _, err := s.f.ReadAt(data, s.m.PieceOffset(i)); err != nil {
		return nil, fmt.Errorf("store: read piece %d: %w", i, err)
	}
	if err := s.m.VerifyPiece(i, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Commit makes the complete file appear at its final path: it flushes the part
// file to stable storage and renames it, so the final path only ever holds a
// whole, verified file. The store stays open: pieces can still be read (and
// served to peers) until Close.
func (s *File) Commit() error {
	if c := s.Count(); c != s.m.NumPieces() {
		return fmt.Errorf("%w: have %d of %d", ErrIncomplete, c, s.m.NumPieces())
	}
	s.closeDirect()
	return Publish(s.f, s.final)
}

func (s *File) closeDirect() {
	if s.direct != nil {
		s.direct.Close()
		s.direct = nil
	}
}

// Publish makes the finished part file f appear at final: fsync, atomic
// rename, then fsync of the directory so the rename survives a crash. f stays
// open (an open file survives its rename); the caller closes it.
func Publish(f *os.File, final string) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: sync: %w", err)
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return syncDir(filepath.Dir(final))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("store: sync %s: %w", dir, err)
	}
	return nil
}

// Close closes the part file, leaving it for a later resume.
func (s *File) Close() error {
	s.closeDirect()
	return s.f.Close()
}
