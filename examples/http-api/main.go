// Command http-api is a small API behind ration's HTTP middleware
// (client/httplimit): two tenants authenticated by API key, a cheap route
// and an expensive one weighted 5, each request charged to two policies
// (per tenant and route, then per tenant), answered 429 with RateLimit
// fields and a problem+json body when over quota.
//
//	make cluster
//	./bin/rationctl policy apply -f examples/http-api/policies.yaml --servers 127.0.0.1:7400
//	RATION_SERVERS=127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402 go run ./examples/http-api
//	curl -i -H 'X-API-Key: acme-secret-key' -X POST localhost:8080/v1/reports
//
// Environment: RATION_SERVERS (default the local cluster's three
// servers), ADDR (default 127.0.0.1:8080), CLIENT_ID (default
// http-api-<hostname>-<pid>).
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/client/inflight"
)

// apiKeys maps each API key to its tenant. A real service would look keys
// up in its own store (and keep only their hashes).
var apiKeys = map[string]string{
	"acme-secret-key":   "acme",
	"globex-secret-key": "globex",
}

// authenticate resolves the X-API-Key header to a tenant and stores it as
// the request's principal, which the limiter charges. Unknown keys get
// 401. Health checks and metrics need no key.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		tenant, ok := lookupKey(r.Header.Get("X-API-Key"))
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("WWW-Authenticate", `ApiKey header="X-API-Key"`)
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Unauthorized", "status": 401,
				"detail": "Send a valid API key in the X-API-Key header."})
			return
		}
		next.ServeHTTP(w, r.WithContext(httplimit.WithPrincipal(r.Context(), tenant)))
	})
}

func lookupKey(key string) (string, bool) {
	found := ""
	for k, tenant := range apiKeys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			found = tenant
		}
	}
	return found, found != ""
}

// newHandler builds the service: routes, the limiter, authentication.
func newHandler(c *client.Client, reg prometheus.Registerer, gatherer prometheus.Gatherer) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := httplimit.PrincipalFromContext(r.Context())
		writeJSON(w, map[string]any{"tenant": tenant, "items": []string{"anvil", "rocket skates"}})
	})
	mux.HandleFunc("POST /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := httplimit.PrincipalFromContext(r.Context())
		writeJSON(w, map[string]any{"tenant": tenant, "report": "quarterly", "status": "generated"})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))

	lim, err := httplimit.New(httplimit.Config{
		Client: c,
		Layers: []httplimit.Layer{
			// RateLimit-Policy states each policy's rate and burst as
			// the cluster holds them (read by the client).
			{Policy: "api-tenant-route", Key: httplimit.ByCallerAndRoute("route")},
			{Policy: "api-tenant", Key: httplimit.ByCaller()},
		},
		// The default identity is the principal authenticate stored:
		// {"tenant": ...}. Routes are the mux's patterns.
		Route:     httplimit.MuxRoute(mux),
		Cost:      httplimit.CostByRoute(map[string]int64{"POST /v1/reports": 5}, 1),
		AllowList: []func(*http.Request) bool{httplimit.PathIs("/healthz", "/metrics")},
		// At most 4 of a tenant's requests run at once on this replica.
		InFlight:   inflight.New(inflight.Config{Limit: 4, MaxQueue: 8, MaxWait: time.Second}),
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	return authenticate(lim.Wrap(mux)), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	servers := strings.Split(getenv("RATION_SERVERS", "127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402"), ",")
	addr := getenv("ADDR", "127.0.0.1:8080")
	host, _ := os.Hostname()
	id := getenv("CLIENT_ID", fmt.Sprintf("http-api-%s-%d", host, os.Getpid()))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A new key's first request waits up to FirstLeaseWait for its lease
	// (then 503); later ones never wait.
	c, err := client.New(ctx, client.Config{Servers: servers, ClientID: id, FirstLeaseWait: 250 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(client.NewCollector(c))
	h, err := newHandler(c, reg, reg)
	if err != nil {
		log.Fatal(err)
	}
	// The policies' rates and bursts for RateLimit-Policy: read once
	// before serving (the client re-reads them every 30 s).
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := c.WaitPolicies(wait); err != nil {
		log.Printf("serving without RateLimit-Policy until the policies are read: %v", err)
	}
	cancel()
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("http-api on http://%s (ration servers %s, client %s)", addr, strings.Join(servers, ","), id)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	// Stop admitting, then give the leases' unspent tokens back.
	if err := c.Close(); err != nil {
		log.Printf("releasing leases: %v", err)
	}
}
