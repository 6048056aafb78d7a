package cdn

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine a test started is still running
// once every test has ended.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
