package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the tests without the RATION_* variables of the shell
// that started them (a developer's RATION_SERVERS for rationctl would set
// the edge's --servers): each test sets the ones it means (env.go).
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, envPrefix) {
			os.Unsetenv(name)
		}
	}
	os.Exit(m.Run())
}
