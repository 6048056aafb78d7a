// Package units parses and prints the sizes and rates stampede's flags take:
// "2MB", "512KiB", "8Mbit", "1.5G". Rates are bytes per second; a suffix
// ending in "bit" counts bits.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// multipliers maps a lowercased unit to its factor in bytes. As in curl's
// --limit-rate, a bare k, M, G is 1024-based; kB, MB, GB are SI and KiB, MiB,
// GiB IEC. Bit units (kbit, Mbit) are SI, as link speeds are quoted.
var multipliers = map[string]float64{
	"": 1, "b": 1, "byte": 1, "bytes": 1,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"bit": 1.0 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
	"kibit": 1024.0 / 8, "mibit": (1 << 20) / 8.0, "gibit": (1 << 30) / 8.0,
}

// ParseSize parses a byte count such as "32MiB", "4M", "1.5GB" or "1000".
func ParseSize(s string) (int64, error) {
	v, err := parse(s, false)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return v, nil
}

// ParseRate parses a rate in bytes per second: "8Mbit", "2MB", "500k",
// "2MB/s". "0" means unlimited.
func ParseRate(s string) (int64, error) {
	v, err := parse(s, true)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	return v, nil
}

func parse(s string, rate bool) (int64, error) {
	t := strings.TrimSpace(s)
	if rate {
		t = strings.TrimSuffix(t, "/s")
		if strings.HasSuffix(t, "bps") { // 8Mbps: bits, as link speeds are quoted
			t = strings.TrimSuffix(t, "ps") + "it"
		} else {
			t = strings.TrimSuffix(t, "ps") // 2MBps: bytes
		}
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, suffix := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("no number (want e.g. 8Mbit, 2MB, 512KiB)")
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("bad number %q", num)
	}
	mul, ok := multipliers[suffix]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (want B, k, KB, KiB, M, MB, MiB, G, ..., or bit, kbit, Mbit, Gbit)", suffix)
	}
	v := f * mul
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("too large")
	}
	if v > 0 && math.Round(v) == 0 {
		// A rate of 0 means unlimited: never let a tiny one round to it.
		return 0, fmt.Errorf("less than one byte")
	}
	return int64(math.Round(v)), nil
}

// Bytes formats n bytes with a binary prefix: "1.5 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// Rate formats a rate in bytes per second: "12.3 MiB/s".
func Rate(bps float64) string { return Bytes(int64(bps)) + "/s" }
