package tracker_test

import (
	"testing"

	"github.com/stampede-dev/stampede/tracker"
	"github.com/stampede-dev/stampede/tracker/storetest"
)

func newMemoryStore(t *testing.T, l tracker.Limits) tracker.Store {
	return tracker.NewMemoryStore(l, nil)
}

// TestMemoryStore runs the store conformance suite on the in-memory
// store, with the largest crowd too: it takes a second.
func TestMemoryStore(t *testing.T) {
	storetest.Run(t, newMemoryStore, storetest.Options{Crowds: []int{10, 100, 1000, 10000}})
}

// BenchmarkMemoryStore: announces per second and p99 at the Store
// interface. Run with -benchtime=3s or so for figures.
func BenchmarkMemoryStore(b *testing.B) {
	storetest.BenchmarkStore(b, newBenchStore, 1)
}

// BenchmarkMemoryStoreHTTP: the same over HTTP on loopback, with the load
// generator in this process.
func BenchmarkMemoryStoreHTTP(b *testing.B) {
	storetest.BenchmarkHTTP(b, newBenchStore, 8)
}

func newBenchStore(*testing.B) tracker.Store { return tracker.NewMemoryStore(tracker.Limits{}, nil) }
