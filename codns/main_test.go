package codns_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine a test started is still running
// once every test has ended: a lookup's queries, the upstream's that may
// outlive it, and the servers must all end with Serve.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
