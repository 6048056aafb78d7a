package swarm

import (
	"time"

	"github.com/stampede-dev/stampede/pieceset"
)

// PeerID is the scheduler's handle for one connection. The runtime assigns
// them (never reused within a session); the scheduler never sees sockets.
type PeerID uint64

// Event is something that happened, fed to Scheduler.Step.
type Event interface{ isEvent() }

// Action is something the runtime must do, returned by Scheduler.Step.
type Action interface{ isAction() }

// --- Events ---------------------------------------------------------------

// Tick is sent periodically (about every 100-250 ms) so time-driven
// decisions happen: deadlines, choking rounds, origin slices, refills.
type Tick struct{}

// PeerUp: a connection finished its handshake. Addr is the address the peer
// can be reached at (for recommendations), "" if unknown. Host is the
// address the connection comes from, without the port ("" if unknown: then
// Addr's host): the scheduler bounds what one host adds to the swarm-size
// estimate and evicts the connections of a crowded host first.
type PeerUp struct {
	Peer     PeerID
	Addr     string
	Host     string
	Outbound bool
}

// PeerDown: the connection is gone (closed, error, goodbye). Requests to it
// are void.
type PeerDown struct {
	Peer   PeerID
	Reason string
	// Left: the peer said GOODBYE, so it left the swarm (not merely this
	// connection); the swarm-size estimate of the origin rule drops by one.
	Left bool
}

// HaveSet: the peer's whole have-set (sent once after the handshake).
type HaveSet struct {
	Peer PeerID
	Set  *pieceset.Set
}

// Have: the peer announced one more piece.
type Have struct {
	Peer  PeerID
	Piece int
}

// Started: the peer announced START: it is fetching Piece (from the origin or
// a peer), so others should pick something else.
type Started struct {
	Peer  PeerID
	Piece int
}

// Stopped: the peer withdrew its START for Piece (STOP): that fetch failed
// and it is not fetching the piece elsewhere.
type Stopped struct {
	Peer  PeerID
	Piece int
}

// Choked / Unchoked: the peer stopped / started accepting our requests.
type Choked struct{ Peer PeerID }
type Unchoked struct{ Peer PeerID }

// Received: a requested piece arrived from a peer and was verified and stored.
type Received struct {
	Peer  PeerID
	Piece int
	Bytes int64
}

// Corrupt: a piece from Peer failed verification, or its piece layer did
// (Piece -1: the hashes it sent do not hash to the manifest's root). The
// peer must be dropped and banned.
type Corrupt struct {
	Peer  PeerID
	Piece int
}

// Rejected: the peer refused a request (choked, does not have it, busy), or
// the request was lost. The piece is free to be asked elsewhere. Reason is
// one of the Reject reasons as the peer sent it ("" if unknown or lost):
// only RejectDontHave counts against the peer, RejectChoked waits for
// Unchoked, anything else backs off from the peer for a second.
type Rejected struct {
	Peer   PeerID
	Piece  int
	Reason string
}

// OriginResult: a FetchOrigin finished. OK means the piece is verified and
// stored: Piece, or with Picked the origin's choice among the fetch's
// Candidates, Got, instead. Busy is the origin's Retry-After when it
// answered 503 (0 otherwise). InSwarm, when not 0, says the origin sent
// Piece and the fetch's Candidates to other peers just now and would send
// them again only in InSwarm: they are left to the swarm for that long,
// and other pieces may still be fetched.
type OriginResult struct {
	Piece      int
	OK         bool
	Busy       time.Duration
	Picked     bool
	Got        int
	InSwarm    time.Duration
	Candidates []int // the FetchOrigin's, with InSwarm
}

// PeerRequest: the peer asked us for Piece (upload side).
type PeerRequest struct {
	Peer  PeerID
	Piece int
}

// Unserved: the runtime refused as busy a Serve the scheduler asked for
// (its upload queue was full); what was counted as served is taken back.
type Unserved struct {
	Peer  PeerID
	Piece int
}

// Uploaded: we finished sending Bytes of Piece to Peer.
type Uploaded struct {
	Peer  PeerID
	Piece int
	Bytes int64
}

// PathRTT: the connection's round trip without queues, as the transport
// measures it (TCP's minimum RTT), for sizing request pipelines
// (Scheduler.depth). Transports that cannot tell send none.
type PathRTT struct {
	Peer PeerID
	RTT  time.Duration
}

// Capacity: our own upload capacity as the runtime measures it, bytes/s
// (0: not known). With PeerCapacity it sets what reciprocation measures
// a neighbour's upload against (capacityOf, meanCapacity).
type Capacity struct{ Up float64 }

// PeerCapacity: a neighbour told its upload capacity (RATE), bytes/s (0:
// not known).
type PeerCapacity struct {
	Peer PeerID
	Up   float64
}

// OriginBudget: the origin's last word on its egress budget for the file
// (serve --max-copies): Left more bytes to swarm clients before it refuses
// them, until the window ends in Reset. Without it the origin is used as
// if it had no budget to spare (see spare).
type OriginBudget struct {
	Left  int64
	Reset time.Duration
}

// Recommended: a peer recommended addresses, most recent first.
type Recommended struct {
	Peer  PeerID
	Addrs []string
}

// TrackerPeers: the tracker answered. SwarmSize is its estimate of n (0: no
// estimate, e.g. a failed announce; the scheduler keeps its previous one).
type TrackerPeers struct {
	Addrs     []string
	SwarmSize int
}

// Learned: peer addresses learnt outside the tracker and our peers (an
// overloaded origin's answer, a gateway's list). They are candidates to
// dial; unlike TrackerPeers this says nothing about the swarm's size and
// does not count as the tracker's answer.
type Learned struct{ Addrs []string }

// DialFailed: a Connect could not be established.
type DialFailed struct{ Addr string }

// Prefer: the application reads the file in order (a streaming client, a
// Range request): pieces From to From+Count-1 that we lack go before all
// others, lowest index first, from peers and, within the origin rule, from
// the origin. Count 0 ends the preference. A new Prefer replaces the last.
type Prefer struct{ From, Count int }

// LayerReady: the piece layer is known and verified against the root, and
// pieces may be requested (Config.LayerPending).
type LayerReady struct{}

func (Tick) isEvent()         {}
func (PeerUp) isEvent()       {}
func (PeerDown) isEvent()     {}
func (HaveSet) isEvent()      {}
func (Have) isEvent()         {}
func (Started) isEvent()      {}
func (Stopped) isEvent()      {}
func (Choked) isEvent()       {}
func (Unchoked) isEvent()     {}
func (Received) isEvent()     {}
func (Corrupt) isEvent()      {}
func (Rejected) isEvent()     {}
func (OriginResult) isEvent() {}
func (PeerRequest) isEvent()  {}
func (Uploaded) isEvent()     {}
func (PathRTT) isEvent()      {}
func (Capacity) isEvent()     {}
func (OriginBudget) isEvent() {}
func (PeerCapacity) isEvent() {}
func (Unserved) isEvent()     {}
func (Recommended) isEvent()  {}
func (TrackerPeers) isEvent() {}
func (DialFailed) isEvent()   {}
func (Learned) isEvent()      {}
func (Prefer) isEvent()       {}
func (LayerReady) isEvent()   {}

// --- Actions --------------------------------------------------------------

// Request: ask Peer for Piece.
type Request struct {
	Peer  PeerID
	Piece int
}

// Cancel: withdraw an outstanding request: the piece came from elsewhere
// (endgame duplicates), or Peer missed a deadline (Timeout, for the logs).
type Cancel struct {
	Peer    PeerID
	Piece   int
	Timeout bool
}

// FetchOrigin: fetch Piece from the origin over HTTP. Reason is one of the
// OriginReason constants, counted in metrics and --json. Candidates are
// pieces the origin may send instead (OriginResult.Picked): the origin
// sees every fetch of the crowd and sends the piece it has sent least, so
// peers that do not see each other's START claims still fetch different
// pieces. When Piece is the only eligible piece they are Piece alone, so
// the origin still takes the request for a swarm fetch (and refuses a
// piece it sent another peer just now); but none then for reason
// no-peers or after an origin fetch of ours of that piece failed. None
// either when only Piece will do whoever has it (a preferred or stalled
// piece).
type FetchOrigin struct {
	Piece      int
	Reason     string
	Candidates []int
	// Odds is the chance with which we drew the origin slice the fetch
	// is in (1 for an origin holder), for logs.
	Odds float64
}

// Origin request reasons.
const (
	ReasonNoPeerHasIt = "no-peer-has-it" // nobody we know has it or is fetching it
	ReasonNoPeers     = "no-peers"       // we know no peers at all
	ReasonStalled     = "stalled"        // peers have it but it has not come for too long
	ReasonPeersFail   = "peers-failing"  // only peers that are failing us have it (see suspect)
	ReasonSpare       = "spare"          // peers have it, but the origin has budget and time to spare (see spare)
	ReasonDeadline    = "deadline"       // a small object not whole by its deadline (see small.go)
)

// Announce: tell every connected peer (HAVE), after a piece was stored.
type Announce struct{ Piece int }

// AnnounceStart: tell every connected peer we are fetching Piece (START).
type AnnounceStart struct{ Piece int }

// AnnounceStop: tell every connected peer we no longer fetch Piece (STOP):
// our START for it is void. Emitted when the fetches of a piece we
// announced all ended without it (the peer asked left, rejected or timed
// out, the origin failed) and the decisions of the same step did not start
// another.
type AnnounceStop struct{ Piece int }

// Choke / Unchoke: stop / start serving Peer's requests.
type Choke struct{ Peer PeerID }
type Unchoke struct{ Peer PeerID }

// Serve: send Piece to Peer (read it from the store, which verifies it).
type Serve struct {
	Peer  PeerID
	Piece int
}

// Reject: refuse Peer's request for Piece. Reason is one of the Reject
// reasons below; the runtime sends it to the peer (which reports it as
// Rejected.Reason).
type Reject struct {
	Peer   PeerID
	Piece  int
	Reason string
}

// Reject reasons, for the Reject action and the Rejected event.
const (
	RejectChoked   = "choked"    // the requester is choked
	RejectDontHave = "dont-have" // the piece is not there
	RejectTab      = "tab"       // strict tit-for-tat: the requester's tab is full
	RejectBusy     = "busy"      // the upload queue is full (runtime)
)

// Disconnect reasons the runtime tells the peer apart (its GOODBYE's
// reason); the others are for logs.
const (
	DisconnectBadHaveSet   = "bad-haveset"    // its have-set does not fit the file
	DisconnectBothComplete = "both-complete"  // we both have the whole file
	DisconnectTooManyPeers = "too-many-peers" // evicted past MaxPeers
)

// Connect: dial Addr.
type Connect struct{ Addr string }

// Disconnect: close the connection; Ban keeps the address out of this swarm.
type Disconnect struct {
	Peer   PeerID
	Reason string
	Ban    bool
}

// AskTracker: announce to the tracker and ask for peers (partition repair,
// refill, or the periodic announce).
type AskTracker struct{ Why string }

// Recommend: send Peer a list of addresses recently traded with.
type Recommend struct {
	Peer  PeerID
	Addrs []string
}

// Complete: every piece is stored. Sent once.
type Complete struct{}

func (Request) isAction()       {}
func (Cancel) isAction()        {}
func (FetchOrigin) isAction()   {}
func (Announce) isAction()      {}
func (AnnounceStart) isAction() {}
func (AnnounceStop) isAction()  {}
func (Choke) isAction()         {}
func (Unchoke) isAction()       {}
func (Serve) isAction()         {}
func (Reject) isAction()        {}
func (Connect) isAction()       {}
func (Disconnect) isAction()    {}
func (AskTracker) isAction()    {}
func (Recommend) isAction()     {}
func (Complete) isAction()      {}
