// Package sign is stampede's one key tool: ed25519 keys, their files, and
// what an origin signs with one.
//
//   - A manifest signature vouches that the origin holding the key
//     published the file of a root and size (a manifest's identity; the
//     root, of the merkle tree over 16 KiB blocks, commits to every byte).
//     A client given the origin's public key (get --trust-key) refuses a
//     manifest without one.
//   - A token (see Token) admits one peer to a private swarm until it
//     expires: the tracker and the other peers check it with the origin's
//     public key, and refuse whoever comes without one.
//
// Every message signed starts with a context string of its own, so that a
// signature of one kind is never valid as another. Keys are written as PEM
// (PKCS #8 for the private key, PKIX for the public one, as openssl writes
// them); a public key is also written on one line, "ed25519:" and its 32
// bytes in unpadded base64url, for flags and headers.
//
// The package uses the standard library only.
package sign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Errors a check returns, wrapped; test with errors.Is.
var (
	// ErrBadSignature: a signature that does not verify, or none.
	ErrBadSignature = errors.New("bad signature")
	// ErrBadKey: a key file or text that is not an ed25519 key.
	ErrBadKey = errors.New("not an ed25519 key")
)

// publicPrefix starts a public key's one-line form.
const publicPrefix = "ed25519:"

var b64 = base64.RawURLEncoding

// GenerateKey returns a new private key.
func GenerateKey() ed25519.PrivateKey {
	_, priv, _ := ed25519.GenerateKey(rand.Reader) // crypto/rand never fails
	return priv
}

// MarshalPrivateKey returns priv as a PEM "PRIVATE KEY" block (PKCS #8).
func MarshalPrivateKey(priv ed25519.PrivateKey) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(priv) // an ed25519 key always marshals
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// MarshalPublicKey returns pub as a PEM "PUBLIC KEY" block (PKIX).
func MarshalPublicKey(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub) // an ed25519 key always marshals
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// FormatPublicKey returns pub's one-line form, "ed25519:" and base64url.
func FormatPublicKey(pub ed25519.PublicKey) string {
	return publicPrefix + b64.EncodeToString(pub)
}

// ParsePrivateKey parses a PEM "PRIVATE KEY" block holding an ed25519 key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PEM PRIVATE KEY block", ErrBadKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T", ErrBadKey, k)
	}
	return priv, nil
}

// ParsePublicKey parses a public key in its one-line form or as a PEM
// "PUBLIC KEY" block.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	s := strings.TrimSpace(string(data))
	if rest, ok := strings.CutPrefix(s, publicPrefix); ok {
		b, err := b64.DecodeString(rest)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: %q is not %s and %d bytes in base64url", ErrBadKey, s, publicPrefix, ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(b), nil
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: neither %s... nor a PEM PUBLIC KEY block", ErrBadKey, publicPrefix)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T", ErrBadKey, k)
	}
	return pub, nil
}

// ReadPrivateKey reads a private key file. It refuses a file that others
// than its owner can read or write: a key anyone on the machine can read
// signs for anyone.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("private key %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("private key %s: mode %04o lets others read or write it; chmod 600 it", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	priv, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	return priv, nil
}

// LoadPublicKey returns the public key s names: its one-line form, or the
// path of a file holding it (either form, or a private key's PEM, whose
// public half it takes).
func LoadPublicKey(s string) (ed25519.PublicKey, error) {
	if strings.HasPrefix(s, publicPrefix) {
		return ParsePublicKey([]byte(s))
	}
	data, err := os.ReadFile(s)
	if err != nil {
		return nil, fmt.Errorf("public key: %w (give a file or %s...)", err, publicPrefix)
	}
	if priv, err := ParsePrivateKey(data); err == nil {
		return priv.Public().(ed25519.PublicKey), nil
	}
	pub, err := ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", s, err)
	}
	return pub, nil
}

// KeyID is a short name of a public key: the first 8 bytes of its
// SHA-256. A token carries it, so that a tracker trusting several origins
// checks it against the right key.
type KeyID [8]byte

// IDOf returns pub's KeyID.
func IDOf(pub ed25519.PublicKey) KeyID {
	sum := sha256.Sum256(pub)
	return KeyID(sum[:8])
}

func (id KeyID) String() string { return b64.EncodeToString(id[:]) }

// manifestContext starts every manifest signature's message.
const manifestContext = "stampede manifest signature v1\x00"

func manifestMessage(root [32]byte, size int64) []byte {
	b := make([]byte, 0, len(manifestContext)+32+8)
	b = append(b, manifestContext...)
	b = append(b, root[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(size))
}

// SignManifest returns the signature, in base64url, that priv vouches
// for the file of root and size with: an origin's
// contract.SignatureHeader.
func SignManifest(priv ed25519.PrivateKey, root [32]byte, size int64) string {
	return b64.EncodeToString(ed25519.Sign(priv, manifestMessage(root, size)))
}

// VerifyManifest checks sig, as SignManifest returns it, for the file of
// root and size against pub.
func VerifyManifest(pub ed25519.PublicKey, root [32]byte, size int64, sig string) error {
	if sig == "" {
		return fmt.Errorf("%w: the manifest is not signed", ErrBadSignature)
	}
	b, err := b64.DecodeString(sig)
	if err != nil || len(b) != ed25519.SignatureSize || !ed25519.Verify(pub, manifestMessage(root, size), b) {
		return fmt.Errorf("%w: the manifest's signature is not the key %s's", ErrBadSignature, FormatPublicKey(pub))
	}
	return nil
}
