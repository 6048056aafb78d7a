package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The origin's egress budget (stampede serve --max-copies; package origin,
// budget.go): at most so many copies of each file version per window go to
// swarm clients, past which a swarm client is refused the pieces the swarm
// already has. Its answers to swarm clients say where the budget stands, in
// BudgetHeader:
//
//	left=1048576, reset=42         a piece answer: bytes left, seconds to the window's end
//	spent, left=0, reset=42        a 503: the budget is spent and every piece asked went out this window
//
// A client tells the origin it downloads alone in SuppliersHeader: 0
// neighbours delivered it anything, so it has nowhere else to get a piece,
// and the origin serves it past the budget.

// BudgetHeader carries the file version's egress budget in an origin's
// answers to swarm clients (FormatBudget): how many bytes of the file it
// may still send them in the current window, and when the window ends; on
// a 503 also "spent", which tells the refusal from a busy or failing
// origin.
const BudgetHeader = "Stampede-Budget"

// SuppliersHeader is the request header in which a swarm client says how
// many of its neighbours delivered it a verified piece (and are still
// connected). "0" says it downloads alone: the origin serves it past the
// file's budget. Absent: the client does not say.
const SuppliersHeader = "Stampede-Suppliers"

// Budget is a BudgetHeader's value.
type Budget struct {
	// Spent marks the refusal: the budget is spent, and every piece the
	// request would take went out in this window already.
	Spent bool
	// Left is how many more body bytes of the file version the origin
	// sends swarm clients in this window before it refuses them.
	Left int64
	// Reset is the time left until the window ends and the budget is
	// whole again, in whole seconds.
	Reset time.Duration
}

// FormatBudget is the value of BudgetHeader for b. Reset is rounded up to
// whole seconds.
func FormatBudget(b Budget) string {
	secs := int64((max(b.Reset, 0) + time.Second - 1) / time.Second)
	v := fmt.Sprintf("left=%d, reset=%d", max(b.Left, 0), secs)
	if b.Spent {
		v = "spent, " + v
	}
	return v
}

// ErrBadBudget is what ParseBudget returns for a value it cannot read.
var ErrBadBudget = errors.New("malformed " + BudgetHeader)

// maxBudgetValue bounds what ParseBudget reads; a budget header is a few
// tens of bytes.
const maxBudgetValue = 256

// ParseBudget reads a BudgetHeader value: comma-separated members, "spent"
// and key=value with keys "left" (bytes) and "reset" (seconds), both
// non-negative integers. Members it does not know are skipped, so that an
// origin may add some; a known one it cannot read, a repeated one, or a
// value without "left" is an error (ErrBadBudget).
func ParseBudget(v string) (Budget, error) {
	var (
		b              Budget
		left, reset, s bool
	)
	if len(v) > maxBudgetValue {
		return Budget{}, fmt.Errorf("%w: %d bytes", ErrBadBudget, len(v))
	}
	for m := range strings.SplitSeq(v, ",") {
		m = strings.TrimSpace(m)
		key, val, hasVal := strings.Cut(m, "=")
		num := func(seen *bool) (int64, error) {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n < 0 || !hasVal || *seen || val != strings.TrimSpace(val) || strings.HasPrefix(val, "+") {
				return 0, fmt.Errorf("%w: %q", ErrBadBudget, m)
			}
			*seen = true
			return n, nil
		}
		switch key {
		case "spent":
			if hasVal || s {
				return Budget{}, fmt.Errorf("%w: %q", ErrBadBudget, m)
			}
			b.Spent, s = true, true
		case "left":
			n, err := num(&left)
			if err != nil {
				return Budget{}, err
			}
			b.Left = n
		case "reset":
			n, err := num(&reset)
			if err != nil {
				return Budget{}, err
			}
			// A day is more than any window; the bound keeps the
			// Duration from overflowing.
			b.Reset = time.Duration(min(n, 86400)) * time.Second
		}
	}
	if !left {
		return Budget{}, fmt.Errorf("%w: no left in %q", ErrBadBudget, v)
	}
	return b, nil
}

// FormatSuppliers is the value of SuppliersHeader for n neighbours.
func FormatSuppliers(n int) string { return strconv.Itoa(max(n, 0)) }

// Alone reports whether SuppliersHeader's value v says the client
// downloads alone: no neighbour delivered it anything.
func Alone(v string) bool {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return err == nil && n == 0
}
