package tracker

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

// Store holds the tracker's swarms and takes the decisions on them (which
// peers an announce gets, how large a swarm is, which swarm goes when there
// are too many). The Tracker checks requests, keeps the metrics and speaks
// HTTP; a Store keeps the state. MemoryStore, the default, keeps it in the
// process; package redisstore keeps it in Redis, so that several trackers
// share their swarms. Package storetest holds the behaviour every Store
// must have, as a suite each implementation runs.
//
// Time comes in as an argument: a Store reads no clock. Its methods are
// safe for concurrent use. An error is the store's failure (Redis
// unreachable, say), never the peer's: the tracker answers it with a
// failure, and the peer tries again on its next announce.
type Store interface {
	// Announce applies an announce, from a peer reachable at addr (port 0:
	// unreachable), to the swarm of req.Root and req.Size at now, creating
	// the swarm if need be, and returns the answer. req has been checked,
	// and its NumWant is between 1 and MaxNumWant.
	Announce(ctx context.Context, req AnnounceRequest, addr netip.AddrPort, now time.Time) (Outcome, error)
	// Peers returns, in Outcome.Peers, up to want (1 to MaxNumWant) peers
	// of the swarm of root and size from the list cached for announces
	// that come too soon, without counting anyone in or marking the swarm
	// announced. Outcome.Peers is nil when there is no such swarm.
	Peers(ctx context.Context, root manifest.Hash, size int64, want int, now time.Time) (Outcome, error)
	// Stats drops the idle swarms and expired peers, and counts what is
	// left.
	Stats(ctx context.Context, now time.Time) (StoreStats, error)
}

// Limits are what a Store needs of the tracker's Config, with its
// defaults applied (Config.Limits). A Store shared by several trackers must
// be given the same Limits by each.
type Limits struct {
	// Interval is the time between a peer's periodic announces, in whole
	// seconds; a peer silent for 3 intervals is forgotten, and so is a swarm.
	Interval time.Duration
	// MaxPeersPerSwarm bounds the table of peers kept per swarm.
	MaxPeersPerSwarm int
	// MaxSwarms bounds the swarms kept; past it, a new swarm pushes out
	// one of the source that made the most swarms kept, if it made more
	// than the new swarm's source will have with it, or else a swarm
	// whose table holds peers of one source at most, of a source that
	// made more than the new swarm's, or of that same source; or it is
	// not kept (share.go).
	MaxSwarms int
	// MaxPeersPerAddress bounds the peers of one source (an IPv4
	// address, an IPv6 /64; loopback is exempt, see Source) a swarm's
	// table holds, and the ids of one source the estimator counts (see
	// CountingID).
	MaxPeersPerAddress int
}

// WithDefaults returns l with its zero or negative fields set to the
// defaults, and the interval rounded up to whole seconds, as New and the
// stores set them.
func (l Limits) WithDefaults() Limits {
	if l.Interval <= 0 {
		l.Interval = DefaultInterval
	}
	l.Interval = (l.Interval + time.Second - 1).Truncate(time.Second)
	if l.MaxPeersPerSwarm <= 0 {
		l.MaxPeersPerSwarm = DefaultMaxPeersPerSwarm
	}
	if l.MaxSwarms <= 0 {
		l.MaxSwarms = DefaultMaxSwarms
	}
	if l.MaxPeersPerAddress <= 0 {
		l.MaxPeersPerAddress = DefaultMaxPeersPerAddress
	}
	l.MaxPeersPerAddress = min(l.MaxPeersPerAddress, 256) // CountingID has a byte for it
	return l
}

// ExpiryIntervals is how many intervals a peer stays after its last
// announce, and a swarm after the last announce to it: a peer may miss two
// and still be listed.
const ExpiryIntervals = expiryIntervals

// MinAnnounceGap is the shortest time between two announces of one peer
// that are both acted on; one sooner is answered from the swarm's cached
// peer list and changes nothing (but a first "completed").
const MinAnnounceGap = minAnnounceGap

// Outcome is what a Store decided for one call.
type Outcome struct {
	// SwarmSize and Complete estimate the peers in the swarm and the seeds
	// among them (see AnnounceResponse).
	SwarmSize, Complete int
	// Peers are the peers handed out: never the asker, never one that
	// cannot accept connections; seeds first, then the latest arrivals,
	// then others at random (a cached list may come in another order).
	Peers []Peer
	// RateLimited: the announce came less than MinAnnounceGap after the
	// same peer's last, and was answered from the cached list.
	RateLimited bool
	// Late: the announce came from a peer that said "stopped" within the
	// last interval, and did not add it back.
	Late bool
	// AddressFull: the announce, of a peer not in the table, came from
	// a source that has MaxPeersPerAddress peers in it already: it was
	// answered and counted (CountingID), not added to the table.
	AddressFull bool
	// SwarmsFull: the announce was to a new swarm while the store held
	// MaxSwarms swarms, none of which the new one may push out (see
	// Limits.MaxSwarms): the swarm was not kept, and the peer is answered
	// as if alone.
	SwarmsFull bool
	// Removed counts what this call took out of the store.
	Removed Removals
}

// Removals counts peers and swarms taken out of a store, by reason.
type Removals struct {
	PeersStopped   int // said "stopped"
	PeersExpired   int // silent for ExpiryIntervals
	PeersTableFull int // pushed out of a full table by a newcomer
	SwarmsIdle     int // no announce for ExpiryIntervals
	SwarmsLimit    int // pushed out by a new swarm past MaxSwarms
}

// StoreStats is what Stats counts.
type StoreStats struct {
	Swarms    int64 // swarms kept
	Peers     int64 // peers in the swarms' tables
	Estimated int64 // sum of the swarms' estimated sizes
	Removed   Removals
}

// ErrStore is wrapped by the errors of a Store that failed (as opposed to
// a request that was refused), so that callers can tell them apart.
var ErrStore = errors.New("tracker store")
