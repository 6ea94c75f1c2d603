package rationtest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/rationtest"
)

// A handler test against a real cluster: the second request of a tenant
// whose burst is 1 gets a 429. In a test, rationtest.Start(t, policies)
// and cl.NewClient(t, cfg) clean up by themselves.
func ExampleNew() {
	cl, err := rationtest.New(`policies:
  - {name: api, algorithm: token-bucket, rate: 1/h, burst: 1, key: [tenant]}
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

	mw, err := httplimit.New(httplimit.Config{
		Client: c,
		Layers: []httplimit.Layer{{Policy: "api", Rate: 1.0 / 3600, Burst: 1}},
		// Your authentication decides who the caller is; a header here.
		Identity: func(r *http.Request) (client.Key, error) { return client.Key{"tenant": r.Header.Get("X-Tenant")}, nil },
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	for range 2 {
		req := httptest.NewRequest("GET", "/items", nil)
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 false
	// 429 true
}
