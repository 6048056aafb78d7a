package sign

import (
	"crypto/ed25519"
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
