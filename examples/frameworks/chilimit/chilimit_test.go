package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/examples/frameworks/chilimit"
	"github.com/ration-dev/ration/examples/frameworks/internal/frameworktest"
)

func TestChi(t *testing.T) {
	calls := 0
	r := chi.NewRouter()
	cfg := frameworktest.Config(frameworktest.Client(t))
	cfg.Route = chilimit.Route(r)
	mw, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Use(mw.Wrap)
	handler := func(w http.ResponseWriter, _ *http.Request) { calls++ }
	r.Get("/v1/items/{id}", handler)
	r.Route("/v1/users", func(r chi.Router) { r.Get("/{id}", handler) }) // a subrouter
	frameworktest.Check(t, r, &calls)
}
