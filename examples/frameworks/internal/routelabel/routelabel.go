// Package routelabel carries a framework's route pattern to httplimit:
// the adapter puts it in the request's context (With), and httplimit's
// Config.Route reads it back (Route).
package routelabel

import (
	"context"
	"net/http"
)

type key struct{}

// With returns r with pattern as its route label.
func With(r *http.Request, pattern string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), key{}, pattern))
}

// Route is an httplimit.Config.Route reading the label With set ("" if none).
func Route(r *http.Request) string {
	p, _ := r.Context().Value(key{}).(string)
	return p
}
