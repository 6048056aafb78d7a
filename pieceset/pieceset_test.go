package pieceset_test

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"reflect"
	"slices"
	"testing"

	"github.com/stampede-dev/stampede/pieceset"
)

// model is the obvious implementation every test compares against.
type model []bool

func (m model) count() int {
	c := 0
	for _, b := range m {
		if b {
			c++
		}
	}
	return c
}

// nexts returns, for every i in [0, n], the smallest j >= i with m[j] ==
// want, or -1: one backward pass, so checks stay linear in n.
func (m model) nexts(want bool) []int {
	out := make([]int, len(m)+1)
	out[len(m)] = -1
	for j := len(m) - 1; j >= 0; j-- {
		out[j] = out[j+1]
		if m[j] == want {
			out[j] = j
		}
	}
	return out
}

func (m model) intervals() []pieceset.Interval {
	var out []pieceset.Interval
	for i := 0; i < len(m); i++ {
		if !m[i] {
			continue
		}
		j := i
		for j < len(m) && m[j] {
			j++
		}
		out = append(out, pieceset.Interval{Start: i, Len: j - i})
		i = j
	}
	return out
}

// checkAgainst compares every read-only view of s with m.
func checkAgainst(t *testing.T, s *pieceset.Set, m model) {
	t.Helper()
	n := len(m)
	if s.Len() != n || s.Count() != m.count() || s.Complete() != (m.count() == n) {
		t.Fatalf("Len %d Count %d Complete %v; want %d %d %v", s.Len(), s.Count(), s.Complete(), n, m.count(), m.count() == n)
	}
	next, missing := m.nexts(true), m.nexts(false)
	for i := -2; i < n+2; i++ {
		if want := i >= 0 && i < n && m[i]; s.Has(i) != want {
			t.Fatalf("Has(%d) = %v", i, !want)
		}
		j := min(max(i, 0), n)
		if got, want := s.Next(i), next[j]; got != want {
			t.Fatalf("Next(%d) = %d, want %d", i, got, want)
		}
		if got, want := s.NextMissing(i), missing[j]; got != want {
			t.Fatalf("NextMissing(%d) = %d, want %d", i, got, want)
		}
	}
	var all []int
	for i := range s.All() {
		all = append(all, i)
	}
	var want []int
	for i, b := range m {
		if b {
			want = append(want, i)
		}
	}
	if !slices.Equal(all, want) {
		t.Fatalf("All = %v, want %v", all, want)
	}
	if got, want := s.Intervals(), m.intervals(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Intervals = %v, want %v", got, want)
	}
	bf := make([]byte, (n+7)/8)
	for i, b := range m {
		if b {
			bf[i/8] |= 0x80 >> (i % 8)
		}
	}
	if got := s.Bytes(); !bytes.Equal(got, bf) {
		t.Fatalf("Bytes = % x, want % x", got, bf)
	}
}

var sizes = []int{0, 1, 7, 8, 9, 63, 64, 65, 127, 128, 130, 200}

func TestNewAndFull(t *testing.T) {
	for _, n := range sizes {
		checkAgainst(t, pieceset.New(n), make(model, n))
		full := make(model, n)
		for i := range full {
			full[i] = true
		}
		checkAgainst(t, pieceset.Full(n), full)
	}
}

func TestOpsAgainstModel(t *testing.T) {
	for _, n := range sizes[1:] {
		s, m := pieceset.New(n), make(model, n)
		for k := range 4 * n {
			i := (k*37 + k*k) % n
			if k%3 == 2 {
				if got := s.Remove(i); got != m[i] {
					t.Fatalf("Remove(%d) = %v", i, got)
				}
				m[i] = false
			} else {
				if got := s.Add(i); got == m[i] {
					t.Fatalf("Add(%d) = %v", i, got)
				}
				m[i] = true
			}
			if k%17 == 0 {
				checkAgainst(t, s, m)
			}
		}
		checkAgainst(t, s, m)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := pieceset.New(100)
	s.Add(3)
	c := s.Clone()
	c.Add(50)
	s.Remove(3)
	if s.Has(50) || !c.Has(3) || s.Count() != 0 || c.Count() != 2 {
		t.Fatal("Clone shares state with the original")
	}
}

func TestAllStopsEarly(t *testing.T) {
	s := pieceset.Full(10)
	var got []int
	for i := range s.All() {
		got = append(got, i)
		if i == 2 {
			break
		}
	}
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
}

func TestOutOfRangePanics(t *testing.T) {
	s := pieceset.New(10)
	for _, f := range []func(){
		func() { s.Add(10) },
		func() { s.Add(-1) },
		func() { s.Remove(10) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic on an out-of-range index")
				}
			}()
			f()
		}()
	}
}

func TestBytesLayout(t *testing.T) {
	s := pieceset.New(10)
	s.Add(0)
	s.Add(9)
	if got := s.Bytes(); !bytes.Equal(got, []byte{0x80, 0x40}) {
		t.Fatalf("Bytes = % x, want 80 40 (piece 0 is the high bit)", got)
	}
}

func TestFromBytes(t *testing.T) {
	for _, c := range []struct {
		b  []byte
		n  int
		ok bool
	}{
		{nil, 0, true},
		{[]byte{}, 0, true},
		{[]byte{0}, 0, false},
		{[]byte{0x80, 0x40}, 10, true},
		{[]byte{0x80, 0x60}, 10, false}, // bit 10 set
		{[]byte{0x80}, 10, false},
		{[]byte{0x80, 0, 0}, 10, false},
		{[]byte{0xff}, 8, true},
		{[]byte{0xff, 0x80}, 8, false},
	} {
		s, err := pieceset.FromBytes(c.b, c.n)
		if (err == nil) != c.ok {
			t.Errorf("FromBytes(% x, %d) = %v", c.b, c.n, err)
			continue
		}
		if err == nil && !bytes.Equal(s.Bytes(), c.b) && len(c.b) > 0 {
			t.Errorf("FromBytes(% x, %d).Bytes() = % x", c.b, c.n, s.Bytes())
		}
	}
}

func TestFromIntervals(t *testing.T) {
	type iv = pieceset.Interval
	for _, c := range []struct {
		iv []iv
		n  int
		ok bool
	}{
		{nil, 0, true},
		{nil, 10, true},
		{[]iv{{0, 10}}, 10, true},
		{[]iv{{0, 1}, {2, 3}, {9, 1}}, 10, true},
		{[]iv{{0, 11}}, 10, false},            // past n
		{[]iv{{9, 2}}, 10, false},             // past n
		{[]iv{{10, 1}}, 10, false},            // past n
		{[]iv{{0, 0}}, 10, false},             // empty
		{[]iv{{3, -1}}, 10, false},            // negative
		{[]iv{{-1, 2}}, 10, false},            // negative start
		{[]iv{{0, 2}, {2, 2}}, 10, false},     // touching: not maximal
		{[]iv{{0, 3}, {2, 2}}, 10, false},     // overlapping
		{[]iv{{5, 1}, {2, 1}}, 10, false},     // out of order
		{[]iv{{1 << 62, 1 << 62}}, 10, false}, // overflow bait
	} {
		s, err := pieceset.FromIntervals(c.iv, c.n)
		if (err == nil) != c.ok {
			t.Errorf("FromIntervals(%v, %d) = %v", c.iv, c.n, err)
			continue
		}
		if err == nil && !reflect.DeepEqual(s.Intervals(), c.iv) {
			t.Errorf("FromIntervals(%v, %d).Intervals() = %v", c.iv, c.n, s.Intervals())
		}
	}
}

func FuzzFromBytes(f *testing.F) {
	f.Add(uint16(10), []byte{0x80, 0x40})
	f.Add(uint16(10), []byte{0x80, 0x60})
	f.Add(uint16(0), []byte{})
	f.Add(uint16(64), bytes.Repeat([]byte{0xaa}, 8))
	f.Add(uint16(65), append(bytes.Repeat([]byte{0xff}, 8), 0x80))
	f.Fuzz(func(t *testing.T, n16 uint16, b []byte) {
		n := int(n16)
		s, err := pieceset.FromBytes(b, n)
		valid := len(b) == (n+7)/8 && (n%8 == 0 || len(b) == 0 || b[len(b)-1]&(0xff>>(n%8)) == 0)
		if (err == nil) != valid {
			t.Fatalf("FromBytes(% x, %d) = %v", b, n, err)
		}
		if err != nil {
			return
		}
		m := make(model, n)
		for i := range m {
			m[i] = b[i/8]&(0x80>>(i%8)) != 0
		}
		checkAgainst(t, s, m)
		back, err := pieceset.FromIntervals(s.Intervals(), n)
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("FromIntervals(Intervals()) = %v", err)
		}
		pop := 0
		for _, c := range b {
			pop += bits.OnesCount8(c)
		}
		if s.Count() != pop {
			t.Fatalf("Count %d, %d bits set", s.Count(), pop)
		}
	})
}

func FuzzFromIntervals(f *testing.F) {
	// n, then (start, len) pairs of int16 each.
	f.Add(uint16(10), []byte{0, 0, 0, 1, 0, 2, 0, 3})
	f.Add(uint16(10), []byte{0, 0, 0, 2, 0, 2, 0, 2})
	f.Add(uint16(300), []byte{0, 5, 0, 10, 1, 0, 0, 44})
	f.Add(uint16(0), []byte{})
	f.Add(uint16(5), []byte{0xff, 0xff, 0, 2})
	f.Fuzz(func(t *testing.T, n16 uint16, raw []byte) {
		n := int(n16)
		var iv []pieceset.Interval
		for len(raw) >= 4 {
			iv = append(iv, pieceset.Interval{
				Start: int(int16(binary.BigEndian.Uint16(raw))),
				Len:   int(int16(binary.BigEndian.Uint16(raw[2:]))),
			})
			raw = raw[4:]
		}
		valid, prevEnd := true, 0
		for k, r := range iv {
			if r.Len < 1 || r.Start < 0 || r.Start+r.Len > n || (k > 0 && r.Start <= prevEnd) {
				valid = false
				break
			}
			prevEnd = r.Start + r.Len
		}
		s, err := pieceset.FromIntervals(iv, n)
		if (err == nil) != valid {
			t.Fatalf("FromIntervals(%v, %d) = %v", iv, n, err)
		}
		if err != nil {
			return
		}
		m := make(model, n)
		for _, r := range iv {
			for i := r.Start; i < r.Start+r.Len; i++ {
				m[i] = true
			}
		}
		checkAgainst(t, s, m)
		if len(iv) == 0 {
			iv = nil
		}
		if !reflect.DeepEqual(s.Intervals(), iv) {
			t.Fatalf("Intervals() = %v, want the input %v (runs are maximal)", s.Intervals(), iv)
		}
		back, err := pieceset.FromBytes(s.Bytes(), n)
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("FromBytes(Bytes()) = %v", err)
		}
	})
}

func FuzzOps(f *testing.F) {
	f.Add(uint8(70), []byte{0, 1, 2, 63, 64, 65, 0x80, 0x81})
	f.Add(uint8(1), []byte{0, 0x80, 0})
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, n8 uint8, ops []byte) {
		n := int(n8)
		s, m := pieceset.New(n), make(model, n)
		if n == 0 {
			checkAgainst(t, s, m)
			return
		}
		for _, op := range ops {
			i := int(op&0x7f) % n
			if op&0x80 != 0 {
				if s.Remove(i) != m[i] {
					t.Fatalf("Remove(%d) reported wrongly", i)
				}
				m[i] = false
			} else {
				if s.Add(i) == m[i] {
					t.Fatalf("Add(%d) reported wrongly", i)
				}
				m[i] = true
			}
		}
		checkAgainst(t, s, m)
		checkAgainst(t, s.Clone(), m)
	})
}
