package gateway

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Real curl through the gateway, in both modes. scripts/test.sh installs
// curl; without it these tests skip.

func needCurl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (scripts/test.sh installs it as root): skipping the curl tests")
	}
	return p
}

// curl runs curl with args and returns its stdout; it fails the test
// unless curl exits 0.
func curl(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-sS", "--fail", "--noproxy", ""}, args...)...)
	cmd.Env = append(os.Environ(), "http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY=", "ALL_PROXY=", "NO_PROXY=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func TestCurl(t *testing.T) {
	bin := needCurl(t)
	data := randomBytes(2<<20+77, 9)
	o := startOrigin(t, map[string][]byte{"dir/f.bin": data}, originOpts{})
	g := startGateway(t, Config{})
	u := o.base + "/dir/f.bin"

	got := curl(t, bin, "-x", g.base, u)
	mustEqual(t, "curl -x", got, data)
	got = curl(t, bin, g.prefixed(u))
	mustEqual(t, "curl by prefix", got, data)
	if o.count("RANGE /dir/f.bin") == 0 {
		t.Error("the origin served no pieces: curl did not go through the swarm path")
	}

	got = curl(t, bin, "-x", g.base, "-r", "1000-300000", u)
	mustEqual(t, "curl -x -r", got, data[1000:300001])
	got = curl(t, bin, "-r", "-5000", g.prefixed(u))
	mustEqual(t, "curl -r -5000 by prefix", got, data[len(data)-5000:])

	head := string(curl(t, bin, "-x", g.base, "-I", u))
	if !strings.Contains(head, "Content-Length: 2097229") || !strings.Contains(head, "Stampede-Gateway: swarm") {
		t.Errorf("curl -I:\n%s", head)
	}

	// Output to a file, as a user would.
	out := filepath.Join(t.TempDir(), "f.bin")
	curl(t, bin, "-x", g.base, "-o", out, u)
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "curl -o", written, data)
}

func TestCurlConnect(t *testing.T) {
	bin := needCurl(t)
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls ok")
	}))
	t.Cleanup(ts.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, Config{ConnectPorts: []uint16{portOf(t, ts.Listener.Addr())}})
	got := curl(t, bin, "-x", g.base, "--cacert", ca, ts.URL+"/")
	if string(got) != "tls ok" {
		t.Fatalf("curl through CONNECT: %q", got)
	}
}
