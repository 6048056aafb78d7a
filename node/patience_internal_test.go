package node

import (
	"errors"
	"testing"
	"time"
)

// TestOutOfPatience: a download gives up once no piece came for its
// patience and the origin failed since the last one; an origin failure
// from before the last piece does not count.
func TestOutOfPatience(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	refused := errors.New("connection refused")
	for _, c := range []struct {
		name      string
		lastPiece time.Time
		at        time.Time
		err       error
		want      bool
	}{
		{"the origin failed after the last piece, patience out", t0, t0.Add(time.Second), refused, true},
		{"within patience", t0.Add(50 * time.Second), t0.Add(55 * time.Second), refused, false},
		{"a stale failure, before the last piece", t0.Add(time.Second), t0, refused, false},
		{"the origin's last answer fine", t0, t0.Add(time.Second), nil, false},
	} {
		if got := outOfPatience(t0.Add(61*time.Second), c.lastPiece, c.at, c.err, time.Minute); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
