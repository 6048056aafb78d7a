package sign

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKeyFilesRoundTrip(t *testing.T) {
	priv := GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	got, err := ParsePrivateKey(MarshalPrivateKey(priv))
	if err != nil || !got.Equal(priv) {
		t.Fatalf("private key round trip: %v", err)
	}
	for _, form := range [][]byte{MarshalPublicKey(pub), []byte(FormatPublicKey(pub) + "\n")} {
		got, err := ParsePublicKey(form)
		if err != nil || !got.Equal(pub) {
			t.Errorf("public key %q: %v", form, err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, MarshalPrivateKey(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadPrivateKey(path); err != nil || !got.Equal(priv) {
		t.Errorf("ReadPrivateKey: %v", err)
	}
	// The public half of a private key file, a public key file, the line.
	pubPath := filepath.Join(dir, "key.pub")
	os.WriteFile(pubPath, MarshalPublicKey(pub), 0o644)
	for _, s := range []string{path, pubPath, FormatPublicKey(pub)} {
		if got, err := LoadPublicKey(s); err != nil || !got.Equal(pub) {
			t.Errorf("LoadPublicKey(%s): %v", s, err)
		}
	}
}

func TestPrivateKeyRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.WriteFile(open, MarshalPrivateKey(GenerateKey()), 0o644)
	if _, err := ReadPrivateKey(open); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key others can read: %v", err)
	}
	pub := filepath.Join(dir, "pub")
	os.WriteFile(pub, MarshalPublicKey(GenerateKey().Public().(ed25519.PublicKey)), 0o600)
	if _, err := ReadPrivateKey(pub); !errors.Is(err, ErrBadKey) {
		t.Errorf("a public key as the private one: %v", err)
	}
	if _, err := ReadPrivateKey(dir); err == nil {
		t.Error("a directory as a key file: no error")
	}
	for _, s := range []string{"ed25519:", "ed25519:AAAA", "ed25519:" + strings.Repeat("A", 44), "garbage"} {
		if _, err := ParsePublicKey([]byte(s)); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParsePublicKey(%q): %v", s, err)
		}
	}
}

func TestManifestSignature(t *testing.T) {
	priv := GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	root := [32]byte{1, 2, 3}
	sig := SignManifest(priv, root, 1000)
	if err := VerifyManifest(pub, root, 1000, sig); err != nil {
		t.Fatal(err)
	}
	other := GenerateKey().Public().(ed25519.PublicKey)
	tok := Issue(priv, root, 1000, [16]byte{}, time.Unix(0, 0))
	for name, err := range map[string]error{
		"unsigned":     VerifyManifest(pub, root, 1000, ""),
		"other size":   VerifyManifest(pub, root, 1001, sig),
		"other root":   VerifyManifest(pub, [32]byte{1, 2, 4}, 1000, sig),
		"other key":    VerifyManifest(other, root, 1000, sig),
		"not base64":   VerifyManifest(pub, root, 1000, "!!"),
		"short":        VerifyManifest(pub, root, 1000, sig[:20]),
		"a token's as": VerifyManifest(pub, root, 1000, b64.EncodeToString(tok.Sig[:])),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

func TestToken(t *testing.T) {
	priv := GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	v := NewVerifier(GenerateKey().Public().(ed25519.PublicKey), pub)
	root, peer := [32]byte{9}, [16]byte{7}
	now := time.Unix(1e9, 0)
	tok := Issue(priv, root, 1<<20, peer, now.Add(time.Hour))
	parsed, err := ParseToken(tok.String())
	if err != nil || parsed != tok {
		t.Fatalf("text round trip: %+v, %v", parsed, err)
	}
	if len(tok.String()) != 108 {
		t.Errorf("text form of %d characters, documented 108", len(tok.String()))
	}
	if err := v.Verify(tok, root, 1<<20, peer, now); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"another peer", v.Verify(tok, root, 1<<20, [16]byte{8}, now), ErrBadSignature},
		{"another swarm", v.Verify(tok, [32]byte{10}, 1<<20, peer, now), ErrBadSignature},
		{"another size", v.Verify(tok, root, 1<<20+1, peer, now), ErrBadSignature},
		{"expired", v.Verify(tok, root, 1<<20, peer, now.Add(time.Hour)), ErrTokenExpired},
		{"untrusted key", NewVerifier().Verify(tok, root, 1<<20, peer, now), ErrUnknownKey},
		{"nil verifier", (*Verifier)(nil).Verify(tok, root, 1<<20, peer, now), ErrUnknownKey},
		{"none", v.VerifyString("", root, 1<<20, peer, now), ErrNoToken},
		{"garbage", v.VerifyString("@@@", root, 1<<20, peer, now), ErrBadToken},
		{"long", v.VerifyString(strings.Repeat("A", 1000), root, 1<<20, peer, now), ErrBadToken},
	}
	// An expiry moved later keeps the key and signature: refused.
	later := tok
	later.Expires = tok.Expires.Add(time.Hour)
	cases = append(cases, struct {
		name string
		err  error
		want error
	}{"expiry moved", v.Verify(later, root, 1<<20, peer, now), ErrBadSignature})
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if NewVerifier().Trusts() || (*Verifier)(nil).Trusts() || !v.Trusts() {
		t.Error("Trusts: wrong")
	}
}

func FuzzParseToken(f *testing.F) {
	priv := GenerateKey()
	f.Add(Issue(priv, [32]byte{1}, 5, [16]byte{2}, time.Unix(1e9, 0)).String())
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		again, err := ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("%q parsed, but its own text %q did not give it back: %v", s, tok.String(), err)
		}
	})
}

func FuzzParsePublicKey(f *testing.F) {
	pub := GenerateKey().Public().(ed25519.PublicKey)
	f.Add(MarshalPublicKey(pub))
	f.Add([]byte(FormatPublicKey(pub)))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParsePublicKey(b)
		if err != nil {
			return
		}
		if len(k) != ed25519.PublicKeySize {
			t.Fatalf("a key of %d bytes", len(k))
		}
		if again, err := ParsePublicKey([]byte(FormatPublicKey(k))); err != nil || !again.Equal(k) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func TestProof(t *testing.T) {
	origin := GenerateKey()
	v := NewVerifier(origin.Public().(ed25519.PublicKey))
	peerKey := GenerateKey()
	id := PeerIDOf(peerKey.Public().(ed25519.PublicKey))
	now := time.Unix(1e9, 0)
	root := [32]byte{3}
	tok := Issue(origin, root, 100, id, now.Add(time.Hour))
	c := ProofContext{Root: root, Size: 100, Prover: id, Hearer: [16]byte{9}, Challenge: [32]byte{1, 2}}
	proof := Prove(peerKey, tok, c)
	if len(proof) != ProofLen {
		t.Fatalf("proof of %d bytes, ProofLen %d", len(proof), ProofLen)
	}
	if err := v.Check(proof, c, now); err != nil {
		t.Fatal(err)
	}
	other := c
	other.Challenge[0] = 7 // another connection: replayed
	thief := GenerateKey()
	stolen := Prove(thief, tok, c) // the token, another key
	forID := ProofContext{Root: root, Size: 100, Prover: PeerIDOf(thief.Public().(ed25519.PublicKey)), Hearer: c.Hearer, Challenge: c.Challenge}
	for name, err := range map[string]error{
		"replayed on another connection": v.Check(proof, other, now),
		"another hearer":                 v.Check(proof, ProofContext{Root: root, Size: 100, Prover: id, Hearer: [16]byte{8}, Challenge: c.Challenge}, now),
		"a token with another key":       v.Check(stolen, c, now),
		"a token for another ID":         v.Check(Prove(thief, tok, forID), forID, now),
		"short":                          v.Check(proof[:10], c, now),
	} {
		if !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	if err := v.Check(proof, c, now.Add(2*time.Hour)); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("expired: %v", err)
	}
	msg := []byte("fields")
	sig := SignAnnounce(peerKey, msg)
	if err := VerifyAnnounce(peerKey.Public().(ed25519.PublicKey), msg, sig); err != nil {
		t.Error(err)
	}
	if err := VerifyAnnounce(peerKey.Public().(ed25519.PublicKey), []byte("other"), sig); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another announce: %v", err)
	}
}

// FuzzCheck: a peer's AUTH payload is anyone's bytes: a proof that
// checks is only one made with the origin's token for the prover's key.
func FuzzCheck(f *testing.F) {
	origin := GenerateKey()
	v := NewVerifier(origin.Public().(ed25519.PublicKey))
	peer := GenerateKey()
	c := ProofContext{Root: [32]byte{1}, Size: 10, Prover: PeerIDOf(peer.Public().(ed25519.PublicKey)), Challenge: [32]byte{2}}
	now := time.Unix(1e9, 0)
	good := Prove(peer, Issue(origin, c.Root, c.Size, c.Prover, now.Add(time.Hour)), c)
	f.Add(good)
	f.Add(good[:TokenLen])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, proof []byte) {
		if err := v.Check(proof, c, now); err == nil && !bytes.Equal(proof, good) {
			t.Fatalf("a proof other than the one made checked: % x", proof)
		}
	})
}
