package tracker

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// MemoryStore is the Store a Tracker uses unless given another: the pure
// per-swarm core (swarm.go) for each swarm, in a map, with the swarms in
// the order they were last announced to, so that the idle ones are
// dropped, the lone ones (peers of one source at most) in that order too,
// and the count of the swarms each source made, so that past MaxSwarms a
// new swarm pushes out one of the source most over its share, or a lone
// one (share.go). Create it with NewMemoryStore.
//
// Each swarm has a lock of its own, held while one announce is applied to
// it (microseconds: the table is small), so that a crowd on one file does
// not queue behind another's; the store's lock covers only finding the
// swarm.
type MemoryStore struct {
	limits Limits
	log    *slog.Logger
	seed   maphash.Seed // keys the id hash of the size estimator
	// rng, when set (NewSeededMemoryStore), draws the swarms' seeds and
	// key keys the id hash in place of seed; guarded by mu.
	rng *rand.Rand
	key uint64

	mu     sync.Mutex // guards the following, and every slot's links, last and lone
	swarms map[swarmKey]*slot
	lru    slot   // sentinel of the list of slots from most to least recently announced
	lones  slot   // sentinel of the same list of the lone slots (linked by lprev, lnext)
	makers makers // of the slots
}

// swarmKey names a swarm: a manifest's root and size.
type swarmKey struct {
	root manifest.Hash
	size int64
}

// slot holds one swarm in the store.
type slot struct {
	key          swarmKey
	maker        netip.Prefix // the source of the announce that made it (maker)
	prev, next   *slot        // guarded by MemoryStore.mu; nil once dropped
	lprev, lnext *slot        // in MemoryStore.lones while lone; guarded by MemoryStore.mu
	last         time.Time    // of the last announce; guarded by MemoryStore.mu
	lone         bool         // guarded by MemoryStore.mu

	mu      sync.Mutex // guards the following
	sw      *swarm
	wasLone bool // sw.lone() as last told to the store (lone)
}

// NewMemoryStore returns an empty MemoryStore for limits (zero fields take
// their defaults) logging to log (nil: discard).
func NewMemoryStore(limits Limits, log *slog.Logger) *MemoryStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &MemoryStore{
		limits: limits.WithDefaults(),
		log:    log,
		seed:   maphash.MakeSeed(),
		swarms: make(map[swarmKey]*slot),
	}
	m.lru.prev, m.lru.next = &m.lru, &m.lru
	m.lones.lprev, m.lones.lnext = &m.lones, &m.lones
	return m
}

// NewSeededMemoryStore is NewMemoryStore with every random draw (the
// peers an announce gets back, the size estimator's id hash) derived
// from seed, so that a simulation repeats. Anyone who knows the seed can
// choose ids that skew the estimate: it is for simulations and tests,
// not for a tracker on the Internet.
func NewSeededMemoryStore(limits Limits, log *slog.Logger, seed uint64) *MemoryStore {
	m := NewMemoryStore(limits, log)
	m.rng = rand.New(rand.NewPCG(seed, seed^0x747261636b6572))
	m.key = m.rng.Uint64()
	return m
}

// idHash is the size estimator's hash of a counting id.
func (m *MemoryStore) idHash(id PeerID) uint64 {
	if m.rng == nil {
		return maphash.Comparable(m.seed, id)
	}
	h := mix64(m.key ^ binary.LittleEndian.Uint64(id[:8]))
	return mix64(h ^ binary.LittleEndian.Uint64(id[8:]))
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// swarmSeedLocked seeds a new swarm's draws.
func (m *MemoryStore) swarmSeedLocked() uint64 {
	if m.rng == nil {
		return rand.Uint64()
	}
	return m.rng.Uint64()
}

// Announce implements Store. It never fails.
func (m *MemoryStore) Announce(_ context.Context, req AnnounceRequest, addr netip.AddrPort, now time.Time) (Outcome, error) {
	a := announce{AnnounceRequest: req, addr: addr,
		hash: m.idHash(CountingID(req.ID, addr.Addr(), m.limits.MaxPeersPerAddress))}
	s, dropped := m.slotFor(swarmKey{req.Root, req.Size}, maker(addr.Addr()), now)
	if s == nil {
		// Not kept: answered as the swarm's only peer.
		out := Outcome{SwarmsFull: true, Peers: []Peer{}, Removed: dropped}
		if req.Event != EventStopped {
			out.SwarmSize, out.Complete = 1, boolInt(req.Left == 0)
		}
		return out, nil
	}
	// The swarm may be dropped from the store meanwhile; the announce
	// then lands in a swarm no one will see again, and the peer comes
	// back in on its next one.
	s.mu.Lock()
	res := s.sw.announce(a, now)
	m.toldLocked(s)
	s.mu.Unlock()
	out := res.outcome()
	out.Removed.SwarmsIdle, out.Removed.SwarmsLimit = dropped.SwarmsIdle, dropped.SwarmsLimit
	return out, nil
}

// Peers implements Store. It never fails.
func (m *MemoryStore) Peers(_ context.Context, root manifest.Hash, size int64, want int, now time.Time) (Outcome, error) {
	m.mu.Lock()
	s := m.swarms[swarmKey{root, size}]
	m.mu.Unlock()
	if s == nil {
		return Outcome{}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out Outcome
	out.Removed.PeersExpired = s.sw.expire(now)
	m.toldLocked(s)
	out.Peers = s.sw.cached(PeerID{}, want, now)
	out.SwarmSize, out.Complete = s.sw.size(now)
	return out, nil
}

// Stats implements Store. It never fails.
func (m *MemoryStore) Stats(_ context.Context, now time.Time) (StoreStats, error) {
	var st StoreStats
	m.mu.Lock()
	st.Removed.SwarmsIdle = m.dropIdleLocked(now)
	slots := make([]*slot, 0, len(m.swarms))
	for s := m.lru.next; s != &m.lru; s = s.next {
		slots = append(slots, s)
	}
	m.mu.Unlock()
	st.Swarms = int64(len(slots))
	for _, s := range slots {
		s.mu.Lock()
		st.Removed.PeersExpired += s.sw.expire(now)
		m.toldLocked(s)
		n, _ := s.sw.size(now)
		st.Peers += int64(s.sw.peers.len())
		st.Estimated += int64(n)
		s.mu.Unlock()
	}
	return st, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// slotFor returns the slot of key, creating it if need be (made by src),
// and marks it announced at now; nil if it is new and there is no room for
// it. It also says which swarms it dropped.
func (m *MemoryStore) slotFor(key swarmKey, src netip.Prefix, now time.Time) (*slot, Removals) {
	var dropped Removals
	m.mu.Lock()
	defer m.mu.Unlock()
	dropped.SwarmsIdle = m.dropIdleLocked(now)
	s := m.swarms[key]
	if s == nil {
		if len(m.swarms) >= m.limits.MaxSwarms {
			old := m.victimLocked(src)
			if old == nil {
				m.log.Debug("not keeping a new swarm: tracking as many swarms as allowed, none of which it may push out",
					"root", key.root.String(), "source", src, "made", m.makers.made[src], "max_swarms", m.limits.MaxSwarms)
				return nil, dropped
			}
			m.log.Debug("pushing out a swarm: tracking as many swarms as allowed",
				"root", old.key.root.String(), "lone", old.lone, "idle", now.Sub(old.last), "source", old.maker,
				"made", m.makers.made[old.maker], "for", src, "max_swarms", m.limits.MaxSwarms)
			m.removeLocked(old)
			dropped.SwarmsLimit++
		}
		s = &slot{key: key, maker: src, sw: newSwarm(m.limits.Interval, m.limits.MaxPeersPerSwarm, m.limits.MaxPeersPerAddress, m.swarmSeedLocked(), now),
			lone: true, wasLone: true}
		s.sw.small = key.size <= smallObject
		m.swarms[key] = s
		m.makers.count(src, 1)
		m.log.Debug("new swarm", "root", key.root.String(), "size", key.size)
	} else {
		s.prev.next, s.next.prev = s.next, s.prev
		if s.lone {
			s.lprev.lnext, s.lnext.lprev = s.lnext, s.lprev
		}
	}
	s.last = now
	s.prev, s.next = &m.lru, m.lru.next
	m.lru.next.prev = s
	m.lru.next = s
	if s.lone {
		m.pushLoneLocked(s)
	}
	return s, dropped
}

// victimLocked returns the swarm a new one made by src pushes out when
// MaxSwarms are kept (share.go), nil if none.
func (m *MemoryStore) victimLocked(src netip.Prefix) *slot {
	n, most := m.makers.made[src], m.makers.most
	if most > n+1 {
		for s := m.lones.lprev; s != &m.lones; s = s.lprev {
			if m.makers.made[s.maker] == most {
				return s
			}
		}
		for s := m.lru.prev; s != &m.lru; s = s.prev {
			if m.makers.made[s.maker] == most {
				return s
			}
		}
	}
	for s := m.lones.lprev; s != &m.lones; s = s.lprev {
		if s.maker == src || m.makers.made[s.maker] > n {
			return s
		}
	}
	return nil
}

// pushLoneLocked puts s first in the list of lone slots.
func (m *MemoryStore) pushLoneLocked(s *slot) {
	s.lprev, s.lnext = &m.lones, m.lones.lnext
	m.lones.lnext.lprev = s
	m.lones.lnext = s
}

// toldLocked tells the store whether s has become lone, or stopped being
// so, since it was last told. s.mu is held (and is taken before m.mu).
func (m *MemoryStore) toldLocked(s *slot) {
	lone := s.sw.lone()
	if lone == s.wasLone {
		return
	}
	s.wasLone = lone
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.prev == nil || s.lone == lone { // dropped meanwhile
		return
	}
	s.lone = lone
	if !lone {
		s.lprev.lnext, s.lnext.lprev = s.lnext, s.lprev
		s.lprev, s.lnext = nil, nil
		return
	}
	// Its place among the lone ones is by its last announce.
	at := m.lones.lnext
	for at != &m.lones && at.last.After(s.last) {
		at = at.lnext
	}
	s.lprev, s.lnext = at.lprev, at
	at.lprev.lnext = s
	at.lprev = s
}

// dropIdleLocked drops the swarms no one has announced to for
// expiryIntervals (all their peers have expired) and returns how many.
func (m *MemoryStore) dropIdleLocked(now time.Time) int {
	n := 0
	for s := m.lru.prev; s != &m.lru && now.Sub(s.last) >= expiryIntervals*m.limits.Interval; s = m.lru.prev {
		m.removeLocked(s)
		n++
	}
	return n
}

func (m *MemoryStore) removeLocked(s *slot) {
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
	if s.lone {
		s.lprev.lnext, s.lnext.lprev = s.lnext, s.lprev
		s.lprev, s.lnext = nil, nil
		s.lone = false
	}
	delete(m.swarms, s.key)
	m.makers.count(s.maker, -1)
}
