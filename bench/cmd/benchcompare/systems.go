package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/ration-dev/ration/client"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// decide is one rate-limit decision for cost 1: admitted or not, or an
// error when the system could not decide (the caller then rejects).
type decide func(ctx context.Context) (bool, error)

// quota is one token bucket: rate r per second, burst B, in whole tokens.
type quota struct {
	ratePerSec int64
	burst      int64
}

// --- ration ---

// rationDecider returns AllowN(1) on policy/key of a fresh client.Client,
// after waiting for its first lease.
func rationDecider(servers []string, clientID, policy, key string) (decide, func(), error) {
	c, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: clientID})
	if err != nil {
		return nil, nil, err
	}
	lim := c.Limiter(policy, client.Key{"tenant": key})
	deadline := time.Now().Add(10 * time.Second)
	for !hasLease(lim) {
		if time.Now().After(deadline) {
			c.Close()
			return nil, nil, fmt.Errorf("ration: no lease on %s/%s after 10s (%v)", policy, key, lim.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func(context.Context) (bool, error) { return lim.AllowN(1).Allowed, nil }, func() { _ = c.Close() }, nil
}

// hasLease probes with a zero-cost decision, which never spends tokens.
func hasLease(l *client.Limiter) bool {
	d := l.AllowN(0)
	return d.Reason != client.NoLease && d.Reason != client.Unavailable
}

// --- Redis GCRA (go-redis/redis_rate) ---

func newRedisClient(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, MinIdleConns: 0,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
}

func redisDecider(rdb *redis.Client, key string, q quota) decide {
	lim := redis_rate.NewLimiter(rdb)
	l := redis_rate.Limit{Rate: int(q.ratePerSec), Burst: int(q.burst), Period: time.Second}
	return func(ctx context.Context) (bool, error) {
		res, err := lim.AllowN(ctx, key, l, 1)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}
}

// --- Gubernator ---

// guberCluster is a three-daemon Gubernator cluster in this process.
type guberCluster struct {
	daemons []*guber.Daemon
	clients []guber.V1Client
}

func startGubernator(n int) (*guberCluster, error) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	g := &guberCluster{}
	var peers []guber.PeerInfo
	for i := 0; i < n; i++ {
		gp, err := freePort()
		if err != nil {
			return nil, err
		}
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(gp)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
			Logger: logrus.NewEntry(log), InstanceID: addr,
			GRPCListenAddress: addr, AdvertiseAddress: addr,
			HTTPListenAddress: "127.0.0.1:" + strconv.Itoa(hp),
			// Behaviors: Gubernator's defaults (GlobalSyncWait 100ms, BatchWait 500µs).
		})
		cancel()
		if err != nil {
			g.stop()
			return nil, err
		}
		g.daemons = append(g.daemons, d)
		peers = append(peers, guber.PeerInfo{GRPCAddress: addr, HTTPAddress: d.HTTPListener.Addr().String()})
	}
	for _, d := range g.daemons {
		d.SetPeers(peers)
	}
	for _, p := range peers {
		c, err := guber.DialV1Server(p.GRPCAddress, nil)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.clients = append(g.clients, c)
	}
	return g, nil
}

func (g *guberCluster) stop() {
	for _, d := range g.daemons {
		d.Close()
	}
}

// decider asks node i%n for name/key under q, GLOBAL or not. The algorithm
// is LEAKY_BUCKET: Limit tokens per Duration with capacity Burst is
// Gubernator's token bucket in the sense of r and B (its TOKEN_BUCKET
// resets the whole limit every Duration, a fixed window).
func (g *guberCluster) decider(i int, name, key string, q quota, global bool) decide {
	c := g.clients[i%len(g.clients)]
	beh := guber.Behavior_BATCHING
	if global {
		beh = guber.Behavior_GLOBAL
	}
	return func(ctx context.Context) (bool, error) {
		resp, err := c.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
			Name: name, UniqueKey: key, Hits: 1, Limit: q.ratePerSec, Duration: 1000, Burst: q.burst,
			Algorithm: guber.Algorithm_LEAKY_BUCKET, Behavior: beh,
		}}})
		if err != nil {
			return false, err
		}
		r := resp.GetResponses()[0]
		if r.GetError() != "" {
			return false, errors.New(r.GetError())
		}
		return r.GetStatus() == guber.Status_UNDER_LIMIT, nil
	}
}

// --- golang.org/x/time/rate ---

func xrateDecider(q quota) decide {
	lim := rate.NewLimiter(rate.Limit(q.ratePerSec), int(q.burst))
	return func(context.Context) (bool, error) { return lim.Allow(), nil }
}
