package cluster

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/sign"
)

func signed(t *testing.T, priv ed25519.PrivateKey, now time.Time) Request {
	t.Helper()
	r := Request{Root: strings.Repeat("ab", 32), Size: 1000, URL: "http://pusher:7880/app.tar", Dest: "/srv/app.tar",
		Then: "systemctl reload app", Hosts: []string{"web-1", "web-2"}}
	r.Sign(priv, now, time.Hour)
	return r
}

func TestRequestSignature(t *testing.T) {
	priv := sign.GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Unix(1_700_000_000, 0)
	r := signed(t, priv, now)
	if err := r.Verify(pub, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !r.For("web-2") || r.For("web-3") {
		t.Error("For")
	}
	// Every field is covered.
	for name, change := range map[string]func(*Request){
		"root":     func(r *Request) { r.Root = strings.Repeat("cd", 32) },
		"size":     func(r *Request) { r.Size++ },
		"url":      func(r *Request) { r.URL = "http://evil/app.tar" },
		"dest":     func(r *Request) { r.Dest = "/etc/passwd" },
		"then":     func(r *Request) { r.Then = "rm -rf /" },
		"hosts":    func(r *Request) { r.Hosts = append(r.Hosts, "web-3") },
		"host":     func(r *Request) { r.Hosts = []string{"web-1", "web-3"} },
		"issued":   func(r *Request) { r.Issued = r.Issued.Add(time.Second) },
		"expires":  func(r *Request) { r.Expires = r.Expires.Add(time.Hour) },
		"nonce":    func(r *Request) { r.Nonce = strings.Repeat("0", 32) },
		"unsigned": func(r *Request) { r.Sig = "" },
		"garbage":  func(r *Request) { r.Sig = "!!" },
		// Moving a byte from one field to the next is a different message.
		"boundary": func(r *Request) { r.Dest, r.Then = r.Dest+"s", r.Then[1:] },
	} {
		c := r
		c.Hosts = append([]string(nil), r.Hosts...)
		change(&c)
		if err := c.Verify(pub, now); !errors.Is(err, ErrUnsigned) {
			t.Errorf("%s changed: %v, want ErrUnsigned", name, err)
		}
	}
	other := sign.GenerateKey().Public().(ed25519.PublicKey)
	if err := r.Verify(other, now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("another key: %v", err)
	}
	if err := r.Verify(pub, now.Add(time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v", err)
	}
	long := Request{Root: r.Root, Size: 1, URL: "u", Dest: "d", Hosts: []string{"a"}}
	long.Sign(priv, now, 48*time.Hour)
	if err := long.Verify(pub, now); !errors.Is(err, ErrRequest) {
		t.Errorf("a 48h request: %v", err)
	}
	// Issued long ago, expiring soon: within MaxLifetime of now, but not
	// of its issue.
	old := Request{Root: r.Root, Size: 1, URL: "u", Dest: "d", Hosts: []string{"a"}}
	old.Sign(priv, now.Add(-30*time.Hour), 31*time.Hour)
	if err := old.Verify(pub, now); !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), "lives more than") {
		t.Errorf("a request living 31h: %v", err)
	}
	empty := Request{Root: r.Root}
	empty.Sign(priv, now, time.Hour)
	if err := empty.Verify(pub, now); !errors.Is(err, ErrRequest) {
		t.Errorf("no dest nor hosts: %v", err)
	}
}

func TestNonces(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := NewNonces(2)
	if err := n.Use("a", now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if err := n.Use("a", now.Add(time.Minute), now.Add(30*time.Second)); !errors.Is(err, ErrReplayed) {
		t.Errorf("replay: %v", err)
	}
	if err := n.Use("b", now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if err := n.Use("c", now.Add(time.Hour), now); !errors.Is(err, ErrRequest) {
		t.Errorf("past the bound: %v", err)
	}
	// a has expired: forgotten, and room for c.
	if err := n.Use("c", now.Add(time.Hour), now.Add(2*time.Minute)); err != nil {
		t.Errorf("after a expired: %v", err)
	}
	m := NewNonces(10)
	m.Restore(n.Snapshot())
	if err := m.Use("b", now.Add(time.Hour), now.Add(3*time.Minute)); !errors.Is(err, ErrReplayed) {
		t.Errorf("restored: %v", err)
	}
}

func TestLastIssued(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewLastIssued()
	if err := l.Check("/srv/a", now); err != nil {
		t.Fatal(err)
	}
	l.Accept("/srv/a", now, now)
	for _, c := range []struct {
		dest   string
		issued time.Time
		ok     bool
	}{
		{"/srv/a", now, false},                     // the same time again
		{"/srv/a", now.Add(-time.Second), false},   // older: a rollback
		{"/srv/a", now.Add(time.Nanosecond), true}, // newer
		{"/srv/b", now.Add(-time.Hour), true},      // another destination
	} {
		err := l.Check(c.dest, c.issued)
		if c.ok != (err == nil) || (err != nil && (!errors.Is(err, ErrReplayed) || !strings.Contains(err.Error(), "accepted already"))) {
			t.Errorf("%s issued %v: %v", c.dest, c.issued.Sub(now), err)
		}
	}
	// An older one accepted (a record read back) does not lower it.
	l.Accept("/srv/a", now.Add(-time.Hour), now)
	if err := l.Check("/srv/a", now.Add(-time.Minute)); err == nil {
		t.Error("lowered by an older request")
	}
	// Kept across a restart.
	data, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	back := NewLastIssued()
	if err := json.Unmarshal(data, back); err != nil {
		t.Fatal(err)
	}
	if err := back.Check("/srv/a", now); err == nil || back.Len() != 1 {
		t.Errorf("after a round trip through %s: %v, %d destinations", data, err, back.Len())
	}
	// Forgotten once no request issued before can be unexpired.
	l.Accept("/srv/b", now.Add(time.Hour), now.Add(MaxLifetime-time.Nanosecond))
	if l.Len() != 2 {
		t.Errorf("%d destinations within MaxLifetime, want 2", l.Len())
	}
	l.Accept("/srv/b", now.Add(time.Hour), now.Add(MaxLifetime))
	if l.Len() != 1 || l.Check("/srv/a", now.Add(-time.Hour)) != nil {
		t.Errorf("/srv/a not forgotten MaxLifetime after its issue: %d destinations", l.Len())
	}
}

func TestTakeoverSignature(t *testing.T) {
	priv := sign.GenerateKey()
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Unix(1_700_000_000, 0)
	push := signed(t, priv, now)
	to := Takeover{Push: push.ID(), Host: "web-2"}
	to.Sign(priv, now, time.Minute)
	if err := to.Verify(pub, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Takeover){
		"push":     func(to *Takeover) { to.Push = strings.Repeat("0", 32) },
		"host":     func(to *Takeover) { to.Host = "web-1" },
		"expires":  func(to *Takeover) { to.Expires = to.Expires.Add(time.Hour) },
		"nonce":    func(to *Takeover) { to.Nonce = strings.Repeat("1", 32) },
		"unsigned": func(to *Takeover) { to.Sig = "" },
		"garbage":  func(to *Takeover) { to.Sig = "!!" },
		"boundary": func(to *Takeover) { to.Push, to.Host = to.Push[:31], to.Push[31:]+to.Host },
	} {
		c := to
		change(&c)
		if err := c.Verify(pub, now); !errors.Is(err, ErrUnsigned) {
			t.Errorf("%s changed: %v, want ErrUnsigned", name, err)
		}
	}
	if err := to.Verify(sign.GenerateKey().Public().(ed25519.PublicKey), now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("another key: %v", err)
	}
	if err := to.Verify(pub, now.Add(time.Minute)); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v", err)
	}
	// A push's signature is not a takeover's, nor the other way round.
	forged := Takeover{Push: push.ID(), Host: "web-2", Expires: push.Expires, Nonce: push.Nonce, Sig: push.Sig}
	if err := forged.Verify(pub, now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("a push's signature as a takeover's: %v", err)
	}
	long := Takeover{Push: push.ID(), Host: "web-2"}
	long.Sign(priv, now, time.Hour)
	if err := long.Verify(pub, now); !errors.Is(err, ErrRequest) {
		t.Errorf("a takeover living an hour: %v", err)
	}
	bad := Takeover{Push: "not hex, but 32 characters long!", Host: "web-2"}
	bad.Sign(priv, now, time.Minute)
	if err := bad.Verify(pub, now); !errors.Is(err, ErrRequest) {
		t.Errorf("a push id that is not hex: %v", err)
	}
	noHost := Takeover{Push: push.ID()}
	noHost.Sign(priv, now, time.Minute)
	if err := noHost.Verify(pub, now); !errors.Is(err, ErrRequest) {
		t.Errorf("no host: %v", err)
	}
}
