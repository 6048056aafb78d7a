package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestGetOutputKinds: what -o names decides how the file is written. A
// regular file is replaced atomically; a device, a FIFO and /dev/stdout are
// written into and stay what they were; a symbolic link is written through,
// never replaced; a directory takes the remote name.
func TestGetOutputKinds(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(3<<20+5, 11)
	writeFile(t, www, "f", data)
	base := startServe(t, www)
	get := func(t *testing.T, args ...string) {
		t.Helper()
		if code, _, stderr := runCmd(t, append([]string{"get", "-q", base + "/f"}, args...)...); code != 0 {
			t.Fatalf("get %v: exit %d: %s", args, code, stderr)
		}
	}

	t.Run("device", func(t *testing.T) {
		// As root, a null device of our own: the test must not risk the
		// machine's /dev/null. Without root the real one is safe, since
		// an unprivileged rename over it fails anyway.
		dev := "/dev/null"
		if os.Geteuid() == 0 {
			dev = filepath.Join(t.TempDir(), "null")
			if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Fatal(err)
			}
		}
		get(t, "-o", dev)
		if fi, err := os.Lstat(dev); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s after get: %v, %v", dev, fi.Mode(), err)
		}
		if _, err := os.Lstat(dev + ".part"); !os.IsNotExist(err) {
			t.Errorf("%s.part was made: %v", dev, err)
		}
		if code, _, stderr := runCmd(t, "get", "-q", "-c", base+"/f", "-o", dev); code != exitUsage {
			t.Errorf("-c into a device: exit %d (%s), want %d", code, stderr, exitUsage)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "pipe")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- nil
				return
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			got <- b
		}()
		get(t, "-o", fifo)
		select {
		case b := <-got:
			if !bytes.Equal(b, data) {
				t.Errorf("read %d bytes from the FIFO, want the file's %d", len(b), len(data))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("get ended and the FIFO's reader still waits for a writer")
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("%s after get: %v, %v", fifo, fi.Mode(), err)
		}
	})

	t.Run("dev-stdout", func(t *testing.T) {
		bin, err := buildBinary()
		if err != nil {
			t.Fatal(err)
		}
		before, err := os.Lstat("/dev/stdout")
		if err != nil {
			t.Skip("no /dev/stdout here")
		}
		// Into a pipe, and into a regular file stdout was redirected to.
		var pipe, stderr bytes.Buffer
		cmd := exec.Command(bin, "get", "-q", base+"/f", "-o", "/dev/stdout")
		cmd.Stdout, cmd.Stderr = &pipe, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("get -o /dev/stdout: %v: %s", err, stderr.String())
		}
		if !bytes.Equal(pipe.Bytes(), data) {
			t.Errorf("stdout (a pipe) got %d bytes, want %d", pipe.Len(), len(data))
		}
		file := filepath.Join(t.TempDir(), "out")
		f, err := os.Create(file)
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(bin, "get", "-q", base+"/f", "-o", "/dev/stdout")
		cmd.Stdout = f
		err = cmd.Run()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		sameFile(t, file, data)
		if after, err := os.Lstat("/dev/stdout"); err != nil || after.Mode() != before.Mode() {
			t.Errorf("/dev/stdout was %v, is %v (%v)", before.Mode(), after.Mode(), err)
		}
	})

	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
		writeFile(t, dir, "target", []byte("old"))
		if err := os.Symlink("target", link); err != nil {
			t.Fatal(err)
		}
		get(t, "-o", link)
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a link: %v, %v", link, fi.Mode(), err)
		}
		sameFile(t, target, data)
	})

	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		get(t, "-o", dir)
		sameFile(t, filepath.Join(dir, "f"), data)
		// A link to a directory is a directory too.
		other := t.TempDir()
		link := filepath.Join(t.TempDir(), "d")
		if err := os.Symlink(other, link); err != nil {
			t.Fatal(err)
		}
		get(t, "-o", link)
		sameFile(t, filepath.Join(other, "f"), data)
	})

	t.Run("regular", func(t *testing.T) {
		// Replaced by a rename: a hard link to the old file keeps the old
		// bytes, which writing into it would have overwritten.
		dir := t.TempDir()
		out, old := filepath.Join(dir, "out"), filepath.Join(dir, "old")
		writeFile(t, dir, "out", []byte("previous"))
		if err := os.Link(out, old); err != nil {
			t.Fatal(err)
		}
		get(t, "-o", out)
		sameFile(t, out, data)
		sameFile(t, old, []byte("previous"))
	})
}
