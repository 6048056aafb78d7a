package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/stampede-dev/stampede/sign"
)

// runKeygen makes an ed25519 key pair: the origin's signing key for
// private swarms and signed manifests (serve --sign-key), whose public half
// peers and trackers are given (get --trust-key, tracker --trust-key), and
// a cluster's push key (push --key; its public half daemon --cluster-key).
func runKeygen(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "keygen", "-o FILE", `Make an ed25519 key pair: the private key in FILE (PEM, mode 0600), the public
key in FILE.pub (PEM), and the public key's one-line form on stdout. One tool
for every key: an origin's for private swarms and signed manifests (serve
--sign-key FILE; get and tracker --trust-key FILE.pub or the one-line form),
and a cluster's push key (push --key FILE; daemon --cluster-key FILE.pub or the
one-line form, on every host).`)
	out := fs.StringP("output", "o", "", "write the private key to `FILE` (required; never overwritten)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("keygen takes no arguments, got %q", pos)
	}
	if *out == "" {
		return usageErrorf("say where the private key goes: -o FILE")
	}
	priv := sign.GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	if err := writeNew(*out, sign.MarshalPrivateKey(priv), 0o600); err != nil {
		return err
	}
	if err := writeNew(*out+".pub", sign.MarshalPublicKey(pub), 0o644); err != nil {
		os.Remove(*out) // no private key without its public half
		return err
	}
	fmt.Fprintln(e.stdout, sign.FormatPublicKey(pub))
	return nil
}

// writeNew writes data to a new file at path with perm, refusing to
// replace anything there, and removes what it wrote on failure.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return usageErrorf("%s exists; keygen never overwrites a key", path)
	}
	if err != nil {
		return withCode(exitIO, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return withCode(exitIO, fmt.Errorf("writing %s: %w", path, err))
	}
	return nil
}

// trustedKeys loads the public keys --trust-key names (files or one-line
// forms) into a Verifier; nil for none.
func trustedKeys(names []string) (*sign.Verifier, error) {
	if len(names) == 0 {
		return nil, nil
	}
	keys := make([]ed25519.PublicKey, 0, len(names))
	for _, n := range names {
		k, err := sign.LoadPublicKey(n)
		if err != nil {
			return nil, usageErrorf("--trust-key %s: %v", n, err)
		}
		keys = append(keys, k)
	}
	return sign.NewVerifier(keys...), nil
}
