package main

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runGetEnv runs `stampede get args...` in-process with stdin and, if
// given, an environment to read (HOME for --netrc).
func runGetEnv(t *testing.T, stdin string, getenv map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr}
	if getenv != nil {
		e.getenv = func(k string) string { return getenv[k] }
	}
	code := run(t.Context(), append([]string{"get"}, args...), e)
	return code, stdout.String(), stderr.String()
}

// recorded is one request a recorder saw.
type recorded struct {
	method, path, host string
	header             http.Header
}

// recorder keeps the requests that reach a test server.
type recorder struct {
	mu   sync.Mutex // guards the following
	reqs []recorded
}

func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, recorded{r.Method, r.URL.Path, r.Host, r.Header.Clone()})
		rc.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (rc *recorder) all() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.reqs...)
}

// fileHandler serves data at every path but /missing, with Range and an
// ETag, as a plain web server (no manifest).
func fileHandler(data []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "f", time.Unix(1e9, 0), bytes.NewReader(data))
	})
}

// startRecorded serves data as a plain web server and records its requests.
func startRecorded(t *testing.T, data []byte) (string, *recorder) {
	t.Helper()
	rc := &recorder{}
	srv := httptest.NewServer(rc.wrap(fileHandler(data)))
	t.Cleanup(srv.Close)
	return srv.URL, rc
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// TestGetHeadersAndUser: -H (repeated), --user-agent and -u reach the
// origin on every request, the probe, the manifest and the pieces, and
// neither an announce to the tracker nor the read of the tracker host's
// peer.json (--webrtc=auto's STUN and TURN servers); the credentials are in neither --json nor the
// verbose log.
func TestGetHeadersAndUser(t *testing.T) {
	www := t.TempDir()
	data := randomBytes(3<<20+3, 21)
	writeFile(t, www, "f", data)
	origin, _ := url.Parse(startServe(t, www))
	// In front of serve, keeping the Host asked for, so the tracker its
	// manifest names is reached through here too.
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(origin)
		pr.Out.Host = pr.In.Host
	}}
	rc := &recorder{}
	front := httptest.NewServer(rc.wrap(rp))
	defer front.Close()

	out := filepath.Join(t.TempDir(), "f")
	code, stdout, stderr := runCmd(t, "get", "-v", "--json", front.URL+"/f", "-o", out,
		"-H", "X-Test: one", "--header=X-Test: two, with a comma", "--user-agent", "agent/1.0", "-u", "alice:s3cret:too")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	var origins, announces int
	for _, r := range rc.all() {
		if strings.Contains(r.path, "/tracker/") || r.path == "/.well-known/stampede/peer.json" {
			announces++
			if r.header.Get("Authorization") != "" || r.header.Get("X-Test") != "" || r.header.Get("User-Agent") == "agent/1.0" {
				t.Errorf("the tracker got the user's headers: %s %s %v", r.method, r.path, r.header)
			}
			continue
		}
		origins++
		if got := r.header.Values("X-Test"); len(got) != 2 || got[0] != "one" || got[1] != "two, with a comma" {
			t.Errorf("%s %s: X-Test %q", r.method, r.path, got)
		}
		if r.header.Get("User-Agent") != "agent/1.0" || r.header.Get("Authorization") != basic("alice", "s3cret:too") {
			t.Errorf("%s %s: User-Agent %q, Authorization %q", r.method, r.path, r.header.Get("User-Agent"), r.header.Get("Authorization"))
		}
	}
	if origins < 3 || announces == 0 {
		t.Errorf("%d requests to the origin, %d announces: want the probe, manifest and pieces, and the swarm's announce", origins, announces)
	}
	for _, secret := range []string{"s3cret", base64.StdEncoding.EncodeToString([]byte("alice:s3cret:too"))} {
		if strings.Contains(stdout, secret) || strings.Contains(stderr, secret) {
			t.Errorf("the password is printed:\nstdout: %s\nstderr: %s", stdout, stderr)
		}
	}
}

// TestGetURLCredentials: user:password@ in the URL is sent as Basic
// authentication, and printed nowhere: not in --json's url, not in the
// log, not in an error.
func TestGetURLCredentials(t *testing.T) {
	data := []byte("secret file")
	base, rc := startRecorded(t, data)
	withUser := strings.Replace(base, "http://", "http://bob:hunter2@", 1)
	out := filepath.Join(t.TempDir(), "f")
	code, stdout, stderr := runCmd(t, "get", "-v", "--json", withUser+"/f", "-o", out, "-u", "alice:other")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	for _, r := range rc.all() {
		if r.header.Get("Authorization") != basic("bob", "hunter2") {
			t.Errorf("%s %s: Authorization %q; the URL's credentials win over -u", r.method, r.path, r.header.Get("Authorization"))
		}
	}
	code, stdout2, stderr2 := runCmd(t, "get", "--json", withUser+"/missing", "-o", filepath.Join(t.TempDir(), "m"))
	if code != exitServer {
		t.Errorf("a 404 exited %d", code)
	}
	for _, s := range []string{stdout, stderr, stdout2, stderr2} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("the URL's password is printed: %s", s)
		}
	}
	if !strings.Contains(stdout, `"url": "`+base+`/f"`) {
		t.Errorf("--json's url is not the URL without its credentials: %s", stdout)
	}
}

// TestGetCredentialsNotRedirected: a redirect to another host takes no
// credentials there, neither on the redirect (Go's client) nor on the
// requests sent there directly afterwards (the file's body).
func TestGetCredentialsNotRedirected(t *testing.T) {
	data := randomBytes(1<<20, 22)
	// The redirect goes to the same loopback server under another host
	// name, or on the same host to another port (curl drops credentials
	// there too).
	for _, name := range []string{"host", "port"} {
		t.Run(name, func(t *testing.T) {
			there, rc := startRecorded(t, data)
			elsewhere := there
			if name == "host" {
				elsewhere = strings.Replace(there, "127.0.0.1", "localhost", 1)
			}
			testCredentialsNotRedirected(t, data, elsewhere, rc)
		})
	}
}

func testCredentialsNotRedirected(t *testing.T, data []byte, elsewhere string, rc *recorder) {
	here := &recorder{}
	srv := httptest.NewServer(here.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere+r.URL.Path, http.StatusFound)
	})))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "f")
	code, _, stderr := runCmd(t, "get", "-q", srv.URL+"/f", "-o", out, "-u", "alice:s3cret", "-H", "Cookie: c=1", "-H", "X-Test: t")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	sameFile(t, out, data)
	if r := here.all(); len(r) == 0 || r[0].header.Get("Authorization") != basic("alice", "s3cret") {
		t.Fatalf("the first host got no credentials: %v", r)
	}
	reqs := rc.all()
	if len(reqs) < 2 {
		t.Fatalf("%d requests to the other server; want the redirected probe and the body", len(reqs))
	}
	for _, r := range reqs {
		if r.host != strings.TrimPrefix(elsewhere, "http://") {
			t.Errorf("a request for host %s", r.host)
		}
		if r.header.Get("Authorization") != "" || r.header.Get("Cookie") != "" {
			t.Errorf("%s %s on another server: Authorization %q, Cookie %q", r.method, r.path, r.header.Get("Authorization"), r.header.Get("Cookie"))
		}
		if r.header.Get("X-Test") != "t" {
			t.Errorf("%s %s: X-Test %q; headers other than credentials follow", r.method, r.path, r.header.Get("X-Test"))
		}
	}
}

// TestGetNetrc: --netrc-file's entry for the URL's host (without its port,
// any letter case), else the default entry; -u and the URL's own
// credentials win over it; --netrc reads ~/.netrc.
func TestGetNetrc(t *testing.T) {
	base, rc := startRecorded(t, []byte("x"))
	port := base[strings.LastIndex(base, ":"):]
	dir := t.TempDir()
	netrc := filepath.Join(dir, "netrc")
	os.WriteFile(netrc, []byte("machine LOCALHOST login name password name-pass\n"+
		"machine 127.0.0.1\n  login ip\n  password ip-pass\n"+
		"default login any password any-pass\n"), 0o600)
	noIP := filepath.Join(dir, "netrc-no-ip")
	os.WriteFile(noIP, []byte("machine localhost login name password name-pass\ndefault login any password any-pass\n"), 0o600)
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine 127.0.0.1 login home password home-pass\n"), 0o600)
	for _, tc := range []struct {
		url  string
		args []string
		want string
	}{
		{"http://127.0.0.1" + port, []string{"--netrc-file", netrc}, basic("ip", "ip-pass")},
		{"http://localhost" + port, []string{"--netrc-file", netrc}, basic("name", "name-pass")},
		{"http://127.0.0.1" + port, []string{"--netrc-file", noIP}, basic("any", "any-pass")},
		{"http://127.0.0.1" + port, []string{"--netrc-file", netrc, "-u", "u:p"}, basic("u", "p")},
		{"http://me:mine@127.0.0.1" + port, []string{"--netrc-file", netrc}, basic("me", "mine")},
		{"http://127.0.0.1" + port, []string{"--netrc"}, basic("home", "home-pass")},
		{"http://127.0.0.1" + port, nil, ""},
	} {
		before := len(rc.all())
		args := append([]string{"-q", tc.url + "/f", "-o", filepath.Join(t.TempDir(), "f")}, tc.args...)
		code, _, stderr := runGetEnv(t, "", map[string]string{"HOME": home}, args...)
		if code != 0 {
			t.Fatalf("get %v: exit %d: %s", args, code, stderr)
		}
		for _, r := range rc.all()[before:] {
			if got := r.header.Get("Authorization"); got != tc.want {
				t.Errorf("get %v: %s %s with Authorization %q, want %q", args, r.method, r.path, got, tc.want)
			}
		}
	}
	// --netrc without a ~/.netrc: none is used, as curl and wget do.
	if code, _, stderr := runGetEnv(t, "", map[string]string{"HOME": t.TempDir()}, "-q", base+"/f", "-o", filepath.Join(t.TempDir(), "f"), "--netrc"); code != 0 {
		t.Errorf("--netrc without ~/.netrc: exit %d: %s", code, stderr)
	}
}

// TestGetProxy: --proxy carries the requests, given as a URL or as
// HOST:PORT; the origin's host need not even resolve.
func TestGetProxy(t *testing.T) {
	data := []byte("through the proxy")
	proxy, rc := startRecorded(t, data)
	for _, p := range []string{proxy, strings.TrimPrefix(proxy, "http://")} {
		out := filepath.Join(t.TempDir(), "f")
		code, _, stderr := runCmd(t, "get", "-q", "http://origin.invalid/dir/f", "-o", out, "--proxy", p)
		if code != 0 {
			t.Fatalf("--proxy %s: exit %d: %s", p, code, stderr)
		}
		sameFile(t, out, data)
	}
	reqs := rc.all()
	if len(reqs) == 0 {
		t.Fatal("the proxy got no request")
	}
	for _, r := range reqs {
		if r.host != "origin.invalid" || r.path != "/dir/f" {
			t.Errorf("the proxy was asked for %s%s", r.host, r.path)
		}
	}
}

// TestGetTLS: a server whose authority is unknown is refused; --cacert
// with its certificate, or -k, lets the download through.
func TestGetTLS(t *testing.T) {
	data := randomBytes(100<<10, 23)
	srv := httptest.NewUnstartedServer(fileHandler(data))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	get := func(args ...string) (int, string) {
		out := filepath.Join(t.TempDir(), "f")
		code, _, stderr := runCmd(t, append([]string{"get", "-q", "--retries", "0", srv.URL + "/f", "-o", out}, args...)...)
		if code == 0 {
			sameFile(t, out, data)
		}
		return code, stderr
	}
	if code, stderr := get(); code != exitNetwork || !strings.Contains(stderr, "certificate") {
		t.Errorf("an unknown authority: exit %d (%s), want %d naming the certificate", code, stderr, exitNetwork)
	}
	if code, stderr := get("--cacert", ca); code != 0 {
		t.Errorf("--cacert: exit %d: %s", code, stderr)
	}
	if code, stderr := get("-k"); code != 0 {
		t.Errorf("-k: exit %d: %s", code, stderr)
	}
}
