package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/examples/frameworks/echolimit"
	"github.com/ration-dev/ration/rationtest"
)

// One request per tenant and route pattern: /v1/items/1 and /v1/items/2
// are one route, "/v1/items/:id", so the second is a 429. The cluster is
// rationtest's; in production, client.Config.Servers lists yours.
func ExampleNew() {
	cl, err := rationtest.New(`policies:
  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 1, key: [tenant, route]}
`)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	c, err := cl.Client(client.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	e := echo.New()
	m, err := echolimit.New(httplimit.Config{
		Client:   c,
		Layers:   []httplimit.Layer{{Policy: "api", Rate: 1.0 / 3600, Burst: 1, Key: httplimit.ByCallerAndRoute("route")}},
		Identity: func(r *http.Request) (client.Key, error) { return client.Key{"tenant": r.Header.Get("X-Tenant")}, nil },
	})
	if err != nil {
		panic(err)
	}
	e.Use(m)
	e.GET("/v1/items/:id", func(c echo.Context) error { return c.String(200, "an item") })

	for _, path := range []string{"/v1/items/1", "/v1/items/2"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		line := fmt.Sprint(path, " ", rec.Code)
		if p := rec.Header().Get("RateLimit-Policy"); p != "" {
			line += " " + p
		}
		fmt.Println(line)
	}
	// Output:
	// /v1/items/1 200
	// /v1/items/2 429 "api";q=1;w=3600
}
