package contract

import (
	"errors"
	"testing"
	"time"
)

func TestBudgetHeader(t *testing.T) {
	for _, tt := range []struct {
		b    Budget
		want string
	}{
		{Budget{Left: 1 << 20, Reset: 42 * time.Second}, "left=1048576, reset=42"},
		{Budget{Spent: true, Reset: 41*time.Second + time.Millisecond}, "spent, left=0, reset=42"},
		{Budget{Left: -5, Reset: -time.Second}, "left=0, reset=0"},
	} {
		v := FormatBudget(tt.b)
		if v != tt.want {
			t.Errorf("FormatBudget(%+v) = %q, want %q", tt.b, v, tt.want)
		}
		got, err := ParseBudget(v)
		if err != nil {
			t.Fatalf("ParseBudget(%q): %v", v, err)
		}
		if again := FormatBudget(got); again != v {
			t.Errorf("round trip of %q: %q", v, again)
		}
	}
	// Members unknown today are skipped; order and spaces do not matter.
	got, err := ParseBudget("reset=7,copies=1.5;x,left=3,  spent")
	if err != nil || got != (Budget{Spent: true, Left: 3, Reset: 7 * time.Second}) {
		t.Errorf("ParseBudget with unknown members: %+v, %v", got, err)
	}
	for _, v := range []string{"", "spent", "left=", "left=-1", "left=+1", "left=1, left=2", "left=x", "left=1, reset=1e3",
		"left=1, spent=1", "spent, spent, left=1", "left= 1", "left=99999999999999999999"} {
		if got, err := ParseBudget(v); !errors.Is(err, ErrBadBudget) {
			t.Errorf("ParseBudget(%q) = %+v, %v; want ErrBadBudget", v, got, err)
		}
	}
	if got, err := ParseBudget("left=1, reset=9223372036854775807"); err != nil || got.Reset != 24*time.Hour {
		t.Errorf("a huge reset: %+v, %v; want a day", got, err)
	}
}

func TestSuppliers(t *testing.T) {
	for v, want := range map[string]bool{"0": true, " 0 ": true, "00": true, "1": false, "": false, "none": false, "-1": false} {
		if got := Alone(v); got != want {
			t.Errorf("Alone(%q) = %v, want %v", v, got, want)
		}
	}
	if FormatSuppliers(3) != "3" || FormatSuppliers(-1) != "0" || !Alone(FormatSuppliers(0)) {
		t.Error("FormatSuppliers")
	}
}
