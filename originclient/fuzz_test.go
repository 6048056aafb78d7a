package originclient

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzRetryAfter: a 503's or an overload answer's Retry-After is the
// server's word on when to come back (the peers and the manifest head of
// an overload answer are package contract's, fuzzed there). Whatever it
// says, the wait stays in [100ms, 60s]; a number of seconds is taken as
// such, the larger the number the longer the wait; a date counts from now.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, v := range []string{"", "0", "1", "5", "60", "61", "3600", "-1", "+5", " 5", "5 ", "1.5", "0x10",
		"9223372036", "20000000000000000000A", "-20000000000000000000", now.Add(30 * time.Second).Format(http.TimeFormat),
		now.Add(-time.Hour).Format(http.TimeFormat), "Mon, 02 Jan 2006 15:04:05 GMT", "Monday, 02-Jan-06 15:04:05 GMT",
		"Mon Jan  2 15:04:05 2006", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(v)
	}
	clamp := func(d time.Duration) time.Duration { return max(100*time.Millisecond, min(60*time.Second, d)) }
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Retry-After": {v}}
		got := retryAfter(h, now)
		if got < 100*time.Millisecond || got > 60*time.Second {
			t.Fatalf("Retry-After %q: wait %v", v, got)
		}
		if got != retryAfter(h, now) {
			t.Fatalf("Retry-After %q: two waits", v)
		}
		if digits := strings.TrimPrefix(v, "+"); digits != "" && strings.Trim(digits, "0123456789") == "" {
			secs, err := strconv.ParseInt(digits, 10, 64)
			want := 60 * time.Second // past int64: a very long time
			if err == nil && secs < 1<<32 {
				want = clamp(time.Duration(secs) * time.Second)
			}
			if got != want {
				t.Fatalf("Retry-After %q: wait %v, want %v", v, got, want)
			}
			return
		}
		if _, err := strconv.Atoi(v); err == nil {
			return // a negative number: anything in bounds
		}
		if at, err := http.ParseTime(v); err == nil {
			if want := clamp(at.Sub(now)); got != want {
				t.Fatalf("Retry-After %q: wait %v, want %v", v, got, want)
			}
		} else if got != time.Second {
			t.Fatalf("Retry-After %q, not a number nor a date: wait %v, want the default 1s", v, got)
		}
	})
}
