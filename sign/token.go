package sign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A Token admits one peer to one private swarm until it expires: the
// origin's signature over the swarm (root and size), the peer's ID and
// the expiry. The peer gets it from the origin with the manifest, and
// shows it to the tracker with every announce and to every peer in its
// handshake; they check it with the origin's public key (a Verifier).
//
// A token is a bearer token bound to a peer ID: whoever sees it (on a
// plaintext wire, an observer of the peer's connections) can use it, as
// that peer ID, until it expires. docs/security.md says what that allows.
type Token struct {
	Key     KeyID     // the key that signed it
	Expires time.Time // whole seconds
	Sig     [ed25519.SignatureSize]byte
}

// TokenLen is a token's binary length: a version byte, the key ID, the
// expiry in Unix seconds (u64) and the signature.
const TokenLen = 1 + 8 + 8 + ed25519.SignatureSize

// tokenVersion is the binary form's first byte.
const tokenVersion = 1

// tokenContext starts every token signature's message.
const tokenContext = "stampede swarm token v1\x00"

// Token errors, wrapped; test with errors.Is.
var (
	ErrNoToken      = errors.New("no token: the swarm is private")
	ErrTokenExpired = errors.New("token expired")
	ErrUnknownKey   = errors.New("token signed by a key not trusted")
	ErrBadToken     = errors.New("malformed token")
)

func tokenMessage(key KeyID, root [32]byte, size int64, peer [16]byte, expires int64) []byte {
	b := make([]byte, 0, len(tokenContext)+8+32+8+16+8)
	b = append(b, tokenContext...)
	b = append(b, key[:]...)
	b = append(b, root[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = append(b, peer[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(expires))
}

// Issue returns the token that admits peer to the swarm of root and size
// until expires.
func Issue(priv ed25519.PrivateKey, root [32]byte, size int64, peer [16]byte, expires time.Time) Token {
	key := IDOf(priv.Public().(ed25519.PublicKey))
	exp := expires.Unix()
	t := Token{Key: key, Expires: time.Unix(exp, 0)}
	copy(t.Sig[:], ed25519.Sign(priv, tokenMessage(key, root, size, peer, exp)))
	return t
}

// AppendBinary appends the token's TokenLen bytes to b.
func (t Token) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, tokenVersion)
	b = append(b, t.Key[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(t.Expires.Unix()))
	return append(b, t.Sig[:]...), nil
}

// MarshalBinary returns the token's TokenLen bytes.
func (t Token) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(make([]byte, 0, TokenLen))
}

// String returns the token's text form, its binary form in unpadded
// base64url (108 characters): in headers and announce queries.
func (t Token) String() string {
	b, _ := t.MarshalBinary()
	return b64.EncodeToString(b)
}

// UnmarshalBinary decodes a token's binary form.
func (t *Token) UnmarshalBinary(b []byte) error {
	if len(b) != TokenLen {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadToken, len(b), TokenLen)
	}
	if b[0] != tokenVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadToken, b[0], tokenVersion)
	}
	exp := binary.BigEndian.Uint64(b[9:17])
	if exp > 1<<40 { // far past any date a time.Time handles without surprise
		return fmt.Errorf("%w: expiry %d out of range", ErrBadToken, exp)
	}
	*t = Token{Key: KeyID(b[1:9]), Expires: time.Unix(int64(exp), 0)}
	copy(t.Sig[:], b[17:])
	return nil
}

// ParseToken decodes a token's text form.
func ParseToken(s string) (Token, error) {
	var t Token
	if s == "" {
		return t, ErrNoToken
	}
	if len(s) > 2*TokenLen {
		return t, fmt.Errorf("%w: %d characters", ErrBadToken, len(s))
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	return t, t.UnmarshalBinary(b)
}

// A Verifier checks tokens against the public keys it trusts. The zero
// Verifier trusts none. It is safe for concurrent use once made.
type Verifier struct {
	keys map[KeyID]ed25519.PublicKey
}

// NewVerifier returns a Verifier trusting keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: make(map[KeyID]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		v.keys[IDOf(k)] = k
	}
	return v
}

// Trusts reports whether v trusts any key: whether swarms checked by it
// are private.
func (v *Verifier) Trusts() bool { return v != nil && len(v.keys) > 0 }

// Verify checks that t admits peer to the swarm of root and size at now:
// signed by a trusted key (ErrUnknownKey), for these (ErrBadSignature),
// not expired (ErrTokenExpired).
func (v *Verifier) Verify(t Token, root [32]byte, size int64, peer [16]byte, now time.Time) error {
	var pub ed25519.PublicKey
	if v != nil {
		pub = v.keys[t.Key]
	}
	if pub == nil {
		return fmt.Errorf("%w (key %s)", ErrUnknownKey, t.Key)
	}
	if !ed25519.Verify(pub, tokenMessage(t.Key, root, size, peer, t.Expires.Unix()), t.Sig[:]) {
		return fmt.Errorf("%w: the token is not for this swarm and peer", ErrBadSignature)
	}
	if !now.Before(t.Expires) {
		return fmt.Errorf("%w at %s", ErrTokenExpired, t.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// VerifyString parses s (ParseToken) and verifies it.
func (v *Verifier) VerifyString(s string, root [32]byte, size int64, peer [16]byte, now time.Time) error {
	t, err := ParseToken(s)
	if err != nil {
		return err
	}
	return v.Verify(t, root, size, peer, now)
}

// PeerIDOf is the peer ID of a peer key: a private swarm's peer proves it
// holds the key its ID and token are for (Prove), so that a token seen on
// the wire, or issued for another's ID, admits no one else.
func PeerIDOf(pub ed25519.PublicKey) [16]byte {
	h := sha256.New()
	h.Write([]byte(peerIDContext))
	h.Write(pub)
	return [16]byte(h.Sum(nil))
}

const peerIDContext = "stampede peer id v1\x00"

// ProofLen is the length of a Proof's binary form: the token, the peer's
// public key and its signature.
const ProofLen = TokenLen + ed25519.PublicKeySize + ed25519.SignatureSize

// proofContext starts the message of every proof's signature.
const proofContext = "stampede swarm proof v1\x00"

// A Proof is what a peer of a private swarm shows another in its
// handshake: its token, its public key (whose PeerIDOf is its peer ID),
// and its signature over the other side's challenge, so that it can be
// used on no other connection. Prove makes one; Verifier.Check checks
// one.
type Proof struct {
	Token Token
	Key   ed25519.PublicKey
	Sig   [ed25519.SignatureSize]byte
}

// ProofContext is what a proof is bound to: one connection of one swarm.
type ProofContext struct {
	Root           [32]byte
	Size           int64
	Prover, Hearer [16]byte // the peer IDs of the side proving and of the other
	Challenge      [32]byte // the other side's: fresh for the connection
}

func (c ProofContext) message() []byte {
	b := make([]byte, 0, len(proofContext)+32+8+16+16+32)
	b = append(b, proofContext...)
	b = append(b, c.Root[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Size))
	b = append(b, c.Prover[:]...)
	b = append(b, c.Hearer[:]...)
	return append(b, c.Challenge[:]...)
}

// Prove returns the proof of the peer whose key is priv and whose token
// is tok, for c, in its binary form (ProofLen bytes).
func Prove(priv ed25519.PrivateKey, tok Token, c ProofContext) []byte {
	b, _ := tok.MarshalBinary()
	b = append(b, priv.Public().(ed25519.PublicKey)...)
	return append(b, ed25519.Sign(priv, c.message())...)
}

// Check verifies a proof in its binary form for c at now: its token for
// the swarm and the prover's ID, the prover's key for that ID, and its
// signature over c (ErrBadSignature, and the errors of Verify).
func (v *Verifier) Check(proof []byte, c ProofContext, now time.Time) error {
	if len(proof) != ProofLen {
		return fmt.Errorf("%w: a proof of %d bytes, want %d", ErrBadToken, len(proof), ProofLen)
	}
	var tok Token
	if err := tok.UnmarshalBinary(proof[:TokenLen]); err != nil {
		return err
	}
	key := ed25519.PublicKey(proof[TokenLen : TokenLen+ed25519.PublicKeySize])
	if PeerIDOf(key) != c.Prover {
		return fmt.Errorf("%w: the peer's key is not its ID's", ErrBadSignature)
	}
	if err := v.Verify(tok, c.Root, c.Size, c.Prover, now); err != nil {
		return err
	}
	if !ed25519.Verify(key, c.message(), proof[TokenLen+ed25519.PublicKeySize:]) {
		return fmt.Errorf("%w: the peer's proof is not for this connection", ErrBadSignature)
	}
	return nil
}

// announceContext starts the message of every announce's signature.
const announceContext = "stampede announce v1\x00"

// SignAnnounce returns the signature, in base64url, of a private swarm's
// peer over an announce, msg being the announce's fields as the tracker
// lays them out (tracker.AnnounceRequest.Sign): a token shows who may
// announce, the signature that the announce is that peer's.
func SignAnnounce(priv ed25519.PrivateKey, msg []byte) string {
	return b64.EncodeToString(ed25519.Sign(priv, append([]byte(announceContext), msg...)))
}

// VerifyAnnounce checks sig, as SignAnnounce returns it, over msg against
// pub.
func VerifyAnnounce(pub ed25519.PublicKey, msg []byte, sig string) error {
	b, err := b64.DecodeString(sig)
	if err != nil || len(b) != ed25519.SignatureSize || !ed25519.Verify(pub, append([]byte(announceContext), msg...), b) {
		return fmt.Errorf("%w: the announce is not signed by the peer's key", ErrBadSignature)
	}
	return nil
}
