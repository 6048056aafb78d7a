package golden

import (
	"strings"
	"testing"
)

func TestFirstDiff(t *testing.T) {
	got := firstDiff("a\nb\nc\n", "a\nx\nc\n")
	if !strings.Contains(got, "line 2") || !strings.Contains(got, `"b"`) || !strings.Contains(got, `"x"`) {
		t.Errorf("firstDiff = %q", got)
	}
	if got := firstDiff("a\n", "a\nb\n"); !strings.Contains(got, "line 2") {
		t.Errorf("an extra line: %q", got)
	}
}
