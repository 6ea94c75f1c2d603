package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	const rev = "28bdce9c0123456789abcdef0123456789abcdef"
	self := func(v string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: v}, Settings: settings}
	}
	for _, tc := range []struct {
		name         string
		stampV       string
		stampR       string
		bi           *debug.BuildInfo
		wantV, wantR string
	}{
		{"stamp wins", "v0.1.0", rev, self("v0.0.0-20261203114805-aaaaaaaaaaaa"), "v0.1.0", rev},
		{"go install at a tag", "", "", self("v0.1.0"), "v0.1.0", "unknown"},
		{"go build in a checkout", "", "", self("v0.1.1-0.20261203114805-28bdce9c0123+dirty",
			debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			"v0.1.1-0.20261203114805-28bdce9c0123+dirty", rev + "-dirty"},
		{"go install at a commit", "", "", self("v0.0.0-20261203114805-28bdce9c0123"), "v0.0.0-20261203114805-28bdce9c0123", "28bdce9c0123"},
		{"a program importing the client", "", "", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "example.com/other", Version: "v9.9.9"}, {Path: modulePath, Version: "v0.1.0"}}}, "v0.1.0", "unknown"},
		{"a replaced dependency", "", "", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.1.0", Replace: &debug.Module{Path: "../ration", Version: ""}}}}, "v0.1.0", "unknown"},
		{"no build information", "", "", nil, "(devel)", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.stampV, tc.stampR, tc.bi)
			if got.Version != tc.wantV || got.Revision != tc.wantR {
				t.Errorf("version %q revision %q, want %q %q", got.Version, got.Revision, tc.wantV, tc.wantR)
			}
			if got.GoVersion == "" || !strings.Contains(got.Platform, "/") {
				t.Errorf("go version %q platform %q", got.GoVersion, got.Platform)
			}
		})
	}
}

func TestPseudoRevision(t *testing.T) {
	for v, want := range map[string]string{
		"v0.0.0-20261203114805-28bdce9c0123":         "28bdce9c0123",
		"v0.1.1-0.20261203114805-28bdce9c0123+dirty": "28bdce9c0123",
		"v0.1.0":                              "",
		"v0.1.0-rc1":                          "",
		"v1.0.0-20261203114805-XYZdce9c0123":  "",
		"(devel)":                             "",
		"v0.0.0-20261203114805-28bdce9c01234": "",
	} {
		if got := pseudoRevision(v); got != want {
			t.Errorf("pseudoRevision(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestBuildInfoGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector())
	in := Get()
	want := `# HELP ration_build_info A metric with a constant '1' value labeled by the version, VCS revision and Go version ration was built from.
# TYPE ration_build_info gauge
ration_build_info{goversion="` + in.GoVersion + `",revision="` + in.Revision + `",version="` + in.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), BuildInfoName); err != nil {
		t.Fatal(err)
	}
}
