package gateway

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/originclient"
	"github.com/stampede-dev/stampede/store"
)

// object is one file in the cache: its store, the node downloading or
// seeding it, and the readers streaming it to clients.
type object struct {
	c     *cache
	key   string
	m     *manifest.Manifest
	path  string        // the complete file; path+".part" while downloading
	ready chan struct{} // closed once the download started (or failed to)

	// Guarded by c.mu.
	elem    *list.Element
	readers int  // pins: requests using the object
	done    bool // complete (the cache's copy of complete)
	seeding bool // counted against MaxSeeds
	gone    bool // out of the index: destroyed once unread

	mu sync.Mutex // guards the following
	st *store.File
	// checked are the pieces verified since the process started (written
	// by our node, or read back and verified once): readers send them
	// straight from the file.
	checked  []bool
	complete bool
	err      error         // the download failed: readers of missing pieces abort
	changed  chan struct{} // closed and replaced when a piece arrives or err is set
	// pos is the piece each reader is at; the node fetches first from the
	// lowest piece missing at or after any of them.
	pos        map[*reader]int
	preferFrom int
	nd         *node.Node
	stop       context.CancelFunc
	nodeDone   chan struct{}
}

func newObject(c *cache, m *manifest.Manifest, path string) *object {
	o := &object{
		c: c, key: objectKey(m), m: m, path: path, ready: make(chan struct{}),
		checked: make([]bool, m.NumPieces()), changed: make(chan struct{}),
		pos: map[*reader]int{}, preferFrom: -1,
	}
	return o
}

// maxSpan bounds the run of pieces await hands out at once, so that a
// long run of present pieces costs a bounded scan.
const maxSpan = 64

// startDownload opens the part file, records the manifest beside it and
// starts a node that downloads from the swarm and from src.
func (o *object) startDownload(src *originclient.Source) error {
	data, err := o.m.MarshalJSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.path+manifestSuffix, data, 0o644); err != nil {
		return fmt.Errorf("%w: %v", errLocal, err)
	}
	st, err := store.Open(o.path, o.m, false, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errLocal, err)
	}
	o.mu.Lock()
	o.st = st
	o.mu.Unlock()
	return o.startNode(src)
}

// errLocal: the cache directory failed us (disk full, permissions).
var errLocal = errors.New("gateway cache")

// startNode runs a node on the open store: a download from src, or with
// src nil a seeder of the complete file.
func (o *object) startNode(src *originclient.Source) error {
	g := o.c.g
	cfg := g.cfg.Node
	o.mu.Lock()
	cfg.Manifest, cfg.Store = o.m, o.st
	o.mu.Unlock()
	cfg.Trackers = o.m.Trackers
	cfg.Listener, cfg.ListenAddr = nil, g.cfg.PeerListen
	cfg.HTTPClient = g.trackers
	cfg.UploadLimit = g.upload
	if cfg.Host == nil && !cfg.NoPacing {
		cfg.Pacer = g.pacer // one uplink for every file
	}
	cfg.SeedForever = true // until the cache stops it
	var nd *node.Node      // set before it runs, which is before any origin fetch
	if src != nil {
		cfg.Origin = src.Fetcher(cfg.Store, func() *node.Node { return nd })
		cfg.OnPiece = o.onPiece
		cfg.OnComplete = o.onComplete
	}
	if cfg.Logger == nil {
		cfg.Logger = g.log.With("root", o.m.Root.String()[:12])
	}
	nd, err := node.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(g.ctx)
	done := make(chan struct{})
	o.mu.Lock()
	o.nd, o.stop, o.nodeDone = nd, cancel, done
	o.mu.Unlock()
	if !g.spawn(func() { o.nodeExited(nd.Run(ctx)) }) {
		cancel()
		o.mu.Lock()
		o.nd, o.stop, o.nodeDone = nil, nil, nil
		o.mu.Unlock()
		close(done)
		return errClosed
	}
	return nil
}

// errClosed: the gateway is shutting down.
var errClosed = errors.New("gateway closed")

// onPiece runs on the node's loop after each piece is stored (verified).
func (o *object) onPiece(i int) {
	o.mu.Lock()
	o.checked[i] = true
	o.broadcastLocked()
	o.mu.Unlock()
}

func (o *object) broadcastLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// onComplete runs on the node's loop once every piece is in: the file is
// published under its final name, then the cache decides whether it seeds.
func (o *object) onComplete() error {
	o.mu.Lock()
	err := o.st.Commit()
	if err == nil {
		o.complete = true
	}
	o.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %v", errLocal, err)
	}
	o.c.g.log.Info("download complete", "root", o.m.Root, "size", o.m.Size)
	o.c.completed(o)
	return nil
}

// nodeExited runs when the node's Run returned.
func (o *object) nodeExited(err error) {
	o.mu.Lock()
	complete := o.complete
	done := o.nodeDone
	o.nd, o.stop, o.nodeDone = nil, nil, nil
	o.mu.Unlock()
	close(done)
	if complete {
		o.c.seedingStopped(o)
		return
	}
	if err == nil {
		err = errors.New("the download stopped")
	}
	o.fail(err)
}

// fail ends o: readers waiting for pieces get err, and o leaves the cache.
func (o *object) fail(err error) {
	o.mu.Lock()
	first := o.err == nil
	if first {
		o.err = err
		o.broadcastLocked()
	}
	o.mu.Unlock()
	if first && o.c.g.ctx.Err() == nil {
		o.c.g.log.Warn("download failed", "root", o.m.Root, "err", err)
	}
	o.stopNode()
	o.c.drop(o)
}

// failed returns the error that ended o, if any.
func (o *object) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *object) stopNode() {
	o.mu.Lock()
	if o.stop != nil {
		o.stop()
	}
	o.mu.Unlock()
}

// open makes sure a complete file's store is open (it is closed while
// nobody uses it) and starts seeding it when the cache wants it to.
func (o *object) open() error {
	o.mu.Lock()
	if !o.complete || o.st != nil {
		o.mu.Unlock()
		return nil
	}
	st, err := store.OpenComplete(o.path, o.m)
	if err != nil {
		o.mu.Unlock()
		o.fail(fmt.Errorf("%w: %v", errLocal, err))
		return err
	}
	o.st = st
	o.mu.Unlock()
	if o.c.wantsSeed(o) {
		if err := o.startNode(nil); err != nil {
			o.c.g.log.Info("cannot seed", "root", o.m.Root, "err", err)
			o.c.seedingStopped(o)
		}
	}
	return nil
}

// hasNode reports whether a node runs (or is stopping) on o.
func (o *object) hasNode() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nd != nil
}

// closeIfIdle closes the store of a complete file that nobody reads and
// no node uses, to hold no descriptor for it.
func (o *object) closeIfIdle() {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	if o.readers > 0 || o.gone {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nd == nil && o.st != nil && o.complete {
		o.st.Close()
		o.st = nil
	}
}

func (o *object) closeStore() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.st != nil {
		o.st.Close()
		o.st = nil
	}
}

// destroy stops o's node and removes its files; o is out of the index and
// unread.
func (o *object) destroy() {
	o.mu.Lock()
	stop, done := o.stop, o.nodeDone
	o.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	o.closeStore()
	for _, p := range []string{o.path, o.path + store.PartSuffix, o.path + manifestSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			o.c.g.log.Warn("cache: cannot remove a file", "path", p, "err", err)
		}
	}
}

// await waits until the piece holding byte off is verified and returns the
// end of the run of verified bytes starting there. A piece on disk from an
// earlier run is verified here, once. r's position steers the node.
func (o *object) await(ctx context.Context, r *reader, off int64) (int64, error) {
	i := int(off / o.m.PieceSize)
	var waiting time.Time // since the piece was first found missing
	for {
		o.mu.Lock()
		if o.checked[i] {
			j := i + 1
			for j < len(o.checked) && j < i+maxSpan && o.checked[j] {
				j++
			}
			nd, from := o.positionLocked(r, i)
			o.mu.Unlock()
			o.prefer(ctx, nd, from)
			if !waiting.IsZero() {
				o.c.g.metrics.pieceWait.Observe(time.Since(waiting).Seconds())
			}
			return min(o.m.PieceOffset(j), o.m.Size), nil
		}
		if o.err != nil {
			err := o.err
			o.mu.Unlock()
			return 0, err
		}
		if st := o.st; st != nil && st.Has(i) {
			o.mu.Unlock()
			if _, err := st.ReadPiece(i, r.pieceBuf(o.m.PieceSize)); err != nil {
				o.fail(fmt.Errorf("the cached copy is damaged: %w", err))
				return 0, err
			}
			o.mu.Lock()
			o.checked[i] = true
			o.mu.Unlock()
			continue
		}
		if o.st == nil {
			o.mu.Unlock()
			return 0, errors.New("gateway: cache file closed under a reader")
		}
		nd, from := o.positionLocked(r, i)
		ch := o.changed
		o.mu.Unlock()
		o.prefer(ctx, nd, from)
		if waiting.IsZero() {
			waiting = time.Now()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// positionLocked records that r is at piece i and returns the node and
// the new start of the preferred window when it moved (nil otherwise).
func (o *object) positionLocked(r *reader, i int) (*node.Node, int) {
	if o.complete || o.nd == nil {
		return nil, 0
	}
	if p, ok := o.pos[r]; (ok && p == i && o.preferFrom >= 0) || r.isClosed() {
		return nil, 0
	}
	o.pos[r] = i
	from := -1
	for _, p := range o.pos {
		for j := p; j < len(o.checked); j++ {
			if !o.checked[j] {
				if from < 0 || j < from {
					from = j
				}
				break
			}
		}
	}
	if from < 0 || from == o.preferFrom {
		return nil, 0
	}
	o.preferFrom = from
	return o.nd, from
}

func (o *object) prefer(ctx context.Context, nd *node.Node, from int) {
	if nd == nil {
		return
	}
	count := int(max(2, o.c.g.cfg.Window/o.m.PieceSize))
	nd.Prefer(ctx, from, count)
}

// leave forgets r's position.
func (o *object) leave(r *reader) {
	o.mu.Lock()
	delete(o.pos, r)
	o.mu.Unlock()
}

// openFile opens o's file for one reader: the part file while
// downloading (its descriptor survives the rename on completion).
func (o *object) openFile() (*os.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	name := o.path
	if !o.complete {
		name += store.PartSuffix
	}
	return os.Open(name)
}
