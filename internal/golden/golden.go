// Package golden compares test output with files in testdata, for tests
// that pin an output byte for byte (the metrics pages, the scheduler's
// scenario scripts). Run the tests with -rewrite to write the files from
// the current output, then review the diff.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files (testdata/...golden) from the current output")

// Check compares got with the file at path, or writes got there with
// -rewrite. A difference is reported at its first line.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -rewrite and review the diff):\n%s", path, firstDiff(string(want), string(got)))
	}
}

// firstDiff describes the first line where want and got differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %q\n  got:  %q", i+1, wl, gl)
		}
	}
	return "(they differ only in the last line's end)"
}
