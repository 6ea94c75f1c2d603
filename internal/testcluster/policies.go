package testcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
)

// ApplyPolicies waits for the feature switches (a concurrency or window
// policy is refused until they are on), then applies yaml at the leader,
// retrying until it is accepted.
func (c *Cluster) ApplyPolicies(t testing.TB, yaml string) {
	t.Helper()
	c.WaitForFeatures(t)
	WaitFor(t, DefaultWait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		_, err := c.Admin(c.Index(l)).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: yaml})
		return err
	})
}
