package cdn

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestStoreLRU(t *testing.T) {
	dir := t.TempDir()
	s, err := openStore(dir, 3*(1000+32), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(i int) []byte { return randomBytes(1000, uint64(i)) }
	for i := range 3 {
		if err := s.put(string(rune('a'+i)), chunk(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := s.get("a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	s.put("d", chunk(3)) // evicts b, the least recently used
	if _, ok := s.get("b"); ok {
		t.Fatal("b not evicted")
	}
	for i, k := range []string{"a", "c", "d"} {
		got, ok := s.get(k)
		if !ok || !bytes.Equal(got, chunk([]int{0, 2, 3}[i])) {
			t.Fatalf("%s: lost or wrong", k)
		}
	}
	if st := s.stats(); st.Files != 3 || st.Bytes > st.Max || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A restart keeps the chunks and removes interrupted writes.
	os.WriteFile(filepath.Join(dir, "x-1"+tmpSuffix), []byte("torn"), 0o600)
	s2, err := openStore(dir, 3*(1000+32), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s2.get("c"); !ok || !bytes.Equal(got, chunk(2)) {
		t.Fatal("c lost across a restart")
	}
	if _, err := os.Stat(filepath.Join(dir, "x-1"+tmpSuffix)); !os.IsNotExist(err) {
		t.Fatal("an interrupted write survived the restart")
	}

	// A damaged file is a miss, and is dropped.
	p := s2.path(storeName("d"))
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 1
	os.WriteFile(p, b, 0o600)
	if _, ok := s2.get("d"); ok {
		t.Fatal("a damaged chunk was served")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("the damaged chunk was kept")
	}
	// A truncated one likewise.
	p = s2.path(storeName("a"))
	os.Truncate(p, 10)
	if _, ok := s2.get("a"); ok {
		t.Fatal("a truncated chunk was served")
	}
}

// TestStoreWriteFails: a write that cannot be made (here the directory is
// gone, as a full disk would fail it) is an error, counted, and leaves
// nothing behind.
func TestStoreWriteFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	s, err := openStore(dir, 1<<20, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := s.put("k", []byte("data")); err == nil {
		t.Fatal("a failed write reported success")
	}
	if _, ok := s.get("k"); ok {
		t.Fatal("a failed write is served")
	}
	if st := s.stats(); st.WriteErrors != 1 || st.Files != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.put("big", make([]byte, 2<<20)); err == nil {
		t.Fatal("a chunk larger than the cache was taken")
	}
}
