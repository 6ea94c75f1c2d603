// Package ginlimit puts client/httplimit in front of a gin-gonic/gin
// engine as a gin.HandlerFunc.
//
//	r := gin.New()
//	m, err := ginlimit.New(httplimit.Config{Client: c, Layers: layers})
//	r.Use(m)
//
// Gin has routed the request before its middlewares run, so the route
// pattern ("/v1/items/:id", c.FullPath()) is the route label httplimit
// sees. A refused request is answered by httplimit (429 or 503 with its
// fields) and the chain is aborted.
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/examples/frameworks/internal/routelabel"
)

// New returns the middleware for cfg (httplimit.New's errors are
// returned). cfg.Route, if set, is replaced: the route is Gin's.
func New(cfg httplimit.Config) (gin.HandlerFunc, error) {
	cfg.Route = routelabel.Route
	mw, err := httplimit.New(cfg)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) {
		passed := false
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		}))
		r := c.Request
		h.ServeHTTP(c.Writer, routelabel.With(r, c.FullPath()))
		if !passed {
			c.Abort()
		}
	}, nil
}
