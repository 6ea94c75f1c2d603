package ginlimit_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ration-dev/ration/examples/frameworks/ginlimit"
	"github.com/ration-dev/ration/examples/frameworks/internal/frameworktest"
)

func TestGin(t *testing.T) {
	gin.SetMode(gin.TestMode)
	calls := 0
	r := gin.New()
	m, err := ginlimit.New(frameworktest.Config(frameworktest.Client(t)))
	if err != nil {
		t.Fatal(err)
	}
	r.Use(m)
	handler := func(c *gin.Context) { calls++; c.String(200, "ok") }
	r.GET("/v1/items/:id", handler)
	r.Group("/v1/users").GET("/:id", handler)
	frameworktest.Check(t, r, &calls)
}
