package manifest_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/stampede-dev/stampede/manifest"
)

// BenchmarkFromReaderAt hashes a 64 MiB in-memory file: workers=1 is the
// per-core throughput, workers=GOMAXPROCS what an origin gets from the machine.
func BenchmarkFromReaderAt(b *testing.B) {
	const size = 64 << 20
	r := bytes.NewReader(pattern(size))
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := manifest.FromReaderAt(r, size, "f", w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyPiece checks one full piece of a multi-piece file, the cost
// paid for every piece received or served.
func BenchmarkVerifyPiece(b *testing.B) {
	for _, ps := range []int64{16 << 10, 512 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("piece=%dKiB", ps>>10), func(b *testing.B) {
			data := pattern(2 * ps)
			m := mustBuild(b, data, ps)
			piece := data[:ps]
			b.SetBytes(ps)
			b.ReportAllocs()
			for b.Loop() {
				if err := m.VerifyPiece(0, piece); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
