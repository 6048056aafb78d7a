package node

import (
	"context"
	"errors"
	"time"

	"github.com/stampede-dev/stampede/swarm"
	"github.com/stampede-dev/stampede/wire"
)

// Lazy HAVEs. A HAVE goes at once to the neighbours that lack the piece
// and may fetch it from us: they may want it now. Those that have it
// already or that we choke, and still have pieces we lack, need not hear
// at once (swarm.Scheduler.HaveCanWait; an UNCHOKE goes after them): their
// HAVEs wait, for about lazyHaveDelay at most (the flush is on the loop's
// ticks), and go out in one write with the next HAVE that goes at once, or
// with the others held back, or when maxLazy are waiting. The START of a
// request to a peer waits with them (swarm.Scheduler.StartTo, Node.announce). A HAVE is
// one frame in a packet of its own, which draws an ACK, and each peer of a
// crowd of N sends N-1 of them per piece: in a flash crowd of 20 (512
// pieces, 8 Mbit/s links) 19 × 512 = 9,728 HAVEs per peer against about
// 23,000 data segments (32 MiB in 1,448-byte segments) and half as many
// ACKs for what it receives, all handled by the peers' processes and
// kernels, on the testbed two cores for all of them. In flash50 runs on
// that testbed, where the cores are saturated, the last peer came 1.0-1.5 s
// sooner on average than without (nine pairs of runs, one after the
// other, every pair in favour); in flash20 runs no change showed beyond
// the runs' spread of about a second.
const (
	lazyHaveDelay = time.Second
	maxLazy       = 64
)

// announce sends a HAVE, START or STOP of piece to p, holds it back
// (wait; never a STOP), or drops it (!send: a claim p need not hear). What was held for p
// goes first, so p hears of each piece in order. A HAVE supersedes a START
// still held, and a STOP cancels it: that START does not go out, nor does
// the STOP. Any other STOP goes at once: it frees the piece for p's origin
// fetches, and STOPs are few.
func (n *Node) announce(p *peerConn, t wire.Type, piece int, send, wait bool) {
	if t == wire.TypeHave {
		p.unhold(wire.TypeStart, piece)
	}
	switch {
	case t == wire.TypeStop && p.unhold(wire.TypeStart, piece):
	case !send:
	case wait:
		p.hold(t, piece)
	default:
		p.sendLazy()
		switch t {
		case wire.TypeHave:
			p.sendControl(&wire.Have{Piece: uint32(piece)})
		case wire.TypeStart:
			p.sendControl(&wire.Start{Piece: uint32(piece)})
		case wire.TypeStop:
			p.sendControl(&wire.Stop{Piece: uint32(piece)})
		}
	}
}

// apply carries out the scheduler's actions.
func (n *Node) apply(ctx context.Context, acts []swarm.Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case swarm.Request:
			if p := n.peers[a.Peer]; p != nil {
				p.request(a.Piece, n.m.PieceLen(a.Piece))
			}
		case swarm.Cancel:
			if p := n.peers[a.Peer]; p != nil {
				if a.Timeout {
					n.log.Debug("request timed out", "peer", p.addr, "piece", a.Piece)
				}
				p.cancel(a.Piece, n.m.PieceLen(a.Piece))
			}
		case swarm.FetchOrigin:
			n.fetchOrigin(ctx, a)
		case swarm.Announce:
			for id, p := range n.peers {
				n.announce(p, wire.TypeHave, a.Piece, true, n.sched.HaveCanWait(id, a.Piece))
			}
		case swarm.AnnounceStart:
			for id, p := range n.peers {
				send, wait := n.sched.StartTo(id, a.Piece)
				n.announce(p, wire.TypeStart, a.Piece, send, wait)
			}
		case swarm.AnnounceStop:
			for id, p := range n.peers {
				send, _ := n.sched.StartTo(id, a.Piece) // a STOP never waits
				n.announce(p, wire.TypeStop, a.Piece, send, false)
			}
		case swarm.Choke:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(&wire.Choke{})
				p.rejectQueued()
			}
		case swarm.Unchoke:
			if p := n.peers[a.Peer]; p != nil {
				p.sendLazy()
				p.sendControl(&wire.Unchoke{})
			}
		case swarm.Serve:
			if p := n.peers[a.Peer]; p != nil {
				if !p.own && n.uploadsFull() {
					p.refuseBusy(a.Piece)
				} else if p.serve(a.Piece, n.uploadRank(a.Piece)) {
					continue
				}
				// Refused after all: the scheduler takes back what it
				// counted as served.
				n.postLater(ctx, swarm.Unserved(a))
			}
		case swarm.Reject:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(&wire.Reject{Piece: uint32(a.Piece), Length: uint32(n.m.PieceLen(a.Piece)), Reason: rejectReason(a.Reason)})
			}
		case swarm.Connect:
			n.connect(ctx, a.Addr)
		case swarm.Disconnect:
			if p := n.peers[a.Peer]; p != nil {
				n.log.Debug("disconnecting", "peer", p.addr, "why", a.Reason, "ban", a.Ban)
				if a.Ban {
					if len(n.bannedIDs) < maxBannedIDs {
						n.bannedIDs[p.peerID] = true
					} else {
						n.log.Warn("too many banned peer IDs to remember; this one is banned by its address only", "peer", p.addr)
					}
					n.mu.Lock()
					n.banned++
					n.mu.Unlock()
				}
				p.sendControl(&wire.Goodbye{Reason: goodbyeReason(a), Text: a.Reason})
				p.closeAfterFlush()
			}
		case swarm.AskTracker:
			if a.Why == "completed" && n.cfg.SeedTime == 0 && !n.cfg.SeedForever {
				// Leaving at once: "stopped" follows at once, and a
				// "completed" sent just before it could reach the
				// tracker after it, listing us as a seed that is gone.
				continue
			}
			n.askTracker(ctx, a.Why)
		case swarm.Recommend:
			if p := n.peers[a.Peer]; p != nil {
				p.sendControl(recommendation(a.Addrs))
			}
		case swarm.Complete:
			if n.complete {
				continue
			}
			n.complete = true
			if n.cfg.OnComplete != nil {
				if err := n.cfg.OnComplete(); err != nil {
					n.doneErr = err
					continue
				}
			}
			n.askTracker(ctx, "completed")
		}
	}
}

// goodbyeReason is the GOODBYE reason of the scheduler's Disconnect
// (docs/protocol.md, GOODBYE); its text is the scheduler's reason.
func goodbyeReason(d swarm.Disconnect) wire.GoodbyeReason {
	switch {
	case d.Ban: // corrupt data, now or before ("banned")
		return wire.GoodbyeCorrupt
	case d.Reason == swarm.DisconnectBadHaveSet:
		return wire.GoodbyeProtocol
	case d.Reason == swarm.DisconnectBothComplete:
		return wire.GoodbyeDone
	case d.Reason == swarm.DisconnectTooManyPeers:
		return wire.GoodbyeTooManyPeers
	}
	return wire.GoodbyeOther
}

func rejectReason(s string) wire.RejectReason {
	switch s {
	case "choked":
		return wire.RejectChoked
	case "don't have", "dont-have", "not-have":
		return wire.RejectDontHave
	case "busy":
		return wire.RejectBusy
	}
	return wire.RejectOther
}

func (n *Node) fetchOrigin(ctx context.Context, a swarm.FetchOrigin) {
	n.mu.Lock()
	n.origin[a.Reason]++
	n.mu.Unlock()
	n.log.Debug("origin fetch", "piece", a.Piece, "why", a.Reason, "peers", len(n.peers), "odds", a.Odds)
	if n.cfg.Origin == nil {
		n.postLater(ctx, swarm.OriginResult{Piece: a.Piece, OK: false})
		return
	}
	n.wg.Go(func() {
		start := time.Now()
		got, busy, err := n.cfg.Origin(ctx, a)
		n.log.Debug("origin fetch done", "piece", a.Piece, "took", time.Since(start), "ok", err == nil)
		if fe, ok := errors.AsType[*FatalError](err); ok {
			select {
			case n.fatal <- fe.Err:
			default:
			}
			return
		}
		res := swarm.OriginResult{Piece: a.Piece, OK: err == nil, Busy: busy}
		ie, inSwarm := errors.AsType[*InSwarmError](err)
		if failed := err != nil && busy == 0 && !inSwarm; !failed || ctx.Err() == nil {
			n.mu.Lock()
			n.originErr, n.originAt = nil, time.Now()
			if failed {
				n.originErr = err
			}
			n.mu.Unlock()
		}
		switch {
		case inSwarm:
			n.log.Debug("origin: pieces in the swarm", "piece", a.Piece, "retry_after", ie.Wait)
			res.InSwarm, res.Candidates = max(ie.Wait, time.Millisecond), a.Candidates
		case err != nil && busy == 0 && ctx.Err() == nil: // not when the node is stopping
			n.log.Info("origin fetch failed", "piece", a.Piece, "err", err)
		case busy > 0:
			n.log.Debug("origin busy", "piece", a.Piece, "retry_after", busy)
		}
		if err == nil && got >= 0 && got < n.m.NumPieces() {
			n.bytesFromOrigin.Add(n.m.PieceLen(got))
		}
		if err == nil && got != a.Piece {
			n.log.Debug("origin picked", "asked", a.Piece, "got", got)
			res.Picked, res.Got = true, got
		}
		n.post(ctx, res)
	})
}
