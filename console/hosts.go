package console

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// AnyHost in Options.AllowedHosts turns the Host check off, for a server
// that checks the Host header itself (a reverse proxy that rewrites it).
const AnyHost = "*"

// hostList is an allow-list of Host header names. A page on another site
// can point a name it controls at 127.0.0.1 (DNS rebinding) and then read a
// loopback console as same-origin: its requests carry its own name as Host,
// so answering only the names the console is meant to be reached by defeats
// it.
type hostList struct {
	any      bool
	names    map[string]bool // lower case, without port
	suffixes []string        // ".example.com" for "*.example.com"
	remote   bool            // a name that is not loopback is allowed
}

func newHostList(hosts []string) hostList {
	l := hostList{names: map[string]bool{}}
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case h == "":
		case h == AnyHost:
			l.any, l.remote = true, true
		case strings.HasPrefix(h, "*."):
			l.suffixes = append(l.suffixes, h[1:])
			l.remote = true
		default:
			h = hostName(h)
			l.names[h] = true
			l.remote = l.remote || !loopbackName(h)
		}
	}
	return l
}

// allows reports whether the request's Host is one the console answers:
// a loopback name (localhost, *.localhost, 127.0.0.0/8, ::1), which only
// this machine's clients send, or a name of the list.
func (l hostList) allows(host string) bool {
	if l.any {
		return true
	}
	h := hostName(strings.ToLower(host))
	if loopbackName(h) || l.names[h] {
		return true
	}
	for _, s := range l.suffixes {
		if strings.HasSuffix(h, s) && len(h) > len(s) {
			return true
		}
	}
	return false
}

// hostName is host without its port and IPv6 brackets.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// loopbackName reports whether the name (no port) is a loopback address or
// a name that resolves to one by definition (RFC 6761).
func loopbackName(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether a listen address (host:port) only accepts
// connections from this machine: an empty host or 0.0.0.0 does not.
func LoopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return h != "" && loopbackName(strings.ToLower(h))
}

// AllowHosts returns a handler that answers only requests whose Host header
// is a loopback name or one of hosts (names without port; "*.example.com"
// for its subdomains; AnyHost for every one), and
// refuses the others with 421 Misdirected Request. The console applies it
// itself (Options.AllowedHosts); a server that serves more next to it
// (its /metrics) wraps those with it too.
func AllowHosts(hosts []string, next http.Handler) http.Handler {
	l := newHostList(hosts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.allows(r.Host) {
			refuseHost(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func refuseHost(w http.ResponseWriter) {
	// The Host is not echoed: it is the requester's text.
	http.Error(w, "idem console: this Host is not one the console answers (see Options.AllowedHosts, idem console --allow-host)",
		http.StatusMisdirectedRequest)
}

// mountPath is the path the console is mounted under, as the browser sees
// it (before any http.StripPrefix): the request's original path up to its
// last slash, or up to static/ for the console's files. Cookies are scoped
// to it, so an application serving the console under /ops/idem/ does not
// hand the console's cookies to its other paths.
func mountPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && r.RequestURI != "" {
		p = u.EscapedPath()
	}
	if i := strings.LastIndex(p, "/static/"); i >= 0 {
		return p[:i+1]
	}
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i+1]
	}
	return "/"
}
