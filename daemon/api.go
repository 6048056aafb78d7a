package daemon

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stampede-dev/stampede/fetch"
	"github.com/stampede-dev/stampede/host"
	"github.com/stampede-dev/stampede/internal/dashboard"
	"github.com/stampede-dev/stampede/internal/httpserve"
	"github.com/stampede-dev/stampede/internal/metrics"
	"github.com/stampede-dev/stampede/node"
)

// maxBody bounds a request body of the API.
const maxBody = 64 << 10

// startAPI listens on the API's address (a unix socket, or TCP with a
// token) and serves it.
func (s *Server) startAPI() error {
	ln := s.cfg.APIListener
	var err error
	if ln == nil {
		if ln, err = s.listenAPI(); err != nil {
			return err
		}
	}
	if _, ok := ln.Addr().(*net.UnixAddr); !ok {
		if s.token, err = s.loadToken(); err != nil {
			ln.Close()
			return err
		}
	}
	s.apiAddr = ln.Addr()
	hs := &http.Server{Handler: s.apiHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	s.goServe("api", func() error { return httpserve.Run(s.ctx, hs, ln, 5*time.Second, nil) })
	return nil
}

// listenAPI opens the configured address: TCP if it looks like HOST:PORT,
// else a unix socket, mode 0660 (its owner and group may connect), the
// stale socket of an earlier run removed first.
func (s *Server) listenAPI() (net.Listener, error) {
	addr := s.cfg.API
	if IsTCP(addr) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("daemon: api: %w", err)
		}
		return ln, nil
	}
	if fi, err := os.Lstat(addr); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("daemon: api: %s exists and is not a socket", addr)
		}
		if c, err := net.Dial("unix", addr); err == nil {
			c.Close()
			return nil, fmt.Errorf("daemon: api: another daemon answers on %s (give each its own --state-dir)", addr)
		}
		os.Remove(addr)
	}
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: api: %w", err)
	}
	if err := os.Chmod(addr, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: api: %w", err)
	}
	var gid int
	if fi, err := os.Stat(addr); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			gid = int(st.Gid)
		}
	}
	return &credListener{Listener: ln, uid: os.Getuid(), gid: gid, log: s.log}, nil
}

// IsTCP reports whether an API address is HOST:PORT (TCP) rather than a
// unix socket's path: it has no slash and splits as host and port.
func IsTCP(addr string) bool {
	if strings.Contains(addr, "/") {
		return false
	}
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}

// credListener admits the callers the socket's permissions mean to admit,
// by their credentials (SO_PEERCRED): root, the daemon's own user and the
// socket's group. The kernel checks the permissions on connect already;
// this holds if they are loosened by mistake (a chmod 666).
type credListener struct {
	net.Listener
	uid, gid int
	log      interface {
		Warn(msg string, args ...any)
	}
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		who, err := peerCred(uc)
		if err == nil && admitted(who, l.uid, l.gid, groupsOf) {
			return c, nil
		}
		l.log.Warn("api: caller refused", "uid", who.uid, "gid", who.gid, "err", err)
		c.Close()
	}
}

// cred is who called: a unix socket peer's user and primary group.
type cred struct{ uid, gid int }

// admitted decides who may use the API: root, the daemon's user, and the
// members of the socket's group (by primary or supplementary group, as
// the kernel admits them to a socket of mode 0660). groups looks up a
// user's supplementary groups, only when the rest does not admit it (it
// may ask a directory service).
func admitted(c cred, uid, gid int, groups func(uid int) []int) bool {
	if c.uid == 0 || c.uid == uid || c.gid == gid {
		return true
	}
	return c.uid >= 0 && slices.Contains(groups(c.uid), gid)
}

// loadToken returns the TCP API's token: the configured one, the one in
// StateDir/api-token, or a new one written there (mode 0600).
func (s *Server) loadToken() (string, error) {
	if s.cfg.APIToken != "" {
		return s.cfg.APIToken, nil
	}
	path := filepath.Join(s.cfg.StateDir, TokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 16 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [24]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("daemon: api token: %w", err)
	}
	return tok, nil
}

func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", s.dash)
	mux.Handle("GET "+dashboard.Path, s.dash)
	mux.Handle("GET "+dashboard.Path+"/", s.dash)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /v1/downloads", s.addDownload)
	mux.HandleFunc("POST /v1/seeds", s.addSeed)
	mux.HandleFunc("POST /v1/jobs/{id}/pause", s.pauseJob)
	mux.HandleFunc("POST /v1/jobs/{id}/resume", s.resumeJob)
	mux.HandleFunc("DELETE /v1/jobs/{id}", s.removeJob)
	mux.HandleFunc("GET /v1/stats", s.getStats)
	mux.Handle("GET /metrics", metrics.Handler(s.reg, s.log))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such endpoint: %s %s (see docs/daemon.md)", r.Method, r.URL.Path)
	})
	if s.token == "" {
		return s.withHealth(mux)
	}
	return s.withHealth(s.guard(mux))
}

// guard admits TCP callers with the token and a Host header naming the
// API's own address or localhost (a web page's script, by DNS rebinding,
// would send its own name).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			apiError(w, http.StatusForbidden, "Host %q is not this API's address", r.Host)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stampede daemon"`)
			apiError(w, http.StatusUnauthorized, "missing or wrong token (Authorization: Bearer, from %s)", filepath.Join(s.cfg.StateDir, TokenFile))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) hostAllowed(h string) bool {
	if h == s.apiAddr.String() {
		return true
	}
	name, port, err := net.SplitHostPort(h)
	if err != nil {
		return false
	}
	_, ourPort, _ := net.SplitHostPort(s.apiAddr.String())
	return port == ourPort && slices.Contains([]string{"localhost", "127.0.0.1", "::1"}, name)
}

// apiError answers with status and {"error": message}.
func apiError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// decode reads a JSON request body into v: unknown fields, trailing data
// and bodies past maxBody are errors.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad JSON: %v", err)
		return false
	}
	return true
}

// DownloadRequest is the body of POST /v1/downloads.
type DownloadRequest struct {
	URL string `json:"url"`
	// Path is the destination: a file, or an existing directory to save
	// into under the URL's name; default the first allowed directory.
	Path string `json:"path,omitempty"`
}

// SeedRequest is the body of POST /v1/seeds: a local file and where its
// swarm is found (its origin's URL, or a tracker).
type SeedRequest struct {
	Path    string `json:"path"`
	URL     string `json:"url,omitempty"`
	Tracker string `json:"tracker,omitempty"`
}

// RemoveResult is the answer to DELETE /v1/jobs/{id}.
type RemoveResult struct {
	ID          string `json:"id"`
	Removed     bool   `json:"removed"`
	DataDeleted bool   `json:"data_deleted"`
}

func (s *Server) addDownload(w http.ResponseWriter, r *http.Request) {
	var req DownloadRequest
	if !decode(w, r, &req) {
		return
	}
	u, err := fetch.ParseURL(req.URL)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	path := req.Path
	switch {
	case path == "":
		path = filepath.Join(s.cfg.AllowDirs[0], fetch.RemoteName(u))
	case isDir(path):
		path = filepath.Join(path, fetch.RemoteName(u))
	}
	path, err = s.confine(path)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if _, err := os.Lstat(path); err == nil {
		apiError(w, http.StatusConflict, "path %q exists: the daemon never writes over a file it did not write (remove it first)", path)
		return
	}
	s.add(w, &job{Job: Job{Kind: KindDownload, URL: u.String(), Path: path, Size: -1}})
}

func (s *Server) addSeed(w http.ResponseWriter, r *http.Request) {
	var req SeedRequest
	if !decode(w, r, &req) {
		return
	}
	if (req.URL == "") == (req.Tracker == "") {
		apiError(w, http.StatusBadRequest, "give url (the file's origin) or tracker, not both")
		return
	}
	for _, raw := range []string{req.URL, req.Tracker} {
		if raw == "" {
			continue
		}
		if _, err := fetch.ParseURL(raw); err != nil {
			apiError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	path, err := s.confine(req.Path)
	if err != nil {
		apiError(w, http.StatusBadRequest, "%v", err)
		return
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		apiError(w, http.StatusBadRequest, "path %q is not a regular file", path)
		return
	}
	s.add(w, &job{Job: Job{Kind: KindSeed, URL: req.URL, Tracker: req.Tracker, Path: path, Size: fi.Size(), Completed: true}})
}

// add starts j unless another job has its path.
func (s *Server) add(w http.ResponseWriter, j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.jobs) >= s.cfg.MaxJobs {
		apiError(w, http.StatusTooManyRequests, "the daemon keeps %d jobs already, its most: remove some first", len(s.jobs))
		return
	}
	for _, o := range s.jobs {
		if o.Path == j.Path {
			apiError(w, http.StatusConflict, "job %s already has path %q", o.ID, o.Path)
			return
		}
	}
	j.ID, j.Added, j.State = newID(), time.Now(), StateQueued
	s.jobs[j.ID] = j
	s.startLocked(j, true)
	s.persistLocked()
	writeJSON(w, http.StatusCreated, j.live())
}

// JobList is the answer to GET /v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, JobList{Jobs: s.Jobs()})
}

// Jobs returns every job with its live figures, oldest first.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Job{}
	for _, j := range s.sortedLocked() {
		out = append(out, j.live())
	}
	return out
}

// sortedLocked is the jobs, oldest first.
func (s *Server) sortedLocked() []*job {
	js := slices.Collect(maps.Values(s.jobs))
	slices.SortFunc(js, func(a, b *job) int { return a.Added.Compare(b.Added) })
	return js
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobLocked(w, r)
	if j == nil {
		return
	}
	writeJSON(w, http.StatusOK, j.live())
}

// jobLocked returns the job the request's path names, or answers 404
// and returns nil.
func (s *Server) jobLocked(w http.ResponseWriter, r *http.Request) *job {
	j := s.jobs[r.PathValue("id")]
	if j == nil {
		apiError(w, http.StatusNotFound, "%v: %q", errNotFound, r.PathValue("id"))
	}
	return j
}

// changeableLocked is jobLocked for a pause or a removal: a job being
// removed answers 409.
func (s *Server) changeableLocked(w http.ResponseWriter, r *http.Request) *job {
	j := s.jobLocked(w, r)
	if j != nil && j.State == StateRemoving {
		apiError(w, http.StatusConflict, "job %s is being removed", j.ID)
		return nil
	}
	return j
}

func (s *Server) pauseJob(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j := s.changeableLocked(w, r)
	if j == nil {
		s.mu.Unlock()
		return
	}
	ended := j.ended
	if j.cancel != nil {
		j.stop = StatePaused
		j.cancel()
	} else if j.State != StateFailed {
		j.State = StatePaused
	}
	s.mu.Unlock()
	if !s.wait(w, r, ended) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.persistLocked()
	writeJSON(w, http.StatusOK, j.live())
}

// wait waits for done (nil: at once), or until the request ends (false:
// nobody to answer) or the daemon stops (false, answered 503).
func (s *Server) wait(w http.ResponseWriter, r *http.Request, done <-chan struct{}) bool {
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-r.Context().Done():
	case <-s.ctx.Done():
		apiError(w, http.StatusServiceUnavailable, "the daemon is stopping; the job's state is kept for its next start")
	}
	return false
}

func (s *Server) resumeJob(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobLocked(w, r)
	if j == nil {
		return
	}
	if j.State == StateRemoving {
		apiError(w, http.StatusConflict, "job %s is being removed", j.ID)
		return
	}
	if j.cancel == nil {
		s.startLocked(j, true)
		s.persistLocked()
	}
	writeJSON(w, http.StatusOK, j.live())
}

// removeJob stops a job and forgets it. With ?delete_data=true a
// download's files go too: the file it published, its part file and the
// part file's notes. A seed's file, which the daemon did not write, never
// does. The job keeps its path (state "removing") until its run has ended
// and its files are gone, so no new job can take the path meanwhile.
func (s *Server) removeJob(w http.ResponseWriter, r *http.Request) {
	del := false
	if v := r.URL.Query().Get("delete_data"); v != "" {
		switch v {
		case "true", "1":
			del = true
		case "false", "0":
		default:
			apiError(w, http.StatusBadRequest, "delete_data=%q: want true or false", v)
			return
		}
	}
	s.mu.Lock()
	j := s.changeableLocked(w, r)
	if j == nil {
		s.mu.Unlock()
		return
	}
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		apiError(w, http.StatusServiceUnavailable, "the daemon is stopping")
		return
	}
	if del && j.Kind == KindSeed {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "job %s seeds %s, a file the daemon did not write: it is never deleted", j.ID, j.Path)
		return
	}
	ended := j.ended
	if j.cancel != nil {
		j.stop = StateRemoving
		j.cancel()
	}
	j.State = StateRemoving
	s.persistLocked()
	s.mu.Unlock()

	done := make(chan struct{})
	res := RemoveResult{ID: j.ID, Removed: true}
	var derr error
	s.wg.Go(func() {
		defer close(done)
		if ended != nil {
			<-ended
		}
		if del {
			res.DataDeleted, derr = s.deleteData(j)
		}
		s.mu.Lock()
		delete(s.jobs, j.ID)
		os.Remove(s.manifestPath(j.ID))
		s.persistLocked()
		s.mu.Unlock()
	})
	if !s.wait(w, r, done) {
		return
	}
	if derr != nil {
		apiError(w, http.StatusInternalServerError, "job removed, but deleting its data: %v", derr)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// deleteData deletes what j's download wrote: the published file (only
// if the download published it, never a file that was there before), the
// part file and its notes, each checked against the allowed directories
// again. It reports whether anything was deleted.
func (s *Server) deleteData(j *job) (bool, error) {
	paths := []string{j.Path + ".part", j.Path + ".part.meta"}
	if j.Completed {
		paths = append(paths, j.Path)
	}
	deleted := false
	for _, p := range paths {
		if _, err := s.confine(p); err != nil {
			return deleted, err
		}
		switch err := os.Remove(p); {
		case err == nil:
			deleted = true
		case !errors.Is(err, os.ErrNotExist):
			return deleted, err
		}
	}
	return deleted, nil
}

// Stats is the answer to GET /v1/stats.
type Stats struct {
	// Jobs counts the jobs by state.
	Jobs map[string]int `json:"jobs"`
	// Peers is the peer port's account (connections routed, refused...).
	Peers host.Stats `json:"peers"`
	// BytesFromPeers and BytesToPeers sum the running jobs' swarms.
	BytesFromPeers int64 `json:"bytes_from_peers"`
	BytesToPeers   int64 `json:"bytes_to_peers"`
	// OriginRequests sums the ended downloads' origin requests by reason.
	OriginRequests map[string]int `json:"origin_requests"`
	// Neighbours sums the running jobs' neighbours by path (docs/nat.md).
	Neighbours  node.Paths `json:"neighbours"`
	PeerAddr    string     `json:"peer_addr"`
	GatewayAddr string     `json:"gateway_addr,omitempty"`
}

// Stats returns the daemon's figures.
func (s *Server) Stats() Stats {
	st := Stats{Jobs: map[string]int{}, Peers: s.host.Stats(), OriginRequests: map[string]int{}, PeerAddr: s.peerAddr.String()}
	if s.gatewayAddr != nil {
		st.GatewayAddr = s.gatewayAddr.String()
	}
	for _, j := range s.Jobs() {
		st.Jobs[j.State]++
		st.BytesFromPeers += j.FromPeers
		st.BytesToPeers += j.Uploaded
		if nb := j.Neighbours; nb != nil {
			st.Neighbours.Direct += nb.Direct
			st.Neighbours.Punched += nb.Punched
			st.Neighbours.Relayed += nb.Relayed
			st.Neighbours.RelayedBytes += nb.RelayedBytes
		}
		for k, v := range j.Origin {
			st.OriginRequests[k] += v
		}
	}
	return st
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
