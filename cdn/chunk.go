package cdn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/internal/httphdr"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/originclient"
)

// How a chunk gets to a node, each tried in turn:
//
//   - its own cache;
//   - from the node a client reached (the entry): the node bounded-load HRW
//     picks in the chunk's order, within a deadline, then the next one
//     (re-forwarding), and last the origin itself;
//   - at a node asked for it that is not the chunk's owner (the overflow of
//     a hot chunk, or a bypassed owner's runner-up): from the owner, which
//     it then caches, becoming a replica;
//   - at the owner: from the origin, by Range, once however many ask.
//
// Every chunk is verified where it arrives: with the manifest when there is
// one, else by its length (the validators of each origin answer are
// checked where it is fetched).

// errChanged is a chunk request whose file is no longer the one the
// asking node knows (another meta ID).
var errChanged = errors.New("the file changed")

// originRequest is a request to u's origin with the header hdr. A
// configured origin's URL names it as its clients do (its Host); the
// node's transport dials its address (originDialer).
func (n *Node) originRequest(ctx context.Context, method string, u *url.URL, hdr http.Header) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("request to %s: %w", u.Redacted(), err)
	}
	if hdr != nil {
		req.Header = hdr.Clone()
	}
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// originChunk fetches chunk i from the origin by Range, with If-Range and
// the checks of every answer: status, validators, Content-Range, length,
// and the manifest's hash.
func (n *Node) originChunk(ctx context.Context, m *meta, i int) ([]byte, error) {
	u, err := url.Parse(m.URL)
	if err != nil {
		return nil, err
	}
	req, err := n.originRequest(ctx, http.MethodGet, u, m.ReqHeader)
	if err != nil {
		return nil, err
	}
	off, size := m.chunkRange(i)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+size-1))
	switch {
	case m.ETag != "" && !strings.HasPrefix(m.ETag, "W/"):
		req.Header.Set("If-Range", m.ETag)
	case m.LastModified != "":
		req.Header.Set("If-Range", m.LastModified)
	}
	n.met.originRequests.Add(1)
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chunk %d from the origin: %w", i, err)
	}
	defer resp.Body.Close()
	if err := originclient.CheckValidators(resp.Header, m.ETag, m.LastModified); err != nil {
		return nil, fmt.Errorf("chunk %d from the origin: %w", i, err)
	}
	if resp.StatusCode != http.StatusPartialContent {
		return nil, fmt.Errorf("chunk %d from the origin: status %d, want 206", i, resp.StatusCode)
	}
	cr, err := httphdr.ParseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || cr.First != off || cr.Last != off+size-1 || (cr.Size >= 0 && cr.Size != m.Size) {
		return nil, fmt.Errorf("chunk %d from the origin: Content-Range %q, want bytes %d-%d/%d", i, resp.Header.Get("Content-Range"), off, off+size-1, m.Size)
	}
	data, err := readExactly(resp.Body, size)
	n.met.originBytes.Add(float64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("chunk %d from the origin: %w", i, err)
	}
	if err := m.verify(i, data); err != nil {
		n.met.rejected[fromOrigin].Inc()
		return nil, fmt.Errorf("chunk %d from the origin: %w", i, err)
	}
	n.met.chunks[srcOrigin].Inc()
	return data, nil
}

// idHeader carries, in a node's answer for a chunk, the ID of the file
// the chunk is of, as the answering node knows it.
const idHeader = "Stampede-Cdn-Id"

// checkChunkHeader checks a node's answer for the chunk at off (size
// bytes) against m: the same file ID, the same range of the same size
// and, without a manifest (whose hashes check the bytes; two nodes may
// know different validators of the same content), the same validators.
func (m *meta) checkChunkHeader(h http.Header, off, size int64) error {
	if got := h.Get(idHeader); got != m.ID {
		return fmt.Errorf("%w: a chunk of %q, want %q", errMismatch, got, m.ID)
	}
	cr, err := httphdr.ParseContentRange(h.Get("Content-Range"))
	if err != nil || cr.First != off || cr.Last != off+size-1 || cr.Size != m.Size {
		return fmt.Errorf("%w: Content-Range %q, want bytes %d-%d/%d", errMismatch, h.Get("Content-Range"), off, off+size-1, m.Size)
	}
	if m.m != nil {
		return nil
	}
	if h.Get("ETag") != m.ETag || h.Get("Last-Modified") != m.LastModified {
		return fmt.Errorf("%w: validators %s %q, want %s %q", errMismatch, h.Get("ETag"), h.Get("Last-Modified"), m.ETag, m.LastModified)
	}
	return nil
}

// errMismatch is a node's answer about another file than the one asked.
var errMismatch = errors.New("the node's answer does not match what this node knows")

// readExactly reads n bytes from r, failing if it ends early or holds
// more.
func readExactly(r io.Reader, n int64) ([]byte, error) {
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("short body: %w", err)
	}
	var one [1]byte
	if k, _ := r.Read(one[:]); k > 0 {
		return nil, errors.New("body longer than announced")
	}
	return data, nil
}

// nodeRequest is a GET of path on node with query q, signed when the
// cluster has a key.
func (n *Node) nodeRequest(ctx context.Context, node, path string, q url.Values, hdr http.Header) (*http.Response, error) {
	uri := path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+node+uri, nil)
	if err != nil {
		return nil, err
	}
	if hdr != nil {
		req.Header = hdr.Clone()
	}
	if n.cfg.Key != nil {
		req.Header.Set(authHeader, makeToken(n.cfg.Key, http.MethodGet, uri, n.now()))
	}
	resp, err := n.nodeClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			n.memberFailed(node)
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode == http.StatusConflict {
			return nil, fmt.Errorf("node %s: %w", node, errChanged)
		}
		return nil, fmt.Errorf("node %s: status %d", node, resp.StatusCode)
	}
	return resp, nil
}

// remoteMeta asks node (the URL's owner) for u's meta.
func (n *Node) remoteMeta(ctx context.Context, node string, u *url.URL, fwd http.Header, id string) (*meta, error) {
	q := url.Values{"u": {u.String()}}
	if id != "" {
		q.Set("id", id)
	}
	resp, err := n.nodeRequest(ctx, node, pathMeta, q, fwd)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, manifest.MaxEncodedSize+1<<20))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	m, err := decodeMeta(data)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	if m.URL != u.String() {
		return nil, fmt.Errorf("node %s: meta of %s, asked %s", node, m.URL, u.Redacted())
	}
	return m, nil
}

// remoteChunk asks node for chunk i and verifies it. hop marks a request
// to the owner, which must not forward it again.
func (n *Node) remoteChunk(ctx context.Context, node string, m *meta, i int, hop bool) ([]byte, error) {
	q := url.Values{"u": {m.URL}, "i": {strconv.Itoa(i)}, "id": {m.ID}}
	if hop {
		q.Set("hop", "1")
	}
	resp, err := n.nodeRequest(ctx, node, pathChunk, q, m.ReqHeader)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	off, size := m.chunkRange(i)
	if err := m.checkChunkHeader(resp.Header, off, size); err != nil {
		n.met.rejected[fromNode].Inc()
		n.log.Warn("a node sent a chunk of another file", "node", node, "chunk", i, "url", m.URL, "err", err)
		n.memberFailed(node)
		return nil, fmt.Errorf("chunk %d from node %s: %w", i, node, err)
	}
	data, err := readExactly(resp.Body, size)
	if err != nil {
		return nil, fmt.Errorf("chunk %d from node %s: %w", i, node, err)
	}
	if err := m.verify(i, data); err != nil {
		n.met.rejected[fromNode].Inc()
		n.log.Warn("a node sent a chunk that failed verification", "node", node, "chunk", i, "url", m.URL, "err", err)
		n.memberFailed(node) // as a failed beat: a node that keeps lying leaves the ring
		return nil, fmt.Errorf("chunk %d from node %s: %w", i, node, err)
	}
	n.met.chunks[srcNode].Inc()
	return data, nil
}

// localChunk gets chunk i at this node: from its cache, else (collapsed)
// from the owner, or from the origin when this node is the owner, when
// hop says the asker already took it for the owner, or when the owner
// fails. What it gets, it caches.
func (n *Node) localChunk(ctx context.Context, m *meta, i int, hop bool) ([]byte, error) {
	key := m.chunkKey(i)
	if data, ok := n.cached(m, i); ok {
		return data, nil
	}
	data, joined, err := n.chunkFlights.do(ctx, key, func() ([]byte, error) {
		fctx, cancel := context.WithTimeout(n.life, n.cfg.FetchTimeout)
		defer cancel()
		var data []byte
		err := errors.New("not asked")
		if owner := n.ring().Owner(key); owner != n.self && !hop {
			if data, err = n.remoteChunk(fctx, owner, m, i, true); err != nil {
				n.log.Debug("the chunk's owner failed it: asking the origin", "owner", owner, "chunk", i, "err", err)
			}
		}
		if err != nil {
			if data, err = n.originChunk(fctx, m, i); err != nil {
				return nil, err
			}
		}
		n.keep(key, data)
		return data, nil
	})
	if joined && err == nil {
		n.met.chunks[srcJoined].Inc()
	}
	return data, err
}

// cached is chunk i from the cache, verified again.
func (n *Node) cached(m *meta, i int) ([]byte, bool) {
	data, ok := n.store.get(m.chunkKey(i))
	n.met.lookups.Inc()
	if !ok {
		return nil, false
	}
	if err := m.verify(i, data); err != nil {
		n.met.rejected[fromCache].Inc()
		return nil, false
	}
	n.met.chunks[srcCache].Inc()
	n.met.hits.Inc()
	return data, true
}

func (n *Node) keep(key string, data []byte) {
	if err := n.store.put(key, data); err != nil {
		n.log.Warn("not cached", "err", err)
	}
}

// clientChunk gets chunk i for a client of this node: from the cache,
// else through fetchForClients, one fetch however many of this node's
// clients want the chunk at once (they mostly read in step). A chunk its
// clients asked for HotThreshold times is kept here: a replica, so the
// next ones cost no node another upload. late reports whether a node was
// bypassed.
func (n *Node) clientChunk(ctx context.Context, m *meta, i int, dl time.Duration) (data []byte, late bool, err error) {
	if n.isDistrusted(m.ID) {
		data, err := n.originOnlyChunk(ctx, m, i)
		return data, false, err
	}
	if data, ok := n.cached(m, i); ok {
		return data, false, nil
	}
	key := m.chunkKey(i)
	got, joined, err := n.entryFlights.do(ctx, key, func() (fetched, error) {
		fctx, cancel := context.WithTimeout(n.life, n.cfg.FetchTimeout)
		defer cancel()
		return n.fetchForClients(fctx, m, i, dl)
	})
	if err != nil {
		return nil, got.late, err
	}
	if joined {
		n.met.chunks[srcJoined].Inc()
	}
	n.mu.Lock()
	hot := n.heatLocked(key)
	n.mu.Unlock()
	if hot && got.remote {
		n.keep(key, got.data)
	}
	return got.data, got.late, nil
}

// distrust makes this node get m's chunks for its clients from the
// origin alone, and drops those of m it holds: m's whole body failed its
// Repr-Digest here, so a node (or this cache) gave wrong bytes that
// nothing can single out, and would give them again.
func (n *Node) distrust(m *meta) {
	n.mu.Lock()
	if len(n.distrusted) >= maxMetas {
		clear(n.distrusted)
	}
	n.distrusted[m.ID] = true
	n.mu.Unlock()
	for i := range m.numChunks() {
		n.store.drop(m.chunkKey(i))
	}
	n.log.Warn("a body failed its Repr-Digest: its chunks will come from the origin alone here", "url", m.URL)
}

func (n *Node) isDistrusted(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.distrusted[id]
}

// originOnlyChunk gets chunk i of a distrusted file from the origin,
// once however many clients ask, and caches it apart from the chunks
// nodes gave.
func (n *Node) originOnlyChunk(ctx context.Context, m *meta, i int) ([]byte, error) {
	key := m.chunkKey(i) + "/origin"
	n.met.lookups.Inc()
	if data, ok := n.store.get(key); ok && m.verify(i, data) == nil {
		n.met.hits.Inc()
		n.met.chunks[srcCache].Inc()
		return data, nil
	}
	data, _, err := n.chunkFlights.do(ctx, key, func() ([]byte, error) {
		fctx, cancel := context.WithTimeout(n.life, n.cfg.FetchTimeout)
		defer cancel()
		data, err := n.originChunk(fctx, m, i)
		if err == nil {
			n.keep(key, data)
		}
		return data, err
	})
	return data, err
}

// fetched is what fetchForClients got: the chunk, whether a node was
// bypassed, and whether another node sent it.
type fetched struct {
	data         []byte
	late, remote bool
}

// fetchForClients gets chunk i from the node bounded-load HRW picks,
// moving down the chunk's order each time one fails or misses the
// deadline dl, and from the origin when every node has.
func (n *Node) fetchForClients(ctx context.Context, m *meta, i int, dl time.Duration) (fetched, error) {
	key := m.chunkKey(i)
	order := n.ring().Order(key)
	n.mu.Lock()
	target := n.bal.Assign(order)
	n.mu.Unlock()
	var f fetched
	for target != "" {
		cctx, cancel := context.WithTimeout(ctx, dl)
		var err error
		if target == n.self {
			f.data, err = n.localChunk(cctx, m, i, false)
		} else {
			f.data, err = n.remoteChunk(cctx, target, m, i, false)
		}
		cancel()
		if err == nil {
			n.mu.Lock()
			n.bal.Done(target)
			n.noteOwnerLocked(key, order[0], target)
			n.mu.Unlock()
			f.remote = target != n.self
			return f, nil
		}
		if ctx.Err() != nil {
			n.mu.Lock()
			n.bal.Done(target)
			n.mu.Unlock()
			return f, context.Cause(ctx)
		}
		f.late = true
		n.met.reforwards.Inc()
		n.log.Debug("re-forwarding a chunk", "from", target, "chunk", i, "err", err)
		n.mu.Lock()
		target = n.bal.Skip(order, target)
		if target == "" {
			n.bal.Done(order[len(order)-1])
		}
		n.mu.Unlock()
	}
	n.met.chunks[srcFallback].Inc()
	data, err := n.originChunk(ctx, m, i)
	if err != nil {
		return f, err
	}
	n.keep(key, data)
	f.data, f.late = data, true
	return f, nil
}

// heatLocked counts a client's request for key and reports whether the
// chunk is hot here (HotThreshold requests).
func (n *Node) heatLocked(key string) bool {
	if len(n.heat) > maxHeat {
		clear(n.heat)
	}
	n.heat[key]++
	return n.heat[key] >= n.cfg.HotThreshold
}

const maxHeat = 1 << 16

// serveNodeMeta answers another node's request for a URL's meta.
func (n *Node) serveNodeMeta(w http.ResponseWriter, r *http.Request) {
	u, err := n.nodeTarget(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m, err := n.getMeta(r.Context(), u, r.Header, true, r.URL.Query().Get("id"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(n.forge(m))
}

// serveNodeChunk answers another node's request for a chunk.
func (n *Node) serveNodeChunk(w http.ResponseWriter, r *http.Request) {
	u, err := n.nodeTarget(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	// Not internal: this node may not be the URL's owner, which has it.
	m, err := n.getMeta(r.Context(), u, r.Header, false, q.Get("id"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if !m.Cacheable || m.ID != q.Get("id") {
		http.Error(w, "the file changed, or is not cached", http.StatusConflict)
		return
	}
	i, err := strconv.Atoi(q.Get("i"))
	if err != nil || i < 0 || i >= m.numChunks() {
		http.Error(w, "no such chunk", http.StatusBadRequest)
		return
	}
	n.served.Add(1)
	defer n.served.Add(-1)
	if d := n.slow.Load(); d > 0 {
		select {
		case <-time.After(time.Duration(d)):
		case <-r.Context().Done():
			return
		}
	}
	data, err := n.localChunk(r.Context(), m, i, q.Get("hop") == "1")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Content-Type", "application/octet-stream")
	// What the chunk is of, as this node knows it: the asking node checks
	// it against what it knows.
	off, size := m.chunkRange(i)
	h.Set(idHeader, m.ID)
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+size-1, m.Size))
	if m.ETag != "" {
		h.Set("ETag", n.forgeValidator(m.ETag))
	}
	if m.LastModified != "" {
		h.Set("Last-Modified", m.LastModified)
	}
	n.met.servedNodes.Add(float64(len(data)))
	w.Write(n.corrupt(data))
}

// nodeTarget is the URL a node's request names, which must be on an
// origin this node serves too.
func (n *Node) nodeTarget(r *http.Request) (*url.URL, error) {
	u, err := url.Parse(r.URL.Query().Get("u"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errors.New("bad u")
	}
	if !n.originAllowed(u) {
		return nil, errors.New("origin not served here")
	}
	return u, nil
}
