package fetch

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
)

// Piece picks, the client side (the origin side and the exchange are in
// package origin, pick.go). In the swarm, a request to the origin may
// offer other pieces it would take as well (Stampede-Candidates; the
// piece asked alone when there is no other); the origin sends the one it
// has sent least, naming it in Stampede-Piece without a Retry-After. The
// piece is verified and stored like any other, and the fetcher reports it
// as the piece got.

// readPickAnswer checks and stores the piece the origin picked among a's
// candidates, and records it in a.got. The response's validators were
// checked already.
func (d *Download) readPickAnswer(ctx context.Context, m *manifest.Manifest, sk sink, a *attempt, free chan<- []byte, resp *http.Response) error {
	v := resp.Header.Get(contract.PieceHeader)
	j, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || (j != a.piece && !slices.Contains(a.candidates, j)) {
		return fmt.Errorf("%w: asked for piece %d, the origin sent piece %q, which was not offered", ErrProtocol, a.piece, v)
	}
	if err := d.readPiece(ctx, m, sk, j, a, free, resp, fmt.Sprintf("piece %d (picked instead of %d)", j, a.piece)); err != nil {
		return err
	}
	a.got = j
	return nil
}
