package fetch

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
)

// Overload mode, the client side (the origin side and the exact answer are
// in package origin, overloadanswer.go). In the swarm, every request to the
// origin says it can take an overload answer; an origin past its limits
// then answers 206 with one piece of its choosing (Stampede-Piece), peers
// of the swarm (Stampede-Peers) and a Retry-After. The piece is verified and
// stored like any other, the node is told it has it and who the peers are,
// and the request counts as a busy answer for the piece asked, so the
// scheduler stays off the origin for the Retry-After and takes the rest
// from peers.

// maxAnswerPeers bounds the peers taken from one answer.
const maxAnswerPeers = 50

// overloadAnswer is an overloaded origin's answer to a piece request: it
// sent (and we stored) another piece, named peers, and asks us to stay away
// for wait. It is an error for the piece asked.
type overloadAnswer struct {
	asked, piece int
	wait         time.Duration
	peers        []string
}

func (e *overloadAnswer) Error() string {
	return fmt.Sprintf("origin overloaded: asked for piece %d, got piece %d and %d peers; retry after %v",
		e.asked, e.piece, len(e.peers), e.wait)
}

// readOverloadAnswer checks and stores the piece of an overload answer to
// attempt a. The response's validators were checked already.
func (d *Download) readOverloadAnswer(ctx context.Context, m *manifest.Manifest, sk sink, a *attempt, free chan<- []byte, resp *http.Response) error {
	h := resp.Header
	j, err := strconv.Atoi(strings.TrimSpace(h.Get(contract.PieceHeader)))
	if err != nil || j < 0 || j >= m.NumPieces() {
		return fmt.Errorf("%w: overload answer names piece %q of %d", ErrProtocol, h.Get(contract.PieceHeader), m.NumPieces())
	}
	if root := h.Get(contract.RootHeader); root != "" && !strings.EqualFold(root, m.Root.String()) {
		return fmt.Errorf("%w: overload answer for root %s, the manifest's is %s", ErrChanged, root, m.Root)
	}
	if err := d.readPiece(ctx, m, sk, j, a, free, resp, fmt.Sprintf("overload answer for piece %d", j)); err != nil {
		return err
	}
	return &overloadAnswer{asked: a.piece, piece: j, wait: retryAfter(h, time.Now()), peers: contract.ParsePeers(h.Values(contract.PeersHeader), maxAnswerPeers)}
}
