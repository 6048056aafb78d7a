package originclient

import (
	"net/http"
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
