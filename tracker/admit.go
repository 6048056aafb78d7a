package tracker

import (
	"sync"

	"github.com/stampede-dev/stampede/manifest"
)

// An origin's tracker tracks the files the origin serves, not any file
// anyone names: an open tracker is a rendezvous for any content, and a
// flood of announces to random roots fills its table of swarms. So with
// Config.OnlyAdmitted it tracks the swarms admitted with Admit (package
// origin admits a file's as its manifest goes out), and those already in
// its store: a swarm another tracker sharing the store admitted, or one
// that outlived its admission.

// maxAdmitted bounds the swarms admitted; past it, the one admitted
// longest ago is forgotten (its swarm stays tracked while it lives, and
// the next manifest of its file admits it again).
const maxAdmitted = 1 << 16

// admitted is a bounded set of swarms, the least recently admitted
// going first.
type admitted struct {
	mu    sync.RWMutex // guards the following
	m     map[swarmKey]*admission
	order admission // sentinel: most recently admitted first
}

type admission struct {
	key        swarmKey
	prev, next *admission
}

func newAdmitted() *admitted {
	a := &admitted{m: make(map[swarmKey]*admission)}
	a.order.prev, a.order.next = &a.order, &a.order
	return a
}

func (a *admitted) add(k swarmKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.m[k]
	switch {
	case e != nil && e.prev == &a.order:
		return // admitted last already: the usual case, a crowd's manifests
	case e != nil:
		e.prev.next, e.next.prev = e.next, e.prev
	default:
		if len(a.m) >= maxAdmitted {
			old := a.order.prev
			old.prev.next, old.next.prev = old.next, old.prev
			delete(a.m, old.key)
		}
		e = &admission{key: k}
		a.m[k] = e
	}
	e.prev, e.next = &a.order, a.order.next
	a.order.next.prev = e
	a.order.next = e
}

func (a *admitted) has(k swarmKey) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m[k] != nil
}

func (a *admitted) len() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.m)
}

// Admit has a tracker with Config.OnlyAdmitted track the swarm of the
// file of root and size (the last 65,536 admitted; a swarm in the store
// stays tracked while it lives). Package origin calls it for each
// manifest it sends out. Without OnlyAdmitted it does nothing.
func (t *Tracker) Admit(root manifest.Hash, size int64) {
	if t.admitted != nil {
		t.admitted.add(swarmKey{root, size})
	}
}
