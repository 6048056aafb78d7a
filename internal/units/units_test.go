package units_test

import (
	"strings"
	"testing"

	"github.com/stampede-dev/stampede/internal/units"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1000", 1000},
		{"1000B", 1000},
		{"7 bytes", 7},
		{"2MB", 2_000_000},
		{"2mb", 2_000_000},
		{"1kB", 1000},
		{"1.5GB", 1_500_000_000},
		{"512KiB", 512 << 10},
		{"32MiB", 32 << 20},
		{"2GiB", 2 << 30},
		{"1TiB", 1 << 40},
		{"4M", 4 << 20}, // bare k, M, G are 1024-based, as in curl
		{"1k", 1024},
		{"1.5G", 1536 << 20},
		{"1T", 1 << 40},
		{".5k", 512},
		{"  64 KiB  ", 64 << 10},
		{"8Mbit", 1_000_000},
		{"4611686018427387904", 1 << 62},
	} {
		got, err := units.ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, // unlimited
		{"8Mbit", 1_000_000},
		{"8mbit", 1_000_000},
		{"8Mbit/s", 1_000_000},
		{"100kbit", 12_500},
		{"1Gbit", 125_000_000},
		{"1Mibit", 131072},
		{"2MB", 2_000_000},
		{"2MB/s", 2_000_000},
		{" 2 MB/s ", 2_000_000},
		{"2MBps", 2_000_000}, // capital B: bytes
		{"500k", 500 << 10},
		{"500k/s", 500 << 10},
		{"512KiB", 512 << 10},
		{"1.5G", 1536 << 20},
		{"1000", 1000},
	} {
		got, err := units.ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// TestParseRateBitsPerSecond: "Mbps", "kbps", "Gbps" are how link speeds are
// written, and mean bits, like "Mbit/s". Reading them as megabytes gives a
// limit eight times too high.
func TestParseRateBitsPerSecond(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"8Mbps", 1_000_000},
		{"100kbps", 12_500},
		{"1Gbps", 125_000_000},
	} {
		got, err := units.ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d (bits per second)", c.in, got, err, c.want)
		}
	}
}

// TestParseRatePositiveIsNotUnlimited: 0 means unlimited, so a positive rate
// too small to round to a whole byte per second must not come back as 0.
func TestParseRatePositiveIsNotUnlimited(t *testing.T) {
	for _, in := range []string{"1bit", "3bit", "0.4", "0.001k"} {
		got, err := units.ParseRate(in)
		if err == nil && got == 0 {
			t.Errorf("ParseRate(%q) = 0 (unlimited); want an error or at least 1 B/s", in)
		}
	}
}

func TestParseBad(t *testing.T) {
	for _, in := range []string{
		"",
		"   ",
		"abc",
		"MB",
		"5 parsecs",
		"-1", // negative sizes and rates make no sense
		"-1MB",
		"+1",
		".",
		"1.2.3",
		"1e6", // no exponents: "e6" is not a unit
		"0x10",
		"NaN",
		"Inf",
		"1_000",
		"2 MB MB",
		"9223372036854775807", // would overflow once multiplied or added to
		"99999999999999999999",
		"9999999TB",
	} {
		if got, err := units.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		} else if !strings.Contains(err.Error(), "size") {
			t.Errorf("ParseSize(%q) error %q does not say what was being parsed", in, err)
		}
		if got, err := units.ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d; want an error", in, got)
		}
	}
	// A rate's "/s" is not part of a size.
	for _, in := range []string{"2MB/s", "8Mbit/s"} {
		if got, err := units.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{10 << 10, "10.0 KiB"},
		{1 << 20, "1.0 MiB"},
		{3 << 29, "1.5 GiB"},
		{1 << 40, "1.0 TiB"},
		{1 << 50, "1.0 PiB"},
		{1 << 60, "1024.0 PiB"}, // PiB is the largest unit
	} {
		if got := units.Bytes(c.in); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := units.Rate(1.5 * (1 << 20)); got != "1.5 MiB/s" {
		t.Errorf("Rate(1.5 MiB/s) = %q", got)
	}
}

// TestRoundTrip: what Bytes prints, ParseSize reads back to within the
// rounding of one decimal.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{1, 1000, 1024, 1536, 5 << 20, 3 << 29, 7 << 40} {
		s := strings.ReplaceAll(units.Bytes(n), " ", "")
		got, err := units.ParseSize(s)
		if err != nil {
			t.Fatalf("ParseSize(Bytes(%d) = %q): %v", n, s, err)
		}
		if d := got - n; d < -n/20 || d > n/20 {
			t.Errorf("ParseSize(Bytes(%d) = %q) = %d", n, s, got)
		}
	}
}
