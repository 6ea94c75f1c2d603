package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestProductionBinariesCarryNoFaults builds rationd and rationctl as a
// plain go build does (no build tags) and lists their symbols with go tool
// nm: no broken variant, fault switch, injection hook or clock control of
// the ration module may be linked in. The negative controls' machinery
// exists only with -tags ration_faults (internal/faults; lease and fsm
// fault.go: faultsBuilt). What may stay is internal/faults' registry of
// fault numbers (numbers.go) and the stubs that refuse faults and clock
// control (off.go). It skips with -short.
func TestProductionBinariesCarryNoFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rationd and rationctl; skipped with -short")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	build := exec.Command(goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/ration-dev/ration/cmd/rationd", "github.com/ration-dev/ration/cmd/rationctl")
	// GOFLAGS could name tags; a production build has none.
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, bin := range []string{"rationd", "rationctl"} {
		out, err := exec.Command(goBin, "tool", "nm", filepath.Join(dir, bin)).Output()
		if err != nil {
			t.Fatalf("go tool nm %s: %v", bin, err)
		}
		bad, n := testOnlySymbols(string(out))
		if n == 0 {
			t.Fatalf("%s: no symbol of the ration module listed: the check reads nothing", bin)
		}
		if len(bad) > 0 {
			t.Errorf("%s carries %d test-only symbols (of %d of the module):\n%s", bin, len(bad), n, strings.Join(bad, "\n"))
		}
	}
}

const modulePrefix = "github.com/ration-dev/ration/"

var (
	// testOnlyName: what names a fault, an injection or break hook, or a
	// clock control ("default" is no fault).
	testOnlyName = regexp.MustCompile(`(?i)fault|inject|break[A-Z_]|clockcontrol|parsecontrol|wallOffset`)
	// registryName: internal/faults' names a normal build keeps, the
	// registry (Number and its generic instances, typeKey, registry) and
	// the refusing stubs of off.go.
	registryName = regexp.MustCompile(`^internal/faults\.\.?(dict\.)?(Number|typeKey|newRegistry|numbers|\(\*registry\)\.(add|names)(\.deferwrap\d+)?|init|inittask|Set|Active|Enabled|WallNow|WatchClock|errNotBuilt)(\[.*)?$`)
	defaultWord  = regexp.MustCompile(`(?i)default`)
)

// testOnlySymbols returns, of go tool nm's listing, the ration module's
// symbols that name test-only machinery, and how many of the module's
// symbols it read.
func testOnlySymbols(nm string) (bad []string, n int) {
	for _, line := range strings.Split(nm, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		name := strings.Join(f[2:], " ")
		if !strings.HasPrefix(name, modulePrefix) {
			continue
		}
		n++
		rest := strings.TrimPrefix(name, modulePrefix)
		if strings.HasPrefix(rest, "internal/faults.") {
			if !registryName.MatchString(rest) {
				bad = append(bad, name)
			}
			continue
		}
		if testOnlyName.MatchString(defaultWord.ReplaceAllString(rest, "")) {
			bad = append(bad, name)
		}
	}
	return bad, n
}
