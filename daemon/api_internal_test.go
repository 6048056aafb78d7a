package daemon

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestAdmitted: root, the daemon's user and the socket's group may call.
func TestAdmitted(t *testing.T) {
	const uid, gid = 1000, 50
	for _, c := range []struct {
		who  cred
		want bool
	}{
		{cred{0, 0}, true},
		{cred{uid, 7}, true},
		{cred{2000, gid}, true},
		{cred{3000, 7}, true}, // a member by supplementary group
		{cred{2000, 7}, false},
		{cred{-1, -1}, false},
	} {
		groups := func(u int) []int {
			if u == 3000 {
				return []int{3, gid}
			}
			return []int{3}
		}
		if got := admitted(c.who, uid, gid, groups); got != c.want {
			t.Errorf("admitted(%+v) = %v, want %v", c.who, got, c.want)
		}
	}
}

// TestPeerCred: the credentials of a caller on a unix socket are ours.
func TestPeerCred(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	who, err := peerCred(s.(*net.UnixConn))
	if err != nil || who.uid != os.Getuid() || who.gid != os.Getgid() {
		t.Errorf("peerCred = %+v, %v; want uid %d gid %d", who, err, os.Getuid(), os.Getgid())
	}
}
