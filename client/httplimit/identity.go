package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ration-dev/ration/client"
)

// KeyFunc derives who a request is charged to: the key attributes of its
// caller, such as {"tenant": "acme"}. It must use only what the caller
// cannot forge: the authenticated principal, or the connection's address.
type KeyFunc func(*http.Request) (client.Key, error)

// Identity is a request's caller and route, as a Layer's Key sees them.
type Identity struct {
	// Key is what Config.Identity returned. Treat it as read-only.
	Key client.Key
	// Route is Config.Route's answer: a route pattern such as
	// "POST /v1/reports", or "" for a request no route matched.
	Route string
}

type principalKey struct{}

// WithPrincipal returns a context carrying the authenticated principal
// (a tenant, account or API client ID). The application's authentication
// middleware calls it after verifying the caller's credentials, and
// passes the request on with r.WithContext.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFromContext returns the principal WithPrincipal stored.
func PrincipalFromContext(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok && p != ""
}

// ErrNoPrincipal is Principal's error for a request that carries no
// principal: the limiter runs before authentication, or on a route that
// does not authenticate (use ClientIP there, explicitly).
var ErrNoPrincipal = errors.New("httplimit: no authenticated principal in the request context (does authentication run before the limiter?)")

// Principal keys a request by its authenticated principal
// (PrincipalFromContext) under the attribute attr: {attr: principal}. It
// is the default Identity, with attr "tenant". Headers play no part: a
// caller can only be charged as who it authenticated as.
func Principal(attr string) KeyFunc {
	return func(r *http.Request) (client.Key, error) {
		p, ok := PrincipalFromContext(r.Context())
		if !ok {
			return nil, ErrNoPrincipal
		}
		return client.Key{attr: p}, nil
	}
}

// ClientIP keys a request by its client's IP address under the attribute
// attr, for routes that serve unauthenticated callers. Choose it
// explicitly: callers behind one NAT or proxy share a budget, and one
// caller with many addresses gets many.
//
// The address is the connection's peer (r.RemoteAddr), unless the peer is
// one of trustedProxies: then X-Forwarded-For is read from the right, past
// every trusted hop, and the first untrusted address is the client (the
// rightmost untrusted hop). A caller can put anything in the header, but
// only to the left of what the trusted proxies appended, so a forged
// header never changes the key; without trusted proxies the header is
// ignored, as are Forwarded, X-Real-IP and the like. If every hop is
// trusted, the leftmost is used; a hop that does not parse stops the walk
// at the last trusted address.
//
// IPv4 addresses (and IPv4-mapped IPv6) are keyed as themselves; IPv6
// addresses by their /64, which one subscriber usually holds whole.
func ClientIP(attr string, trustedProxies ...netip.Prefix) KeyFunc {
	trusted := append([]netip.Prefix(nil), trustedProxies...)
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (client.Key, error) {
		ip, err := parseHop(r.RemoteAddr)
		if err != nil {
			return nil, fmt.Errorf("httplimit: remote address %q: %w", r.RemoteAddr, err)
		}
		if isTrusted(ip) {
			hops := forwardedFor(r.Header)
			for i := len(hops) - 1; i >= 0; i-- {
				a, err := parseHop(hops[i])
				if err != nil {
					break
				}
				ip = a
				if !isTrusted(a) {
					break
				}
			}
		}
		return client.Key{attr: ipKey(ip)}, nil
	}
}

// forwardedFor returns every X-Forwarded-For hop, in order, across
// repeated header lines.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		for _, hop := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// parseHop parses "ip", "ip:port" or "[ipv6]:port".
func parseHop(s string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, err
	}
	return a.WithZone("").Unmap(), nil
}

func ipKey(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// MuxRoute returns a Config.Route that names a request by the pattern mux
// would route it to ("" when none matches), for a limiter wrapped around
// the mux. A limiter wrapped around each handler inside the mux needs no
// Route: the default reads r.Pattern, which the mux sets.
func MuxRoute(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		return pattern
	}
}

// ByCaller keys a layer by the caller alone: Identity.Key (a per-tenant
// layer). It is the default Layer.Key.
func ByCaller() func(*http.Request, Identity) (client.Key, error) {
	return func(_ *http.Request, id Identity) (client.Key, error) {
		k := make(client.Key, len(id.Key))
		for a, v := range id.Key {
			k[a] = v
		}
		return k, nil
	}
}

// ByCallerAndRoute keys a layer by the caller and the route pattern,
// the route under the attribute attr (a per-tenant-and-route layer).
func ByCallerAndRoute(attr string) func(*http.Request, Identity) (client.Key, error) {
	return func(_ *http.Request, id Identity) (client.Key, error) {
		k := make(client.Key, len(id.Key)+1)
		for a, v := range id.Key {
			k[a] = v
		}
		k[attr] = id.Route
		return k, nil
	}
}

// Global keys a layer by nothing: one budget for every caller, for a
// policy with no key attributes.
func Global() func(*http.Request, Identity) (client.Key, error) {
	return func(*http.Request, Identity) (client.Key, error) { return client.Key{}, nil }
}

// Cost says what a request costs, in the policies' tokens, given its route
// pattern. A cost of 0 admits the request without charging anything. A
// negative cost is refused through Config.OnError (ErrInvalidCost; by
// default 500, ProblemCostInvalid), never admitted free; a cost above
// every policy's burst (above client.MaxCost at most) is a 429 without
// Retry-After, like any cost a layer's burst cannot hold.
type CostFunc func(r *http.Request, route string) int64

// ErrInvalidCost is the error Config.OnError gets when Config.Cost priced
// a request below 0.
var ErrInvalidCost = errors.New("httplimit: negative request cost")

// Cost is a constant cost.
func Cost(n int64) CostFunc {
	return func(*http.Request, string) int64 { return n }
}

// CostByRoute is a weight table: a request on a route pattern in table
// costs that much, any other costs otherwise.
func CostByRoute(table map[string]int64, otherwise int64) CostFunc {
	t := make(map[string]int64, len(table))
	for k, v := range table {
		t[k] = v
	}
	return func(_ *http.Request, route string) int64 {
		if c, ok := t[route]; ok {
			return c
		}
		return otherwise
	}
}

// PathIs is an allow-list predicate: the request's path is one of paths
// (exactly), e.g. "/healthz".
func PathIs(paths ...string) func(*http.Request) bool {
	set := make(map[string]bool, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return func(r *http.Request) bool { return set[r.URL.Path] }
}

// PeerIn is an allow-list predicate for internal callers: the connection's
// peer address (r.RemoteAddr, never a header) is in one of prefixes.
// Behind a proxy every request's peer is the proxy: list the internal
// callers' own addresses, not the proxy's.
func PeerIn(prefixes ...netip.Prefix) func(*http.Request) bool {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(r *http.Request) bool {
		a, err := parseHop(r.RemoteAddr)
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// canonical is a key's string form for the in-flight limiter.
func canonical(key client.Key) string { return client.LimiterID("", key) }
