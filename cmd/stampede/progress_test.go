package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"

	"github.com/stampede-dev/stampede/fetch"
)

// TestProgressLineFits: on a terminal the line never reaches the last
// column, so it never wraps, and what is left at each width is what matters
// most: the percentage, the bytes, the rate and the ETA before the bar, the
// name and the phase.
func TestProgressLineFits(t *testing.T) {
	p := fetch.Progress{Phase: "downloading", Size: 3 << 30, Done: 1 << 30}
	names := []string{"f", "ubuntu-24.04.1-desktop-amd64.iso", strings.Repeat("ñ", 80), "日本語のファイル名はとても長いです-ダウンロード.iso"}
	for _, name := range names {
		for cols := 1; cols <= 200; cols++ {
			line := progressLine(name, p, 12.5e6, cols)
			if n := runewidth.StringWidth(line); n > cols-1 && cols > 1 {
				t.Fatalf("%d columns, name %q: %d columns wide: %q", cols, name, n, line)
			}
			if cols >= 60 {
				for _, want := range []string{"33%", "1.0 GiB / 3.0 GiB", "/s", "ETA 02:5"} {
					if !strings.Contains(line, want) {
						t.Fatalf("%d columns, name %q: %q lacks %q", cols, name, line, want)
					}
				}
			}
		}
	}
	// Wide enough, nothing is dropped.
	line := progressLine("f", p, 12.5e6, 120)
	if !strings.Contains(line, "["+progressBar(1.0/3, 24)+"]") || !strings.HasSuffix(line, "downloading") {
		t.Errorf("120 columns: %q", line)
	}
	// Without a terminal the line is whole whatever the name.
	if line := progressLine(names[2], p, 0, 0); !strings.HasPrefix(line, names[2]+" ") || !strings.HasSuffix(line, "downloading") {
		t.Errorf("no terminal: %q", line)
	}
}

// TestRateMeterFromStart: the first reading already has a rate, measured from
// when the meter was started.
func TestRateMeterFromStart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := rateMeter{last: t0, lastDone: 1 << 20}
	if got := m.update(t0.Add(5*time.Second), 11<<20); got != 2<<20 {
		t.Errorf("first rate %v B/s, want %v", got, 2<<20)
	}
}
