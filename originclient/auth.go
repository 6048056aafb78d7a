package originclient

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// credentialHeader reports whether the header named name carries
// credentials: those Go's client drops on a redirect to another host
// (net/http's makeHeadersCopier).
func credentialHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Authorization", "Www-Authenticate", "Cookie", "Cookie2", "Proxy-Authorization", "Proxy-Authenticate":
		return true
	}
	return false
}

// authScope is where Config.Header's credentials may go, from
// Config.AuthHost: the scheme, host and port of the URL they were given
// for ("https://example.com:8443"), as curl keeps them only while none of
// the three changes. An https URL's credentials must not travel in clear
// to http on the same host, nor to another service of that host, which a
// redirect or a manifest link could name. Go's client, on a redirect,
// ignores both scheme and port.
//
// Subdomains of the host, on the same scheme and port, get them too: Go's
// client keeps credentials on a redirect to a subdomain (curl does not),
// and an origin may well send its downloads to its own dl.example.com.
// Wherever Go's rule is broader than this one, this one holds: Go ignores
// the scheme and the port, and takes a name in Unicode and its ASCII form
// for one host, which hostKey does not.
//
// An AuthHost without a scheme is a bare host name, and then the scheme
// and port are not checked: the caller did not say them.
type authScope struct {
	scheme string // lower case; "" for a bare host name
	host   string // hostKey form
	port   string // the scheme's default when the URL names none
}

// parseAuthScope reads Config.AuthHost. One that does not parse allows
// nothing.
func parseAuthScope(s string) authScope {
	if !strings.Contains(s, "://") {
		return authScope{host: hostKey(s)}
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" {
		return authScope{}
	}
	return authScope{scheme: strings.ToLower(u.Scheme), host: hostKey(u.Hostname()), port: effectivePort(u)}
}

// allows reports whether credentials may go to u.
func (a authScope) allows(u *url.URL) bool {
	if !isDomainOrSubdomain(hostKey(u.Hostname()), a.host) {
		return false
	}
	return a.scheme == "" || strings.EqualFold(u.Scheme, a.scheme) && effectivePort(u) == a.port
}

// guardRedirects returns cl, or, when req carries credentials, a copy of
// cl that drops them from each redirect a does not allow. Go's client
// decides alone which redirects keep them, by host name only: an https
// URL redirected to http on the same host would send them in clear.
func (a authScope) guardRedirects(cl *http.Client, req *http.Request) *http.Client {
	carries := false
	for k := range req.Header {
		carries = carries || credentialHeader(k)
	}
	if !carries {
		return cl
	}
	guarded := *cl
	next := cl.CheckRedirect
	guarded.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if !a.allows(r.URL) {
			for k := range r.Header {
				if credentialHeader(k) {
					delete(r.Header, k)
				}
			}
		}
		if next != nil {
			return next(r, via)
		}
		// net/http's default, which a CheckRedirect of our own replaces.
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &guarded
}

// effectivePort is u's port, or its scheme's default.
func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// hostKey is a host name as compared here: in lower case, since host
// names are not case-sensitive. Go's client also turns international
// names into their ASCII form; here a name given in Unicode and met again
// in ASCII does not match, and gets no credentials.
func hostKey(host string) string { return strings.ToLower(host) }

// isDomainOrSubdomain reports whether sub is parent or one of its
// subdomains, as net/http decides whether a redirect keeps credentials.
// An empty parent matches nothing.
func isDomainOrSubdomain(sub, parent string) bool {
	switch {
	case parent == "":
		return false
	case sub == parent:
		return true
	case strings.ContainsAny(sub, ":%"):
		return false // an IPv6 address, whose zone could end in ".parent"
	}
	return strings.HasSuffix(sub, parent) && sub[len(sub)-len(parent)-1] == '.'
}
