package cdn

import (
	"fmt"
	"slices"
	"testing"
)

func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:8080", i+1)
	}
	return out
}

func TestRingSameOwnersEverywhere(t *testing.T) {
	ns := nodes(6)
	rev := slices.Clone(ns)
	slices.Reverse(rev)
	a, b := NewRing(ns), NewRing(append(rev, ns[2])) // another order, a repeat
	for i := range 1000 {
		key := fmt.Sprintf("http://o/f#%d", i)
		if !slices.Equal(a.Order(key), b.Order(key)) {
			t.Fatalf("key %s: orders differ: %v vs %v", key, a.Order(key), b.Order(key))
		}
		if a.Owner(key) != a.Order(key)[0] {
			t.Fatalf("key %s: Owner %s is not Order's first %s", key, a.Owner(key), a.Order(key)[0])
		}
	}
}

func TestRingSpreadsKeys(t *testing.T) {
	r := NewRing(nodes(6))
	count := map[string]int{}
	const keys = 6000
	for i := range keys {
		count[r.Owner(fmt.Sprintf("k%d", i))]++
	}
	for n, c := range count {
		if c < keys/6*8/10 || c > keys/6*12/10 {
			t.Errorf("%s owns %d of %d keys, want about %d", n, c, keys, keys/6)
		}
	}
	if len(count) != 6 {
		t.Errorf("%d nodes own keys, want 6", len(count))
	}
}

func TestRingMinimalMovement(t *testing.T) {
	ns := nodes(6)
	full := NewRing(ns)
	gone := ns[3]
	less := NewRing(slices.Delete(slices.Clone(ns), 3, 4))
	moved := 0
	for i := range 3000 {
		key := fmt.Sprintf("k%d", i)
		before, after := full.Owner(key), less.Owner(key)
		switch {
		case before == gone:
			moved++
			// It goes to its runner-up.
			if want := full.Order(key)[1]; after != want {
				t.Fatalf("key %s: went to %s, want its runner-up %s", key, after, want)
			}
		case before != after:
			t.Fatalf("key %s moved from %s to %s though %s was not its owner", key, before, after, gone)
		}
	}
	if moved == 0 {
		t.Fatal("the node that left owned nothing")
	}
}

func TestBalancerBound(t *testing.T) {
	tests := []struct {
		name string
		keys func(i int) string
		n    int
		reqs int
	}{
		{"hot spot: one key", func(int) string { return "hot" }, 6, 96},
		{"hot spot: 4 keys, one of them most asked", func(i int) string {
			if i%8 != 0 {
				return "hot"
			}
			return fmt.Sprintf("cold%d", i%3)
		}, 6, 120},
		{"spread", func(i int) string { return fmt.Sprintf("k%d", i) }, 5, 100},
		{"one node", func(int) string { return "x" }, 1, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(nodes(tt.n))
			var b Balancer
			for i := range tt.reqs {
				b.Assign(r.Order(tt.keys(i)))
				// The bound holds at every step, not only at the end.
				limit := b.Cap(b.Total()-1, tt.n)
				for _, n := range r.Nodes() {
					if b.Load(n) > limit {
						t.Fatalf("after %d requests %s has %d in flight, cap %d", i+1, n, b.Load(n), limit)
					}
				}
			}
			mean := float64(tt.reqs) / float64(tt.n)
			for _, n := range r.Nodes() {
				if float64(b.Load(n)) > 1.25*mean+1 {
					t.Errorf("%s has %d in flight, mean %.1f", n, b.Load(n), mean)
				}
			}
		})
	}
}

func TestBalancerOverflowFollowsOrder(t *testing.T) {
	r := NewRing(nodes(4))
	order := r.Order("hot")
	var b Balancer
	got := []string{}
	for range 8 {
		got = append(got, b.Assign(order))
	}
	// 8 requests on 4 nodes: the cap climbs as requests come, and the
	// overflow goes down the key's order, never elsewhere.
	if got[0] != order[0] {
		t.Fatalf("first request went to %s, want the owner %s", got[0], order[0])
	}
	// With 8 in flight on 4 nodes the cap is ceil(1.25×8/4) = 3: the owner
	// and its runner-up take the most, and no node is skipped over for a
	// later one in the order.
	for i := 1; i < len(order); i++ {
		if b.Load(order[i]) > 0 && b.Load(order[i-1]) == 0 {
			t.Fatalf("%s has load but %s before it in the order has none: %v", order[i], order[i-1], got)
		}
	}
	for _, n := range order {
		if b.Load(n) > b.Cap(7, 4) {
			t.Fatalf("%s over the cap: %d", n, b.Load(n))
		}
	}
	// Done frees the owner: the next request goes back to it.
	for range b.Load(order[0]) {
		b.Done(order[0])
	}
	if n := b.Assign(order); n != order[0] {
		t.Fatalf("after the owner drained, got %s, want %s", n, order[0])
	}
}

func TestBalancerSkip(t *testing.T) {
	r := NewRing(nodes(3))
	order := r.Order("k")
	var b Balancer
	first := b.Assign(order)
	next := b.Skip(order, first)
	if next != order[1] || b.Load(first) != 0 || b.Load(next) != 1 || b.Total() != 1 {
		t.Fatalf("skip from %s gave %s, loads %d/%d total %d", first, next, b.Load(first), b.Load(next), b.Total())
	}
	last := b.Skip(order, next)
	if last != order[2] {
		t.Fatalf("second skip gave %s, want %s", last, order[2])
	}
	if b.Skip(order, last) != "" {
		t.Fatal("skipping the last node gave a node")
	}
}
