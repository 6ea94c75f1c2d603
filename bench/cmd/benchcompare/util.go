package main

import (
	"os/exec"
	"runtime/debug"
)

func readBuildInfo() (*debug.BuildInfo, bool) { return debug.ReadBuildInfo() }

func execOutput(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).Output()
	return string(b), err
}
