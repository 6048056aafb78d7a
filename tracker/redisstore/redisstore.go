// Package redisstore keeps a tracker's swarms in Redis (a tracker.Store),
// so that several trackers (replicas of "stampede tracker" or "stampede
// serve" behind one name) share them: a peer announcing to any replica
// finds the peers that announced to the others, and a replica restarting
// loses nothing. It takes the decisions package tracker's MemoryStore takes,
// in Lua that Redis runs atomically (announce.lua, peers.lua and stats.lua
// after swarm.lua, loaded as Redis functions: see scripts.go), and is held
// to the same behaviour by the conformance suite in package storetest.
//
// # Key layout
//
// Under a prefix (Config.Prefix, default "stampede:tracker:"), with S the
// swarm's name "<first half of the root, hex>:<size>" and a peer's line
// "id|complete|ip|port" (id in hex, complete 0 or 1, port 0 when it
// accepts no connections):
//
//	swarms           ZSET   S -> last announce (ms), told at most once a
//	                        second: the swarms, for the idle drops
//	lone             ZSET   the same, of the lone swarms (peers of one
//	                        source at most, see tracker.Source): for the
//	                        MaxSwarms drops
//	makers           HASH   S -> its maker, the source of the announce that
//	                        made it ("lo": 127.0.0.1 or ::1), for every
//	                        swarm in swarms and no other: set and removed
//	                        with its place there, so it cannot drift
//	share            ZSET   source -> the swarms it made: a cache of
//	                        makers' counts, built from it when a new swarm
//	                        finds swarms full, kept while it stays full,
//	                        deleted when it may miss a change (a swarm
//	                        dropped idle, or made while swarms is not full);
//	                        see announce.lua
//	key              STRING the secret the estimator's hashes of ids are
//	                        keyed with, for every tracker (no TTL)
//	{S}:p            ZSET   peer's line -> last seen (ms): the table
//	{S}:i            HASH   peer id -> "complete|ip|port", one padding
//	                        field "~" (which keeps it a hash table), and
//	                        the swarm's own fields (swarm.lua's FIELDS):
//	                        n and c (the table's size and seeds), ovf (last
//	                        overflow), est, estb, dn (the estimate, its
//	                        bucket, the bits counted since), arr (last
//	                        arrival), lo (no peer in the table was seen
//	                        before), dl (last peer that said stopped), ra
//	                        (last announce the registry was told of), hb
//	                        (latest bucket), ns (sources of the table's
//	                        peers), cache and cat (the peer list for
//	                        announces that come too soon, and its time);
//	                        and "@<source>" -> the table's peers of it
//	{S}:r            SET    lines of the peers that accept connections
//	{S}:rs           SET    lines of the seeds that accept connections
//	{S}:a            LIST   ids of the 16 latest arrivals, newest first
//	{S}:d            ZSET   "id|ip" -> when it said stopped (the 64 latest)
//	{S}:h:<bucket>   STRING the estimator's bits of the ids heard from in
//	                        one half interval (bucket: ms since the epoch /
//	                        half an interval), 4 KiB at most
//	{S}:x:<bucket>   STRING peers that said stopped in that half interval
//	{S}:w            STRING scratch for merging the buckets, deleted at once
//
// # Bounds
//
// Nothing an announce carries grows Redis without bound: a swarm holds at
// most MaxPeersPerSwarm peers (a newcomer to a full table pushes out the
// one seen longest ago), 16 arrivals, 64 departures, a cached list of 51
// peers and the estimator's bits of the last seven half intervals (at most
// 4 KiB each); at most MaxPeersPerAddress peers of one source; at most
// MaxSwarms swarms are kept (a new one pushes out one of the source most
// over its share, or a lone one, or is not kept: see tracker.Limits), and
// makers and share hold no more than the swarms kept. Values have fixed
// forms (hex ids, IP addresses, ports). Every key of a swarm gets a TTL of
// four intervals when it is made, renewed every half interval while the
// swarm lives, so what trackers that all went away leave behind goes too;
// the decisions themselves use only the times in the keys, passed in by
// the tracker.
//
// # Failures
//
// An error from Redis (unreachable, timed out, out of memory) comes back
// wrapping tracker.ErrStore; the tracker answers the announce 503 with a
// tracker failure and goes on. Announces made at once go to Redis in one
// call (see maxSending), and a call that fails fails each announce it
// carried. The functions are loaded again when Redis has lost them (a
// restart). They need one Redis, not a Cluster: they touch the swarms'
// registry and a swarm's keys together.
package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
)

// DefaultPrefix is Config.Prefix's default.
const DefaultPrefix = "stampede:tracker:"

// Config configures a Store.
type Config struct {
	// Limits must be the tracker's (tracker.Config.Limits), the same for
	// every tracker sharing the Redis.
	Limits tracker.Limits
	// Prefix starts every key the store uses, so that several trackers
	// of different deployments can share one Redis. Default DefaultPrefix.
	Prefix string
}

// Store is a tracker.Store in Redis. Create it with New or Open.
type Store struct {
	rdb     *redis.Client
	limits  tracker.Limits
	prefix  string
	owned   bool                         // Close closes rdb
	key     atomic.Pointer[estimatorKey] // nil until loaded from Redis
	scripts atomic.Bool                  // Redis has no functions: send scripts (see run)

	mu      sync.Mutex
	queue   []*call // announces waiting for a call to Redis
	sending int     // announce calls to Redis under way, at most maxSending
	batches int     // announce calls to Redis made, for the tests
}

// Announces are sent to Redis in groups (group commit): an announce made
// while maxSending calls are under way waits, and the next call takes every
// announce waiting then, up to maxBatch, in one run of the script. Redis
// spends much of an announce's time in what every call costs (reading and
// answering it, starting the script); a tracker serving many peers makes
// announces at once. An announce made while fewer calls are under way goes
// at once, alone: no timer, no wait.
const (
	maxSending = 2
	maxBatch   = 64
)

// A call is one announce to send: the script's arguments for it, and
// then its answer or the error of the call that carried it.
type call struct {
	ctx     context.Context
	args    []any
	counted tracker.PeerID // what the estimator counts (tracker.CountingID)
	taken   bool           // in a batch (under Store.mu)
	res     []any
	err     error
	done    chan struct{} // closed once res or err is set
}

// New returns a Store using rdb, which stays the caller's to close.
func New(rdb *redis.Client, cfg Config) *Store {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	return &Store{rdb: rdb, limits: cfg.Limits.WithDefaults(), prefix: cfg.Prefix}
}

// ParseURL reads a --store URL: redis://[user:password@]HOST:PORT[/DB],
// rediss:// for TLS, or unix://[user:password@]/PATH[?db=DB], with the
// options go-redis takes in the query. The errors say what is wrong.
func ParseURL(s string) (*redis.Options, error) {
	opt, err := redis.ParseURL(s)
	if err != nil {
		// net/url's errors quote the whole URL, password and all.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err
		}
		return nil, fmt.Errorf("redis store URL: %w (want redis://HOST:PORT/DB)", err)
	}
	// A tracker answers within a second or not at all: a peer announces
	// again soon, and a slow answer holds its connection and a goroutine.
	opt.DialTimeout = min(opt.DialTimeout, 2*time.Second)
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 2 * time.Second
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = time.Second
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = time.Second
	}
	// One retry, and two dials: a Redis that is down should get the peer
	// its tracker failure within a second or two, not after go-redis's
	// defaults of three retries of five dials each.
	if opt.MaxRetries == 0 {
		opt.MaxRetries = 1
	}
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 2
	}
	opt.ContextTimeoutEnabled = true
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// Open connects to the Redis at url (see ParseURL), checks that it
// answers, and returns a Store that closes the connection on Close.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	opt, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("%w: redis at %s: %w", tracker.ErrStore, opt.Addr, err)
	}
	s := New(rdb, cfg)
	s.owned = true
	return s, nil
}

// Close closes the connection to Redis if Open made it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.rdb.Close()
}

// args returns the arguments every script takes first (swarm.lua). The
// times derived from now are worked out here, so that the scripts pass
// them on as they are rather than format them.
func (s *Store) args(now time.Time, more ...any) []any {
	interval := s.limits.Interval.Milliseconds()
	ms, bucket := s.times(now)
	return append([]any{
		ms,
		interval,
		s.prefix,
		(tracker.ExpiryIntervals + 1) * interval, // the TTL
		1 + rand.IntN(1<<31-2),                   // a seed
		bucket,
	}, more...)
}

// times returns the arguments now gives a script: now in ms and the
// estimator's bucket.
func (s *Store) times(now time.Time) (ms, bucket int64) {
	interval := s.limits.Interval.Milliseconds()
	ms = now.UnixMilli()
	return ms, floorDiv(ms, max(interval/2, 1))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// DiscardClientLog silences go-redis's own log, which writes to stderr
// from a package-level logger: the store's errors reach the tracker's log
// already. It sets a global of go-redis, for a program to call, not a
// library.
func DiscardClientLog() { redis.SetLogger(discardLog{}) }

type discardLog struct{}

func (discardLog) Printf(context.Context, string, ...any) {}

// swarmName names the swarm of root and size in Redis: the first half of
// the root, in hex, and the size. Every key of the swarm is built from its
// name, in Lua, which hashes every byte of every string it makes; 128 bits
// of a SHA-256 tell the swarms apart as well as 256.
func swarmName(root manifest.Hash, size int64) string {
	return hex.EncodeToString(root[:16]) + ":" + strconv.FormatInt(size, 10)
}

// Announce implements tracker.Store. Announces made at once on one Store
// go to Redis together (see maxSending).
func (s *Store) Announce(ctx context.Context, req tracker.AnnounceRequest, addr netip.AddrPort, now time.Time) (tracker.Outcome, error) {
	var out tracker.Outcome
	c := s.newCall(ctx, req, addr, now)
	s.mu.Lock()
	if s.sending < maxSending {
		// Nothing waits (whoever finishes a call takes what waits): go.
		s.sending++
		s.batches++
		s.mu.Unlock()
		s.send(ctx, []*call{c})
		s.sent()
	} else {
		c.done = make(chan struct{})
		s.queue = append(s.queue, c)
		s.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			s.mu.Lock()
			if !c.taken {
				s.queue = slices.DeleteFunc(s.queue, func(q *call) bool { return q == c })
				s.mu.Unlock()
				return out, fmt.Errorf("%w: announce: %w", tracker.ErrStore, ctx.Err())
			}
			s.mu.Unlock()
			<-c.done // on its way: the call's own timeouts bound it
		}
	}
	if c.err != nil {
		return out, fmt.Errorf("%w: announce: %w", tracker.ErrStore, c.err)
	}
	res := c.res // of answerLen
	k, _ := toInt(res[0])
	head := answerHead(k)
	var err error
	nums := make([]int64, head-1)
	for i := range nums {
		if nums[i], err = toInt(res[i]); err != nil {
			return out, fmt.Errorf("%w: announce: %w", tracker.ErrStore, err)
		}
	}
	kind := nums[0]
	out.SwarmSize, out.Complete = int(nums[1]), int(nums[2])
	if kind&kindFull != 0 {
		out.Removed.PeersTableFull = 1
	}
	out.AddressFull, out.SwarmsFull = kind&kindAddressFull != 0, kind&kindSwarmsFull != 0
	if kind&kindRemovals != 0 {
		out.Removed.PeersStopped, out.Removed.PeersExpired = int(nums[3]), int(nums[4])
		out.Removed.SwarmsIdle, out.Removed.SwarmsLimit = int(nums[5]), int(nums[6])
	}
	peers := res[head:]
	switch kind & kindMask {
	case 0:
		out.Peers, err = picked(peers, req.ID, req.NumWant)
	case 1, 2:
		// The cached list, one string of lines.
		out.RateLimited, out.Late = kind&kindMask == 1, kind&kindMask == 2
		list := ""
		if len(peers) > 0 {
			list, _ = peers[0].(string)
		}
		out.Peers, err = parsePeers(nil, list, req.ID, req.NumWant)
	default:
		out.Peers = []tracker.Peer{}
	}
	if err != nil {
		return tracker.Outcome{}, fmt.Errorf("%w: announce: %w", tracker.ErrStore, err)
	}
	return out, nil
}

// newCall returns the call of an announce (see Announce).
func (s *Store) newCall(ctx context.Context, req tracker.AnnounceRequest, addr netip.AddrPort, now time.Time) *call {
	info := "0|"
	if req.Left == 0 {
		info = "1|"
	}
	ms, bucket := s.times(now)
	return &call{ctx: ctx, counted: tracker.CountingID(req.ID, addr.Addr(), s.limits.MaxPeersPerAddress), args: []any{
		ms, bucket,
		swarmName(req.Root, req.Size),
		req.ID.String(),
		info + addr.Addr().String() + "|" + strconv.Itoa(int(addr.Port())),
		string(req.Event),
		req.NumWant,
	}}
}

// sent is called when a call to Redis is over: it sends what waits, from
// a goroutine of its own so that the caller gets its answer, or notes
// that one call fewer is under way.
func (s *Store) sent() {
	s.mu.Lock()
	batch := s.take()
	if batch == nil {
		s.sending--
	}
	s.mu.Unlock()
	if batch != nil {
		go s.drain(batch)
	}
}

// drain sends batches until nothing waits.
func (s *Store) drain(batch []*call) {
	for batch != nil {
		ctx, cancel := batchContext(batch)
		s.send(ctx, batch)
		cancel()
		s.mu.Lock()
		if batch = s.take(); batch == nil {
			s.sending--
		}
		s.mu.Unlock()
	}
}

// take takes up to maxBatch of the announces waiting, oldest first, but
// those whose caller gave up; nil if none. s.mu is held.
func (s *Store) take() []*call {
	var batch []*call
	n := 0
	for _, c := range s.queue {
		n++
		if c.ctx.Err() != nil {
			continue // its caller returns the context's error
		}
		c.taken = true
		batch = append(batch, c)
		if len(batch) == maxBatch {
			break
		}
	}
	s.queue = s.queue[:copy(s.queue, s.queue[n:])]
	if batch != nil {
		s.batches++
	}
	return batch
}

// batchContext returns a context for a call carrying batch: one with the
// latest of its callers' deadlines (a caller that gives up sooner stops
// waiting for it), none if one has none.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// send runs the announce script on batch, and hands each call its answer,
// or the call's error.
func (s *Store) send(ctx context.Context, batch []*call) {
	res, err := s.announce(ctx, batch)
	for _, c := range batch {
		if err == nil {
			var n int
			n, err = answerLen(res)
			if err == nil {
				c.res, res = res[:n], res[n:]
			}
		}
		c.err = err
		if c.done != nil {
			close(c.done)
		}
	}
}

// The values an answer to an announce starts with (see announce.lua):
// its kind, with these bits, the swarm size and complete, the counts of
// removals if kindRemovals, the count of the values of peers that follow.
const (
	kindMask        = 3  // picked, rate limited, late, stopped
	kindFull        = 4  // a peer was pushed out of the full table
	kindRemovals    = 8  // peers stopped, expired, swarms idle, limit follow
	kindAddressFull = 16 // tracker.Outcome.AddressFull
	kindSwarmsFull  = 32 // tracker.Outcome.SwarmsFull
)

// answerHead returns how many values an answer of kind starts with, the
// count of the peers' values last.
func answerHead(kind int64) int {
	if kind&kindRemovals != 0 {
		return 8
	}
	return 4
}

// answerLen returns the length of the answer that res starts with.
func answerLen(res []any) (int, error) {
	if len(res) == 0 {
		return 0, fmt.Errorf("no answer left from the script")
	}
	kind, err := toInt(res[0])
	if err != nil {
		return 0, err
	}
	head := answerHead(kind)
	if len(res) < head {
		return 0, fmt.Errorf("%d values left from the script, want %d or more", len(res), head)
	}
	n, err := toInt(res[head-1])
	if err != nil || n < 0 || n > int64(len(res)-head) {
		return 0, fmt.Errorf("%v values of peers, of %d left from the script", res[head-1], len(res)-head)
	}
	return head + int(n), nil
}

// announce runs the announce script on batch, with the estimator's key
// (loaded anew, and the script run again, should Redis have another).
func (s *Store) announce(ctx context.Context, batch []*call) ([]any, error) {
	for attempt := 0; ; attempt++ {
		key, err := s.estimatorKey(ctx)
		if err != nil {
			return nil, err
		}
		args := s.args(time.UnixMilli(batch[0].args[0].(int64)),
			s.limits.MaxSwarms,
			s.limits.MaxPeersPerSwarm,
			key.text,
			s.limits.MaxPeersPerAddress,
		)
		for _, c := range batch {
			args = append(args, c.args...)
			args = append(args, key.bits(c.counted))
		}
		res, err := s.run(ctx, announceScript, args)
		if err == nil || attempt > 0 || !isRedisError(err) || !strings.HasPrefix(err.Error(), "STALEKEY") {
			return res, err
		}
		s.key.CompareAndSwap(key, nil)
	}
}

// Peers implements tracker.Store.
func (s *Store) Peers(ctx context.Context, root manifest.Hash, size int64, want int, now time.Time) (tracker.Outcome, error) {
	var out tracker.Outcome
	res, err := s.run(ctx, peersScript, s.args(now, swarmName(root, size)))
	if err != nil {
		return out, fmt.Errorf("%w: peers: %w", tracker.ErrStore, err)
	}
	if len(res) == 0 {
		return out, nil
	}
	if len(res) != 4 {
		return out, fmt.Errorf("%w: peers: %d values from the script, want 4", tracker.ErrStore, len(res))
	}
	var nums [3]int64
	for i := range nums {
		if nums[i], err = toInt(res[i]); err != nil {
			return out, fmt.Errorf("%w: peers: %w", tracker.ErrStore, err)
		}
	}
	out.SwarmSize, out.Complete, out.Removed.PeersExpired = int(nums[0]), int(nums[1]), int(nums[2])
	list, _ := res[3].(string)
	if out.Peers, err = parsePeers(nil, list, tracker.PeerID{}, want); err != nil {
		return tracker.Outcome{}, fmt.Errorf("%w: peers: %w", tracker.ErrStore, err)
	}
	return out, nil
}

// Stats implements tracker.Store. It runs one script over every swarm
// kept (MaxSwarms bounds them), for a metrics scrape.
func (s *Store) Stats(ctx context.Context, now time.Time) (tracker.StoreStats, error) {
	var st tracker.StoreStats
	res, err := s.run(ctx, statsScript, s.args(now))
	if err != nil {
		return st, fmt.Errorf("%w: stats: %w", tracker.ErrStore, err)
	}
	if len(res) != 5 {
		return st, fmt.Errorf("%w: stats: %d values from the script, want 5", tracker.ErrStore, len(res))
	}
	var nums [5]int64
	for i := range nums {
		if nums[i], err = toInt(res[i]); err != nil {
			return st, fmt.Errorf("%w: stats: %w", tracker.ErrStore, err)
		}
	}
	st.Swarms, st.Peers, st.Estimated = nums[0], nums[1], nums[2]
	st.Removed.PeersExpired, st.Removed.SwarmsIdle = int(nums[3]), int(nums[4])
	return st, nil
}

func toInt(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("%v (%T) from the script, want an integer", v, v)
}

// errBadList is wrapped by the errors of parsePeers and picked: what the
// script returned is not a peer list (another program's keys under our
// prefix, say).
var errBadList = errors.New("bad peer list")

// parsePeers appends to out the peers of the lines "id|complete|ip|port"
// in list (joined by newlines) that a script returned, but skip, until
// out holds want.
func parsePeers(out []tracker.Peer, list string, skip tracker.PeerID, want int) ([]tracker.Peer, error) {
	if out == nil {
		out = make([]tracker.Peer, 0, min(want, strings.Count(list, "\n")+1))
	}
	for line := range strings.SplitSeq(list, "\n") {
		if len(out) == want {
			break
		}
		if line == "" {
			continue
		}
		p, err := parseLine(line)
		if err != nil {
			return nil, err
		}
		if p.ID != skip {
			out = append(out, p)
		}
	}
	return out, nil
}

// picked returns the peers for an announce acted on, from the values the
// script returned (see pickFor in swarm.lua): the lines taken first, in
// their order, then the others in a random order, but the asker and
// those taken, up to want in all.
func picked(vals []any, asker tracker.PeerID, want int) ([]tracker.Peer, error) {
	if len(vals) == 0 {
		return nil, fmt.Errorf("%w: no count of the peers taken first", errBadList)
	}
	taken, err := toInt(vals[0])
	if err != nil || taken < 0 || taken >= int64(len(vals)) {
		return nil, fmt.Errorf("%w: %v peers taken first, of %d", errBadList, vals[0], len(vals)-1)
	}
	out := make([]tracker.Peer, 0, min(want, len(vals)-1))
	others := vals[1+taken:]
	rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	for i, v := range vals[1:] {
		if len(out) == want {
			break
		}
		line, _ := v.(string)
		p, err := parseLine(line)
		if err != nil {
			return nil, err
		}
		// The others may hold the asker, and those taken first.
		if p.ID == asker || int64(i) >= taken && slices.ContainsFunc(out, func(q tracker.Peer) bool { return q.ID == p.ID }) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// parseLine reads a peer's line "id|complete|ip|port".
func parseLine(line string) (tracker.Peer, error) {
	f := strings.Split(line, "|")
	if len(f) != 4 {
		return tracker.Peer{}, fmt.Errorf("%w: line %q", errBadList, line)
	}
	id, err := tracker.ParsePeerID(f[0])
	if err != nil {
		return tracker.Peer{}, fmt.Errorf("%w: %w", errBadList, err)
	}
	ip, err := netip.ParseAddr(f[2])
	if err != nil {
		return tracker.Peer{}, fmt.Errorf("%w: %w", errBadList, err)
	}
	port, err := strconv.ParseUint(f[3], 10, 16)
	if err != nil || port == 0 {
		return tracker.Peer{}, fmt.Errorf("%w: port %q", errBadList, f[3])
	}
	return tracker.Peer{Addr: netip.AddrPortFrom(ip, uint16(port)), ID: id, Complete: f[1] == "1"}, nil
}
