package version

import "github.com/prometheus/client_golang/prometheus"

// BuildInfoName is the gauge every /metrics carries, 1 with this build's
// identity in its labels: the server's, the edge's and the client's
// registries (a mix of versions during an upgrade shows in one query).
const BuildInfoName = "ration_build_info"

// BuildInfoDesc describes ration_build_info{version,revision,goversion}
// with constLabels added (the client's WithConstLabels).
func BuildInfoDesc(constLabels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(BuildInfoName,
		"A metric with a constant '1' value labeled by the version, VCS revision and Go version ration was built from.",
		[]string{"version", "revision", "goversion"}, constLabels)
}

// BuildInfoMetric is the gauge of d (from BuildInfoDesc), 1.
func BuildInfoMetric(d *prometheus.Desc) prometheus.Metric {
	in := Get()
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, in.Version, in.Revision, in.GoVersion)
}

// NewCollector collects ration_build_info, for a registry that has no
// other collector carrying it.
func NewCollector() prometheus.Collector {
	return buildInfoCollector{desc: BuildInfoDesc(nil)}
}

type buildInfoCollector struct{ desc *prometheus.Desc }

func (c buildInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c buildInfoCollector) Collect(ch chan<- prometheus.Metric) { ch <- BuildInfoMetric(c.desc) }
