package gateway

import (
	"net/http"
	"net/url"
)

// proxyFor returns the default Transport's Proxy: explicit (the
// UpstreamProxy of the config), or the environment's, but never the
// gateway itself. A user who points http_proxy at the gateway for every
// program, the gateway's own process included, would otherwise have each
// request sent back to it; such a proxy is skipped, once said, and
// requests go direct.
func (g *Gateway) proxyFor(explicit *url.URL) func(*http.Request) (*url.URL, error) {
	pick := http.ProxyFromEnvironment
	if explicit != nil {
		pick = http.ProxyURL(explicit)
	}
	return func(r *http.Request) (*url.URL, error) {
		p, err := pick(r)
		if err != nil || p == nil {
			return p, err
		}
		if g.isSelf(hostPort(p)) {
			g.selfProxy.Do(func() {
				g.log.Warn("the upstream proxy is this gateway; going direct", "proxy", p.Redacted())
			})
			return nil, nil
		}
		return p, nil
	}
}

// hostPort is u's host with its port, the scheme's default when it has
// none (an http_proxy of "http://127.0.0.1" means port 80).
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return u.Hostname() + ":" + port
}
