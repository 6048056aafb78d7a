package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/tracker/storetest"
)

func TestMain(m *testing.M) {
	DiscardClientLog()
	os.Exit(m.Run())
}

// client returns a client of the Redis at url, closed when the test ends.
func client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ReadTimeout, opt.WriteTimeout = 10*time.Second, 10*time.Second // the race detector slows miniredis
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// miniRedis starts an in-process Redis for the test and returns its URL.
func miniRedis(t testing.TB) (*miniredis.Miniredis, string) {
	m := miniredis.RunT(t)
	return m, "redis://" + m.Addr() + "/0"
}

// prefixes hands each store of a test run a prefix of its own, so that
// stores on one server start empty.
var prefixes atomic.Int64

func newStoreOn(url string) storetest.NewStore {
	return func(t *testing.T, l tracker.Limits) tracker.Store {
		return New(client(t, url), Config{Limits: l, Prefix: fmt.Sprintf("test%d:", prefixes.Add(1))})
	}
}

// TestStoreMiniredis runs the conformance suite on an in-process Redis,
// but the floods, which the real one runs (miniredis takes a minute).
func TestStoreMiniredis(t *testing.T) {
	_, url := miniRedis(t)
	storetest.Run(t, newStoreOn(url), storetest.Options{NoFloods: true})
}

// TestStoreRedisServer runs the conformance suite on a real redis-server,
// which it starts itself; it skips when there is none, unless
// STAMPEDETEST_REQUIRE_REDIS=1 (scripts/test.sh installs one).
func TestStoreRedisServer(t *testing.T) {
	url := redisServer(t)
	storetest.Run(t, newStoreOn(url), storetest.Options{Crowds: []int{10, 100, 1000, 10000}})
}

// redisServer starts a redis-server for the test on a unix socket in a
// temporary directory (redis takes no listener, and asked for port 0 it
// opens no TCP port at all), and returns its URL. The server is killed,
// by its PID, when the test ends. It skips the test when redis-server is
// not installed, unless STAMPEDETEST_REQUIRE_REDIS=1.
func redisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("STAMPEDETEST_REQUIRE_REDIS") == "1" {
			t.Fatalf("STAMPEDETEST_REQUIRE_REDIS=1 and no redis-server: %v", err)
		}
		t.Skipf("no redis-server (set STAMPEDETEST_REQUIRE_REDIS=1 to fail instead): %v", err)
	}
	dir := t.TempDir()
	if len(dir) > 90 {
		// A unix socket's path must fit in 108 bytes.
		if dir, err = os.MkdirTemp("", "redis"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "notice")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	exited := make(chan error, 1)
	var log strings.Builder // written before exited is sent on
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			// "The server is now ready to accept connections at PATH"
			// (7.0), "Ready to accept connections unix" (7.2 on).
			if strings.Contains(strings.ToLower(sc.Text()), "ready to accept connections") {
				close(ready)
				io.Copy(io.Discard, stdout)
				break
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // by its PID: ours alone
		<-exited
	})
	select {
	case <-ready:
		return "unix://" + sock
	case err := <-exited:
		t.Fatalf("redis-server exited: %v\n%s", err, log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("redis-server on %s did not say it was ready", sock)
	}
	return ""
}

func announce(t *testing.T, st tracker.Store, i int, event tracker.Event, now time.Time) tracker.Outcome {
	t.Helper()
	id := tracker.PeerID{byte(i >> 8), byte(i), 0x5a}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 7000)
	out, err := st.Announce(t.Context(), tracker.AnnounceRequest{Root: manifest.Hash{7}, Size: 100, ID: id, Port: 7000,
		Left: 100, Event: event, NumWant: 50}, addr, now)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestartLosesNothing: a store made anew on the same Redis (a tracker
// restarted) has every swarm, and keeps counting peers in them once.
func TestRestartLosesNothing(t *testing.T) {
	_, url := miniRedis(t)
	l := tracker.Limits{}
	now := time.Unix(1e9, 0)
	before := New(client(t, url), Config{Limits: l})
	for i := range 5 {
		announce(t, before, i, tracker.EventStarted, now)
	}
	after := New(client(t, url), Config{Limits: l})
	out := announce(t, after, 5, tracker.EventStarted, now.Add(time.Second))
	if out.SwarmSize != 6 || len(out.Peers) != 5 {
		t.Errorf("after the restart: swarm_size %d, %d peers; want 6, 5", out.SwarmSize, len(out.Peers))
	}
}

// swarmFields is how many fields of its own a swarm keeps in its hash,
// next to the peers' and their sources' counts (swarm.lua's FIELDS).
const swarmFields = 14

// TestKeysBounded plays an attacker: many ids into one swarm, many
// swarms, ids that stop and start: the keys and their sizes stay within
// the bounds, and every key of a swarm carries a TTL.
func TestKeysBounded(t *testing.T) {
	m, url := miniRedis(t)
	const maxPeers, maxSwarms = 8, 4
	st := New(client(t, url), Config{Limits: tracker.Limits{MaxPeersPerSwarm: maxPeers, MaxSwarms: maxSwarms}})
	now := time.Unix(1e9, 0)
	ctx := t.Context()
	for i := range 2000 {
		now = now.Add(10 * time.Millisecond)
		id := tracker.PeerID{byte(i >> 8), byte(i)}
		ev := []tracker.Event{tracker.EventStarted, tracker.EventStopped, tracker.EventNone, tracker.EventCompleted}[i%4]
		left := int64(1)
		if ev == tracker.EventCompleted {
			left = 0
		}
		root := manifest.Hash{byte(i % 40)}                                                      // ten times the swarms allowed
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i % 7)}), uint16(i%3)) // seven sources
		if _, err := st.Announce(ctx, tracker.AnnounceRequest{Root: root, Size: 100, ID: id, Port: addr.Port(), Left: left, Event: ev, NumWant: 50}, addr, now); err != nil {
			t.Fatal(err)
		}
		if i%40 == 0 {
			st.Peers(ctx, root, 100, 50, now)
		}
	}
	rdb := client(t, url)
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	swarms := make(map[string]bool)
	for _, k := range keys {
		switch k {
		case DefaultPrefix + "swarms", DefaultPrefix + "lone", DefaultPrefix + "makers", DefaultPrefix + "share", DefaultPrefix + "key":
			continue // the registries, bound by them; the estimator's key, for good
		}
		name, _, ok := strings.Cut(strings.TrimPrefix(k, DefaultPrefix+"{"), "}")
		if !ok {
			t.Errorf("key %q outside the layout", k)
			continue
		}
		swarms[name] = true
		if ttl := m.TTL(k); ttl <= 0 || ttl > (tracker.ExpiryIntervals+1)*tracker.DefaultInterval {
			t.Errorf("key %q: TTL %v", k, ttl)
		}
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "zset":
			if n := rdb.ZCard(ctx, k).Val(); n > 64 {
				t.Errorf("%s: %d members", k, n)
			}
		case "hash":
			// Each peer's row and its source's count; +1: the padding field.
			if n := rdb.HLen(ctx, k).Val(); n > 2*maxPeers+1+swarmFields {
				t.Errorf("%s: %d fields", k, n)
			}
		case "set":
			if n := rdb.SCard(ctx, k).Val(); n > maxPeers {
				t.Errorf("%s: %d members", k, n)
			}
		case "list":
			if n := rdb.LLen(ctx, k).Val(); n > 16 {
				t.Errorf("%s: %d items", k, n)
			}
		}
		if n := rdb.MemoryUsage(ctx, k).Val(); n > 16<<10 {
			t.Errorf("%s: %d bytes", k, n)
		}
	}
	// The counts the scripts keep agree with the table.
	for name := range swarms {
		base := DefaultPrefix + "{" + name + "}"
		n, c := 0, 0
		sources, counts := make(map[string]int), make(map[string]int)
		for id, v := range rdb.HGetAll(ctx, base+":i").Val() {
			if src, ok := strings.CutPrefix(id, "@"); ok {
				counts[src], _ = strconv.Atoi(v)
				continue
			}
			if len(id) != 2*len(tracker.PeerID{}) {
				continue // the padding, the swarm's fields
			}
			n++
			sources[strings.Split(v, "|")[1]]++
			if strings.HasPrefix(v, "1|") {
				c++
			}
			if _, err := rdb.ZScore(ctx, base+":p", id+"|"+v).Result(); err != nil {
				t.Errorf("%s: %s has a row, not a place in the table: %v", name, id, err)
			}
		}
		if fmt.Sprint(sources) != fmt.Sprint(counts) {
			t.Errorf("%s: peers of each source %v, counted %v", name, sources, counts)
		}
		lone := rdb.ZScore(ctx, DefaultPrefix+"lone", name).Err() == nil
		if ns := rdb.HGet(ctx, base+":i", "ns").Val(); ns != strconv.Itoa(len(sources)) && !(ns == "" && len(sources) == 0) || lone != (len(sources) < 2) {
			t.Errorf("%s: %s sources counted, %d in the table; lone %v", name, ns, len(sources), lone)
		}
		meta := rdb.HMGet(ctx, base+":i", "n", "c").Val()
		for i, v := range meta {
			if v == nil {
				meta[i] = "0" // a swarm no peer joined yet
			}
		}
		if fmt.Sprint(meta[0]) != strconv.Itoa(n) || fmt.Sprint(meta[1]) != strconv.Itoa(c) || rdb.ZCard(ctx, base+":p").Val() != int64(n) {
			t.Errorf("%s: counts %v, table of %d with %d seeds (zset %d)", name, meta, n, c, rdb.ZCard(ctx, base+":p").Val())
		}
	}
	if len(swarms) > maxSwarms {
		t.Errorf("keys of %d swarms, at most %d allowed: %v", len(swarms), maxSwarms, swarms)
	}
	if n := rdb.ZCard(ctx, DefaultPrefix+"swarms").Val(); n > maxSwarms {
		t.Errorf("%d swarms registered", n)
	}
	for _, name := range rdb.ZRange(ctx, DefaultPrefix+"lone", 0, -1).Val() {
		if rdb.ZScore(ctx, DefaultPrefix+"swarms", name).Err() != nil {
			t.Errorf("lone swarm %s not registered", name)
		}
	}
	if n := rdb.ZCard(ctx, DefaultPrefix+"{"+swarmName(manifest.Hash{39}, 100)+"}:p").Val(); n > maxPeers {
		t.Errorf("table of %d peers", n)
	}
	checkMakers(t, rdb, DefaultPrefix)
}

// checkMakers checks the keys of who made which swarm under prefix: made
// names the maker of every swarm registered and of none other, and share,
// when there, counts them.
func checkMakers(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := t.Context()
	registered := rdb.ZRange(ctx, prefix+"swarms", 0, -1).Val()
	made := rdb.HGetAll(ctx, prefix+"makers").Val()
	counts := make(map[string]int)
	for name, src := range made {
		if rdb.ZScore(ctx, prefix+"swarms", name).Err() != nil {
			t.Errorf("swarm %s, made by %s, not registered", name, src)
		}
		if _, err := netip.ParseAddr(src); err != nil && src != "lo" && strings.Count(src, ":") != 3 {
			t.Errorf("swarm %s made by %q", name, src)
		}
		counts[src]++
	}
	if len(made) != len(registered) {
		t.Errorf("%d swarms registered, %d makers known", len(registered), len(made))
	}
	if rdb.Exists(ctx, prefix+"share").Val() == 0 {
		return
	}
	share := make(map[string]int)
	for _, z := range rdb.ZRangeWithScores(ctx, prefix+"share", 0, -1).Val() {
		share[z.Member.(string)] = int(z.Score)
	}
	if fmt.Sprint(share) != fmt.Sprint(counts) {
		t.Errorf("swarms counted by maker %v, made %v", share, counts)
	}
}

// TestMakersKept: the count of the swarms each source made agrees with
// the swarms registered whatever happens to them: swarms pushed out, made
// into a registry not full (a tracker given a larger MaxSwarms), dropped
// idle, gone with their keys' TTL, made anew after they were idle.
func TestMakersKept(t *testing.T) {
	m, url := miniRedis(t)
	rdb := client(t, url)
	ctx := t.Context()
	now := time.Unix(1e9, 0)
	from := func(st *Store, root byte, src byte) {
		t.Helper()
		now = now.Add(time.Second)
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, src}), 7000)
		if _, err := st.Announce(ctx, tracker.AnnounceRequest{Root: manifest.Hash{root}, Size: 100, ID: tracker.PeerID{root, src},
			Port: 7000, Left: 1, NumWant: 50}, addr, now); err != nil {
			t.Fatal(err)
		}
	}
	small := New(rdb, Config{Limits: tracker.Limits{MaxSwarms: 4}})
	for i := range 12 { // past the bound: share is made, and kept
		from(small, byte(i), byte(i%3))
	}
	if rdb.Exists(ctx, DefaultPrefix+"share").Val() == 0 {
		t.Error("no share after swarms were pushed out")
	}
	checkMakers(t, rdb, DefaultPrefix)
	large := New(rdb, Config{Limits: tracker.Limits{MaxSwarms: 8}})
	for i := range 10 { // into a registry not full, then past it
		from(large, byte(20+i), byte(i%2))
		checkMakers(t, rdb, DefaultPrefix)
	}
	// Idle swarms dropped by a new one.
	now = now.Add(tracker.ExpiryIntervals*tracker.DefaultInterval - 5*time.Second)
	for i := range 6 {
		from(large, byte(40+i), 7)
		checkMakers(t, rdb, DefaultPrefix)
	}
	for i := range 8 { // past the bound again (the last two made stay)
		from(large, byte(50+i), byte(i%3))
	}
	if rdb.Exists(ctx, DefaultPrefix+"share").Val() == 0 {
		t.Error("no share after swarms were pushed out")
	}
	// An idle swarm announced to before anything dropped it: made anew, by
	// this source.
	now = now.Add(tracker.ExpiryIntervals * tracker.DefaultInterval)
	from(large, 57, 9)
	if src := rdb.HGet(ctx, DefaultPrefix+"makers", swarmName(manifest.Hash{57}, 100)).Val(); src != "10.0.0.9" {
		t.Errorf("a swarm made anew after it was idle: made by %q, want 10.0.0.9", src)
	}
	checkMakers(t, rdb, DefaultPrefix)
	// Every swarm's keys gone with their TTL, the registry left.
	m.FastForward(time.Hour)
	now = now.Add(time.Hour)
	from(large, 56, 3)
	if src := rdb.HGet(ctx, DefaultPrefix+"makers", swarmName(manifest.Hash{56}, 100)).Val(); src != "10.0.0.3" {
		t.Errorf("a swarm made anew after its keys went: made by %q, want 10.0.0.3", src)
	}
	checkMakers(t, rdb, DefaultPrefix)
	for i := range 12 {
		from(large, byte(60+i), byte(i%4))
		checkMakers(t, rdb, DefaultPrefix)
	}

	// Swarms dropped idle by a new one made into a registry still full (a
	// tracker given a smaller MaxSwarms).
	const prefix = "shrunk:"
	large = New(rdb, Config{Limits: tracker.Limits{MaxSwarms: 6}, Prefix: prefix})
	for i := range 7 {
		from(large, byte(100+i), byte(i))
	}
	now = now.Add(tracker.ExpiryIntervals*tracker.DefaultInterval - 4*time.Second) // the first two kept are idle
	small = New(rdb, Config{Limits: tracker.Limits{MaxSwarms: 3}, Prefix: prefix})
	from(small, 110, 7)
	if n := rdb.ZCard(ctx, prefix+"swarms").Val(); n != 3 {
		t.Errorf("%d swarms registered, want 3", n)
	}
	checkMakers(t, rdb, prefix)
}

// TestRedisDown: with Redis gone, calls fail with an error wrapping
// tracker.ErrStore, within the context's time; once it is back, the
// store works again.
func TestRedisDown(t *testing.T) {
	m, url := miniRedis(t)
	st := New(client(t, url), Config{})
	now := time.Unix(1e9, 0)
	announce(t, st, 1, tracker.EventStarted, now)
	m.SetError("LOADING Redis is loading the dataset in memory")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := st.Announce(ctx, tracker.AnnounceRequest{Root: manifest.Hash{7}, Size: 100, Left: 1, NumWant: 1}, netip.MustParseAddrPort("10.0.0.1:1"), now)
	if !errors.Is(err, tracker.ErrStore) {
		t.Errorf("announce with Redis failing: %v", err)
	}
	if _, err := st.Stats(ctx, now); !errors.Is(err, tracker.ErrStore) {
		t.Errorf("stats with Redis failing: %v", err)
	}
	m.SetError("")
	m.Close()
	start := time.Now()
	if _, err := st.Peers(ctx, manifest.Hash{7}, 100, 5, now); !errors.Is(err, tracker.ErrStore) || time.Since(start) > 4*time.Second {
		t.Errorf("peers with Redis gone: %v after %v", err, time.Since(start))
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	announce(t, st, 2, tracker.EventStarted, now)
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{"", "memory", "http://localhost:6379", "redis://localhost:6379/x", "redis://localhost:port", "unix://"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, good := range []string{"redis://localhost:6379/0", "redis://127.0.0.1:6380/3", "rediss://user:pw@host:6379/1", "unix:///run/redis.sock?db=2"} {
		if _, err := ParseURL(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

// TestOpenFailsClearly: Open names the address it could not reach.
func TestOpenFailsClearly(t *testing.T) {
	m, url := miniRedis(t)
	addr := m.Addr()
	m.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := Open(ctx, url, Config{})
	if !errors.Is(err, tracker.ErrStore) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Open with no Redis: %v", err)
	}
}

// benchStores returns a constructor of empty stores on the Redis at url.
func benchStores(url string) func(b *testing.B) tracker.Store {
	return func(b *testing.B) tracker.Store {
		return New(client(b, url), Config{Prefix: "bench" + strconv.Itoa(int(prefixes.Add(1))) + ":"})
	}
}

// withServerCPU wraps the stores of newStore in serverCPU (a real
// redis-server's INFO: miniredis has no cpu section).
func withServerCPU(newStore func(b *testing.B) tracker.Store) func(b *testing.B) tracker.Store {
	return func(b *testing.B) tracker.Store {
		st := newStore(b).(*Store)
		return serverCPU{st, st.rdb}
	}
}

// serverCPU is a Store that tells the benchmarks the Redis server's CPU
// time (storetest.ServerCPU), from INFO cpu.
type serverCPU struct {
	*Store
	rdb *redis.Client
}

func (s serverCPU) ServerCPU(ctx context.Context) (time.Duration, error) {
	info, err := s.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// BenchmarkRedisStore: announces per second and p99 at the Store
// interface, on a real redis-server (skipped without one).
func BenchmarkRedisStore(b *testing.B) {
	storetest.BenchmarkStore(b, withServerCPU(benchStores(redisServer(b))), 8)
}

// BenchmarkRedisStoreHTTP: the same over HTTP on loopback, with the load
// generator in this process.
func BenchmarkRedisStoreHTTP(b *testing.B) {
	storetest.BenchmarkHTTP(b, benchStores(redisServer(b)), 8)
}

// BenchmarkMiniredisStore: the in-process Redis, for CI's compile check;
// its figures say nothing of a real server.
func BenchmarkMiniredisStore(b *testing.B) {
	_, url := miniRedis(b)
	storetest.BenchmarkStore(b, benchStores(url), 8)
}

// queued starts n announces of peers started into one swarm while the
// store is kept busy (as if maxSending calls were under way), waits until
// they all wait, and returns their answers once one call has sent them.
// fail, if given, runs before they are sent.
func queued(t *testing.T, st *Store, n int, ctxs func(i int) context.Context, fail func()) ([]tracker.Outcome, []error) {
	t.Helper()
	st.mu.Lock()
	st.sending = maxSending
	st.mu.Unlock()
	now := time.Unix(1e9, 0)
	outs, errs := make([]tracker.Outcome, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := tracker.PeerID{byte(i >> 8), byte(i), 0x5b}
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 7000)
			outs[i], errs[i] = st.Announce(ctxs(i), tracker.AnnounceRequest{Root: manifest.Hash{8}, Size: 100, ID: id, Port: 7000,
				Left: 100, Event: tracker.EventStarted, NumWant: 50}, addr, now)
		})
	}
	for {
		st.mu.Lock()
		k := len(st.queue)
		st.mu.Unlock()
		if k == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if fail != nil {
		fail()
	}
	before := st.batchCount()
	st.sent() // sends them, in one batch
	st.sent() // nothing left: the other call "under way" ends
	wg.Wait()
	if got := st.batchCount() - before; got != 1 {
		t.Errorf("%d announces sent in %d calls, want 1", n, got)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sending != 0 || len(st.queue) != 0 {
		t.Errorf("after the batch: %d calls under way, %d announces waiting", st.sending, len(st.queue))
	}
	return outs, errs
}

func (s *Store) batchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches
}

// TestStoreGroupCommit: announces made at once go in one call, each applied in
// turn, and each caller gets its own answer: the k-th peer into the swarm
// is told of a swarm of k and given the k-1 before it.
func TestStoreGroupCommit(t *testing.T) {
	_, url := miniRedis(t)
	st := New(client(t, url), Config{})
	outs, errs := queued(t, st, maxBatch, func(int) context.Context { return t.Context() }, nil)
	order := make(map[int]int) // swarm size told -> peer
	for i, err := range errs {
		if err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		order[outs[i].SwarmSize] = i
	}
	for k := 1; k <= maxBatch; k++ {
		i, ok := order[k]
		if !ok {
			t.Fatalf("no peer told of a swarm of %d: %v", k, order)
		}
		out := outs[i]
		if len(out.Peers) != min(k-1, 50) {
			t.Errorf("peer %d, %d-th in: %d peers", i, k, len(out.Peers))
		}
		for _, p := range out.Peers {
			j := int(p.ID[0])<<8 | int(p.ID[1])
			if outs[j].SwarmSize >= k {
				t.Errorf("peer %d, %d-th in, given peer %d, %d-th in", i, k, j, outs[j].SwarmSize)
			}
		}
	}
}

// TestStoreGroupCommitFails: a call that fails fails every announce it carried;
// one whose caller gave up while it waited is not sent.
func TestStoreGroupCommitFails(t *testing.T) {
	m, url := miniRedis(t)
	st := New(client(t, url), Config{})
	_, errs := queued(t, st, 8, func(int) context.Context { return t.Context() }, func() {
		m.SetError("LOADING Redis is loading the dataset in memory")
	})
	for i, err := range errs {
		if !errors.Is(err, tracker.ErrStore) {
			t.Errorf("peer %d: %v, want a store error", i, err)
		}
	}
	m.SetError("")

	gone, cancel := context.WithCancel(t.Context())
	outs, errs := queued(t, st, 8, func(i int) context.Context {
		if i == 3 {
			return gone
		}
		return t.Context()
	}, cancel)
	for i, err := range errs {
		if i == 3 {
			if !errors.Is(err, tracker.ErrStore) || !errors.Is(err, context.Canceled) {
				t.Errorf("peer 3, gone: %v", err)
			}
		} else if err != nil || outs[i].SwarmSize > 7 {
			t.Errorf("peer %d: %v, swarm of %d", i, err, outs[i].SwarmSize)
		}
	}
}

// TestEstimatorKeyChanged: a store whose estimator key is no longer the
// one in Redis (Redis lost it, and another tracker made another) takes
// the one in Redis, and its announces go through.
func TestEstimatorKeyChanged(t *testing.T) {
	m, url := miniRedis(t)
	st := New(client(t, url), Config{})
	now := time.Unix(1e9, 0)
	announce(t, st, 1, tracker.EventStarted, now)
	m.Set(DefaultPrefix+"key", "another")
	if out := announce(t, st, 2, tracker.EventStarted, now.Add(time.Second)); out.SwarmSize != 2 {
		t.Errorf("swarm_size %d after the key changed, want 2", out.SwarmSize)
	}
	if k := st.key.Load(); k == nil || k.text != "another" {
		t.Errorf("estimator key %+v, want the one in Redis", k)
	}
	m.Del(DefaultPrefix + "key")
	announce(t, st, 3, tracker.EventStarted, now.Add(2*time.Second))
	if v, err := m.Get(DefaultPrefix + "key"); err != nil || v == "another" {
		t.Errorf("estimator key in Redis %q, %v: want a new one", v, err)
	}
}

// TestFunctionsLoadedAgain: a Redis that lost the store's functions (a
// restart) gets them again, and the announce that found them gone goes
// through.
func TestFunctionsLoadedAgain(t *testing.T) {
	rdb := client(t, redisServer(t))
	st := New(rdb, Config{})
	now := time.Unix(1e9, 0)
	announce(t, st, 1, tracker.EventStarted, now)
	if err := rdb.FunctionFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if out := announce(t, st, 2, tracker.EventStarted, now.Add(time.Second)); out.SwarmSize != 2 || len(out.Peers) != 1 {
		t.Errorf("after the functions went: swarm_size %d, %d peers; want 2, 1", out.SwarmSize, len(out.Peers))
	}
	if st.scripts.Load() {
		t.Error("the store went over to scripts")
	}
}

// TestPicked: the peers for an announce are those taken first, in their
// order, then the others, but the asker and those taken, up to want.
func TestPicked(t *testing.T) {
	line := func(i int) string { return fmt.Sprintf("%032x|0|10.0.0.%d|7000", i, i) }
	id := func(i int) tracker.PeerID { return tracker.PeerID{15: byte(i)} }
	vals := []any{int64(2), line(1), line(2), line(3), line(2), line(9), line(4), line(5)}
	for range 20 {
		got, err := picked(slices.Clone(vals), id(9), 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || got[0].ID != id(1) || got[1].ID != id(2) {
			t.Fatalf("picked %v, want 1, 2 and two of 3, 4, 5", got)
		}
		for _, p := range got[2:] {
			if n := p.ID[15]; n != 3 && n != 4 && n != 5 {
				t.Fatalf("picked %v, want 1, 2 and two of 3, 4, 5", got)
			}
		}
		if got[2].ID == got[3].ID {
			t.Fatalf("picked %v twice", got[2])
		}
	}
	if _, err := picked([]any{int64(3), line(1)}, id(9), 4); !errors.Is(err, errBadList) {
		t.Errorf("more taken than given: %v", err)
	}
}

// TestTableLostUnderneath: a swarm whose table Redis lost while its count
// says full (keys evicted under maxmemory, dropped by hand) takes the
// next newcomer into the table, rather than failing every announce to
// it.
func TestTableLostUnderneath(t *testing.T) {
	for name, url := range map[string]string{"miniredis": func() string { _, u := miniRedis(t); return u }(), "redis-server": redisServer(t)} {
		t.Run(name, func(t *testing.T) {
			rdb := client(t, url)
			st := New(rdb, Config{Limits: tracker.Limits{MaxPeersPerSwarm: 4}, Prefix: "lost:"})
			now := time.Unix(1e9, 0)
			for i := 1; i <= 4; i++ {
				announce(t, st, i, tracker.EventStarted, now)
			}
			if err := rdb.Del(t.Context(), "lost:{"+swarmName(manifest.Hash{7}, 100)+"}:p").Err(); err != nil {
				t.Fatal(err)
			}
			announce(t, st, 5, tracker.EventStarted, now.Add(time.Second)) // fails the test on an error
			out := announce(t, st, 6, tracker.EventStarted, now.Add(2*time.Second))
			if !slices.ContainsFunc(out.Peers, func(p tracker.Peer) bool { return p.ID == tracker.PeerID{0, 5, 0x5a} }) {
				t.Errorf("the next one was handed %v, not the newcomer", out.Peers)
			}
		})
	}
}
