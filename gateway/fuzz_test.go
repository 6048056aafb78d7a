package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// targetOf reads uri and referer as a client's request line and Referer
// would arrive, and asks target for the URL they are for; ok is false when
// net/http would not get that far.
func targetOf(uri, referer string) (u *url.URL, prefixed bool, rec *httptest.ResponseRecorder, err error, ok bool) {
	if strings.ContainsAny(uri, " \r\n") || strings.ContainsAny(referer, "\r\n") {
		return nil, false, nil, nil, false
	}
	raw := "GET " + uri + " HTTP/1.1\r\nHost: gw.test\r\n"
	if referer != "" {
		raw += "Referer: " + referer + "\r\n"
	}
	req, rerr := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
	if rerr != nil {
		return nil, false, nil, nil, false
	}
	rec = httptest.NewRecorder()
	u, prefixed, err = (&Gateway{}).target(rec, req)
	return u, prefixed, rec, err, true
}

// FuzzPrefixTarget: the request target of a prefix-form request
// (GET /https://origin/path) and its Referer are anyone's. A URL target
// accepts is http or https, has a host, carries no credentials and no
// fragment, and asking for it by prefix again gives the same URL. A
// redirect for a page's asset stays on the gateway and leads to the
// Referer's origin.
func FuzzPrefixTarget(f *testing.F) {
	for _, s := range [][2]string{
		{"/https://example.org/f.iso", ""},
		{"/http:/example.org/a?b=c", ""},
		{"/HTTPS://h:8443/p?q=1#frag", ""},
		{"/http://user:pw@h/x", ""},
		{"/http://", ""},
		{"/ftp://h/x", ""},
		{"/http://[::1]:80/x", ""},
		{"/https://h/%zz", ""},
		{"/http:%2f%2fh/x", ""},
		{"http://o.test/abs", ""},
		{"/style.css?v=2", "http://gw.test/https://o.test/dir/page.html?x=1"},
		{"/style.css", "http://other.test/https://o.test/page.html"},
		{"//evil.test/x", "http://gw.test/http://o.test/"},
		{"/", ""},
		{"/nothing", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, uri, referer string) {
		u, prefixed, rec, err, ok := targetOf(uri, referer)
		if !ok {
			return
		}
		if err != nil {
			if u != nil {
				t.Fatalf("%q: URL %s with error %v", uri, u, err)
			}
			return
		}
		if u == nil {
			res := rec.Result()
			switch {
			case res.StatusCode == http.StatusTemporaryRedirect:
				loc := res.Header.Get("Location")
				if !strings.HasPrefix(loc, "/http") || strings.HasPrefix(loc, "//") {
					t.Fatalf("%q (Referer %q): redirect to %q, off the gateway", uri, referer, loc)
				}
				ref, _ := url.Parse(referer)
				base := (&Gateway{}).prefixedReferer(&http.Request{Host: ref.Host, Header: http.Header{"Referer": {referer}}})
				to, _, _, err, ok := targetOf(loc, "")
				if !ok || err != nil || to == nil || base == nil || !strings.EqualFold(to.Host, base.Host) {
					t.Fatalf("%q (Referer %q): redirect to %q leads to %v (%v), not to %v", uri, referer, loc, to, err, base)
				}
			case res.StatusCode == http.StatusOK && rec.Body.Len() > 0:
			default:
				t.Fatalf("%q: no URL, no error, and the answer %d %q", uri, res.StatusCode, rec.Body)
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
			t.Fatalf("%q: accepted %#v", uri, u)
		}
		if !prefixed {
			return
		}
		again, prefixedAgain, _, err, ok := targetOf("/"+u.String(), "")
		if !ok || err != nil || again == nil || !prefixedAgain || again.String() != u.String() {
			t.Fatalf("%q: %s, asked again by prefix: %v, %v", uri, u, again, err)
		}
	})
}

// FuzzCacheLoad: the gateway's cache directory outlives the process, and
// whatever is in it at start is read: a file and its manifest beside it,
// under a name that must match the manifest. A file kept is one its
// manifest describes, under its own key and at its size; a file not kept
// is removed with its manifest.
func FuzzCacheLoad(f *testing.F) {
	data := bytes.Repeat([]byte("stampede"), 5000)
	m, err := manifest.FromReaderAt(bytes.NewReader(data), int64(len(data)), "f.bin", 0)
	if err != nil {
		f.Fatal(err)
	}
	enc, err := json.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	name := objectKey(m) + idSep + "1"
	f.Add(name, enc, uint32(len(data)))
	f.Add(name, enc, uint32(len(data)-1))
	f.Add(objectKey(m), enc, uint32(len(data)))
	f.Add(name+"x", enc, uint32(len(data)))
	f.Add(name, bytes.Replace(enc, []byte(`"size":40000`), []byte(`"size":40001`), 1), uint32(len(data)))
	f.Add(name, []byte(`{}`), uint32(0))
	f.Add("x"+idSep+"y", []byte(`{"version":1,"size":0,"piece_size":16384,"piece_layer":""}`), uint32(0))
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, base string, mdata []byte, size uint32) {
		if base == "" || base == "." || base == ".." || len(base) > 200 || strings.ContainsAny(base, "/\x00") ||
			strings.HasSuffix(base, manifestSuffix) || size > 1<<20 {
			return
		}
		dir := t.TempDir()
		file, mfile := filepath.Join(dir, base), filepath.Join(dir, base+manifestSuffix)
		if err := os.WriteFile(file, make([]byte, size), 0o644); err != nil {
			return // a name this file system takes no file under
		}
		if err := os.WriteFile(mfile, mdata, 0o644); err != nil {
			return
		}
		c, err := openCache(&Gateway{log: log}, dir, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if len(c.objects) > 1 {
			t.Fatalf("%d objects from one file", len(c.objects))
		}
		for key, o := range c.objects {
			if key != objectKey(o.m) || o.path != file || o.m.Size != int64(size) || o.m.Validate() != nil || !o.complete {
				t.Fatalf("kept %q as %q: %+v", base, key, o)
			}
			return
		}
		for _, p := range []string{file, mfile} {
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%q not kept, but %s is still there: %v", base, filepath.Base(p), err)
			}
		}
	})
}
