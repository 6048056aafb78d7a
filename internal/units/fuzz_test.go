package units_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/internal/units"
)

// FuzzParseSize: sizes and rates come from flags, settings files and the
// environment. Nothing panics; a value accepted is not negative, stays far
// from overflow, and reads back from its decimal form; a size is the same
// rate, with or without "/s"; a bare number is whole bytes, rounded.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1000", "32MiB", "4M", "1.5GB", "8Mbit", "2MB/s", "500k", "8Mbps", "2MBps", " 2 MB ",
		"1e9", "-1", ".", "1.", ".5", "0.0001", "NaN", "Inf", "9223372036854775807", "99999999999tib", "1..2", "0x10",
		"1bit", "12 kibit", "3GiB/s", "/s", "bps", "", "mb", "1\x00MB", "１MB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		size, serr := units.ParseSize(s)
		rate, rerr := units.ParseRate(s)
		for _, v := range []struct {
			n   int64
			err error
		}{{size, serr}, {rate, rerr}} {
			if v.err != nil {
				if v.n != 0 {
					t.Fatalf("%q: %d with error %v", s, v.n, v.err)
				}
				continue
			}
			if v.n < 0 || v.n > math.MaxInt64/2 {
				t.Fatalf("%q: %d", s, v.n)
			}
			if back, err := units.ParseSize(strconv.FormatInt(v.n, 10)); err != nil || back != v.n {
				t.Fatalf("%q: %d reads back as %d, %v", s, v.n, back, err)
			}
		}
		if serr != nil {
			return
		}
		if rerr != nil || rate != size {
			t.Fatalf("%q: size %d, but rate %d, %v", s, size, rate, rerr)
		}
		if r, err := units.ParseRate(s + "/s"); err != nil || r != size {
			t.Fatalf("%q: size %d, but %q is rate %d, %v", s, size, s+"/s", r, err)
		}
		if num := strings.TrimSpace(s); num != "" && strings.Trim(num, "0123456789") == "" && len(num) < 16 {
			want, _ := strconv.ParseInt(num, 10, 64)
			if size != want {
				t.Fatalf("%q: %d bytes", s, size)
			}
		}
	})
}
