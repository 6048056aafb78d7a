package redisstore

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-dev/stampede/tracker"
)

// An estimatorKey is the secret the estimator's hashes of ids are keyed
// with (see count in swarm.lua), kept in Redis under the prefix's "key"
// for every tracker sharing it: one hashing an id with another key would
// count a peer that announces to both trackers twice. Hashing in the
// tracker spares Redis's single core the work.
type estimatorKey struct {
	text   string   // as Redis holds it, which announce.lua checks
	secret [32]byte // its hash, which ids are hashed with
}

// estimatorKey returns the estimator's key, loaded from Redis, or made
// there, the first time.
func (s *Store) estimatorKey(ctx context.Context) (*estimatorKey, error) {
	if k := s.key.Load(); k != nil {
		return k, nil
	}
	name := s.prefix + "key"
	v, err := s.rdb.Get(ctx, name).Result()
	if errors.Is(err, redis.Nil) {
		var b [16]byte
		crand.Read(b[:]) // never fails
		// Another tracker may be making it too: the first one stays.
		if err = s.rdb.SetNX(ctx, name, hex.EncodeToString(b[:]), 0).Err(); err == nil {
			v, err = s.rdb.Get(ctx, name).Result()
		}
	}
	if err != nil {
		return nil, err
	}
	k := &estimatorKey{text: v, secret: sha256.Sum256([]byte(v))}
	s.key.Store(k)
	return k, nil
}

// The estimator's levels (see count in swarm.lua): levelBits bits each,
// the first for every id, each next one for one id in levelSample of
// those of the one before.
const (
	levelBits   = 1 << 14
	levelSample = 64
	levels      = 2
)

// bits returns the offsets of the estimator's bits for id in a bucket's
// string, separated by commas: a keyed hash of the id picks a bit of each
// level it goes to.
func (k *estimatorKey) bits(id tracker.PeerID) string {
	var buf [len(k.secret) + len(id)]byte
	copy(buf[copy(buf[:], k.secret[:]):], id[:])
	sum := sha256.Sum256(buf[:])
	h := binary.BigEndian.Uint64(sum[:8])
	b := make([]byte, 0, 24)
	for level := range uint64(levels) {
		if level > 0 {
			if h%levelSample != 0 {
				break
			}
			h /= levelSample
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, level*levelBits+h%levelBits, 10)
		h /= levelBits
	}
	return string(b)
}
