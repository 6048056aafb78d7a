package fetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/store"
)

// sink is where verified pieces go: a part file (any order) or a stream that
// must be written in order (stdout). put takes ownership of data's buffer
// and returns it, whole, to the free list when done with it.
type sink interface {
	missing() []int
	ordered() bool
	put(i int, data []byte) error
	finish() error
	close() error
}

func (d *Download) openSink(m *manifest.Manifest, resume bool, free chan []byte) (sink, error) {
	if d.cfg.Output == "-" {
		s := &orderedSink{m: m, w: d.cfg.Stdout, free: free, held: map[int][]byte{}}
		if d.cfg.SHA256 != "" {
			s.sum = sha256.New()
			s.w = io.MultiWriter(s.w, s.sum)
		}
		d.streamSum = s.sum
		return s, nil
	}
	if resume {
		d.phase.Store("verifying")
	}
	st, err := store.Open(d.cfg.Output, m, resume, func(done, total int) {
		d.done.Store(int64(done) * m.PieceSize)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrLocal, err)
	}
	return &fileSink{st: st, free: free}, nil
}

// fileSink writes verified pieces into the part file.
type fileSink struct {
	st        *store.File
	free      chan []byte
	committed bool
}

func (s *fileSink) missing() []int { return s.st.Missing() }
func (s *fileSink) ordered() bool  { return false }

func (s *fileSink) put(i int, data []byte) error {
	defer func() { s.free <- data[:cap(data)] }()
	if err := s.st.WritePiece(i, data); err != nil {
		if isCorrupt(err) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	return nil
}

func (s *fileSink) finish() error {
	if err := s.st.Commit(); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	s.committed = true
	return nil
}

func (s *fileSink) close() error {
	if s.committed {
		return nil
	}
	return s.st.Close()
}

// orderedSink verifies pieces and writes them to w in order, holding the ones
// that arrive early. The scheduler bounds how many it holds: they occupy
// buffers from the free list.
type orderedSink struct {
	m    *manifest.Manifest
	w    io.Writer
	free chan []byte
	sum  hash.Hash // of what was written, when --sha256 asks

	mu   sync.Mutex // guards the following
	next int
	held map[int][]byte
	werr error
}

func (s *orderedSink) missing() []int {
	out := make([]int, s.m.NumPieces())
	for i := range out {
		out[i] = i
	}
	return out
}

func (s *orderedSink) ordered() bool { return true }

func (s *orderedSink) put(i int, data []byte) error {
	if err := s.m.VerifyPiece(i, data); err != nil {
		s.free <- data[:cap(data)]
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < s.next || s.held[i] != nil {
		s.free <- data[:cap(data)]
		return s.werr
	}
	s.held[i] = data
	for s.werr == nil {
		p, ok := s.held[s.next]
		if !ok {
			break
		}
		delete(s.held, s.next)
		if _, err := s.w.Write(p); err != nil {
			s.werr = fmt.Errorf("%w: write output: %v", ErrLocal, err)
		}
		s.free <- p[:cap(p)]
		s.next++
	}
	return s.werr
}

func (s *orderedSink) finish() error { return nil }
func (s *orderedSink) close() error  { return nil }

func isCorrupt(err error) bool { return errors.Is(err, manifest.ErrCorruptPiece) }

// checkWholeSHA256 checks --sha256 against the finished file, when given.
func (d *Download) checkWholeSHA256(res *Result) error {
	if d.cfg.SHA256 == "" {
		return nil
	}
	h := d.streamSum
	if h == nil {
		f, err := os.Open(d.cfg.Output)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrLocal, err)
		}
		defer f.Close()
		h = sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("%w: %v", ErrLocal, err)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(d.cfg.SHA256) {
		return fmt.Errorf("%w: %s has SHA-256 %s, --sha256 wants %s (every piece matched the server's manifest: the manifest and --sha256 disagree)",
			ErrVerify, d.outputName(), got, strings.ToLower(d.cfg.SHA256))
	}
	res.Verified = "merkle+sha256"
	return nil
}
