package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/stampede-dev/stampede/cluster"
	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
)

// thenTail is how much of a command's output a status keeps.
const thenTail = 4 << 10

// runPush runs ps until it has installed the file, run the command and
// seeded the others until the request expires (or the daemon stops).
func (s *Server) runPush(ps *push, dest string) {
	ctx, cancel := context.WithDeadline(s.ctx, ps.req.Expires)
	s.wg.Go(func() {
		defer cancel()
		err := s.pushRun(ctx, ps, dest)
		if err == nil || s.ctx.Err() != nil {
			return // done, or the daemon is stopping: the state stays for the next start
		}
		s.log.Warn("push failed", "push", ps.req.ID(), "err", err)
		s.updatePush(ps, func(st *PushStatus) {
			if st.State != PushDone && st.State != PushFailed {
				st.State, st.Error = PushFailed, err.Error()
			}
		})
	})
}

// pushEnv is what one push's run shares with its hooks.
type pushEnv struct {
	s    *Server
	ps   *push
	plan *cluster.Plan
	role *cluster.Role
	rt   *pushRates
}

func (s *Server) pushRun(ctx context.Context, ps *push, dest string) error {
	p := s.push
	req := ps.req
	seed, _ := hex.DecodeString(req.Root)
	plan, err := cluster.NewPlan(p.cfg.Cluster, req.Hosts, seed)
	if err != nil {
		return err
	}
	role := plan.Roles[p.self.Name]
	e := &pushEnv{s: s, ps: ps, plan: plan, role: role, rt: newPushRates(role)}
	s.updatePush(ps, func(st *PushStatus) { st.Role = roleName(role) })
	ps.ctr.progressAt.Store(time.Now().UnixNano())
	s.wg.Go(func() { e.throttle(ctx) })

	client := &http.Client{Transport: e.gate(req.URL, nil)}
	m, _, err := fetch.Join(ctx, client, req.URL)
	if err != nil {
		return fmt.Errorf("the file's manifest from the pusher: %w", err)
	}
	if m.Root.String() != req.Root || m.Size != req.Size {
		return fmt.Errorf("the pusher serves root %s, %d bytes; the push is of root %s, %d bytes", m.Root, m.Size, req.Root, req.Size)
	}
	if role.DCRep {
		client.Transport = e.gate(req.URL, &workShare{cluster.NewWork(plan.Representatives(), m.NumPieces()), m})
	}
	s.updatePush(ps, func(st *PushStatus) { st.State = PushFetching })
	same, reused, err := reuseOld(dest, m)
	if err != nil {
		return err
	}
	ps.ctr.reused.Store(reused)
	s.updatePush(ps, func(st *PushStatus) { st.Reused = reused })
	nc := node.Config{Host: s.host, PeerConn: e.peerConn(ctx)}
	// The plan chose who fetches from the origin: its datacenters'
	// representatives hold the origin all the time, each with a few
	// fetches in flight, instead of drawing for it among the whole push.
	nc.Swarm.OriginHolder = role.DCRep
	if same {
		// The file there is this one: nothing moves; it is seeded to the
		// others of the push.
		ps.ctr.done.Store(m.Size)
		if err := s.installed(ctx, ps, dest); err != nil {
			return err
		}
		return s.seedPush(ctx, ps, dest, m, nc)
	}
	d, err := fetch.New(fetch.Config{
		URL: req.URL, Output: dest, Continue: true, Client: client, Logger: s.log.With("push", req.ID()),
		Swarm: fetch.SwarmConfig{SeedForever: true, Node: nc},
	})
	if err != nil {
		return err
	}
	var (
		wg      sync.WaitGroup
		thenErr error
	)
	watch, stopWatch := context.WithCancel(ctx)
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watch.Done():
				return
			case <-t.C:
			}
			pr := d.Progress()
			if pr.Done > ps.ctr.done.Swap(pr.Done) {
				ps.ctr.progressAt.Store(time.Now().UnixNano())
			}
			if pr.Phase == "seeding" {
				thenErr = s.installed(ctx, ps, dest)
				return
			}
		}
	})
	_, err = d.Run(ctx)
	stopWatch()
	wg.Wait()
	if thenErr != nil {
		return thenErr
	}
	if st, _ := s.pushStatus(req.ID()); st.State == PushDone {
		return nil // seeded until the request expired
	}
	if err == nil {
		err = errors.New("the download ended before the file was complete")
	}
	return err
}

// roleTookOver is the role of a standby representative told to take
// over (pushSvc.takeOver).
const roleTookOver = "standby representative (took over)"

func roleName(r *cluster.Role) string {
	switch {
	case r.DCRep:
		return "rack+dc representative"
	case r.Standby:
		return "standby representative"
	case r.RackRep:
		return "rack representative"
	}
	return "member"
}

// installed records that the file is whole at dest (fetch has synced and
// renamed it) and runs the request's command.
func (s *Server) installed(ctx context.Context, ps *push, dest string) error {
	s.updatePush(ps, func(st *PushStatus) {
		st.State, st.Installed, st.Done = PushThen, time.Now(), st.Size
	})
	if ps.req.Then == "" {
		s.updatePush(ps, func(st *PushStatus) { st.State = PushDone })
		return nil
	}
	res := s.runThen(ctx, ps.req, dest)
	var err error
	if res.Exit != 0 {
		err = fmt.Errorf("the command after the install (--then) exited with status %d", res.Exit)
	}
	s.updatePush(ps, func(st *PushStatus) {
		st.Then = &res
		if err != nil {
			st.State, st.Error = PushFailed, err.Error()
		} else {
			st.State = PushDone
		}
	})
	return err
}

// runThen runs the request's command with the shell, in the
// destination's directory, with STAMPEDE_PUSH_DEST and _ROOT set.
func (s *Server) runThen(ctx context.Context, req cluster.Request, dest string) ThenResult {
	cmd := exec.CommandContext(ctx, s.push.cfg.Shell, "-c", req.Then)
	cmd.Dir = filepath.Dir(dest)
	cmd.Env = append(os.Environ(), "STAMPEDE_PUSH_DEST="+dest, "STAMPEDE_PUSH_ROOT="+req.Root)
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := ThenResult{Output: out.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	default:
		res.Exit, res.Output = -1, err.Error()
	}
	s.log.Info("push command ran", "push", req.ID(), "exit", res.Exit)
	return res
}

// tailBuffer keeps the last thenTail bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > thenTail {
		t.b = append(t.b[:0], t.b[len(t.b)-thenTail:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// reuseOld looks at the file at dest, an earlier version, for pieces of
// m: every piece of it that verifies as m's piece at the same offset is
// written into dest's part file, so that only the pieces that changed are
// fetched (the part file's pieces are verified again when the download
// opens it). same: the file there is m already, whole. Pieces that moved
// (bytes inserted before them) are not found.
func reuseOld(dest string, m *manifest.Manifest) (same bool, reused int64, err error) {
	old, err := os.OpenFile(dest, os.O_RDONLY|store.NoFollow|store.NonBlock, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("the file at the destination: %w", err)
	}
	defer old.Close()
	fi, err := old.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, 0, fmt.Errorf("the destination %s is not a regular file", dest)
	}
	var (
		found []int
		buf   = make([]byte, m.PieceSize)
	)
	for i := range m.NumPieces() {
		data := buf[:m.PieceLen(i)]
		if n, _ := old.ReadAt(data, m.PieceOffset(i)); n == len(data) && m.VerifyPiece(i, data) == nil {
			found = append(found, i)
		}
	}
	if len(found) == m.NumPieces() && fi.Size() == m.Size {
		return true, m.Size, nil
	}
	if len(found) == 0 {
		return false, 0, nil
	}
	part, err := os.OpenFile(dest+store.PartSuffix, os.O_RDWR|os.O_CREATE|store.NoFollow, 0o644)
	if err != nil {
		return false, 0, fmt.Errorf("the part file: %w", err)
	}
	defer func() {
		if cerr := part.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("the part file: %w", cerr)
		}
	}()
	for _, i := range found {
		data := buf[:m.PieceLen(i)]
		if n, err := old.ReadAt(data, m.PieceOffset(i)); n != len(data) {
			return false, 0, fmt.Errorf("the file at the destination changed while read: %w", err)
		}
		if _, err := part.WriteAt(data, m.PieceOffset(i)); err != nil {
			return false, 0, fmt.Errorf("the part file: %w", err)
		}
		reused += m.PieceLen(i)
	}
	if err := part.Sync(); err != nil {
		return false, 0, fmt.Errorf("the part file: %w", err)
	}
	return false, reused, nil
}

// seedPush serves the complete file at dest to the push's peers until ctx
// ends (the request's expiry).
func (s *Server) seedPush(ctx context.Context, ps *push, dest string, m *manifest.Manifest, nc node.Config) error {
	st, err := store.OpenComplete(dest, m)
	if err != nil {
		return err
	}
	defer st.Close()
	nc.Manifest, nc.Store, nc.Trackers, nc.SeedForever, nc.HTTPClient = m, st, m.Trackers, true, s.client
	nc.Logger = s.log.With("push", ps.req.ID())
	nd, err := node.New(nc)
	if err != nil {
		return err
	}
	if err := nd.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// seedPushLater seeds, after a restart, the file of a push that had
// ended, until it expires, if the pusher still serves its manifest.
func (s *Server) seedPushLater(ps *push, dest string) {
	if ps.status.State != PushDone {
		return
	}
	ctx, cancel := context.WithDeadline(s.ctx, ps.req.Expires)
	s.wg.Go(func() {
		defer cancel()
		m, _, err := fetch.Join(ctx, s.client, ps.req.URL)
		if err != nil || m.Root.String() != ps.req.Root {
			return
		}
		seed, _ := hex.DecodeString(ps.req.Root)
		plan, err := cluster.NewPlan(s.push.cfg.Cluster, ps.req.Hosts, seed)
		if err != nil {
			return
		}
		role := plan.Roles[s.push.self.Name]
		e := &pushEnv{s: s, ps: ps, plan: plan, role: role, rt: newPushRates(role)}
		s.seedPush(ctx, ps, dest, m, node.Config{Host: s.host, PeerConn: e.peerConn(ctx)})
	})
}
