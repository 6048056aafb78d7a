package wire

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Magic opens every handshake.
const Magic = "STMP"

// HandshakeLen is the handshake's fixed size, in every version:
//
//	offset size field
//	     0    4 magic "STMP"
//	     4    1 version: the highest the sender speaks
//	     5    1 reserved: 0 when sent, ignored when read
//	     6    2 capabilities (u16 bitmask)
//	     8   32 root: the manifest's merkle root
//	    40    8 size: the file size (u64); identity is root and size
//	    48   16 peer ID, random per process
//	    64    2 listen port (u16), 0 if not reachable
const HandshakeLen = 66

// Caps is the capability bitmask of a handshake. Bits this version does not
// define are ignored (and kept, so a later version can read them).
type Caps uint16

const (
	// CapSeed: the sender has the whole file (its HAVESET will be full).
	CapSeed Caps = 1 << 0
	// CapStrictTFT: the sender is in strict tit-for-tat mode: it serves
	// peers in proportion to what they serve it. Informational in version 1.
	CapStrictTFT Caps = 1 << 1
	// CapLayer: the sender answers GETLAYER (it may itself have joined
	// with the root alone, and answers once it knows the layer).
	CapLayer Caps = 1 << 2
	// CapPrivate: the swarm is private. A CHALLENGE frame follows the
	// sender's 66 bytes, and once both handshakes are across, each side
	// sends an AUTH frame (see Private).
	CapPrivate Caps = 1 << 3
)

// The frames of a private swarm's handshake. Both are part of the
// handshake (Exchange and Answer send and read them), and never appear
// among the frames a Reader returns (one there is of a type a Reader
// skips).
const (
	// TypeChallenge follows the 66 bytes of a handshake with CapPrivate:
	// 32 random bytes, which the other side's AUTH must answer.
	TypeChallenge Type = 15
	// TypeAuth carries a side's proof that it is admitted (Private.Prove),
	// 1 to MaxAuth bytes.
	TypeAuth Type = 16
)

// ChallengeLen is the length of a CHALLENGE's payload.
const ChallengeLen = 32

// MaxAuth is the most bytes an AUTH frame carries.
const MaxAuth = 512

// ErrUnauthorized is returned by Exchange and Answer when the peer comes
// to a private swarm without a proof of admission, or with one refused
// (Private.Admit).
var ErrUnauthorized = errors.New("wire: not admitted to the private swarm")

// Private is what a side of a private swarm does in its handshake
// (Handshake.Private). Package wire carries the bytes; what they prove,
// and how, is the implementation's (package sign: the origin's token, the
// peer's key, a signature over the other side's challenge).
type Private interface {
	// Prove returns the payload of this side's AUTH: its proof for the
	// connection whose handshakes are mine and theirs, answering
	// theirs.Challenge.
	Prove(mine, theirs Handshake) ([]byte, error)
	// Admit checks the peer's AUTH payload.
	Admit(mine, theirs Handshake, auth []byte) error
}

// Has reports whether every bit of c2 is set in c.
func (c Caps) Has(c2 Caps) bool { return c&c2 == c2 }

// PeerID identifies one stampede process for the life of the process. It
// tells a peer that it dialed itself and which two connections join the
// same pair of peers.
type PeerID [16]byte

// NewPeerID returns a random PeerID.
func NewPeerID() PeerID {
	var id PeerID
	rand.Read(id[:]) // never fails (crypto/rand crashes the process instead)
	return id
}

func (id PeerID) String() string { return hex.EncodeToString(id[:]) }

// Handshake is the first thing each side sends, both at once.
type Handshake struct {
	// Version is the highest version the sender speaks. MarshalBinary
	// always writes this package's Version; ReadHandshake reports the
	// peer's.
	Version    uint8
	Caps       Caps
	Root       [32]byte
	Size       uint64
	PeerID     PeerID
	ListenPort uint16 // 0: not reachable

	// Challenge is a private swarm's side's CHALLENGE: sent after the 66
	// bytes when CapPrivate is set. Exchange and Answer draw ours.
	Challenge [ChallengeLen]byte
	// Private, in the handshake a side sends, makes its swarm private:
	// CapPrivate is sent (MarshalBinary sets or clears it by Private),
	// and once both handshakes are across and root, size and peer ID
	// passed, both sides exchange AUTH frames: a peer without CapPrivate
	// or whose AUTH Private.Admit refuses gets GOODBYE
	// GoodbyeUnauthorized, and Exchange or Answer ErrUnauthorized. Not
	// sent.
	Private Private
}

// Handshake errors. Exchange wraps them; test with errors.Is.
var (
	ErrNotStampede = errors.New("wire: not a stampede peer")
	ErrVersion     = errors.New("wire: no common protocol version")
	ErrWrongSwarm  = errors.New("wire: wrong swarm")
	ErrSelf        = errors.New("wire: connected to ourselves")
)

// AppendBinary appends the handshake's HandshakeLen bytes to b, with this
// package's Version, and in a private swarm (Private set) its CHALLENGE
// frame. It never fails.
func (h Handshake) AppendBinary(b []byte) ([]byte, error) {
	caps := h.Caps &^ CapPrivate
	if h.Private != nil {
		caps |= CapPrivate
	}
	b = append(b, Magic...)
	b = append(b, Version, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(caps))
	b = append(b, h.Root[:]...)
	b = binary.BigEndian.AppendUint64(b, h.Size)
	b = append(b, h.PeerID[:]...)
	b = binary.BigEndian.AppendUint16(b, h.ListenPort)
	if h.Private != nil {
		b = binary.BigEndian.AppendUint32(b, 1+ChallengeLen)
		b = append(b, byte(TypeChallenge))
		b = append(b, h.Challenge[:]...)
	}
	return b, nil
}

// MarshalBinary returns the handshake's HandshakeLen bytes, with this
// package's Version, and in a private swarm its CHALLENGE frame. It never
// fails.
func (h Handshake) MarshalBinary() ([]byte, error) {
	return h.AppendBinary(make([]byte, 0, HandshakeLen+5+ChallengeLen))
}

// ReadHandshake reads exactly HandshakeLen bytes, and the CHALLENGE frame
// that follows them when CapPrivate is set (no more, so frames can be read from
// r next), and decodes them. It checks the magic (ErrNotStampede), the
// version (ErrVersion for 0; a higher one is fine: the session speaks
// Version) and the CHALLENGE frame's form (ErrMalformed). Whether the
// handshake fits ours is Exchange's business.
func ReadHandshake(r io.Reader) (Handshake, error) {
	var b [HandshakeLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) && string(b[:4]) != Magic {
			return Handshake{}, fmt.Errorf("%w: short handshake", ErrNotStampede)
		}
		return Handshake{}, fmt.Errorf("wire: reading the handshake: %w", err)
	}
	if string(b[:4]) != Magic {
		return Handshake{}, fmt.Errorf("%w: magic %q", ErrNotStampede, b[:4])
	}
	h := Handshake{
		Version:    b[4],
		Caps:       Caps(binary.BigEndian.Uint16(b[6:])),
		Root:       [32]byte(b[8:40]),
		Size:       binary.BigEndian.Uint64(b[40:]),
		PeerID:     PeerID(b[48:64]),
		ListenPort: binary.BigEndian.Uint16(b[64:]),
	}
	if h.Version < 1 {
		return h, fmt.Errorf("%w: the peer speaks version %d, we speak 1 to %d", ErrVersion, h.Version, Version)
	}
	if h.Caps.Has(CapPrivate) {
		p, err := readFrame(r, TypeChallenge, ChallengeLen, ChallengeLen)
		if err != nil {
			return h, err
		}
		h.Challenge = [ChallengeLen]byte(p)
	}
	return h, nil
}

// drawChallenge draws a fresh challenge for a private swarm's handshake.
func (h *Handshake) drawChallenge() {
	if h.Private != nil {
		rand.Read(h.Challenge[:]) // never fails
	}
}

// readFrame reads one frame of a private swarm's handshake, of type t
// with a payload of lo to hi bytes, and returns its payload. A GOODBYE
// instead is returned as an error saying why the peer left.
func readFrame(r io.Reader, t Type, lo, hi int) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("wire: reading the handshake's %v: %w", t, err)
	}
	l, got := binary.BigEndian.Uint32(hdr[:4]), Type(hdr[4])
	if got == TypeGoodbye && l >= 2 && int(l) <= 1+maxPayload[TypeGoodbye] {
		p := make([]byte, l-1)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, fmt.Errorf("wire: reading the handshake's %v: %w", t, err)
		}
		m, err := decodePayload(TypeGoodbye, p, nil)
		if err != nil {
			return nil, err
		}
		bye := m.(*Goodbye)
		return nil, fmt.Errorf("%w: the peer said %v: %q", ErrUnauthorized, bye.Reason, bye.Text)
	}
	if got != t || l < uint32(1+lo) || l > uint32(1+hi) {
		return nil, malformed("a frame of type %v and length %d in the handshake, not %v with %d to %d bytes", got, l, t, lo, hi)
	}
	p := make([]byte, l-1)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, fmt.Errorf("wire: reading the handshake's %v: %w", t, err)
	}
	return p, nil
}

// deadliner is what Exchange needs to bound and cancel I/O: net.Conn has it.
type deadliner interface {
	SetDeadline(time.Time) error
}

// Exchange performs the handshake on a fresh connection: it sends mine and
// reads the peer's at the same time, within ctx and HandshakeTimeout. It
// then checks the peer's handshake against ours: the same root and size
// (else ErrWrongSwarm), a different peer ID (else ErrSelf), a supported
// version (else ErrVersion), and on a mismatch says GOODBYE (best effort,
// within about a second) before returning. The caller closes rw after any
// error; on success frames follow, with rw's deadline cleared.
//
// It returns the peer's handshake even with an error, when it was read. If
// rw cannot set deadlines (net.Conn can), a cancelled or timed-out Exchange
// returns at once and leaves its I/O blocked until the caller closes rw.
func Exchange(ctx context.Context, rw io.ReadWriter, mine Handshake) (Handshake, error) {
	mine.drawChallenge()
	dl, deadline, stop, err := bound(ctx, rw)
	if err != nil {
		return Handshake{}, err
	}
	defer stop()
	theirs, err := exchange(ctx, rw, dl, deadline, mine)
	return theirs, settle(ctx, rw, dl, stop, deadline, theirs, mine, err)
}

// Answer completes the handshake of an accepted connection whose peer's
// handshake the caller has read already (ReadHandshake): a host that holds
// many swarms on one port reads it first to pick the swarm by its root,
// then answers with that swarm's handshake. The dialer sent its own
// without waiting for ours (section 3 of docs/protocol.md), so nothing
// changes on its side. The checks and the GOODBYE on a mismatch are
// Exchange's, and so are the deadlines and the caller's duties.
func Answer(ctx context.Context, rw io.ReadWriter, theirs, mine Handshake) error {
	mine.drawChallenge()
	dl, deadline, stop, err := bound(ctx, rw)
	if err != nil {
		return err
	}
	defer stop()
	out, err := mine.MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := rw.Write(out); err != nil {
		err = fmt.Errorf("wire: sending the handshake: %w", err)
		if ctx.Err() != nil {
			err = fmt.Errorf("wire: handshake: %w", context.Cause(ctx))
		}
		return err
	}
	return settle(ctx, rw, dl, stop, deadline, theirs, mine, nil)
}

// Decline answers an accepted connection whose handshake (already read)
// names a swarm the receiver does not hold: it sends mine (a handshake of
// no swarm: zero root and size) and bye, reads the peer's GOODBYE if one
// comes at once, and returns. The caller closes rw.
func Decline(ctx context.Context, rw io.ReadWriter, mine Handshake, bye *Goodbye) error {
	dl, deadline, stop, err := bound(ctx, rw)
	if err != nil {
		return err
	}
	defer stop()
	out, _ := mine.MarshalBinary()
	if _, err := rw.Write(out); err != nil {
		return fmt.Errorf("wire: sending the handshake: %w", err)
	}
	sayGoodbye(ctx, rw, dl, deadline, bye)
	return nil
}

// bound sets rw's deadline for a handshake (HandshakeTimeout, or ctx's
// deadline if sooner) and makes ctx's end cut its I/O short, until stop.
func bound(ctx context.Context, rw io.ReadWriter) (dl deadliner, deadline time.Time, stop func() bool, err error) {
	deadline = time.Now().Add(HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dl, _ = rw.(deadliner)
	stop = func() bool { return ctx.Err() == nil }
	if dl != nil {
		if err := dl.SetDeadline(deadline); err != nil {
			return nil, deadline, nil, fmt.Errorf("wire: handshake: %w", err)
		}
		stop = context.AfterFunc(ctx, func() { dl.SetDeadline(longAgo) })
	}
	return dl, deadline, stop, nil
}

// settle checks theirs against mine once both are across (err is the
// exchange's), says GOODBYE on a mismatch, and on success stops ctx from
// cutting rw short and clears its deadline.
func settle(ctx context.Context, rw io.ReadWriter, dl deadliner, stop func() bool, deadline time.Time, theirs, mine Handshake, err error) error {
	bye := &Goodbye{}
	switch {
	case errors.Is(err, ErrVersion):
		bye.Reason, bye.Text = GoodbyeVersion, fmt.Sprintf("I speak versions 1 to %d", Version)
	case err != nil:
		return err
	case theirs.Root != mine.Root || theirs.Size != mine.Size:
		bye.Reason, bye.Text = GoodbyeWrongSwarm, fmt.Sprintf("I am in the swarm of root %x… size %d", mine.Root[:8], mine.Size)
		err = fmt.Errorf("%w: the peer has root %x… size %d, we have root %x… size %d",
			ErrWrongSwarm, theirs.Root[:8], theirs.Size, mine.Root[:8], mine.Size)
	case theirs.PeerID == mine.PeerID:
		bye.Reason, bye.Text = GoodbyeSelf, "you are me"
		err = fmt.Errorf("%w (peer ID %v)", ErrSelf, mine.PeerID)
	case mine.Private != nil && !theirs.Caps.Has(CapPrivate):
		bye.Reason, bye.Text = GoodbyeUnauthorized, "this swarm is private: come with a token from its origin"
		err = fmt.Errorf("%w: the peer came without a token", ErrUnauthorized)
	default:
		if mine.Private != nil {
			refused, failed := authenticate(rw, mine, theirs)
			if failed != nil {
				return failed
			}
			if refused != nil {
				bye.Reason, bye.Text = GoodbyeUnauthorized, "your proof: "+refused.Error()
				err = fmt.Errorf("%w: %w", ErrUnauthorized, refused)
				break
			}
		}
		// Once stopped, ctx's end can no longer cut the connection short
		// behind our back; if it has already, the connection is dead.
		if !stop() {
			return fmt.Errorf("wire: handshake: %w", context.Cause(ctx))
		}
		if dl != nil {
			if err := dl.SetDeadline(time.Time{}); err != nil {
				return fmt.Errorf("wire: handshake: %w", err)
			}
		}
		return nil
	}
	if ctx.Err() == nil {
		if said := sayGoodbye(ctx, rw, dl, deadline, bye); said != nil {
			err = fmt.Errorf("%w; the peer said %v: %q", err, said.Reason, said.Text)
		}
	}
	return err
}

// authenticate sends our AUTH and reads theirs at once (over an
// unbuffered stream neither write completes unless the other side reads),
// within rw's deadline, and checks theirs. refused is why we refuse the
// peer (we say GOODBYE); failed, why the handshake cannot go on (I/O, a
// malformed frame, the peer's GOODBYE: nothing more to say).
func authenticate(rw io.ReadWriter, mine, theirs Handshake) (refused, failed error) {
	proof, err := mine.Private.Prove(mine, theirs)
	if err != nil {
		return nil, fmt.Errorf("wire: our proof: %w", err)
	}
	if len(proof) == 0 || len(proof) > MaxAuth {
		return nil, fmt.Errorf("wire: our proof is %d bytes, want 1 to %d", len(proof), MaxAuth)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 5+len(proof)), uint32(1+len(proof)))
	out = append(append(out, byte(TypeAuth)), proof...)
	wc := make(chan error, 1)
	go func() {
		_, err := rw.Write(out)
		wc <- err
	}()
	auth, rerr := readFrame(rw, TypeAuth, 1, MaxAuth)
	if dl, ok := rw.(deadliner); ok && rerr != nil {
		dl.SetDeadline(longAgo) // a write still blocked returns
	}
	if werr := <-wc; werr != nil && rerr == nil {
		return nil, fmt.Errorf("wire: sending our AUTH: %w", werr)
	}
	if rerr != nil {
		return nil, rerr
	}
	return mine.Private.Admit(mine, theirs, auth), nil
}

// longAgo is a deadline in the past: it cuts blocked I/O short.
var longAgo = time.Unix(1, 0)

// exchange writes mine and reads theirs concurrently. When one side fails it
// cuts the other short, except on ErrVersion, where ours must still go out
// so the GOODBYE that follows is understood.
func exchange(ctx context.Context, rw io.ReadWriter, dl deadliner, deadline time.Time, mine Handshake) (Handshake, error) {
	out, err := mine.MarshalBinary()
	if err != nil {
		return Handshake{}, err
	}
	type read struct {
		h   Handshake
		err error
	}
	wc, rc := make(chan error, 1), make(chan read, 1)
	go func() {
		_, err := rw.Write(out)
		wc <- err
	}()
	go func() {
		h, err := ReadHandshake(rw)
		rc <- read{h, err}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()

	done := ctx.Done()
	var (
		theirs       Handshake
		werr, rerr   error
		wrote, heard bool
	)
	for !wrote || !heard {
		select {
		case werr = <-wc:
			wrote = true
			if werr != nil {
				werr = fmt.Errorf("wire: sending the handshake: %w", werr)
			}
		case r := <-rc:
			heard, theirs, rerr = true, r.h, r.err
		case <-done:
			if dl == nil {
				return theirs, fmt.Errorf("wire: handshake: %w", context.Cause(ctx))
			}
			done = nil // the AfterFunc cuts the I/O short: collect it
			continue
		case <-timer.C:
			if dl == nil {
				return theirs, fmt.Errorf("wire: handshake: no answer within %v", HandshakeTimeout)
			}
			continue // the deadline cuts the I/O short: collect it
		}
		failed := (werr != nil && !heard) || (rerr != nil && !errors.Is(rerr, ErrVersion) && !wrote)
		if failed {
			if dl == nil {
				return theirs, errors.Join(werr, rerr)
			}
			dl.SetDeadline(longAgo)
		}
	}
	if ctx.Err() != nil {
		return theirs, fmt.Errorf("wire: handshake: %w", context.Cause(ctx))
	}
	if rerr != nil {
		return theirs, rerr
	}
	return theirs, werr
}

// sayGoodbye sends bye and, at the same time, reads what the peer sends
// first in case it is a GOODBYE too (which it returns): both sides of a
// mismatch say GOODBYE at once, and over an unbuffered stream (net.Pipe)
// neither write completes unless the other side reads.
func sayGoodbye(ctx context.Context, rw io.ReadWriter, dl deadliner, deadline time.Time, bye *Goodbye) *Goodbye {
	if len(bye.Text) > MaxGoodbyeText {
		bye.Text = strings.ToValidUTF8(bye.Text[:MaxGoodbyeText], "")
	}
	frame, err := AppendFrame(nil, bye)
	if err != nil {
		return nil
	}
	wc := make(chan struct{})
	go func() {
		defer close(wc)
		rw.Write(frame)
	}()
	if dl == nil {
		// Nothing could cut a read short: only send, for a moment.
		t := time.NewTimer(goodbyeGrace)
		defer t.Stop()
		select {
		case <-wc:
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
	if grace := time.Now().Add(goodbyeGrace); grace.Before(deadline) {
		deadline = grace
	}
	dl.SetDeadline(deadline)
	var said *Goodbye
	if m, err := NewReader(rw, Geometry{}).Read(); err == nil {
		said, _ = m.(*Goodbye)
	}
	<-wc
	return said
}
