package cdn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
)

// What the node a client reached does with a GET or HEAD, CoBlitz's agent:
// it gets the file's meta, answers what the meta answers (HEAD, 304, 412,
// 416: http.ServeContent with the origin's validators), and streams the
// body in order through a body that keeps a window of chunk fetches in
// flight ahead of the client.

// Header is the response header that says how the node answered:
// "chunks" (cached and shared, in chunks) or "direct" (passed through).
const Header = "Stampede-Cdn"

// CheckHeader says what a chunked body is checked against: "manifest"
// (every chunk's hash), "repr-digest" (the whole body, by the origin's
// Repr-Digest, when sent whole) or "validators-only" (the validators of
// every range; nothing checks the bytes themselves).
const CheckHeader = "Stampede-Cdn-Check"

func (n *Node) serveClient(w http.ResponseWriter, r *http.Request, u *url.URL) {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		n.passThrough(w, r, u, "method "+r.Method)
		return
	case r.Header.Get("Authorization") != "" || r.Header.Get("Cookie") != "":
		// Never shared: the answer may be this user's alone.
		n.passThrough(w, r, u, "credentials")
		return
	}
	m, err := n.getMeta(r.Context(), u, r.Header, false, "")
	if err != nil {
		n.met.requests[answerError].Inc()
		if r.Context().Err() == nil {
			n.log.Warn("cannot reach the origin", "url", u.Redacted(), "err", err)
			http.Error(w, "cannot reach the origin: "+err.Error(), http.StatusBadGateway)
		}
		return
	}
	if !m.Cacheable {
		n.passThrough(w, r, u, m.Why)
		return
	}
	n.met.requests[answerChunks].Inc()
	h := w.Header()
	for k, v := range m.Header {
		h[k] = v
	}
	if _, ok := m.Header["Content-Type"]; !ok {
		h["Content-Type"] = nil // never sniff: the origin said nothing
	}
	h.Set(Header, "chunks")
	h.Set(CheckHeader, m.checks())
	if len(m.Vary) > 0 {
		h.Del("Vary")
		for _, v := range m.Vary {
			h.Add("Vary", v)
		}
	}
	modtime, _ := http.ParseTime(m.LastModified)
	b := n.newBody(r.Context(), m, r.Header.Get("Range"))
	defer b.close()
	http.ServeContent(w, r, "", modtime, b)
	if b.err != nil {
		n.met.aborted.Inc()
		if r.Context().Err() == nil {
			n.log.Warn("response aborted", "url", u.Redacted(), "err", b.err)
		}
		panic(http.ErrAbortHandler)
	}
}

// passThrough proxies a request the node does not cache straight to its
// origin.
func (n *Node) passThrough(w http.ResponseWriter, r *http.Request, u *url.URL, why string) {
	n.met.requests[answerDirect].Inc()
	n.log.Debug("passing through", "url", u.Redacted(), "why", why)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = u
			pr.Out.Host = u.Host
			pr.Out.Header.Del(authHeader)
		},
		Transport: n.client.Transport,
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(Header, "direct")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				http.Error(w, "cannot reach the origin: "+err.Error(), http.StatusBadGateway)
			}
		},
		ErrorLog: nil,
	}
	rp.ServeHTTP(w, r)
}

// body is a client's view of a file as an io.ReadSeeker for ServeContent:
// reading at a position fetches the chunk there and keeps the next ones
// of the window in flight. Read in order from the start to the end, its
// bytes are hashed, and the last chunk is not given out unless the hash
// matches the origin's Repr-Digest. It belongs to one goroutine.
type body struct {
	n   *Node
	ctx context.Context
	m   *meta
	pos int64
	// end is where the client's Range ends, a hint to fetch no further
	// ahead (reading beyond it still works).
	end int64

	win     *window
	dl      *deadline
	pending map[int]*fetching
	next    int // the next chunk to start

	cur    []byte
	curIdx int

	sum    hash.Hash // nil once out of order
	summed int64

	err error
}

type fetching struct {
	done   chan struct{}
	data   []byte
	late   bool
	err    error
	start  time.Time
	took   time.Duration
	cancel context.CancelFunc
}

func (n *Node) newBody(ctx context.Context, m *meta, rangeHdr string) *body {
	b := &body{n: n, ctx: ctx, m: m, end: m.Size, curIdx: -1, pending: make(map[int]*fetching),
		win: newWindow(n.cfg.Window, 1, n.maxWindow(m)), dl: &deadline{lo: n.cfg.MinDeadline, hi: n.cfg.MaxDeadline}}
	if rangeHdr != "" {
		if rs, err := httphdr.ParseRange(rangeHdr, m.Size); err == nil && len(rs) > 0 {
			b.end = 0
			for _, r := range rs {
				b.end = max(b.end, r.Start+r.Length)
			}
		}
	}
	if m.ReprDigest != nil {
		b.sum = sha256.New()
	}
	return b
}

// maxWindow is the most chunks a client may have in flight: MaxWindow,
// and no more than MaxWindowBytes.
func (n *Node) maxWindow(m *meta) int {
	return max(1, min(n.cfg.MaxWindow, int(n.cfg.MaxWindowBytes/max(1, m.ChunkSize))))
}

func (b *body) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += b.pos
	case io.SeekEnd:
		off += b.m.Size
	default:
		return 0, errors.New("bad whence")
	}
	if off < 0 {
		return 0, errors.New("negative position")
	}
	b.pos = off
	return off, nil
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.pos >= b.m.Size {
		return 0, io.EOF
	}
	i := int(b.pos / b.m.ChunkSize)
	if i != b.curIdx {
		data, err := b.chunk(i)
		if err != nil {
			b.err = err
			return 0, err
		}
		b.cur, b.curIdx = data, i
	}
	off, _ := b.m.chunkRange(i)
	k := copy(p, b.cur[b.pos-off:])
	b.pos += int64(k)
	b.n.met.clientBytes.Add(float64(k))
	return k, nil
}

// chunk waits for chunk i, starting it and the window after it.
func (b *body) chunk(i int) ([]byte, error) {
	for j, f := range b.pending {
		if j < i { // left behind by a seek
			f.cancel()
			delete(b.pending, j)
		}
	}
	if b.next < i || b.next > i+b.win.size() {
		b.next = i
	}
	if b.pending[i] == nil {
		b.start(i)
	}
	b.fill(i)
	f := b.pending[i]
	select {
	case <-f.done:
	case <-b.ctx.Done():
		return nil, context.Cause(b.ctx)
	}
	delete(b.pending, i)
	if f.err != nil {
		return nil, f.err
	}
	if f.late {
		b.win.loss()
	} else {
		b.win.success()
		b.dl.sample(f.took)
	}
	if b.sum != nil {
		off, _ := b.m.chunkRange(i)
		if off == b.summed {
			b.sum.Write(f.data)
			b.summed += int64(len(f.data))
			if b.summed == b.m.Size && !bytes.Equal(b.sum.Sum(nil), b.m.ReprDigest) {
				b.n.met.rejected[fromWhole].Inc()
				b.n.distrust(b.m)
				return nil, fmt.Errorf("the file does not match the origin's Repr-Digest")
			}
		} else {
			b.sum = nil
		}
	}
	b.fill(i + 1)
	return f.data, nil
}

// fill starts the chunks from i on that the window and the client's
// range allow.
func (b *body) fill(i int) {
	last := int((max(b.end, b.pos+1) - 1) / b.m.ChunkSize)
	for b.next < i+b.win.size() && b.next <= last && b.next < b.m.numChunks() {
		if b.pending[b.next] == nil && b.next != b.curIdx {
			b.start(b.next)
		}
		b.next++
	}
}

func (b *body) start(i int) {
	ctx, cancel := context.WithCancel(b.ctx)
	f := &fetching{done: make(chan struct{}), start: time.Now(), cancel: cancel}
	b.pending[i] = f
	dl := b.dl.get()
	go func() {
		defer close(f.done)
		f.data, f.late, f.err = b.n.clientChunk(ctx, b.m, i, dl)
		f.took = time.Since(f.start)
	}()
}

func (b *body) close() {
	for _, f := range b.pending {
		f.cancel()
	}
}
