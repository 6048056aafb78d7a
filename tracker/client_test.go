package tracker

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/manifest"
)

func TestAnnounceRoundTrip(t *testing.T) {
	h := newHarness(t, Config{Interval: 20 * time.Second})
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.URL.Query().Get("key"))
		h.tr.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := srv.Client()
	announceURL := srv.URL + "/announce?key=s3cret"

	a := AnnounceRequest{Root: testRoot, Size: testSize, ID: NewPeerID(), Port: 7001, Left: 0, Event: EventStarted}
	res, err := Announce(t.Context(), client, announceURL, a)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interval != 20*time.Second || res.SwarmSize != 1 || res.Complete != 1 || res.Peers == nil || len(res.Peers) != 0 {
		t.Errorf("first answer %+v", res)
	}
	b := AnnounceRequest{Root: testRoot, Size: testSize, ID: NewPeerID(), Port: 7002, Left: 5, NumWant: 3}
	if res, err = Announce(t.Context(), client, announceURL, b); err != nil {
		t.Fatal(err)
	}
	want := []Peer{{Addr: netip.MustParseAddrPort("127.0.0.1:7001"), ID: a.ID, Complete: true}}
	if res.SwarmSize != 2 || res.Complete != 1 || !reflect.DeepEqual(res.Peers, want) {
		t.Errorf("second answer %+v, want peers %+v", res, want)
	}
	if strings.Join(keys, ",") != "s3cret,s3cret" {
		t.Errorf("the announce URL's own parameter came through as %q", keys)
	}

	// A refusal is a StatusError with the tracker's message.
	bad := b
	bad.Left = testSize + 1
	_, err = Announce(t.Context(), client, announceURL, bad)
	if se, ok := errors.AsType[*StatusError](err); !ok || se.Code != http.StatusBadRequest || !strings.Contains(se.Message, "left") {
		t.Errorf("bad announce: %v", err)
	}
}

func TestAnnounceErrors(t *testing.T) {
	var answer func(w http.ResponseWriter)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w) }))
	defer srv.Close()
	req := AnnounceRequest{Root: testRoot, Size: 1, ID: NewPeerID(), Port: 1, Left: 1}
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		check  func(error) bool
	}{
		{"plain 502", func(w http.ResponseWriter) { http.Error(w, "bad gateway", http.StatusBadGateway) },
			func(err error) bool {
				se, ok := errors.AsType[*StatusError](err)
				return ok && se.Code == http.StatusBadGateway && se.Message == ""
			}},
		{"not JSON", func(w http.ResponseWriter) { w.Write([]byte("<html>")) }, nil},
		{"no interval", func(w http.ResponseWriter) { w.Write([]byte(`{"swarm_size":1,"peers":[]}`)) }, nil},
		{"port 0", func(w http.ResponseWriter) {
			w.Write([]byte(`{"interval":15,"peers":[{"addr":"192.0.2.1:0","id":"` + strings.Repeat("0", 32) + `"}]}`))
		}, nil},
		{"bad id", func(w http.ResponseWriter) {
			w.Write([]byte(`{"interval":15,"peers":[{"addr":"192.0.2.1:1","id":"xyz"}]}`))
		}, nil},
		{"too large", func(w http.ResponseWriter) { w.Write([]byte(strings.Repeat(" ", maxResponseSize+1))) }, nil},
	} {
		answer = tc.answer
		_, err := Announce(t.Context(), srv.Client(), srv.URL, req)
		if err == nil || tc.check != nil && !tc.check(err) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
	if _, err := Announce(t.Context(), nil, "ftp://example.com/announce", req); err == nil {
		t.Error("an ftp announce URL was accepted")
	}
}

func TestPeerIDText(t *testing.T) {
	id := NewPeerID()
	if id == (PeerID{}) || NewPeerID() == id {
		t.Fatal("NewPeerID is not random")
	}
	var back PeerID
	if err := back.UnmarshalText([]byte(id.String())); err != nil || back != id {
		t.Errorf("round trip: %v %v", back, err)
	}
	for _, s := range []string{"", "00", strings.Repeat("g", 32), strings.Repeat("0", 33)} {
		if _, err := ParsePeerID(s); err == nil {
			t.Errorf("ParsePeerID(%q) accepted", s)
		}
	}
}

func FuzzParseAnnounce(f *testing.F) {
	root, id := manifest.Hash{1}.String(), PeerID{2}.String()
	f.Add("root=" + root + "&size=100&id=" + id + "&port=7000&left=5")
	f.Add("root=" + root + "&size=100&id=" + id + "&port=0&left=0&event=completed&numwant=50")
	f.Add("root=" + root + "&size=0&id=" + id + "&port=65535&left=0&event=stopped&numwant=0&x=y")
	f.Add("root=" + root + "&size=+7&id=" + id + "&port=01&left=-0&event=&numwant=999999")
	f.Add("root=%41&size=1;2")
	f.Fuzz(func(t *testing.T, q string) {
		r, err := parseAnnounce(q)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error %v does not wrap errBadRequest", err)
			}
			return
		}
		if r.Size < 0 || r.Size > manifest.MaxSize || r.Left < 0 || r.Left > r.Size ||
			r.NumWant < 1 || r.NumWant > MaxNumWant || !r.Event.valid() ||
			r.Event == EventCompleted && r.Left != 0 {
			t.Fatalf("parsed %q into an impossible %+v", q, r)
		}
		v := url.Values{}
		r.addTo(v)
		back, err := parseAnnounce(v.Encode())
		if err != nil || back != r {
			t.Fatalf("%+v encoded as %q came back as %+v, %v", r, v.Encode(), back, err)
		}
	})
}

func FuzzAnnounceResponse(f *testing.F) {
	f.Add([]byte(`{"interval":15,"swarm_size":3,"complete":1,"peers":[{"addr":"192.0.2.1:7000","id":"` +
		strings.Repeat("ab", 16) + `","complete":true},{"addr":"[2001:db8::1]:1","id":"` + strings.Repeat("0", 32) + `"}]}`))
	f.Add([]byte(`{"interval":1,"peers":null}`))
	f.Add([]byte(`{"interval":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r AnnounceResponse
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		if r.Interval <= 0 || r.SwarmSize < 0 || r.Complete < 0 || len(r.Peers) > MaxNumWant {
			t.Fatalf("accepted an impossible %+v", r)
		}
		enc, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var back AnnounceResponse
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("re-encoded %s: %v", enc, err)
		}
		if r.Peers == nil {
			r.Peers = []Peer{}
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip: %+v became %+v", r, back)
		}
	})
}
