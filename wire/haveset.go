package wire

import (
	"encoding/binary"
	"math/bits"
	"strconv"

	"github.com/stampede-dev/stampede/pieceset"
)

// HAVESET encodings (the payload's first byte). The sender picks the shorter
// one, the bitfield on a tie; a receiver accepts either.
//
// Bitfield (0): ceil(n/8) bytes, piece 0 the most significant bit of the
// first byte; spare bits after piece n-1 are zero.
//
// Intervals (1): the set as maximal runs of consecutive pieces, in increasing
// order: uvarint count, then for each run uvarint gap and uvarint length-1,
// where gap is the run's first piece minus the end (last piece + 1) of the
// previous run, or minus 0 for the first run. Runs are maximal, so every gap
// after the first is at least 1; a run may not pass piece n-1; nothing may
// follow the last run. A uvarint is 7 bits per byte, least significant group
// first, high bit set on every byte but the last (as in protobuf), and must
// be minimal: no trailing 0x80-continued zero groups.
//
// A near-complete or sparse set is a few bytes as intervals; a random
// half-full one is the bitfield.
const (
	encBitfield  = 0
	encIntervals = 1
)

// runs yields the set's maximal runs without allocating.
func runs(s *pieceset.Set, yield func(start, length int)) {
	for i := s.Next(0); i >= 0; {
		end := s.NextMissing(i)
		if end < 0 {
			end = s.Len()
		}
		yield(i, end-i)
		i = s.Next(end)
	}
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// intervalsLen is the length of the interval encoding of s, without the
// encoding byte.
func intervalsLen(s *pieceset.Set) int {
	count, n, prevEnd := 0, 0, 0
	runs(s, func(start, length int) {
		count++
		n += uvarintLen(uint64(start-prevEnd)) + uvarintLen(uint64(length-1))
		prevEnd = start + length
	})
	return uvarintLen(uint64(count)) + n
}

// appendHaveSet appends s in the shorter of the two encodings.
func appendHaveSet(b []byte, s *pieceset.Set) []byte {
	bitfield := (s.Len() + 7) / 8
	if intervalsLen(s) >= bitfield {
		b = append(b, encBitfield)
		return append(b, s.Bytes()...)
	}
	return appendIntervals(append(b, encIntervals), s)
}

func appendIntervals(b []byte, s *pieceset.Set) []byte {
	count := 0
	runs(s, func(int, int) { count++ })
	b = binary.AppendUvarint(b, uint64(count))
	prevEnd := 0
	runs(s, func(start, length int) {
		b = binary.AppendUvarint(b, uint64(start-prevEnd))
		b = binary.AppendUvarint(b, uint64(length-1))
		prevEnd = start + length
	})
	return b
}

// decodeHaveSet decodes a HAVESET payload (encoding byte first) of a swarm of
// n pieces.
func decodeHaveSet(p []byte, n int) (*pieceset.Set, error) {
	if len(p) == 0 {
		return nil, malformed("HAVESET without an encoding")
	}
	switch p[0] {
	case encBitfield:
		if want := (n + 7) / 8; len(p)-1 != want {
			return nil, malformed("HAVESET bitfield of %d bytes for %d pieces, want %d", len(p)-1, n, want)
		}
		s, err := pieceset.FromBytes(p[1:], n)
		if err != nil {
			return nil, malformed("HAVESET bitfield: %v", err)
		}
		return s, nil
	case encIntervals:
		return decodeIntervals(p[1:], n)
	}
	return nil, malformed("HAVESET encoding %d", p[0])
}

func decodeIntervals(p []byte, n int) (*pieceset.Set, error) {
	count, p, err := readUvarint(p, uint64(n))
	if err != nil {
		return nil, malformed("HAVESET interval count: %v", err)
	}
	// Each run takes at least two bytes: a count beyond that is a lie, and
	// checking it first bounds the allocation below by the frame size.
	if count > uint64(len(p)/2) {
		return nil, malformed("HAVESET of %d intervals in %d bytes", count, len(p))
	}
	iv := make([]pieceset.Interval, count)
	prevEnd := 0
	for i := range iv {
		var gap, lm1 uint64
		if gap, p, err = readUvarint(p, uint64(n)); err == nil {
			lm1, p, err = readUvarint(p, uint64(n))
		}
		if err != nil {
			return nil, malformed("HAVESET interval %d: %v", i, err)
		}
		start := prevEnd + int(gap)
		length := int(lm1) + 1
		switch {
		case i > 0 && gap == 0:
			return nil, malformed("HAVESET interval %d touches the previous one: runs must be maximal", i)
		case start > n-length:
			return nil, malformed("HAVESET interval %d [%d,+%d) passes the last piece %d", i, start, length, n-1)
		}
		iv[i] = pieceset.Interval{Start: start, Len: length}
		prevEnd = start + length
	}
	if len(p) != 0 {
		return nil, malformed("HAVESET: %d bytes after the last interval", len(p))
	}
	s, err := pieceset.FromIntervals(iv, n)
	if err != nil {
		return nil, malformed("HAVESET intervals: %v", err) // unreachable: checked above
	}
	return s, nil
}

// errUvarint describes a bad uvarint.
type errUvarint string

func (e errUvarint) Error() string { return string(e) }

// readUvarint reads a minimal uvarint no greater than limit.
func readUvarint(p []byte, limit uint64) (uint64, []byte, error) {
	v, k := binary.Uvarint(p)
	switch {
	case k == 0:
		return 0, p, errUvarint("truncated uvarint")
	case k < 0:
		return 0, p, errUvarint("uvarint overflows 64 bits")
	case k > 1 && p[k-1] == 0:
		return 0, p, errUvarint("non-minimal uvarint")
	case v > limit:
		return 0, p, errUvarint("uvarint " + strconv.FormatUint(v, 10) + " out of range")
	}
	return v, p[k:], nil
}
