// Package pieceset is a set of piece indexes in [0, n): what a peer has, what
// is being fetched, what is missing. It is a bitset with a count, plus the
// interval view the wire protocol uses to send sparse or nearly full sets
// compactly (Flashback's interval handshakes).
//
// The package uses the standard library only.
package pieceset

import (
	"fmt"
	"math/bits"
)

// Set is a set of pieces in [0, Len()). The zero value is an empty set of
// length 0; use New. A Set is not safe for concurrent use.
type Set struct {
	n     int
	count int
	words []uint64
}

// New returns an empty set over n pieces.
func New(n int) *Set {
	return &Set{n: n, words: make([]uint64, (n+63)/64)}
}

// Full returns a set holding all n pieces.
func Full(n int) *Set {
	s := New(n)
	for i := range s.words {
		s.words[i] = ^uint64(0)
	}
	if r := n % 64; r != 0 {
		s.words[len(s.words)-1] = (1 << r) - 1
	}
	s.count = n
	return s
}

// Len is the number of pieces the set ranges over.
func (s *Set) Len() int { return s.n }

// Count is the number of pieces in the set.
func (s *Set) Count() int { return s.count }

// Complete reports whether every piece is in the set.
func (s *Set) Complete() bool { return s.count == s.n }

// Has reports whether piece i is in the set; out-of-range indexes are not.
func (s *Set) Has(i int) bool {
	return i >= 0 && i < s.n && s.words[i/64]&(1<<(i%64)) != 0
}

// Add puts piece i in the set and reports whether it was new. It panics if i
// is out of range: callers validate indexes from the network first.
func (s *Set) Add(i int) bool {
	s.check(i)
	w, b := &s.words[i/64], uint64(1)<<(i%64)
	if *w&b != 0 {
		return false
	}
	*w |= b
	s.count++
	return true
}

// Remove takes piece i out of the set and reports whether it was there.
func (s *Set) Remove(i int) bool {
	s.check(i)
	w, b := &s.words[i/64], uint64(1)<<(i%64)
	if *w&b == 0 {
		return false
	}
	*w &^= b
	s.count--
	return true
}

func (s *Set) check(i int) {
	if i < 0 || i >= s.n {
		panic(fmt.Sprintf("pieceset: index %d out of range [0,%d)", i, s.n))
	}
}

// Clone returns an independent copy.
func (s *Set) Clone() *Set {
	return &Set{n: s.n, count: s.count, words: append([]uint64(nil), s.words...)}
}

// Next returns the smallest piece >= i in the set, or -1.
func (s *Set) Next(i int) int {
	if i < 0 {
		i = 0
	}
	for i < s.n {
		w := s.words[i/64] >> (i % 64)
		if w != 0 {
			j := i + bits.TrailingZeros64(w)
			if j < s.n {
				return j
			}
			return -1
		}
		i = (i/64 + 1) * 64
	}
	return -1
}

// NextMissing returns the smallest piece >= i not in the set, or -1.
func (s *Set) NextMissing(i int) int {
	if i < 0 {
		i = 0
	}
	for i < s.n {
		w := ^s.words[i/64] >> (i % 64)
		if w != 0 {
			j := i + bits.TrailingZeros64(w)
			if j < s.n {
				return j
			}
			return -1
		}
		i = (i/64 + 1) * 64
	}
	return -1
}

// All yields the pieces in the set in increasing order.
func (s *Set) All() func(func(int) bool) {
	return func(yield func(int) bool) {
		for i := s.Next(0); i >= 0; i = s.Next(i + 1) {
			if !yield(i) {
				return
			}
		}
	}
}

// Interval is the pieces [Start, Start+Len).
type Interval struct{ Start, Len int }

// Intervals returns the set as maximal runs, in increasing order.
func (s *Set) Intervals() []Interval {
	var out []Interval
	for i := s.Next(0); i >= 0; {
		end := s.NextMissing(i)
		if end < 0 {
			end = s.n
		}
		out = append(out, Interval{i, end - i})
		i = s.Next(end)
	}
	return out
}

// Bytes returns the set as a bitfield, most significant bit first (piece 0
// is the high bit of byte 0, as in BitTorrent), ceil(n/8) bytes.
func (s *Set) Bytes() []byte {
	out := make([]byte, (s.n+7)/8)
	for i := range s.All() {
		out[i/8] |= 0x80 >> (i % 8)
	}
	return out
}

// FromBytes decodes a bitfield of n pieces. Spare bits past n must be zero.
func FromBytes(b []byte, n int) (*Set, error) {
	if len(b) != (n+7)/8 {
		return nil, fmt.Errorf("pieceset: bitfield of %d bytes for %d pieces", len(b), n)
	}
	s := New(n)
	for i, c := range b {
		for c != 0 {
			k := bits.LeadingZeros8(c)
			p := i*8 + k
			if p >= n {
				return nil, fmt.Errorf("pieceset: bit %d set past the last piece %d", p, n-1)
			}
			s.Add(p)
			c &^= 0x80 >> k
		}
	}
	return s, nil
}

// FromIntervals builds a set of n pieces from runs that must be in
// increasing order, non-empty, non-overlapping and within [0, n).
func FromIntervals(iv []Interval, n int) (*Set, error) {
	s := New(n)
	prevEnd := -1
	for _, r := range iv {
		if r.Len <= 0 || r.Start <= prevEnd || r.Start < 0 || r.Start > n-r.Len {
			return nil, fmt.Errorf("pieceset: interval [%d,+%d) is empty, out of order or outside [0,%d)", r.Start, r.Len, n)
		}
		for i := r.Start; i < r.Start+r.Len; i++ {
			s.Add(i)
		}
		prevEnd = r.Start + r.Len
	}
	return s, nil
}
