// Package chilimit puts client/httplimit in front of a go-chi/chi router.
//
//	r := chi.NewRouter()
//	mw, err := httplimit.New(httplimit.Config{Client: c, Layers: layers, Route: chilimit.Route(r)})
//	r.Use(mw.Wrap)
//
// chi routes after the middlewares of r.Use have run, so a route pattern
// is not known to them yet; Route asks the router which pattern the
// request will match, as httplimit.MuxRoute does for a ServeMux.
package chilimit

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// Route returns an httplimit.Config.Route that names a request by the
// pattern router will route it to, subrouters' patterns joined
// ("/v1/items/{id}"), or "" when no route matches.
func Route(router chi.Routes) func(*http.Request) string {
	return func(r *http.Request) string {
		rctx := chi.NewRouteContext()
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if !router.Match(rctx, r.Method, path) {
			return ""
		}
		return rctx.RoutePattern()
	}
}
