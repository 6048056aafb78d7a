package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/sign"
)

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "origin.key")
	code, stdout, stderr := runCmd(t, "keygen", "-o", key)
	if code != exitOK {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(key)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v, mode %v", err, fi.Mode())
	}
	priv, err := sign.ReadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	line, err := sign.LoadPublicKey(strings.TrimSpace(stdout))
	if err != nil || !line.Equal(priv.Public()) {
		t.Errorf("stdout %q is not the key's public half: %v", stdout, err)
	}
	if pub, err := sign.LoadPublicKey(key + ".pub"); err != nil || !pub.Equal(priv.Public()) {
		t.Errorf("%s.pub: %v", key, err)
	}

	// Never overwritten; no flag, an argument: usage errors.
	before, _ := os.ReadFile(key)
	if code, _, stderr := runCmd(t, "keygen", "-o", key); code != exitUsage || !strings.Contains(stderr, "never overwrites") {
		t.Errorf("keygen over a key: exit %d, %s", code, stderr)
	}
	if after, _ := os.ReadFile(key); string(after) != string(before) {
		t.Error("the key was overwritten")
	}
	if code, _, _ := runCmd(t, "keygen"); code != exitUsage {
		t.Errorf("keygen without -o: exit %d", code)
	}
	// The public half exists already: no private key is left without it.
	other := filepath.Join(dir, "other.key")
	os.WriteFile(other+".pub", []byte("x"), 0o644)
	if code, _, _ := runCmd(t, "keygen", "-o", other); code != exitUsage {
		t.Errorf("keygen with FILE.pub there: exit %d", code)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a private key left without its public half: %v", err)
	}
}
