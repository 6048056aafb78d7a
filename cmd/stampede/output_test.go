package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		// A link of our own made as /dev/stdout is (to /proc/self/fd/1,
		// and one through /dev/fd/1): the machine's /dev/stdout must not
		// be what a broken build replaces.
		if _, err := os.Stat("/proc/self/fd/1"); err != nil {
			t.Skip("no /proc/self/fd here")
		}
		bin, err := buildBinary()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, to := range []string{"/proc/self/fd/1", "/dev/fd/1"} {
			link := filepath.Join(dir, "stdout")
			os.Remove(link)
			if err := os.Symlink(to, link); err != nil {
				t.Fatal(err)
			}
			// Into a pipe, and into a regular file stdout was redirected to.
			var pipe, stderr bytes.Buffer
			cmd := exec.Command(bin, "get", "-q", "--json", base+"/f", "-o", link) // the summary must not go into the data
			cmd.Stdout, cmd.Stderr = &pipe, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("get -o %s: %v: %s", link, err, stderr.String())
			}
			if !bytes.Equal(pipe.Bytes(), data) {
				t.Errorf("stdout (a pipe) through %s got %d bytes, want %d", to, pipe.Len(), len(data))
			}
			if !strings.Contains(stderr.String(), `"verified"`) {
				t.Errorf("the --json summary is not on stderr: %q", stderr.String())
			}
			file := filepath.Join(dir, "out")
			f, err := os.Create(file)
			if err != nil {
				t.Fatal(err)
			}
			cmd = exec.Command(bin, "get", "-q", base+"/f", "-o", link)
			cmd.Stdout, cmd.Stderr = f, &stderr
			err = cmd.Run()
			f.Close()
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			sameFile(t, file, data)
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link to %s was replaced: %v (%v)", to, fi.Mode(), err)
			}
		}
	})

	t.Run("symlink", func(t *testing.T) {
		// A link to a regular file is replaced, never followed into the
		// rename: its target is left alone, downloads that fail included.
		dir := t.TempDir()
		target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
		writeFile(t, dir, "target", []byte("old"))
		if err := os.Symlink("target", link); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := runCmd(t, "get", "-q", base+"/missing", "-o", link); code != exitServer {
			t.Fatalf("a 404: exit %d", code)
		}
		sameFile(t, target, []byte("old"))
		get(t, "-o", link)
		if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s after get: %v, %v; want the file in the link's place", link, fi.Mode(), err)
		}
		sameFile(t, link, data)
		sameFile(t, target, []byte("old"))
		// The same for a link planted where the remote name lands.
		cwd := t.TempDir()
		t.Chdir(cwd)
		if err := os.Symlink(target, "f"); err != nil {
			t.Fatal(err)
		}
		get(t)
		sameFile(t, filepath.Join(cwd, "f"), data)
		sameFile(t, target, []byte("old"))
	})

	t.Run("fifo-no-reader", func(t *testing.T) {
		// Waited for as curl does, but --max-time (and Ctrl-C) end the wait.
		fifo := filepath.Join(t.TempDir(), "pipe")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCmd(t, "get", "-q", "--max-time", "300ms", base+"/f", "-o", fifo); code != exitMaxTime {
			t.Errorf("a FIFO nobody reads, --max-time 300ms: exit %d: %s", code, stderr)
		}
	})

	t.Run("remote-name-is-a-directory", func(t *testing.T) {
		t.Chdir(t.TempDir())
		if err := os.Mkdir("f", 0o755); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCmd(t, "get", "-q", base+"/f"); code != exitIO || !strings.Contains(stderr, "is a directory") {
			t.Errorf("the remote name is a directory: exit %d: %s", code, stderr)
		}
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
