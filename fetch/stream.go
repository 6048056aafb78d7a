package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
)

// runStream downloads with one GET at a time: for servers without a manifest
// or without Range support. With a manifest, pieces are still verified one by
// one as they stream past.
func (d *Download) runStream(ctx context.Context, in *originclient.Resource, m *manifest.Manifest, res *Result) error {
	d.phase.Store("downloading")
	if m != nil {
		return d.streamPieces(ctx, in, m, res)
	}
	return d.streamPlain(ctx, in, res)
}

// streamPieces reads the whole file in one stream and puts it piece by piece
// into the sink, which verifies each one. A failed stream is retried from the
// start; pieces already present are skipped. A stream that gets further
// than any before it has made progress (see Config.Retries).
func (d *Download) streamPieces(ctx context.Context, in *originclient.Resource, m *manifest.Manifest, res *Result) error {
	free := make(chan []byte, 1)
	free <- make([]byte, m.PieceSize)
	sk, err := d.openSink(m, d.resume)
	if err != nil {
		return err
	}
	res.PiecesResumed = m.NumPieces() - len(sk.missing())
	d.resumed.Store(m.Size - bytesOf(m, sk.missing()))
	d.phase.Store("downloading")
	var (
		busyWaited time.Duration
		p          = originclient.Patience{Retries: d.cfg.Retries}
	)
	for {
		err = d.streamPiecesOnce(ctx, in, m, sk, free, &busyWaited)
		if err == nil {
			break
		}
		if isCorrupt(err) {
			res.PiecesRejected++
		}
		if ctx.Err() != nil || errors.Is(err, ErrChanged) || errors.Is(err, ErrLocal) || originclient.Permanent(err) {
			return err
		}
		wait, ok := p.Failed(d.done.Load())
		if !ok {
			if isCorrupt(err) {
				return fmt.Errorf("%w: %v (after %s)", ErrVerify, err, p.Tries())
			}
			return fmt.Errorf("the stream failed %d times in a row without getting further, last: %w", p.Failures, err)
		}
		d.cfg.Logger.Info("stream failed, retrying", "retry", fmt.Sprintf("%d/%d", p.Failures, p.Retries), "in", wait, "err", err)
		if err := originclient.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	return d.finish(sk, res)
}

func (d *Download) streamPiecesOnce(ctx context.Context, in *originclient.Resource, m *manifest.Manifest, sk sink, free chan []byte, busyWaited *time.Duration) error {
	resp, err := d.oc.GetStream(ctx, in, 0, busyWaited)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	etag, lm := originclient.Validators(m, in)
	if err := originclient.CheckValidators(resp.Header, etag, lm); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &StatusError{URL: in.URL.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	if resp.ContentLength >= 0 && resp.ContentLength != m.Size {
		return fmt.Errorf("%w: server sends %d bytes, the manifest says %d", ErrChanged, resp.ContentLength, m.Size)
	}
	body := d.lim.Reader(ctx, resp.Body)
	for i := range m.NumPieces() {
		buf := <-free
		data := buf[:m.PieceLen(i)]
		k, err := io.ReadFull(body, data)
		d.received.Add(int64(k))
		if err != nil {
			free <- buf
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: body ended after %d of %d bytes: %w", ErrProtocol, m.PieceOffset(i)+int64(k), m.Size, err)
		}
		if err := sk.put(i, data, free); err != nil {
			return err
		}
		d.done.Store(m.PieceOffset(i) + int64(len(data)))
	}
	return nil
}

// partMeta is kept beside a part file downloaded without a manifest, so a
// resume can tell whether the server's file is still the one it started.
type partMeta struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	Size         int64  `json:"size"`
}

const metaSuffix = ".part.meta"

// streamPlain downloads without a manifest: one stream, resumed with a Range
// request after a truncation when the server allows it, verified at the end
// by --sha256 or the server's Repr-Digest if either is there.
func (d *Download) streamPlain(ctx context.Context, in *originclient.Resource, res *Result) error {
	out := &plainOut{d: d, sum: sha256.New()}
	if err := out.open(in); err != nil {
		return err
	}
	defer out.close()

	var (
		busyWaited time.Duration
		digest     = in.ReprDigest // valid while the validators hold
		p          = originclient.Patience{Retries: d.cfg.Retries}
	)
	for {
		done, err := d.streamPlainTry(ctx, in, out, &digest, &busyWaited)
		if done {
			break
		}
		if ctx.Err() != nil || errors.Is(err, ErrChanged) || errors.Is(err, ErrLocal) || originclient.Permanent(err) {
			return err
		}
		// Bytes written are kept (resumed with Range), so getting further
		// than ever before is progress.
		wait, ok := p.Failed(out.off)
		if !ok {
			return fmt.Errorf("the stream failed %d times in a row without getting further, last: %w", p.Failures, err)
		}
		if out.off > 0 && !(in.AcceptRanges && (in.ETag != "" || in.LastModified != "")) {
			if d.cfg.Output == "-" {
				return fmt.Errorf("%v; the server cannot resume (no Range support or validator) and stdout cannot be rewound", err)
			}
			if err := out.restart(); err != nil {
				return err
			}
		}
		d.cfg.Logger.Info("stream failed, retrying", "at_byte", out.off, "retry", fmt.Sprintf("%d/%d", p.Failures, p.Retries),
			"in", wait, "err", err)
		if err := originclient.Sleep(ctx, wait); err != nil {
			return err
		}
	}

	got := out.sum.Sum(nil)
	switch {
	case d.cfg.SHA256 != "":
		want, _ := hex.DecodeString(strings.ToLower(d.cfg.SHA256))
		if !bytes.Equal(got, want) {
			out.discard()
			return fmt.Errorf("%w: SHA-256 is %x, --sha256 wants %x; the download was discarded", ErrVerify, got, want)
		}
		res.Verified = "sha256"
	case digest != nil:
		if !bytes.Equal(got, digest) {
			out.discard()
			return fmt.Errorf("%w: SHA-256 is %x, the server's Repr-Digest says %x; the download was discarded", ErrVerify, got, digest)
		}
		res.Verified = "repr-digest"
	default:
		res.Verified = "none"
		d.cfg.Logger.Warn("UNVERIFIED download: the server publishes no manifest and no Repr-Digest; pass --sha256 HEX to verify", "url", in.URL)
	}
	d.phase.Store("finishing")
	d.size.Store(out.off)
	return out.commit()
}

// streamPlainTry sends one GET from out.off and copies its answer into out.
// It reports done when the whole file has arrived.
func (d *Download) streamPlainTry(ctx context.Context, in *originclient.Resource, out *plainOut, digest *[]byte, busyWaited *time.Duration) (bool, error) {
	resp, err := d.oc.GetStream(ctx, in, out.off, busyWaited)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	return d.streamPlainOnce(ctx, in, resp, out, digest)
}

// streamPlainOnce copies one response into out. It reports done when the
// whole file has arrived.
func (d *Download) streamPlainOnce(ctx context.Context, in *originclient.Resource, resp *http.Response, out *plainOut, digest *[]byte) (bool, error) {
	if err := originclient.CheckValidators(resp.Header, in.ETag, in.LastModified); err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if out.off > 0 {
			d.cfg.Logger.Info("server sent the whole file instead of the rest; starting over")
			if d.cfg.Output == "-" {
				return false, fmt.Errorf("%w: server restarted the file and stdout cannot be rewound", ErrProtocol)
			}
			if err := out.restart(); err != nil {
				return false, err
			}
		}
		dg, err := httphdr.ReprDigestSHA256(resp.Header.Values("Repr-Digest"))
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if dg != nil {
			*digest = dg
		}
		if resp.ContentLength >= 0 {
			d.size.Store(resp.ContentLength)
		}
	case http.StatusPartialContent:
		cr, err := httphdr.ParseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if cr.First != out.off {
			return false, fmt.Errorf("%w: asked for bytes from %d, got Content-Range %q", ErrProtocol, out.off, resp.Header.Get("Content-Range"))
		}
		if cr.Size >= 0 {
			d.size.Store(cr.Size)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if in.Size >= 0 && out.off == in.Size {
			return true, nil // the part file was already complete
		}
		return false, fmt.Errorf("%w: server says byte %d is past the end of the file", ErrChanged, out.off)
	default:
		return false, &StatusError{URL: in.URL.String(), Code: resp.StatusCode, Status: resp.Status}
	}
	_, err := io.Copy(out, d.lim.Reader(ctx, resp.Body))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, ErrLocal) {
			return false, err
		}
		return false, fmt.Errorf("%w: body ended at byte %d: %w", ErrProtocol, out.off, err)
	}
	if want := d.size.Load(); want >= 0 && out.off != want {
		return false, fmt.Errorf("%w: body ended at byte %d of %d", ErrProtocol, out.off, want)
	}
	return true, nil
}

// plainOut is the destination of a download without a manifest: the part
// file (with its meta sidecar) or stdout. It hashes everything written.
type plainOut struct {
	d   *Download
	f   *os.File // nil for stdout
	off int64
	sum hash.Hash
}

func (o *plainOut) open(in *originclient.Resource) error {
	cfg := &o.d.cfg
	if cfg.Output == "-" {
		return nil
	}
	part := cfg.Output + store.PartSuffix
	meta := partMeta{URL: in.URL.String(), ETag: in.ETag, LastModified: in.LastModified, Size: in.Size}
	resume := o.d.resume
	if resume {
		if old, err := readSmallRegular(cfg.Output+metaSuffix, 64<<10); err == nil {
			var pm partMeta
			switch {
			case json.Unmarshal(old, &pm) != nil || pm.URL != meta.URL || pm.Size != meta.Size ||
				pm.ETag != meta.ETag || pm.LastModified != meta.LastModified:
				cfg.Logger.Warn("the file changed on the server since the partial download; starting over", "part", part)
				resume = false
			case !cfg.Continue && meta.ETag == "" && meta.LastModified == "":
				// Found, not asked for: with no validator, a same-sized
				// new version would be taken for the old one.
				cfg.Logger.Warn("the server gives no ETag or Last-Modified to tell whether the part file is of this version; starting over (-c resumes it anyway)", "part", part)
				resume = false
			}
		} else {
			// No record: the part file may come from a manifest download
			// (preallocated, with holes) or another server. Resuming it
			// could publish wrong bytes.
			if _, err := os.Stat(part); err == nil {
				cfg.Logger.Warn("part file has no record of its source; starting over", "part", part)
			}
			resume = false
		}
	}
	flags := os.O_RDWR | os.O_CREATE | store.NoFollow | store.NonBlock
	if !resume {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%w: %s is not a regular file", ErrLocal, part)
	}
	o.f = f
	mb, _ := json.Marshal(meta)
	if err := writeNoFollow(cfg.Output+metaSuffix, mb); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	if resume {
		o.d.phase.Store("verifying")
		// Hash what is there so the final digest covers the whole file.
		n, err := io.Copy(o.sum, f)
		if err != nil {
			return fmt.Errorf("%w: read %s: %v", ErrLocal, part, err)
		}
		o.off = n
		o.d.done.Store(n)
		o.d.resumed.Store(n)
		if !cfg.Continue {
			cfg.Logger.Info("resuming the partial download: the server's validators match its record", "part", part, "bytes", n)
		}
		o.d.phase.Store("downloading")
	}
	return nil
}

func (o *plainOut) Write(p []byte) (int, error) {
	var (
		n   int
		err error
	)
	if o.f == nil {
		n, err = o.d.cfg.Stdout.Write(p)
	} else {
		n, err = o.f.WriteAt(p, o.off)
	}
	o.sum.Write(p[:n])
	o.off += int64(n)
	o.d.done.Store(o.off)
	o.d.received.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("%w: write %s: %v", ErrLocal, o.d.outputName(), err)
	}
	return n, nil
}

// restart empties the part file to download from the beginning.
func (o *plainOut) restart() error {
	o.off = 0
	o.sum.Reset()
	o.d.done.Store(0)
	o.d.resumed.Store(0) // nothing of the part file is kept
	if o.f == nil {
		return nil
	}
	if err := o.f.Truncate(0); err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	return nil
}

// discard removes a part file whose content failed verification: resuming
// it could only reproduce the same wrong bytes.
func (o *plainOut) discard() {
	if o.f == nil {
		return
	}
	o.f.Close()
	o.f = nil
	os.Remove(o.d.cfg.Output + store.PartSuffix)
	os.Remove(o.d.cfg.Output + metaSuffix)
}

func (o *plainOut) commit() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	err := store.Publish(f, o.d.cfg.Output)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLocal, err)
	}
	os.Remove(o.d.cfg.Output + metaSuffix)
	return nil
}

func (o *plainOut) close() {
	if o.f != nil {
		o.f.Close()
	}
}

// writeNoFollow is os.WriteFile that never writes through a symbolic link
// at path, nor waits on a FIFO there.
func writeNoFollow(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|store.NoFollow|store.NonBlock, 0o644)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file", path)
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// readSmallRegular reads the file at path, at most max bytes, if it is a
// regular file: never through a symbolic link, never waiting on a FIFO.
func readSmallRegular(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|store.NoFollow|store.NonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, max))
}
