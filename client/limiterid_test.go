package client

import "testing"

// Keys whose attribute names or values contain separators stay distinct.
func TestLimiterIDUnambiguous(t *testing.T) {
	c := offlineClient(t)
	a := c.Limiter("p", Key{"a": "b=c"})
	b := c.Limiter("p", Key{"a=b": "c"})
	d := c.Limiter("p/a", Key{"b": "c"})
	if a == b || a == d || b == d {
		t.Fatal("different keys share a limiter")
	}
	if c.Limiter("p", Key{"a": "b=c"}) != a {
		t.Fatal("the same key got a new limiter")
	}
}
