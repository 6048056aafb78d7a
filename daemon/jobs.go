package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
	"github.com/stampede-dev/stampede/store"
)

// Kinds of job.
const (
	KindDownload = "download" // a URL to a destination, then seeded
	KindSeed     = "seed"     // a local file, seeded
)

// States of a job.
const (
	StateQueued      = "queued"      // added, not started yet
	StateDownloading = "downloading" // verifying a part file or fetching
	StatePaused      = "paused"      // stopped by the user; the part file is kept
	StateSeeding     = "seeding"     // complete, serving its swarm
	StateComplete    = "complete"    // complete, not seeding (past MaxSeeds)
	StateFailed      = "failed"      // ended with Error
	StateRemoving    = "removing"    // being removed (DELETE), its run ending
)

// Job is a download or a seed, as the API shows it and the state file keeps
// it (the live fields are not kept).
type Job struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	URL   string `json:"url,omitempty"`
	Path  string `json:"path"`
	State string `json:"state"`
	// Tracker is the announce URL of a seed of a file the origin does not
	// serve with a manifest (its manifest is then computed from the file).
	Tracker string    `json:"tracker,omitempty"`
	Error   string    `json:"error,omitempty"`
	Added   time.Time `json:"added"`
	// Used is when the job last started or completed: the seeds kept are
	// the most recently used.
	Used time.Time `json:"used"`
	Root string    `json:"root,omitempty"`
	Size int64     `json:"size"` // -1 while unknown
	// Completed: the file is whole at Path (a download's is published
	// there only then); a resumed job seeds it.
	Completed bool `json:"completed"`

	// Live figures, filled in when the job is shown.
	Done      int64 `json:"done"`     // bytes verified and written
	Uploaded  int64 `json:"uploaded"` // bytes sent to peers
	FromPeers int64 `json:"bytes_from_peers"`
	Peers     int   `json:"peers_seen"`
	// Neighbours counts the job's neighbours now by how their connection
	// reaches them: direct, punched through a NAT, relayed (docs/nat.md).
	Neighbours *node.Paths `json:"neighbours,omitempty"`
	Phase      string      `json:"phase,omitempty"` // fetch's phase while downloading
	// Origin counts the origin requests of the download by reason, once
	// it has ended (fetch.Result.OriginRequests).
	Origin map[string]int `json:"origin_requests,omitempty"`
}

// job is a Job and what runs it. Its fields are guarded by Server.mu.
type job struct {
	Job
	cancel context.CancelFunc // ends the run; nil when not running
	ended  chan struct{}      // closed when the run ends
	d      *fetch.Download    // the download, while it runs
	nd     *node.Node         // the seeding node, while it runs
	stop   string             // the state to take when the run ends by cancel
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stateFile is the jobs' file under StateDir.
const stateFile = "jobs.json"

type saved struct {
	Version int   `json:"version"`
	Jobs    []Job `json:"jobs"`
}

// loadJobs reads the jobs of an earlier run; none if there was none.
func loadJobs(dir string) ([]Job, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("daemon: state: %w", err)
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("daemon: state file %s is damaged: %w", filepath.Join(dir, stateFile), err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("daemon: state file %s has version %d, this daemon reads 1", filepath.Join(dir, stateFile), s.Version)
	}
	return s.Jobs, nil
}

// saveLocked writes the jobs, atomically (a temporary file renamed over
// the old one, both synced).
func (s *Server) saveLocked() error {
	out := saved{Version: 1}
	for _, j := range s.jobs {
		k := j.Job
		k.Done, k.Uploaded, k.FromPeers, k.Peers, k.Phase = 0, 0, 0, 0, ""
		out.Jobs = append(out.Jobs, k)
	}
	slices.SortFunc(out.Jobs, func(a, b Job) int { return a.Added.Compare(b.Added) })
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.cfg.StateDir, stateFile)
	tmp, err := os.CreateTemp(s.cfg.StateDir, stateFile+".*")
	if err != nil {
		return fmt.Errorf("daemon: state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("daemon: state: %w", err)
	}
	if err := store.Publish(tmp, path); err != nil {
		return fmt.Errorf("daemon: state: %w", err)
	}
	return nil
}

// persistLocked is saveLocked logging a failure: the jobs run on, and
// the next change tries again.
func (s *Server) persistLocked() {
	if err := s.saveLocked(); err != nil {
		s.log.Error("saving the jobs", "err", err)
	}
}

// startLocked runs j: a download until complete and then its seeding, or
// a seed. A download waits, queued, while MaxDownloads others download.
// used marks j as just used (added or resumed by the user; not a restart,
// which keeps the order the seeds were used in).
func (s *Server) startLocked(j *job, used bool) {
	if s.ctx.Err() != nil {
		return // stopping: the state stays for the next start
	}
	if j.Kind == KindDownload && !j.Completed && s.downloadingLocked() >= s.cfg.MaxDownloads {
		j.State = StateQueued
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	j.cancel, j.ended, j.stop, j.Error = cancel, make(chan struct{}), "", ""
	if used || j.Used.IsZero() {
		j.Used = time.Now()
	}
	seed := j.Kind == KindSeed || j.Completed
	if seed {
		j.State = StateSeeding
	} else {
		j.State = StateDownloading
	}
	s.wg.Go(func() {
		defer close(j.ended)
		var err error
		if seed {
			err = s.seed(ctx, j)
		} else {
			err = s.download(ctx, j)
		}
		s.ended(j, err)
	})
	s.limitSeedsLocked()
}

// downloadingLocked counts the jobs downloading now.
func (s *Server) downloadingLocked() int {
	n := 0
	for _, j := range s.jobs {
		if j.cancel != nil && j.State == StateDownloading {
			n++
		}
	}
	return n
}

// startQueuedLocked starts the queued downloads, oldest first, while
// fewer than MaxDownloads download.
func (s *Server) startQueuedLocked() {
	if s.ctx.Err() != nil {
		return
	}
	var queued []*job
	for _, j := range s.jobs {
		if j.State == StateQueued && j.cancel == nil {
			queued = append(queued, j)
		}
	}
	slices.SortFunc(queued, func(a, b *job) int { return a.Added.Compare(b.Added) })
	for _, j := range queued {
		if s.downloadingLocked() >= s.cfg.MaxDownloads {
			return
		}
		s.startLocked(j, false)
	}
}

// ended records how j's run ended.
func (s *Server) ended(j *job, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.startQueuedLocked()
	j.cancel, j.d, j.nd = nil, nil, nil
	switch {
	case j.stop != "":
		j.State = j.stop
	case s.ctx.Err() != nil:
		// The daemon is stopping: the state stays for the next start.
	case err != nil:
		j.State, j.Error = StateFailed, err.Error()
		s.log.Warn("job failed", "id", j.ID, "err", err)
	default:
		j.State, j.Completed = StateComplete, true
	}
	if s.ctx.Err() == nil {
		s.persistLocked()
	}
}

// download runs j's download into j.Path, resuming a part file left by an
// earlier run, and seeds the file after (until cancelled).
func (s *Server) download(ctx context.Context, j *job) error {
	// The path was checked when the job was added; what lies on it may
	// have changed since (a directory swapped for a link).
	if _, err := s.confine(j.Path); err != nil {
		return err
	}
	d, err := fetch.New(fetch.Config{
		URL: j.URL, Output: j.Path, Continue: true, Client: s.client, Logger: s.log.With("job", j.ID),
		Swarm: fetch.SwarmConfig{SeedForever: true, Node: node.Config{Host: s.host}},
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	j.d = d
	s.mu.Unlock()
	done := make(chan struct{})
	defer close(done)
	s.wg.Go(func() { s.watchSeeding(j, d, done) })
	res, err := d.Run(ctx)
	published := d.Progress().Phase == "seeding" // the file is whole at j.Path
	if published {
		s.published(j, d)
	}
	if res != nil {
		s.mu.Lock()
		j.Origin = res.OriginRequests
		if res.Root != "" {
			j.Root = res.Root
		}
		s.mu.Unlock()
	}
	if err != nil && ctx.Err() != nil && published {
		return nil // cancelled while seeding: complete
	}
	return err
}

// published records that j's download put the whole file at j.Path: the
// job is complete from now on, and its manifest is kept in StateDir, so a
// restart seeds the file without asking the origin (once).
func (s *Server) published(j *job, d *fetch.Download) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.Completed {
		return
	}
	j.Completed = true
	if m := d.Manifest(); m != nil {
		j.Root = m.Root.String()
		// A private swarm's seed needs a token anew at each start: its
		// manifest is asked of the origin again then, with one.
		if d.Private() {
			s.persistLocked()
			return
		}
		if err := s.saveManifest(j.ID, m); err != nil {
			s.log.Warn("keeping the manifest", "id", j.ID, "err", err)
		}
	}
	s.persistLocked()
}

// manifestPath is where j's manifest is kept.
func (s *Server) manifestPath(id string) string {
	return filepath.Join(s.cfg.StateDir, "manifests", id+".manifest")
}

func (s *Server) saveManifest(id string, m *manifest.Manifest) error {
	data, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.manifestPath(id)), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.manifestPath(id)), id+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	return store.Publish(tmp, s.manifestPath(id))
}

// savedManifest is j's kept manifest, nil if there is none or it does
// not name j's root.
func (s *Server) savedManifest(j *job) *manifest.Manifest {
	data, err := os.ReadFile(s.manifestPath(j.ID))
	if err != nil {
		return nil
	}
	m, err := manifest.Decode(bytes.NewReader(data))
	if err != nil || m.Root.String() != j.Root {
		return nil
	}
	return m
}

// watchSeeding marks j seeding when its download has published the file
// and goes on in the swarm.
func (s *Server) watchSeeding(j *job, d *fetch.Download, done <-chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p := d.Progress()
		if p.Phase == "seeding" {
			// Recorded complete (root, manifest) before it shows as
			// seeding.
			s.published(j, d)
		}
		s.mu.Lock()
		if p.Size >= 0 {
			j.Size = p.Size
		}
		if p.Phase == "seeding" && j.State == StateDownloading {
			j.State, j.Used = StateSeeding, time.Now()
			s.startQueuedLocked()
			s.limitSeedsLocked()
			s.persistLocked()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// seed serves j's complete file to its swarm until cancelled. The file is
// hashed again first. The manifest is the one kept when the daemon
// downloaded the file, or comes from the origin (URL), the file checked
// against it, or is computed from the file for a seed announced to
// Tracker.
func (s *Server) seed(ctx context.Context, j *job) error {
	f, err := s.openRegular(j.Path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	local, err := manifest.FromReaderAt(f, fi.Size(), filepath.Base(j.Path), 0)
	if err != nil {
		f.Close()
		return err
	}
	m := local
	var private *node.Private
	saved := s.savedManifest(j)
	switch {
	case saved != nil:
		if saved.Root != local.Root || saved.Size != local.Size {
			f.Close()
			return fmt.Errorf("%s changed since it was downloaded (root %s, %d bytes; it was %s, %d bytes)",
				j.Path, local.Root, local.Size, saved.Root, saved.Size)
		}
		m = saved
	case j.URL != "":
		remote, priv, err := fetch.Join(ctx, s.client, j.URL)
		private = priv
		if err != nil {
			f.Close()
			return fmt.Errorf("the manifest of %s: %w", j.URL, err)
		}
		if remote.Root != local.Root || remote.Size != local.Size {
			f.Close()
			return fmt.Errorf("%s (root %s, %d bytes) is not the file at %s (root %s, %d bytes)",
				j.Path, local.Root, local.Size, j.URL, remote.Root, remote.Size)
		}
		m = remote
	default:
		m.Trackers = []string{j.Tracker}
	}
	if len(m.Trackers) == 0 {
		f.Close()
		return fmt.Errorf("the manifest of %s names no tracker: nobody could find this seed", j.Path)
	}
	st, err := store.OpenCompleteFile(f, m)
	if err != nil {
		return err
	}
	defer st.Close()
	nd, err := node.New(node.Config{
		Manifest: m, Store: st, Trackers: m.Trackers, Host: s.host, SeedForever: true, Private: private,
		HTTPClient: s.client, Logger: s.log.With("job", j.ID),
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	j.nd, j.Root, j.Size, j.Done = nd, m.Root.String(), m.Size, m.Size
	s.mu.Unlock()
	err = nd.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// limitSeedsLocked keeps at most MaxSeeds jobs seeding, the most recently
// used: the others stop (their files stay) and show as complete.
func (s *Server) limitSeedsLocked() {
	var seeding []*job
	for _, j := range s.jobs {
		if j.State == StateSeeding && j.cancel != nil && j.stop == "" {
			seeding = append(seeding, j)
		}
	}
	if len(seeding) <= s.cfg.MaxSeeds {
		return
	}
	slices.SortFunc(seeding, func(a, b *job) int { return b.Used.Compare(a.Used) })
	for _, j := range seeding[s.cfg.MaxSeeds:] {
		j.stop = StateComplete
		j.cancel()
	}
}

// live fills in j's live figures; s.mu is held.
func (j *job) live() Job {
	out := j.Job
	switch {
	case j.d != nil:
		p := j.d.Progress()
		out.Phase, out.Done, out.Uploaded = p.Phase, p.Done, p.Uploaded
		if p.Size >= 0 {
			out.Size = p.Size
		}
		if st := j.d.SwarmStats(); st != nil {
			out.FromPeers, out.Peers, out.Neighbours = st.BytesFromPeers, st.PeersSeen, &st.Neighbours
		}
	case j.nd != nil:
		st := j.nd.Stats()
		out.Uploaded, out.FromPeers, out.Peers, out.Neighbours = st.BytesToPeers, st.BytesFromPeers, st.PeersSeen, &st.Neighbours
	}
	if out.State == StateComplete || out.State == StateSeeding {
		out.Done = out.Size
	}
	return out
}

// errNotFound: no job has that ID.
var errNotFound = errors.New("no such job")

// httpClientFor is the client the daemon reaches origins and trackers with.
func httpClientFor(t http.RoundTripper) *http.Client {
	if t == nil {
		return fetch.NewClient(16)
	}
	return &http.Client{Transport: t}
}

// openRegular opens path for reading, checked again against the allowed
// directories, never through a symbolic link as its last element and
// never blocking on a FIFO, and only if it is a regular file.
func (s *Server) openRegular(path string) (*os.File, error) {
	if _, err := s.confine(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|store.NoFollow|store.NonBlock, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}
