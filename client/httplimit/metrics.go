package httplimit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	near     *prometheus.CounterVec
	// Config.Slots: requests running under a slot, and waiting for one.
	slotsInFlight *prometheus.GaugeVec
	slotsQueued   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ration", Subsystem: "http", Name: "requests_total",
			Help: "Requests the HTTP middleware decided, by policy, route pattern and outcome."}, []string{"policy", "route", "outcome"}),
		near: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ration", Subsystem: "http", Name: "near_limit_total",
			Help: "Admitted requests that left the last layer's bucket below 20% of the policy's burst, by policy and route pattern."}, []string{"policy", "route"}),
	}
	m.slotsInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ration", Subsystem: "http", Name: "concurrency_in_flight",
		Help: "Requests running under a slot of the cluster-wide concurrency policy (Config.Slots), by policy."}, []string{"policy"})
	m.slotsQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ration", Subsystem: "http", Name: "concurrency_queued",
		Help: "Requests waiting for a slot of the cluster-wide concurrency policy (Config.Slots), by policy."}, []string{"policy"})
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.near, err = register(reg, m.near); err != nil {
		return nil, err
	}
	if m.slotsInFlight, err = register(reg, m.slotsInFlight); err != nil {
		return nil, err
	}
	if m.slotsQueued, err = register(reg, m.slotsQueued); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the equal collector already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *metrics) count(policy, route, outcome string) {
	if m != nil {
		m.requests.WithLabelValues(policy, route, outcome).Inc()
	}
}

func (m *metrics) nearLimit(policy, route string) {
	if m != nil {
		m.near.WithLabelValues(policy, route).Inc()
	}
}

func (m *metrics) inFlight(policy string, delta float64) {
	if m != nil {
		m.slotsInFlight.WithLabelValues(policy).Add(delta)
	}
}

func (m *metrics) queued(policy string, delta float64) {
	if m != nil {
		m.slotsQueued.WithLabelValues(policy).Add(delta)
	}
}
