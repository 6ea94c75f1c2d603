//go:build !ration_faults

package inflight

func activeFault() fault { return faultNone }

func leak(func()) {}
