package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Errors of a push request's checks, wrapped; test with errors.Is.
var (
	ErrUnsigned = errors.New("push request not signed by the cluster's key")
	ErrExpired  = errors.New("push request expired")
	ErrReplayed = errors.New("push request seen before (replayed)")
	ErrRequest  = errors.New("bad push request")
)

// MaxLifetime bounds a request's expiry, from now and from when it was
// issued: agents remember nonces until expiry, a long-lived request is one
// an attacker can hold, and a request issued before a time T has expired
// by T+MaxLifetime, which lets LastIssued forget.
const MaxLifetime = 24 * time.Hour

// Request is a push as the pusher signs it and agents act on it. The
// signature covers every field but Sig, so neither the file, nor where it
// goes, nor the command run after, nor the hosts, nor the time can be
// changed, and the nonce makes each request usable once.
type Request struct {
	Root string `json:"root"` // the file's manifest root, hex
	Size int64  `json:"size"`
	// URL is the file on the pusher's origin (its manifest and pieces).
	URL string `json:"url"`
	// Dest is the path to install the file at; "{host}" in it stands for
	// each host's name.
	Dest string `json:"dest"`
	// Then is run with /bin/sh -c on each host after the install ("":
	// nothing).
	Then string `json:"then,omitempty"`
	// Hosts are the hosts pushed to, by name: each agent works out the
	// same plan from them.
	Hosts   []string  `json:"hosts"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
	Nonce   string    `json:"nonce"` // 16 random bytes, hex
	Sig     string    `json:"sig"`   // ed25519, base64url
}

// ID names the push: its nonce.
func (r *Request) ID() string { return r.Nonce }

// requestContext starts the signed message, so that no other signature
// of the cluster's key (a manifest's, a token's) is valid as a push.
const requestContext = "stampede push request v1\x00"

// message is the signed bytes: every field, each with its length.
func (r *Request) message() []byte {
	b := []byte(requestContext)
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str(r.Root)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Size))
	str(r.URL)
	str(r.Dest)
	str(r.Then)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Hosts)))
	for _, h := range r.Hosts {
		str(h)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.Issued.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Expires.UnixNano()))
	str(r.Nonce)
	return b
}

// Sign fills in a new nonce, Issued (now) and Expires (now+ttl), and
// signs r with priv.
func (r *Request) Sign(priv ed25519.PrivateKey, now time.Time, ttl time.Duration) {
	var n [16]byte
	rand.Read(n[:])
	r.Nonce = hex.EncodeToString(n[:])
	r.Issued, r.Expires = now.UTC(), now.Add(ttl).UTC()
	r.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, r.message()))
}

// Verify checks r's signature against pub and its times against now;
// it does not remember the nonce (Nonces does).
func (r *Request) Verify(pub ed25519.PublicKey, now time.Time) error {
	sig, err := base64.RawURLEncoding.DecodeString(r.Sig)
	if r.Sig == "" || err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, r.message(), sig) {
		return ErrUnsigned
	}
	switch {
	case !now.Before(r.Expires):
		return fmt.Errorf("%w at %s", ErrExpired, r.Expires.Format(time.RFC3339))
	case r.Expires.Sub(now) > MaxLifetime || r.Issued.After(now.Add(time.Minute)):
		return fmt.Errorf("%w: issued %s, expires %s: more than %v ahead of this host's clock", ErrRequest, r.Issued, r.Expires, MaxLifetime)
	case r.Expires.Sub(r.Issued) > MaxLifetime:
		return fmt.Errorf("%w: issued %s, expires %s: lives more than %v", ErrRequest, r.Issued, r.Expires, MaxLifetime)
	case len(r.Nonce) != 32:
		return fmt.Errorf("%w: nonce %q", ErrRequest, r.Nonce)
	case len(r.Root) != 64 || r.Size < 0 || r.URL == "" || r.Dest == "" || len(r.Hosts) == 0:
		return fmt.Errorf("%w: root, size, url, dest and hosts are required", ErrRequest)
	}
	if _, err := hex.DecodeString(r.Root + r.Nonce); err != nil {
		return fmt.Errorf("%w: root and nonce must be hex", ErrRequest)
	}
	return nil
}

// For reports whether host is one of r's hosts.
func (r *Request) For(host string) bool { return slices.Contains(r.Hosts, host) }

// MaxTakeoverLifetime bounds a takeover's expiry from now: it is sent
// the moment its rack is found behind and used at once.
const MaxTakeoverLifetime = 10 * time.Minute

// Takeover tells a standby representative to act as its rack's active
// one for the rest of a push: its rack's active representatives are
// slow, not gone, so it would never take over on its own (a trickle of
// pieces keeps its rack's hosts from falling back). Only the cluster's
// key may sign one, as a push: anyone else could make racks carry two
// representatives' traffic over their uplinks. The signature covers
// every field but Sig; the nonce makes it usable once.
type Takeover struct {
	Push    string    `json:"push"` // the push's ID (its request's nonce)
	Host    string    `json:"host"` // the standby told to take over
	Expires time.Time `json:"expires"`
	Nonce   string    `json:"nonce"` // 16 random bytes, hex
	Sig     string    `json:"sig"`   // ed25519, base64url
}

// takeoverContext starts the signed message, so that no other signature
// of the cluster's key (a push's, a manifest's) is valid as a takeover.
const takeoverContext = "stampede push takeover v1\x00"

func (t *Takeover) message() []byte {
	b := []byte(takeoverContext)
	for _, s := range []string{t.Push, t.Host} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(t.Expires.UnixNano()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(t.Nonce)))
	return append(b, t.Nonce...)
}

// Sign fills in a new nonce and Expires (now+ttl), and signs t with priv.
func (t *Takeover) Sign(priv ed25519.PrivateKey, now time.Time, ttl time.Duration) {
	var n [16]byte
	rand.Read(n[:])
	t.Nonce = hex.EncodeToString(n[:])
	t.Expires = now.Add(ttl).UTC()
	t.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, t.message()))
}

// Verify checks t's signature against pub and its expiry against now
// (ErrUnsigned, ErrExpired, ErrRequest, wrapped); it does not remember
// the nonce (Nonces does).
func (t *Takeover) Verify(pub ed25519.PublicKey, now time.Time) error {
	sig, err := base64.RawURLEncoding.DecodeString(t.Sig)
	if t.Sig == "" || err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, t.message(), sig) {
		return fmt.Errorf("%w (takeover)", ErrUnsigned)
	}
	switch {
	case !now.Before(t.Expires):
		return fmt.Errorf("%w: takeover expired at %s", ErrExpired, t.Expires.Format(time.RFC3339))
	case t.Expires.Sub(now) > MaxTakeoverLifetime:
		return fmt.Errorf("%w: takeover expires %s: more than %v ahead of this host's clock", ErrRequest, t.Expires, MaxTakeoverLifetime)
	case len(t.Nonce) != 32 || len(t.Push) != 32 || t.Host == "":
		return fmt.Errorf("%w: takeover: push, host and nonce are required", ErrRequest)
	}
	if _, err := hex.DecodeString(t.Push + t.Nonce); err != nil {
		return fmt.Errorf("%w: takeover: push and nonce must be hex", ErrRequest)
	}
	return nil
}

// Nonces remembers the nonces of the requests accepted until they
// expire, so that none is accepted twice. Safe for concurrent use.
type Nonces struct {
	mu   sync.Mutex // guards the following
	seen map[string]time.Time
	max  int
}

// NewNonces remembers at most max nonces at once (more requests than
// that, unexpired, are refused).
func NewNonces(max int) *Nonces {
	return &Nonces{seen: map[string]time.Time{}, max: max}
}

// Use accepts nonce, valid until expires, once: a second use before it
// expires is ErrReplayed. Expired nonces are forgotten (a request past
// its expiry is refused by Verify anyway).
func (n *Nonces) Use(nonce string, expires, now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, exp := range n.seen {
		if !now.Before(exp) {
			delete(n.seen, k)
		}
	}
	if _, ok := n.seen[nonce]; ok {
		return ErrReplayed
	}
	if len(n.seen) >= n.max {
		return fmt.Errorf("%w: %d unexpired pushes are remembered already", ErrRequest, n.max)
	}
	n.seen[nonce] = expires
	return nil
}

// Snapshot returns the nonces remembered and their expiries, to be kept
// across a restart; Restore takes them back.
func (n *Nonces) Snapshot() map[string]time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]time.Time, len(n.seen))
	for k, v := range n.seen {
		out[k] = v
	}
	return out
}

// Restore adds nonces kept by Snapshot.
func (n *Nonces) Restore(m map[string]time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, v := range m {
		n.seen[k] = v
	}
}

// LastIssued remembers, for each destination, when the newest request
// accepted for it was issued, so that one issued before (an old version
// with its old signature) is refused: a push cannot roll a destination
// back. An agent keeps it across restarts (it marshals to JSON), since
// the requests themselves are kept only until they expire. A destination
// is forgotten MaxLifetime after its newest request was issued: any
// request issued before has expired by then, and Verify refuses it.
// LastIssued is not safe for concurrent use.
type LastIssued struct {
	issued map[string]time.Time
}

// NewLastIssued returns an empty LastIssued.
func NewLastIssued() *LastIssued {
	return &LastIssued{issued: map[string]time.Time{}}
}

// Check refuses a request for dest issued at or before the newest one
// accepted for it (ErrReplayed, wrapped).
func (l *LastIssued) Check(dest string, issued time.Time) error {
	if last, ok := l.issued[dest]; ok && !issued.After(last) {
		return fmt.Errorf("%w: a push issued %s for %s was accepted already; this one was issued %s",
			ErrReplayed, last.Format(time.RFC3339Nano), dest, issued.Format(time.RFC3339Nano))
	}
	return nil
}

// Accept records a request for dest issued at issued, if it is the newest
// for dest, and forgets the destinations whose newest was issued
// MaxLifetime or more before now.
func (l *LastIssued) Accept(dest string, issued, now time.Time) {
	if issued.After(l.issued[dest]) {
		l.issued[dest] = issued
	}
	for d, t := range l.issued {
		if !now.Before(t.Add(MaxLifetime)) {
			delete(l.issued, d)
		}
	}
}

// Len is the number of destinations remembered.
func (l *LastIssued) Len() int { return len(l.issued) }

// MarshalJSON is an object: destination -> issued time.
func (l *LastIssued) MarshalJSON() ([]byte, error) { return json.Marshal(l.issued) }

// UnmarshalJSON takes back what MarshalJSON wrote.
func (l *LastIssued) UnmarshalJSON(data []byte) error {
	m := map[string]time.Time{}
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	l.issued = m
	return nil
}
