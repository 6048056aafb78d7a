package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/fetch"
)

// TestGetBundleThroughTheSwarm: the bundle of a page is a file like any
// other to stampede get: manifest, tracker, swarm path, verified pieces.
func TestGetBundleThroughTheSwarm(t *testing.T) {
	www := t.TempDir()
	writeFile(t, www, "index.html", []byte(`<link rel=stylesheet href=site.css><img src="big.png"><script src="/app.js"></script>`))
	writeFile(t, www, "site.css", []byte("body{}"))
	writeFile(t, www, "big.png", randomBytes(600_000, 11))
	writeFile(t, www, "app.js", []byte("void 0"))
	base := startServe(t, www)

	res, err := http.Get(base + contract.BundleIndexPrefix + "/index.html")
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Bundle  string `json:"bundle"`
		Members []struct {
			Path string `json:"path"`
		} `json:"members"`
	}
	err = json.NewDecoder(res.Body).Decode(&idx)
	res.Body.Close()
	if err != nil || len(idx.Members) != 4 {
		t.Fatalf("bundle index: %v, %+v", err, idx)
	}
	var want []byte
	for _, m := range idx.Members {
		b, err := os.ReadFile(filepath.Join(www, m.Path))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}

	out := filepath.Join(t.TempDir(), "bundle")
	code, stdout, stderr := runCmd(t, "get", base+idx.Bundle, "-o", out, "--json")
	if code != 0 {
		t.Fatalf("get exited %d: %s", code, stderr)
	}
	sameFile(t, out, want)
	var r fetch.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Verified != "merkle" || r.Swarm == nil || r.Pieces < 2 {
		t.Errorf("summary %+v: want a merkle-verified download through the swarm path", r)
	}
	// And curl gets the same bytes straight.
	res, err = http.Get(base + idx.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Equal(body, want) {
		t.Errorf("GET of the bundle: %d bytes, want %d", len(body), len(want))
	}
}
