package uplink

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine a test started is still running
// once every test has ended. Tests inside a synctest bubble are covered by
// the bubble itself; this catches the others.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
