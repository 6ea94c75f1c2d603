package client

import "time"

// KillSlots stops a Slots handle's loop as a crash would: no release, no
// more renewals. It returns the wall clock of its last acquire or renewal.
func KillSlots(s *Slots) time.Time {
	s.killed.Store(true)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return time.Unix(0, s.lastWall.Load())
}

// SlotsIgnoreLimit breaks a Slots handle for the in-flight checker's
// negative control: it starts every request at once, whatever its slots.
func SlotsIgnoreLimit(s *Slots) { s.ignoreLimit.Store(true) }

// SlotsInstantDemand breaks a Slots handle for
// TestSlotsBackToBackKeepTheirSlot's negative control: it reports the
// requests running and waiting at the instant of each renewal, not their
// peak since the last one.
func SlotsInstantDemand(s *Slots) { s.instantDemand.Store(true) }
