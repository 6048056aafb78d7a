package pieceset

import (
	"errors"
	"slices"
	"testing"
)

// FuzzParseList: the Stampede-Candidates header comes from any client. A
// list accepted names only pieces of the file, no more than asked, in the
// order written; a larger max only extends it; a sorted list without
// duplicates survives FormatList; a list rejected is rejected with
// ErrBadList, whatever max.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0-2,5,9-10", " 3 , 7-9,120", "5", "0-0", "", ",", "1,,2", "5-3", "-1", "1-", "-",
		"00,007", "999999999", "1000000000", "0-999999999", "+1", "1 2", "1-2-3", "\t4\t", "0x10", "１"} {
		f.Add(s, 11, 4)
		f.Add(s, 1000, 256)
	}
	f.Add("0-2147483647", 1<<30, 1<<20)
	f.Fuzz(func(t *testing.T, s string, n, max int) {
		// The callers' range: a file of up to 2^26 pieces of 16 KiB (1 TiB)
		// and a few hundred candidates.
		if n < 0 || n > 1<<26 || max < 0 || max > 4096 {
			return
		}
		got, err := ParseList(s, n, max)
		if err != nil {
			if got != nil || !errors.Is(err, ErrBadList) {
				t.Fatalf("ParseList(%q, %d, %d) = %v, %v", s, n, max, got, err)
			}
			if _, err := ParseList(s, n, max+1); err == nil {
				t.Fatalf("ParseList(%q) rejected with max %d, accepted with %d", s, max, max+1)
			}
			return
		}
		if len(got) > max {
			t.Fatalf("ParseList(%q, %d, %d): %d indexes", s, n, max, len(got))
		}
		for _, i := range got {
			if i < 0 || i >= n {
				t.Fatalf("ParseList(%q, %d, %d): index %d", s, n, max, i)
			}
		}
		more, err := ParseList(s, n, max+1)
		if err != nil || len(more) < len(got) || !slices.Equal(more[:len(got)], got) {
			t.Fatalf("ParseList(%q) with max %d: %v, %v; with %d: %v", s, max+1, more, err, max, got)
		}
		if len(got) > 0 && slices.IsSorted(got) && len(slices.Compact(slices.Clone(got))) == len(got) {
			enc := FormatList(got)
			again, err := ParseList(enc, n, len(got))
			if err != nil || !slices.Equal(again, got) {
				t.Fatalf("round trip of %v through %q: %v, %v", got, enc, again, err)
			}
		}
	})
}
