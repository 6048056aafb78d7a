package swarm

import "time"

// Small objects: a page bundle or an object of a few pieces, fetched by
// visitors who arrive one to a few dozen a second and leave the moment
// they have it (Flashback's setting; docs/architecture.md, "Small
// objects"). What serves an arrival there is the pool of peers still
// downloading, and every round trip counts against a download that takes
// a few of them. The rules change in these ways:
//
//   - One burst. A neighbour is asked for every missing piece it has at
//     once (depth MaxDepth), not for its bandwidth-delay product: the whole
//     object is asked and sent in one round trip, as Roulette's
//     stop-and-go burst. An untested neighbour gets the whole burst too
//     (probes): one that has delivered nothing a second after being asked
//     no longer keeps the origin off its pieces (peers-failing).
//   - A deadline. The pieces still missing SmallDeadline after Start and
//     asked of no neighbour are fetched from the origin at once, all of
//     them, whatever the k/n draw, other peers' START claims and the
//     origin's "in swarm" answers say (reason "deadline"), without
//     candidates, so that the origin does not refuse them. Those asked of
//     a neighbour are left to the request deadlines and the peers-failing
//     rule. Before the deadline the origin rule
//     is the usual one: a lone arrival (the tracker named nobody) fetches
//     everything at once; in a pool the origin sends each piece about
//     once per its resend window and the pool passes it on.
//   - The origin's "in swarm" answer holds a piece off the origin not at
//     all: we asked for it because no neighbour has or claims it, and the
//     pool the origin sent it to within its resend window has most likely
//     left (it turns over many times in that window). It is fetched again
//     at once without candidates, which the origin does not refuse (its
//     START keeps its neighbours off it); so does a lone downloader, which
//     leaves nothing behind in a swarm.
//   - Every interested neighbour is unchoked, and HAVEs and STARTs go out
//     at once: the download is over before a slot would rotate or a held
//     HAVE would go.
//   - Nothing else changes: a file is small or not from its geometry, so
//     a long download runs exactly the code it ran before.
//
// A file is small when all of it fits in one burst: at most MaxDepth
// pieces, and at most OriginWindow bytes (the origin's window: one
// holder's fetches keep the origin's link busy with that much, so the
// whole object is one window's worth). With the defaults, up to 256 KiB.

// DefaultSmallDeadline is Config.SmallDeadline's default: a few times
// what a lone fetch of a small object takes from a busy origin over a
// home link, and well within a visitor's patience.
const DefaultSmallDeadline = time.Second

// smallObject reports whether a file of n pieces and total bytes is a
// small object under c.
func (c Config) smallObject(n int, total int64) bool {
	return c.SmallDeadline > 0 && n > 0 && n <= c.MaxDepth && total <= c.OriginWindow
}

// IsSmall reports whether a file of n pieces and total bytes is a small
// object under the scheduler configuration c (defaults filled in): the
// runtime shortens its own waits for such a file too.
func IsSmall(c Config, n int, total int64) bool {
	return c.withDefaults().smallObject(n, total)
}

// Small reports whether the scheduler's file is a small object.
func (s *Scheduler) Small() bool { return s.small }

// pastDeadline reports whether a small object is still missing pieces
// SmallDeadline after Start.
func (s *Scheduler) pastDeadline() bool {
	return s.small && !s.have.Complete() && s.now.Sub(s.startAt) >= s.cfg.SmallDeadline
}

// fetchOverdue fetches from the origin every missing piece of a small
// object past its deadline that is on its way from nowhere: not from the
// origin already, nor asked of a neighbour (a request has its own
// deadline, and a neighbour that fails us is left by the usual rules:
// peers-failing, timeouts). So a flash crowd whose neighbours are slow to
// deliver does not send the whole crowd to the origin at once; what the
// deadline overrides is what keeps a piece asked of nobody: the draw,
// other peers' START claims and the origin's "in swarm" answers. A busy
// or failing origin is still respected: its Retry-After and backoff hold,
// and while it fails one fetch at a time tries it.
func (s *Scheduler) fetchOverdue() {
	if s.now.Before(s.busyUntil) || s.now.Before(s.originRetryAt) {
		return
	}
	limit := len(s.pieces)
	if s.originFails > 0 {
		limit = 1
	}
	for i := s.have.NextMissing(0); i >= 0 && len(s.originReqs) < limit; i = s.have.NextMissing(i + 1) {
		ps := &s.pieces[i]
		if ps.origin || ps.reqs > 0 || s.now.Before(ps.retry) {
			continue
		}
		s.fetchOrigin(i, ReasonDeadline, nil)
	}
}

// inSwarmWait is how long an "in swarm" answer of wait keeps its pieces
// off the origin: wait, or nothing for a small object. We fetch a piece
// only when no neighbour has it or claims it with START, and a pool
// member the origin sent it to just now would mostly have claimed it before
// the origin saw our request (STARTs go at once); the origin remembers its
// sends for its resend window (seconds), over which a small object's pool
// turns over many times. So the answer mostly speaks of peers that have
// left: the pieces are fetched again at once, without candidates, which
// the origin does not refuse (pickOrigin, leftToSwarm). In the node
// harness at 16 arrivals a second, holding them for a slice (250 ms, up
// to a tick more) put that wait on the arrivals after a gap in the
// arrivals, for no fewer origin bytes: p99 0.75-0.76 s against
// 0.38-0.41 s (docs/benchmarks.md, "Churn").
func (s *Scheduler) inSwarmWait(wait time.Duration) time.Duration {
	if s.small {
		return 0
	}
	return wait
}
