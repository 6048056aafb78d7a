package pieceset

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FormatList writes ascending piece indexes as a text list of indexes and
// inclusive ranges, "0-2,5,9-10" (the Stampede-Candidates header).
func FormatList(ps []int) string {
	var b strings.Builder
	for k := 0; k < len(ps); {
		j := k
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ps[k]))
		if j > k {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ps[j]))
		}
		k = j + 1
	}
	return b.String()
}

// ErrBadList: a text list of pieces is malformed or out of range.
var ErrBadList = errors.New("pieceset: bad piece list")

// ParseList reads a list written by FormatList (spaces around the items
// allowed) for a file of n pieces, returning at most max indexes, in the
// order written. Anything malformed or outside [0, n) is an error.
func ParseList(s string, n, max int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, ok := index(lo, n)
		b := a
		if isRange {
			b, ok = index(hi, n)
			ok = ok && a >= 0 && b >= a
		}
		if !ok || a < 0 {
			return nil, fmt.Errorf("%w: %q", ErrBadList, f)
		}
		for i := a; i <= b && len(out) < max; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// index reads a decimal index below n: digits only, no sign.
func index(s string, n int) (int, bool) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return -1, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i < n
}
