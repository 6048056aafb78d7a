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
// and returns it, whole, to free when done with it. A download opens its sink
// once, so a fallback from pieces to one stream continues where it was.
type sink interface {
	missing() []int
	ordered() bool
	put(i int, data []byte, free chan<- []byte) error
	finish() error
	close() error
}

func (d *Download) openSink(m *manifest.Manifest, resume bool) (sink, error) {
	if d.sk != nil {
		return d.sk, nil
	}
	if d.cfg.Output == "-" {
		s := &orderedSink{m: m, w: d.cfg.Stdout, held: map[int]heldPiece{}}
		if d.cfg.SHA256 != "" {
			s.sum = sha256.New()
			s.w = io.MultiWriter(s.w, s.sum)
		}
		d.streamSum = s.sum
		d.sk = s
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
	if resume && !d.cfg.Continue { // found, not asked for: say what became of it
		part := d.cfg.Output + store.PartSuffix
		if n := st.Count(); n > 0 {
			d.cfg.Logger.Info("resuming the partial download; its pieces were verified again", "part", part, "pieces", n, "of", m.NumPieces())
		} else {
			d.cfg.Logger.Warn("the part file holds no piece of this file; starting over", "part", part)
		}
	}
	d.sk = &fileSink{st: st}
	return d.sk, nil
}

// fileSink writes verified pieces into the part file.
type fileSink struct {
	st *store.File
}

func (s *fileSink) missing() []int { return s.st.Missing() }
func (s *fileSink) ordered() bool  { return false }

func (s *fileSink) put(i int, data []byte, free chan<- []byte) error {
	defer func() { free <- data[:cap(data)] }()
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
	return nil
}

func (s *fileSink) close() error { return s.st.Close() }

// orderedSink verifies pieces and writes them to w in order, holding the ones
// that arrive early. The scheduler bounds how many it holds: they occupy
// buffers from the free list.
type orderedSink struct {
	m   *manifest.Manifest
	w   io.Writer
	sum hash.Hash // of what was written, when --sha256 asks

	mu   sync.Mutex // guards the following
	next int
	held map[int]heldPiece
	werr error
}

// heldPiece is a verified piece waiting for the ones before it.
type heldPiece struct {
	data []byte
	free chan<- []byte
}

func (s *orderedSink) missing() []int {
	out := make([]int, s.m.NumPieces())
	for i := range out {
		out[i] = i
	}
	return out
}

func (s *orderedSink) ordered() bool { return true }

func (s *orderedSink) put(i int, data []byte, free chan<- []byte) error {
	if err := s.m.VerifyPiece(i, data); err != nil {
		free <- data[:cap(data)]
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.held[i]; dup || i < s.next {
		free <- data[:cap(data)]
		return s.werr
	}
	s.held[i] = heldPiece{data, free}
	for s.werr == nil {
		h, ok := s.held[s.next]
		if !ok {
			break
		}
		delete(s.held, s.next)
		if _, err := s.w.Write(h.data); err != nil {
			s.werr = fmt.Errorf("%w: write output: %v", ErrLocal, err)
		}
		h.free <- h.data[:cap(h.data)]
		s.next++
	}
	return s.werr
}

func (s *orderedSink) finish() error { return nil }
func (s *orderedSink) close() error  { return nil }

func isCorrupt(err error) bool { return errors.Is(err, manifest.ErrCorruptPiece) }

// checkWholeSHA256 checks --sha256, when given, against the complete file
// before it is published: the stream's running sum for stdout, FILE.part
// otherwise. On a mismatch FILE.part stays (every piece matched the server's
// manifest) and nothing appears at the final path.
func (d *Download) checkWholeSHA256(res *Result) error {
	if d.cfg.SHA256 == "" {
		return nil
	}
	h := d.streamSum
	if h == nil {
		f, err := os.Open(d.cfg.Output + store.PartSuffix)
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
		return fmt.Errorf("%w: SHA-256 is %s, --sha256 wants %s; every piece matched the server's manifest, so the manifest and --sha256 disagree (%s kept)",
			ErrVerify, got, strings.ToLower(d.cfg.SHA256), d.outputName()+store.PartSuffix)
	}
	res.Verified = "merkle+sha256"
	return nil
}
