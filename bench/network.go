package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Network is an emulated network of hosts: every host of a scenario (the
// origin, each peer) is a real process tree run on one Host, so the same
// code drives every backend. On loopback the programs cap their own rates
// with their flags; on netns the kernel does (tc tbf on each host's link).
type Network interface {
	Name() string
	// AppShaping says the programs must cap their own rates (loopback);
	// false when the network caps them.
	AppShaping() bool
	// AddHost creates a host with upload and download caps in bytes/s
	// (0: uncapped).
	AddHost(ctx context.Context, name string, up, down int64) (*Host, error)
	// Close ends what the network created; it is safe to call twice.
	Close() error
}

// ErrNeedRoot: the netns backend needs root.
var ErrNeedRoot = errors.New("the netns backend needs root (network namespaces and tc)")

// Host is one machine of a Network.
type Host struct {
	Name     string
	IP       string // where it listens and where others reach it
	Up, Down int64  // caps, bytes/s (0: uncapped)
	// ns is the network namespace the host's processes run in ("" on
	// loopback).
	ns string
}

// Command returns argv as run on h.
func (h *Host) Command(argv ...string) []string {
	if h.ns == "" {
		return argv
	}
	return append([]string{"ip", "netns", "exec", h.ns}, argv...)
}

// DialContext connects from the harness to addr on h's network.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if h.ns == "" {
		return d.DialContext(ctx, network, addr)
	}
	var c net.Conn
	err := inNetns(h.ns, func() error {
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a TCP listener on h's address (port 0: any free port), for
// the harness's own services on h (the nginx baseline's relay).
func (h *Host) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	listen := func() error {
		var err error
		ln, err = net.Listen("tcp", h.Addr(port))
		return err
	}
	var err error
	if h.ns == "" {
		err = listen()
	} else {
		err = inNetns(h.ns, listen)
	}
	return ln, err
}

// FreePort returns a TCP port free on h at the time of asking, for the
// programs that cannot be handed a listener (opentracker, aria2c): it
// binds port 0 on h and closes the listener.
func (h *Host) FreePort() (int, error) {
	var port int
	listen := func() error {
		ln, err := net.Listen("tcp", net.JoinHostPort(h.IP, "0"))
		if err != nil {
			return err
		}
		port = ln.Addr().(*net.TCPAddr).Port
		return ln.Close()
	}
	var err error
	if h.ns == "" {
		err = listen()
	} else {
		err = inNetns(h.ns, listen)
	}
	return port, err
}

// HTTPClient returns a client the harness uses to reach services on h.
func (h *Host) HTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: h.DialContext, DisableCompression: true, MaxIdleConnsPerHost: 2},
		Timeout:   3 * time.Second,
	}
}

// Addr joins h's address with port.
func (h *Host) Addr(port int) string { return net.JoinHostPort(h.IP, strconv.Itoa(port)) }

// NewNetwork returns the backend by name.
func NewNetwork(ctx context.Context, backend string, log *slog.Logger) (Network, error) {
	switch backend {
	case BackendLoopback:
		return loopback{}, nil
	case BackendNetns:
		n, err := newNetns(ctx, log)
		if err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("unknown backend %q (want loopback or netns)", backend)
}

// loopback runs every host on 127.0.0.1; the programs shape themselves.
type loopback struct{}

func (loopback) Name() string     { return BackendLoopback }
func (loopback) AppShaping() bool { return true }
func (loopback) Close() error     { return nil }
func (loopback) AddHost(_ context.Context, name string, up, down int64) (*Host, error) {
	return &Host{Name: name, IP: "127.0.0.1", Up: up, Down: down}, nil
}
