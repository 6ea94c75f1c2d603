package lease

// NewLedgerWithPool returns a ledger whose pool starts with poolMilli
// tokens (clamped to [0, B]) at startNanos, whatever cfg.StartFull says.
// The coordinator starts a re-keyed policy's new keys with it, no fuller
// than the retired budgets of the old keying could be by then
// (docs/design.md §3.5).
func NewLedgerWithPool(cfg LedgerConfig, startNanos, poolMilli int64) (*Ledger, error) {
	l, err := newLedger(cfg, startNanos)
	if err != nil {
		return nil, err
	}
	l.s.PoolMilli = max(0, min(poolMilli, cfg.CapacityMilli))
	l.s.InitialPoolMilli = l.s.PoolMilli
	return l, nil
}
