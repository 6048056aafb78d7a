package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/store"
)

// TestPartSymlinkRefused: a symbolic link in the part file's place is
// never written through (it could point anywhere the process may write).
func TestPartSymlinkRefused(t *testing.T) {
	_, m := content(t, 64<<10, 1)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "f")
	if err := os.Symlink(outside, final+store.PartSuffix); err != nil {
		t.Fatal(err)
	}
	for _, resume := range []bool{false, true} {
		if _, err := store.Open(final, m, resume, nil); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("resume %v: Open through a link: %v, want ELOOP", resume, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep me" {
		t.Errorf("the link's target changed: %q", b)
	}
}

// TestOpenCompleteRefusesFIFO: a FIFO in a complete file's place is
// refused at once, never waited on.
func TestOpenCompleteRefusesFIFO(t *testing.T) {
	_, m := content(t, 64<<10, 2)
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.OpenComplete(path, m)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO opened as a complete file")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OpenComplete of a FIFO still blocked after 5 s")
	}
}
