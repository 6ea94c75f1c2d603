package edge

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the edge's own Prometheus collector (the embedded client's
// decisions per policy come from client.NewCollector beside it).
type metrics struct {
	e *Edge

	rlsCalls, rlsInvalid, checkCalls, checkInvalid atomic.Int64
	missing                                        atomic.Int64

	mu          sync.Mutex
	descriptors map[[2]string]int64 // (domain, result)
	checks      map[string]int64    // by reason

	calls, invalid, desc, check, ready, missingDesc, lastSeen *prometheus.Desc
	resOpen, resExpired                                       *prometheus.Desc
}

func newMetrics(e *Edge) *metrics {
	return &metrics{e: e, descriptors: map[[2]string]int64{}, checks: map[string]int64{},
		calls:   prometheus.NewDesc("ration_edge_calls_total", "Calls answered, by API (rls: Envoy's ShouldRateLimit; check: Admission/Check and POST /v1/check).", []string{"api"}, nil),
		invalid: prometheus.NewDesc("ration_edge_invalid_calls_total", "Calls refused as INVALID_ARGUMENT (or FAILED_PRECONDITION: a concurrency policy, a reservation settled already; NOT_FOUND: an unknown reservation; RESOURCE_EXHAUSTED: --max-reservations open), by API.", []string{"api"}, nil),
		desc: prometheus.NewDesc("ration_edge_descriptors_total", "Envoy descriptors by domain (\"\" for a domain not configured) and outcome: ok, over_limit, shadow_over_limit (a shadow rule would have refused; answered OK), unmatched, unlimited, replaced, deny_all, not_evaluated, negative_hits, limit_override_ignored.",
			[]string{"domain", "result"}, nil),
		check:       prometheus.NewDesc("ration_edge_check_items_total", "Check items by the decision's reason.", []string{"reason"}, nil),
		ready:       prometheus.NewDesc("ration_edge_ready", "1 once the edge has reached the cluster (and its client ID is not in use elsewhere).", nil, nil),
		missingDesc: prometheus.NewDesc("ration_edge_policies_missing", "Policies the Envoy configuration or --config needs that the cluster does not have (their requests are refused until applied).", nil, nil),
		lastSeen:    prometheus.NewDesc("ration_edge_cluster_last_seen_seconds", "Seconds since the edge last read the cluster's policy list (-1: never).", nil, nil),
		resOpen:     prometheus.NewDesc("ration_edge_reservations_open", "Check API reservations open (reserved, not settled, hold not ended).", nil, nil),
		resExpired:  prometheus.NewDesc("ration_edge_reservations_expired_total", "Check API reservations whose hold ended unsettled (charged their estimate).", nil, nil),
	}
}

func (m *metrics) descriptor(domain, result string) {
	if conf := m.e.envoy.Load(); conf == nil || !conf.Domain(domain) {
		domain = "" // bounded labels: only configured domains
	}
	m.mu.Lock()
	m.descriptors[[2]string{domain, result}]++
	m.mu.Unlock()
}

func (m *metrics) checkResult(reason string) {
	m.mu.Lock()
	m.checks[reason]++
	m.mu.Unlock()
}

// descriptorCount reads one counter (tests).
func (m *metrics) descriptorCount(domain, result string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.descriptors[[2]string{domain, result}]
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.calls, m.invalid, m.desc, m.check, m.ready, m.missingDesc, m.lastSeen, m.resOpen, m.resExpired} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.calls, prometheus.CounterValue, float64(m.rlsCalls.Load()), "rls")
	ch <- prometheus.MustNewConstMetric(m.calls, prometheus.CounterValue, float64(m.checkCalls.Load()), "check")
	ch <- prometheus.MustNewConstMetric(m.invalid, prometheus.CounterValue, float64(m.rlsInvalid.Load()), "rls")
	ch <- prometheus.MustNewConstMetric(m.invalid, prometheus.CounterValue, float64(m.checkInvalid.Load()), "check")
	ch <- prometheus.MustNewConstMetric(m.resOpen, prometheus.GaugeValue, float64(m.e.reservations.Open()))
	ch <- prometheus.MustNewConstMetric(m.resExpired, prometheus.CounterValue, float64(m.e.reservations.Expired()))
	m.mu.Lock()
	for k, v := range m.descriptors {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(v), k[0], k[1])
	}
	for k, v := range m.checks {
		ch <- prometheus.MustNewConstMetric(m.check, prometheus.CounterValue, float64(v), k)
	}
	m.mu.Unlock()
	ready := 0.0
	if m.e.Ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(m.ready, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(m.missingDesc, prometheus.GaugeValue, float64(m.missing.Load()))
	seen := -1.0
	if t := m.e.lastSeen.Load(); t != 0 {
		seen = time.Since(time.Unix(0, t)).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(m.lastSeen, prometheus.GaugeValue, seen)
}
