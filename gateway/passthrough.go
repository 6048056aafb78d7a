package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
)

// Straight through: requests for origins without manifests (and methods
// other than GET and HEAD) go to the origin as they came, by
// httputil.ReverseProxy, which streams both bodies, drops hop-by-hop
// headers, and handles protocol upgrades and trailers.

type passKey struct{}

// passThrough proxies req to its target and streams the answer back.
func (g *Gateway) passThrough(req *request) {
	// An origin may answer while the request body still flows (an echo, a
	// stream): let it, as it would without us.
	http.NewResponseController(req.w).EnableFullDuplex()
	req.w.Header().Set(Header, "direct")
	ctx := context.WithValue(req.r.Context(), passKey{}, req)
	g.proxy.ServeHTTP(req.w, req.r.WithContext(ctx))
}

func (g *Gateway) reverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			req := pr.In.Context().Value(passKey{}).(*request)
			pr.Out.URL = cloneURL(req.target)
			pr.Out.Host = ""
			pr.Out.Header.Add("Via", viaValue(pr.In, g.via))
			g.fixReferer(req, pr.Out.Header)
		},
		Transport: g.transport,
		ModifyResponse: func(resp *http.Response) error {
			req := resp.Request.Context().Value(passKey{}).(*request)
			resp.Header.Add("Via", viaValue(resp.Request, g.via))
			if req.prefixed {
				rewriteLocation(resp.Header, req.target)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			req := r.Context().Value(passKey{}).(*request)
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client left
			}
			var rt *refusedTarget
			if errors.As(err, &rt) {
				g.log.Info("refused target", "url", req.target.Redacted(), "err", err)
			} else {
				g.log.Warn("origin failed", "url", req.target.Redacted(), "err", err)
			}
			originError(w, req.target, err)
		},
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
}

// originError answers 502 naming the origin and what went wrong, or 403
// if the gateway refused to connect to it (guard.go).
func originError(w http.ResponseWriter, target *url.URL, err error) {
	if refusedTargetError(w, target.Host, err) {
		return
	}
	w.Header().Del(Header)
	http.Error(w, "stampede gateway: origin "+target.Host+": "+err.Error(), http.StatusBadGateway)
}

func cloneURL(u *url.URL) *url.URL {
	c := *u
	return &c
}

// viaValue is our Via entry (RFC 9110 7.6.3) for a message of r's protocol.
func viaValue(r *http.Request, token string) string {
	proto := "1.1"
	if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		proto = "1.0"
	} else if r.ProtoMajor == 2 {
		proto = "2"
	}
	return proto + " " + token
}

// fixReferer replaces a Referer that names a prefixed page on the
// gateway by the page's own URL: the origin should not see the gateway's
// address, and the Referer it sees should be its own page.
func (g *Gateway) fixReferer(req *request, h http.Header) {
	if !req.prefixed {
		return
	}
	if u := g.prefixedReferer(req.r); u != nil {
		h.Set("Referer", u.String())
	}
}

// rewriteLocation keeps a redirect of a prefixed request on the gateway:
// Location http://origin/x (or /x, relative to the target) becomes
// /http://origin/x.
func rewriteLocation(h http.Header, target *url.URL) {
	loc := h.Get("Location")
	if loc == "" {
		return
	}
	u, err := target.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return
	}
	h.Set("Location", "/"+u.String())
}

// hopHeaders are the hop-by-hop headers of RFC 9110 7.6.1 (and the
// historical Proxy-Connection and Keep-Alive), which a proxy must not
// forward; Connection names more.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders deletes the hop-by-hop headers of h, including those
// its Connection header names.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
