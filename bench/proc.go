package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process the harness started. It is ended only through kill
// and term, by its own PID.
type proc struct {
	name  string
	cmd   *exec.Cmd
	start time.Time

	done chan struct{} // closed once the process is reaped
	// Set before done is closed.
	end   time.Time
	code  int    // exit code; -1 when killed by a signal
	state string // "exit status 1", "signal: killed"
	err   error  // a failure to wait or to copy output

	tail *tailBuffer // the end of stderr, for error reports
}

// lineFunc receives one line of a process's output with the time it was
// read.
type lineFunc func(line string, at time.Time)

// procSpec describes a process to start.
type procSpec struct {
	name     string
	argv     []string
	dir      string
	stdout   lineFunc // nil: keep the whole stdout (see collect)
	stderr   lineFunc
	collect  *bytes.Buffer // receives stdout when stdout is nil
	extraEnv []string
}

// startProc starts spec. The child gets its own process group (so a
// terminal's Ctrl-C reaches only the harness, which then ends its
// children in order) and SIGKILL should the harness die.
func startProc(spec procSpec) (*proc, error) {
	if len(spec.argv) == 0 {
		return nil, errors.New("empty command")
	}
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir = spec.dir
	cmd.Env = append(os.Environ(), spec.extraEnv...)
	cmd.SysProcAttr = procAttr()
	// Output copying must not outlive the process by much, should some
	// grandchild inherit the pipes.
	cmd.WaitDelay = 2 * time.Second
	p := &proc{name: spec.name, cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{max: 4 << 10}}
	switch {
	case spec.stdout != nil:
		cmd.Stdout = &lineWriter{fn: spec.stdout}
	case spec.collect != nil:
		cmd.Stdout = &lockedBuffer{b: spec.collect}
	}
	errW := &lineWriter{fn: func(line string, at time.Time) {
		p.tail.add(line)
		if spec.stderr != nil {
			spec.stderr(line, at)
		}
	}}
	cmd.Stderr = errW
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	go func() {
		err := cmd.Wait()
		p.end = time.Now()
		p.code = cmd.ProcessState.ExitCode()
		p.state = cmd.ProcessState.String()
		if _, ok := errors.AsType[*exec.ExitError](err); ok {
			err = nil // reported through code and state
		}
		p.err = err
		if lw, ok := cmd.Stdout.(*lineWriter); ok {
			lw.flush()
		}
		errW.flush()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process (by its PID) and waits until it is
// reaped.
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// term asks the process to end with SIGTERM, then kills it after grace.
func (p *proc) term(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// wait waits for the process to exit, or ctx to end.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// describe says how the process ended, with the end of its stderr (the
// caller names the process).
func (p *proc) describe() string {
	var b strings.Builder
	b.WriteString(p.state)
	if p.err != nil {
		fmt.Fprintf(&b, " (%v)", p.err)
	}
	if t := strings.TrimSpace(p.tail.String()); t != "" {
		fmt.Fprintf(&b, ": %s", t)
	}
	return b.String()
}

// lineWriter splits a stream into lines for fn.
type lineWriter struct {
	fn  lineFunc
	mu  sync.Mutex // guards buf
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(bytes.TrimRight(w.buf[:i], "\r")), now)
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // a runaway line: pass it on in pieces
		w.fn(string(w.buf), now)
		w.buf = nil
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.fn(string(w.buf), time.Now())
		w.buf = nil
	}
}

// tailBuffer keeps the last lines written to it, up to max bytes.
type tailBuffer struct {
	max   int
	mu    sync.Mutex // guards lines, size
	lines []string
	size  int
}

func (t *tailBuffer) add(line string) {
	if strings.HasPrefix(line, "{") { // progress JSON says nothing about errors
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for t.size > t.max && len(t.lines) > 1 {
		t.size -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

// runTool runs a short setup command (ip, tc, mktorrent) and returns its
// combined output, with the output in the error when it fails.
func runTool(ctx context.Context, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = procAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
