package cdn

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// store is the node's on-disk chunk cache: bounded in bytes, least
// recently used evicted first. Each chunk is one file, named by the hash
// of its key, holding the SHA-256 of its bytes then the bytes. A file is
// written under a temporary name and renamed into place, and its sum is
// checked on every read, so a crash, a torn write or a damaged disk gives
// a miss, never wrong bytes. A full disk fails the write (counted) and the
// chunk is served all the same, uncached.
type store struct {
	dir string
	max int64
	log *slog.Logger

	mu    sync.Mutex // guards the following
	items map[string]*list.Element
	lru   *list.List // of *storeItem, most recent at the front
	size  int64

	writeErrors, damaged, evicted int64
}

type storeItem struct {
	name string // file name: the key's hash
	size int64  // file size
}

const (
	storeSuffix = ".chunk"
	tmpSuffix   = ".tmp"
)

// openStore opens the cache in dir, making it if missing. Chunks already
// there are kept (most recently written first), temporary files of
// writes a crash interrupted removed.
func openStore(dir string, max int64, log *slog.Logger) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	s := &store{dir: dir, max: max, log: log, items: make(map[string]*list.Element), lru: list.New()}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	type found struct {
		storeItem
		mod int64
	}
	var have []found
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, storeSuffix) && e.Type().IsRegular():
			info, err := e.Info()
			if err != nil {
				continue
			}
			have = append(have, found{storeItem{strings.TrimSuffix(name, storeSuffix), info.Size()}, info.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(have, func(a, b found) int { return int(b.mod - a.mod) })
	for _, f := range have {
		it := f.storeItem
		s.items[it.name] = s.lru.PushBack(&it)
		s.size += it.size
	}
	s.mu.Lock()
	s.evictLocked()
	s.mu.Unlock()
	return s, nil
}

func storeName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func (s *store) path(name string) string { return filepath.Join(s.dir, name+storeSuffix) }

// get returns the chunk of key, if cached and intact.
func (s *store) get(key string) ([]byte, bool) {
	name := storeName(key)
	s.mu.Lock()
	e, ok := s.items[name]
	if ok {
		s.lru.MoveToFront(e)
	}
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	b, err := os.ReadFile(s.path(name))
	if err == nil && len(b) >= sha256.Size {
		sum := sha256.Sum256(b[sha256.Size:])
		if bytes.Equal(sum[:], b[:sha256.Size]) {
			return b[sha256.Size:], true
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false // evicted meanwhile
	}
	s.log.Warn("dropping a damaged cached chunk", "file", s.path(name), "err", err)
	s.mu.Lock()
	s.damaged++
	s.dropLocked(name)
	s.mu.Unlock()
	return nil, false
}

// put caches data under key, evicting the least recently used chunks to
// stay within the bound.
func (s *store) put(key string, data []byte) error {
	if int64(len(data)+sha256.Size) > s.max {
		return errors.New("chunk larger than the cache")
	}
	name := storeName(key)
	s.mu.Lock()
	_, ok := s.items[name]
	s.mu.Unlock()
	if ok {
		return nil
	}
	f, err := os.CreateTemp(s.dir, name+"-*"+tmpSuffix)
	if err != nil {
		return s.failed(err)
	}
	sum := sha256.Sum256(data)
	_, err = f.Write(sum[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), s.path(name))
	}
	if err != nil {
		os.Remove(f.Name())
		return s.failed(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.items[name]; ok {
		s.size -= old.Value.(*storeItem).size
		s.lru.Remove(old)
	}
	it := &storeItem{name, int64(len(data) + sha256.Size)}
	s.items[name] = s.lru.PushFront(it)
	s.size += it.size
	s.evictLocked()
	return nil
}

func (s *store) failed(err error) error {
	s.mu.Lock()
	s.writeErrors++
	s.mu.Unlock()
	return fmt.Errorf("caching a chunk: %w", err)
}

func (s *store) evictLocked() {
	for s.size > s.max {
		e := s.lru.Back()
		if e == nil {
			return
		}
		s.evicted++
		s.dropLocked(e.Value.(*storeItem).name)
	}
}

// drop removes the chunk of key, if cached.
func (s *store) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(storeName(key))
}

func (s *store) dropLocked(name string) {
	e, ok := s.items[name]
	if !ok {
		return
	}
	s.size -= e.Value.(*storeItem).size
	s.lru.Remove(e)
	delete(s.items, name)
	os.Remove(s.path(name))
}

// storeStats is a snapshot for the metrics.
type storeStats struct {
	Bytes, Files, Max, WriteErrors, Damaged, Evicted int64
}

func (s *store) stats() storeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return storeStats{s.size, int64(len(s.items)), s.max, s.writeErrors, s.damaged, s.evicted}
}
