package tracker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// Peer is a peer an announce hands out.
type Peer struct {
	Addr     netip.AddrPort `json:"addr"` // "ip:port", "[ipv6]:port"
	ID       PeerID         `json:"id"`
	Complete bool           `json:"complete"` // a seed
}

// AnnounceResponse is the tracker's answer to an announce.
type AnnounceResponse struct {
	// Interval is the time until the next periodic announce (whole
	// seconds on the wire).
	Interval time.Duration
	// SwarmSize estimates the peers in the swarm, the asker included, even
	// beyond the tracker's table; Complete estimates the seeds among them.
	SwarmSize int
	Complete  int
	// Peers lists seeds first, then the latest arrivals, then others at
	// random (for a small object, up to 256 KiB: the peers that announced
	// last first); never the asker, never a peer that cannot be reached.
	Peers []Peer
}

// wireResponse is AnnounceResponse as JSON.
type wireResponse struct {
	Interval  int64  `json:"interval"`
	SwarmSize int    `json:"swarm_size"`
	Complete  int    `json:"complete"`
	Peers     []Peer `json:"peers"`
}

// MarshalJSON encodes r as the tracker sends it.
func (r *AnnounceResponse) MarshalJSON() ([]byte, error) {
	peers := r.Peers
	if peers == nil {
		peers = []Peer{}
	}
	return json.Marshal(wireResponse{
		Interval:  int64((r.Interval + time.Second - 1) / time.Second),
		SwarmSize: r.SwarmSize,
		Complete:  r.Complete,
		Peers:     peers,
	})
}

// UnmarshalJSON decodes and checks a tracker's answer.
func (r *AnnounceResponse) UnmarshalJSON(data []byte) error {
	var w wireResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	switch {
	case w.Interval <= 0 || w.Interval > int64(24*time.Hour/time.Second):
		return fmt.Errorf("interval %d s out of range", w.Interval)
	case w.SwarmSize < 0 || w.Complete < 0:
		return fmt.Errorf("negative swarm_size %d or complete %d", w.SwarmSize, w.Complete)
	case len(w.Peers) > MaxNumWant:
		return fmt.Errorf("%d peers, more than the %d any announce may get", len(w.Peers), MaxNumWant)
	}
	for _, p := range w.Peers {
		if !p.Addr.IsValid() || p.Addr.Port() == 0 {
			return fmt.Errorf("peer %s: unusable address %q", p.ID, p.Addr)
		}
	}
	*r = AnnounceResponse{
		Interval:  time.Duration(w.Interval) * time.Second,
		SwarmSize: w.SwarmSize,
		Complete:  w.Complete,
		Peers:     w.Peers,
	}
	return nil
}

// StatusError is a tracker's refusal: any status but 200, with the message
// of its JSON body when it has one.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("tracker: %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("tracker: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// maxResponseSize bounds what Announce reads: MaxNumWant peers take about
// 5 KB.
const maxResponseSize = 64 << 10

// Announce sends req to the tracker at announceURL (whose own query
// parameters, if any, are kept) and returns its answer. A nil client means
// http.DefaultClient. A refusal is a *StatusError.
func Announce(ctx context.Context, client *http.Client, announceURL string, req AnnounceRequest) (*AnnounceResponse, error) {
	if client == nil {
		client = http.DefaultClient
	}
	u, err := url.Parse(announceURL)
	if err != nil {
		return nil, fmt.Errorf("tracker: announce URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("tracker: announce URL %s: want http or https", u.Redacted())
	}
	q := u.Query()
	req.addTo(q)
	u.RawQuery = q.Encode()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("tracker: %w", err)
	}
	hreq.Header.Set("Accept", "application/json")
	res, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("tracker: announce: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxResponseSize+1))
	if err != nil {
		return nil, fmt.Errorf("tracker: announce: read answer: %w", err)
	}
	if len(body) > maxResponseSize {
		return nil, fmt.Errorf("tracker: announce: answer larger than %d bytes", maxResponseSize)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e) // a body that is not ours leaves no message
		return nil, &StatusError{Code: res.StatusCode, Message: e.Error}
	}
	var ar AnnounceResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return nil, fmt.Errorf("tracker: announce: bad answer: %w", err)
	}
	return &ar, nil
}

// errorBody is the JSON of a refusal.
func errorBody(err error) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{err.Error()})
	return b
}
