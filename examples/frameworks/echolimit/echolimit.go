// Package echolimit puts client/httplimit in front of a labstack/echo
// server as an echo.MiddlewareFunc.
//
//	e := echo.New()
//	m, err := echolimit.New(httplimit.Config{Client: c, Layers: layers})
//	e.Use(m)
//
// Use it with e.Use (or on a group or route), not e.Pre: Echo has routed
// the request by then, and the route pattern ("/v1/items/:id", c.Path())
// is the route label httplimit sees. A refused request is answered by
// httplimit (429 or 503 with its fields) and the handler is not called.
package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/examples/frameworks/internal/routelabel"
)

// New returns the middleware for cfg (httplimit.New's errors are
// returned). cfg.Route, if set, is replaced: the route is Echo's.
func New(cfg httplimit.Config) (echo.MiddlewareFunc, error) {
	cfg.Route = routelabel.Route
	mw, err := httplimit.New(cfg)
	if err != nil {
		return nil, err
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var err error
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				err = next(c)
			}))
			r := c.Request()
			h.ServeHTTP(c.Response(), routelabel.With(r, c.Path()))
			return err
		}
	}, nil
}
