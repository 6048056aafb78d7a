package cdn

import (
	"context"
	"sync"
)

// flights collapses concurrent fetches of the same thing into one
// (collapsed forwarding): the first caller's fetch runs on its own context,
// detached from any one client, and every caller waits for it or for its
// own context. A client leaving does not cancel the fetch the others wait
// for; the fetch ends on its own deadline, or with the node (wait).
type flights[T any] struct {
	wg sync.WaitGroup // the fetches under way

	mu    sync.Mutex // guards the following
	calls map[string]*flight[T]
}

type flight[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// do runs fetch for key unless one is under way, and returns its result.
// joined reports whether the caller waited for another's fetch.
func (f *flights[T]) do(ctx context.Context, key string, fetch func() (T, error)) (val T, joined bool, err error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = make(map[string]*flight[T])
	}
	c, joined := f.calls[key]
	if !joined {
		c = &flight[T]{done: make(chan struct{})}
		f.calls[key] = c
		f.wg.Go(func() {
			c.val, c.err = fetch()
			f.mu.Lock()
			delete(f.calls, key)
			f.mu.Unlock()
			close(c.done)
		})
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.val, joined, c.err
	case <-ctx.Done():
		var zero T
		return zero, joined, context.Cause(ctx)
	}
}

// wait waits for the fetches under way to end.
func (f *flights[T]) wait() { f.wg.Wait() }
