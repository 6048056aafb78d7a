package main

import (
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jdx/go-netrc"
	"github.com/stampede-dev/stampede/originclient"
)

// getHTTP is what get's flags say of the requests to the server: headers
// and credentials (fetch.Config.Header, which never goes to peers or
// trackers), and the transport (originclient.HTTPOptions).
type getHTTP struct {
	headers        []string
	userAgent      string
	user           string
	netrc          bool
	netrcFile      string
	proxy          string
	cacert         string
	insecure       bool
	connectTimeout time.Duration
}

func (h *getHTTP) define(fs *flagSet) {
	fs.StringArrayVarP(&h.headers, "header", "H", nil, "send `HEADER`, 'Name: value', with every request to the server (repeatable); never to peers or trackers")
	fs.StringVar(&h.userAgent, "user-agent", "", "send User-Agent `UA` (default \"stampede\"; \"\": none)")
	fs.StringVarP(&h.user, "user", "u", "", "Basic authentication as `USER:PASSWORD` (no prompt: without the colon it is refused), to the URL's host only")
	fs.BoolVar(&h.netrc, "netrc", false, "take the login and password for the URL's host from ~/.netrc (a machine entry, else default)")
	fs.StringVar(&h.netrcFile, "netrc-file", "", "as --netrc, from `FILE`")
	fs.StringVar(&h.proxy, "proxy", "", "send the requests to the server and trackers through `URL` (http://, https://, socks5://; HOST:PORT means http://); default: HTTPS_PROXY, HTTP_PROXY, NO_PROXY")
	fs.StringVar(&h.cacert, "cacert", "", "trust the certificate authorities in the PEM `FILE` instead of the system's")
	fs.BoolVarP(&h.insecure, "insecure", "k", false, "do not check the server's certificate (the pieces are still checked against the manifest, which comes over that connection)")
	fs.DurationVar(&h.connectTimeout, "connect-timeout", 30*time.Second, "give up connecting to the server (TLS handshake included) after `DURATION`: a network failure, retried as others are")
}

// client returns the HTTP client of every download: to the servers, and
// to the trackers their manifests name.
func (h *getHTTP) client(parallel int) (*http.Client, error) {
	if h.connectTimeout < 0 {
		return nil, usageErrorf("--connect-timeout %v: must not be negative", h.connectTimeout)
	}
	o := originclient.HTTPOptions{Parallel: parallel, Insecure: h.insecure, ConnectTimeout: h.connectTimeout}
	if h.proxy != "" {
		u, err := parseProxy("--proxy", h.proxy)
		if err != nil {
			return nil, err
		}
		o.Proxy = u
	}
	if h.cacert != "" {
		pem, err := os.ReadFile(h.cacert)
		if err != nil {
			return nil, usageErrorf("--cacert: %v", err)
		}
		o.RootCAs = x509.NewCertPool()
		if !o.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("--cacert %s: no PEM certificate in it", h.cacert)
		}
	}
	c, err := o.Client()
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return c, nil
}

// parseProxy reads a proxy flag (get's --proxy, the gateway's
// --upstream-proxy) as curl does: a URL, or HOST:PORT for an HTTP proxy;
// empty for none. An error names the proxy without its password.
func parseProxy(flag, s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	raw := s
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, usageErrorf("%s: not a URL: %v", flag, errors.Unwrap(err))
	}
	switch {
	case u.Hostname() == "":
		return nil, usageErrorf("%s %q: not a URL with a host (http://HOST:PORT)", flag, redactedURL(raw, u))
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" && u.Scheme != "socks5h":
		return nil, usageErrorf("%s %q: want an http://, https://, socks5:// or socks5h:// proxy", flag, redactedURL(raw, u))
	}
	return u, nil
}

// redactedURL is u without its password, or raw if it had none.
func redactedURL(raw string, u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return u.Redacted()
	}
	return raw
}

// managedHeaders are the headers stampede sets itself on each request, so
// -H may not: the host comes from the URL, the Range and the validators
// are a piece's, the bytes must arrive as they were hashed (no
// Content-Encoding asked for), and the rest belong to the connection.
var managedHeaders = []string{"Host", "Range", "If-Range", "Accept-Encoding", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Upgrade"}

// header returns the headers -H and --user-agent give, sent with every
// request to the server. A User-Agent given with -H wins over
// --user-agent, as in curl. Errors never quote a header's value, which may
// be a credential.
func (h *getHTTP) header(userAgentSet bool) (http.Header, error) {
	hdr := http.Header{}
	for _, line := range h.headers {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			first, _, _ := strings.Cut(line, " ")
			return nil, usageErrorf("-H %q...: no colon; want 'NAME: VALUE'", first)
		}
		value = strings.TrimSpace(value)
		switch {
		case !validHeaderName(name):
			return nil, usageErrorf("-H %q: not a header name", name)
		case !validHeaderValue(value):
			return nil, usageErrorf("-H %s: its value has a control character", name)
		}
		for _, m := range managedHeaders {
			if strings.EqualFold(name, m) {
				return nil, usageErrorf("-H %s: stampede sets %s itself", name, m)
			}
		}
		hdr.Add(name, value)
	}
	if userAgentSet && hdr.Get("User-Agent") == "" {
		// An empty value makes Go's client send no User-Agent, as curl -A "".
		hdr["User-Agent"] = []string{h.userAgent}
	}
	return hdr, nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110,
// section 5.1).
func validHeaderName(name string) bool {
	return name != "" && strings.IndexFunc(name, func(r rune) bool {
		return r <= ' ' || r > '~' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	}) < 0
}

// validHeaderValue reports whether v has no control character but tab,
// which would end the header or corrupt the request.
func validHeaderValue(v string) bool {
	return strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) < 0
}

// getCredentials are where a URL's Basic credentials come from, first to
// last: a -H Authorization (sent as given), the URL's user:password@, -u,
// then the .netrc entry of the URL's host. They go to the URL's scheme,
// host and port only, and the host's subdomains on those
// (originclient.Config.AuthHost), so a redirect elsewhere does not carry
// them.
type getCredentials struct {
	user  *url.Userinfo // -u
	netrc *netrc.Netrc  // --netrc, --netrc-file
}

// credentials reads -u and the .netrc that --netrc or --netrc-file name.
// A -u without a colon is refused: curl would prompt for the password,
// which would leave a script waiting on a terminal.
func (h *getHTTP) credentials(e *env) (*getCredentials, error) {
	c := &getCredentials{}
	if h.user != "" {
		name, pass, ok := strings.Cut(h.user, ":")
		if !ok {
			return nil, usageErrorf("-u: want USER:PASSWORD (stampede does not prompt for the password; for an empty one, end with a colon)")
		}
		c.user = url.UserPassword(name, pass)
	}
	path := h.netrcFile
	if path == "" && h.netrc {
		home := ""
		if e.getenv != nil {
			home = e.getenv("HOME")
		}
		if home == "" {
			return nil, usageErrorf("--netrc: no HOME to find .netrc in; give --netrc-file FILE")
		}
		path = filepath.Join(home, ".netrc")
	}
	if path == "" {
		return c, nil
	}
	// Read here rather than by netrc.Parse, which runs gpg on a name
	// ending in .gpg.
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && h.netrcFile == "":
		return c, nil // --netrc uses ~/.netrc when there, as curl and wget do
	case err != nil:
		return nil, usageErrorf("--netrc-file: %v", err)
	}
	if c.netrc, err = parseNetrc(string(b)); err != nil {
		return nil, usageErrorf("%s: %v", path, err)
	}
	return c, nil
}

// parseNetrc parses a .netrc. go-netrc v1.0.0 reads the word two after
// "machine" as its name without checking there is one, and panics on a
// file that ends too soon.
func parseNetrc(s string) (n *netrc.Netrc, err error) {
	defer func() {
		if recover() != nil {
			n, err = nil, errors.New("malformed: a machine entry without its name")
		}
	}()
	return netrc.ParseString(s)
}

// forURL returns the Authorization header of a download from u, whose
// user:password@ (taken out of the URL, so it is never printed) is
// inURL: "" when there are no credentials for it.
func (c *getCredentials) forURL(u *url.URL, inURL *url.Userinfo) string {
	who := inURL
	if who == nil {
		who = c.user
	}
	if who == nil && c.netrc != nil {
		if login, pass := netrcLogin(c.netrc, u.Hostname()); login != "" || pass != "" {
			who = url.UserPassword(login, pass)
		}
	}
	if who == nil {
		return ""
	}
	pass, _ := who.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(who.Username()+":"+pass))
}

// netrcLogin returns the login and password of host's machine entry, else
// of the default entry, as curl looks them up (the host name without the
// port, in any letter case).
func netrcLogin(n *netrc.Netrc, host string) (login, password string) {
	var def *netrc.Machine
	for _, m := range n.Machines() {
		switch {
		case m.IsDefault:
			if def == nil {
				def = m
			}
		case strings.EqualFold(m.Name, host):
			return m.Get("login"), m.Get("password")
		}
	}
	if def == nil {
		return "", ""
	}
	return def.Get("login"), def.Get("password")
}

// stripUserinfo takes user:password@ out of u, so that the URL printed,
// logged or in --json never carries it, and returns it.
func stripUserinfo(u *url.URL) *url.Userinfo {
	who := u.User
	u.User = nil
	return who
}
