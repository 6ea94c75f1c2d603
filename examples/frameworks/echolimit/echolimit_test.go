package echolimit_test

import (
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ration-dev/ration/examples/frameworks/echolimit"
	"github.com/ration-dev/ration/examples/frameworks/internal/frameworktest"
)

func TestEcho(t *testing.T) {
	calls := 0
	e := echo.New()
	m, err := echolimit.New(frameworktest.Config(frameworktest.Client(t)))
	if err != nil {
		t.Fatal(err)
	}
	e.Use(m)
	handler := func(c echo.Context) error { calls++; return c.String(200, "ok") }
	e.GET("/v1/items/:id", handler)
	e.Group("/v1/users").GET("/:id", handler)
	frameworktest.Check(t, e, &calls)
}
