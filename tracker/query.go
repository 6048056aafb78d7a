package tracker

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/sign"
)

// PeerID identifies a peer across its announces: 16 random bytes the peer
// picks when it starts, written as 32 hex digits.
type PeerID [16]byte

// NewPeerID returns a random PeerID.
func NewPeerID() PeerID {
	var id PeerID
	rand.Read(id[:]) // never fails (crypto/rand)
	return id
}

// String returns the id in lowercase hex.
func (id PeerID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText encodes the id as hex.
func (id PeerID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText decodes 32 hex digits.
func (id *PeerID) UnmarshalText(b []byte) error {
	p, err := ParsePeerID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParsePeerID decodes a peer id written as 32 hex digits.
func ParsePeerID(s string) (PeerID, error) {
	var id PeerID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("peer id: want %d hex digits, got %d", 2*len(id), len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("peer id: %w", err)
	}
	return id, nil
}

// Event says why a peer announces.
type Event string

// The events of an announce. A peer sends EventStarted when it joins,
// EventCompleted once when it has the whole file, EventStopped when it
// leaves, and EventNone on every periodic announce in between.
const (
	EventNone      Event = ""
	EventStarted   Event = "started"
	EventCompleted Event = "completed"
	EventStopped   Event = "stopped"
)

func (e Event) valid() bool {
	switch e {
	case EventNone, EventStarted, EventCompleted, EventStopped:
		return true
	}
	return false
}

// metricName is the event's label value in the metrics.
func (e Event) metricName() string {
	if e == EventNone {
		return "periodic"
	}
	return string(e)
}

// How many peers an announce asks for.
const (
	DefaultNumWant = 10 // when numwant is absent or 0
	MaxNumWant     = 50 // a larger numwant is cut to this
)

// AnnounceRequest is one announce, as a peer sends it and the tracker reads
// it. The peer's IP is never part of it: the tracker takes the address the
// request comes from.
type AnnounceRequest struct {
	// Root and Size identify the file, and so the swarm (see package
	// manifest: the root alone does not pin the size).
	Root manifest.Hash
	Size int64
	// ID is the peer's id, the same on every announce of one download.
	ID PeerID
	// Port is where the peer accepts connections; 0 means it cannot, and
	// then it is counted in the swarm but never handed to other peers.
	Port uint16
	// Left is how many bytes the peer still lacks; 0 makes it a seed.
	Left  int64
	Event Event
	// NumWant is how many peers to return: 0 means DefaultNumWant, and
	// more than MaxNumWant means MaxNumWant.
	NumWant int
	// Token admits the peer to a private swarm: the text form of the
	// sign.Token its origin issued it (parameter "token"). Empty: none.
	Token string
	// Key, Time and Sig show a private swarm's announce is the peer's
	// own (Sign): its public key, whose sign.PeerIDOf is ID (parameter
	// "peer_key", one-line form), the Unix time it was signed
	// ("sig_time"), and its signature over the announce ("sig").
	Key  string
	Time int64
	Sig  string
}

// Sign makes r a private swarm's announce: it carries tok, issued for
// r.ID, and the signature of priv, the key r.ID is of, over r's fields at
// now. Sign after every other field is set.
func (r *AnnounceRequest) Sign(priv ed25519.PrivateKey, tok sign.Token, now time.Time) {
	r.Token = tok.String()
	r.Key = sign.FormatPublicKey(priv.Public().(ed25519.PublicKey))
	r.Time = now.Unix()
	r.Sig = sign.SignAnnounce(priv, r.signedFields())
}

// signedFields lays out what an announce's signature covers: the swarm,
// the peer, what it says of itself, and when.
func (r *AnnounceRequest) signedFields() []byte {
	b := append([]byte(nil), r.Root[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Size))
	b = append(b, r.ID[:]...)
	b = binary.BigEndian.AppendUint16(b, r.Port)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Left))
	b = append(b, byte(len(r.Event)))
	b = append(b, r.Event...)
	return binary.BigEndian.AppendUint64(b, uint64(r.Time))
}

// maxAnnounceSkew is how far from the tracker's clock a private swarm's
// announce may say it was signed: past it, it is refused as a replay.
const maxAnnounceSkew = 5 * time.Minute

// verifySigned checks that r, a private swarm's announce, is signed by
// the key of its peer ID within maxAnnounceSkew of now.
func (r *AnnounceRequest) verifySigned(now time.Time) error {
	key, err := sign.ParsePublicKey([]byte(r.Key))
	if err != nil {
		return err
	}
	if sign.PeerIDOf(key) != [16]byte(r.ID) {
		return fmt.Errorf("%w: the key is not the peer ID's", sign.ErrBadSignature)
	}
	if d := now.Sub(time.Unix(r.Time, 0)); d > maxAnnounceSkew || d < -maxAnnounceSkew {
		return fmt.Errorf("%w: signed at %d, %v from the tracker's clock", sign.ErrBadSignature, r.Time, d.Round(time.Second))
	}
	return sign.VerifyAnnounce(key, r.signedFields(), r.Sig)
}

// addTo sets r's parameters in q, leaving any others (such as a key the
// announce URL carries) alone.
func (r *AnnounceRequest) addTo(q url.Values) {
	q.Set("root", r.Root.String())
	q.Set("size", strconv.FormatInt(r.Size, 10))
	q.Set("id", r.ID.String())
	q.Set("port", strconv.Itoa(int(r.Port)))
	q.Set("left", strconv.FormatInt(r.Left, 10))
	if r.Event != EventNone {
		q.Set("event", string(r.Event))
	} else {
		q.Del("event")
	}
	if r.NumWant != 0 {
		q.Set("numwant", strconv.Itoa(r.NumWant))
	} else {
		q.Del("numwant")
	}
	// Set only when sent: an announce URL may carry parameters of its
	// own (a passkey), which only ours replace.
	if r.Token != "" {
		q.Set("token", r.Token)
	}
	if r.Sig != "" {
		q.Set("peer_key", r.Key)
		q.Set("sig", r.Sig)
		q.Set("sig_time", strconv.FormatInt(r.Time, 10))
	}
}

// maxTokenText bounds the token parameter: twice a sign.Token's text.
const maxTokenText = 2 * sign.TokenLen

// errBadRequest is wrapped by every error parseAnnounce returns.
var errBadRequest = errors.New("bad announce")

// parseAnnounce reads an announce from a URL query. Unknown parameters are
// ignored, so later versions can add some; a known one given twice is an
// error, since which one counts would be a guess. NumWant comes back
// between 1 and MaxNumWant.
func parseAnnounce(rawQuery string) (AnnounceRequest, error) {
	var r AnnounceRequest
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return r, fmt.Errorf("%w: query: %v", errBadRequest, err)
	}
	get := func(key string, required bool) (string, error) {
		switch vs := q[key]; {
		case len(vs) > 1:
			return "", fmt.Errorf("%w: %s given %d times", errBadRequest, key, len(vs))
		case len(vs) == 1:
			return vs[0], nil
		case required:
			return "", fmt.Errorf("%w: %s missing", errBadRequest, key)
		}
		return "", nil
	}
	num := func(key string, required bool, lo, hi int64) (int64, error) {
		s, err := get(key, required)
		if err != nil || s == "" && !required {
			return 0, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("%w: %s=%.20q: want an integer in [%d, %d]", errBadRequest, key, s, lo, hi)
		}
		return n, nil
	}

	s, err := get("root", true)
	if err != nil {
		return r, err
	}
	if r.Root, err = manifest.ParseHash(s); err != nil {
		return r, fmt.Errorf("%w: root: %v", errBadRequest, err)
	}
	if s, err = get("id", true); err != nil {
		return r, err
	}
	if r.ID, err = ParsePeerID(s); err != nil {
		return r, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if r.Size, err = num("size", true, 0, manifest.MaxSize); err != nil {
		return r, err
	}
	if r.Left, err = num("left", true, 0, r.Size); err != nil {
		return r, err
	}
	port, err := num("port", true, 0, 65535)
	if err != nil {
		return r, err
	}
	r.Port = uint16(port)
	numWant, err := num("numwant", false, 0, 1<<31-1)
	if err != nil {
		return r, err
	}
	r.NumWant = int(numWant)
	if r.NumWant == 0 {
		r.NumWant = DefaultNumWant
	}
	r.NumWant = min(r.NumWant, MaxNumWant)
	if s, err = get("event", false); err != nil {
		return r, err
	}
	r.Event = Event(s)
	if r.Token, err = get("token", false); err != nil {
		return r, err
	}
	if r.Key, err = get("peer_key", false); err != nil {
		return r, err
	}
	if r.Sig, err = get("sig", false); err != nil {
		return r, err
	}
	if r.Time, err = num("sig_time", false, 0, 1<<40); err != nil {
		return r, err
	}
	return r, r.check()
}

// check reports what makes r impossible, wrapping errBadRequest.
func (r *AnnounceRequest) check() error {
	switch {
	case r.Size < 0 || r.Size > manifest.MaxSize:
		return fmt.Errorf("%w: size %d outside [0, %d]", errBadRequest, r.Size, int64(manifest.MaxSize))
	case r.Left < 0 || r.Left > r.Size:
		return fmt.Errorf("%w: left %d outside [0, size %d]", errBadRequest, r.Left, r.Size)
	case !r.Event.valid():
		return fmt.Errorf("%w: event=%.20q: want started, completed, stopped or nothing", errBadRequest, string(r.Event))
	case r.Event == EventCompleted && r.Left != 0:
		return fmt.Errorf("%w: event=completed with left=%d", errBadRequest, r.Left)
	case len(r.Token) > maxTokenText || len(r.Key) > maxTokenText || len(r.Sig) > maxTokenText:
		return fmt.Errorf("%w: a token, key or signature of more than %d characters", errBadRequest, maxTokenText)
	}
	return nil
}
