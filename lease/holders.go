package lease

import (
	"fmt"
	"sort"
)

// The holders table: what the three ledgers (Ledger, SlotLedger,
// WindowLedger) share about who holds a lease, apart from what a lease
// holds. A row is one lease of one holder (client ID, incarnation) with
// its lease ID and the Seq of the grant that created it; the table keeps
// the cluster time of the latest operation and the next lease ID (IDs
// increase and are never reused). Ledger and SlotLedger keep their rows
// sorted by holder, so find is a binary search; WindowLedger keeps its
// rows in ID order and finds them by ID (findID).
//
// The table is a view over the state's own fields (LedgerState.Leases,
// NowNanos, NextID and their slot and window twins), which stay as they
// are in snapshots; each ledger builds it on the fly (Ledger.holders,
// SlotLedger.holders, WindowLedger.holders), so it costs no allocation.
// What a row holds is the kind's business, behind two hooks: holderRow
// (the row's holder, ID, grant seq and hold) and heldShare (one version
// of its terms, for rule (h) and the acknowledgement rule); a kind in
// holder order also passes its own binary search (holders.search).
type holders[L any, P holderRow[L]] struct {
	rows   *[]L
	now    *int64   // cluster time of the latest operation
	nextID *LeaseID // the next lease ID to assign
	kind   string   // "lease", "slot lease": the row's name in errors
	// search is the binary search by holder of a kind kept in holder
	// order (nil for windows): where (clientID, incarnation) is or would
	// be. It is the kind's own, with the rows' fields at hand, because a
	// hook called at every probe would cost a renewal on a key of a
	// thousand holders some 10%.
	search func(rows []L, clientID string, incarnation uint64) int
}

// holderRow is a lease kind's row of the holders table.
type holderRow[L any] interface {
	*L
	holder() (clientID string, incarnation uint64)
	leaseID() LeaseID
	grantSeq() uint64
	// holdUntil is the cluster time until which the row holds anything.
	holdUntil() int64
}

// heldShare is one version of a lease kind's terms: what rule (h) (S6
// for slots) keeps held of a replaced lease, and what an
// acknowledgement drops (rules b and S2).
type heldShare[S any] interface {
	Share | SlotShare
	expiresAt() int64
	version() uint64
	// keptAt reports whether a replaced entry still counts at now.
	keptAt(nowNanos int64) bool
	// plus merges two replaced entries: summed, at the later expiry.
	plus(S) S
}

func (l *Lease) holder() (string, uint64)       { return l.ClientID, l.Incarnation }
func (l *Lease) leaseID() LeaseID               { return l.ID }
func (l *Lease) grantSeq() uint64               { return l.GrantSeq }
func (l *SlotLease) holder() (string, uint64)   { return l.ClientID, l.Incarnation }
func (l *SlotLease) leaseID() LeaseID           { return l.ID }
func (l *SlotLease) grantSeq() uint64           { return l.GrantSeq }
func (l *WindowLease) holder() (string, uint64) { return l.ClientID, l.Incarnation }
func (l *WindowLease) leaseID() LeaseID         { return l.ID }
func (l *WindowLease) grantSeq() uint64         { return l.GrantSeq }

// holdUntil: a chunk holds its units (counted in its window) until it
// expires; Replaced chunks too.
func (l *WindowLease) holdUntil() int64 { return l.ExpiresNanos }

func (s Share) expiresAt() int64           { return s.ExpiresNanos }
func (s Share) version() uint64            { return s.Version }
func (s Share) keptAt(nowNanos int64) bool { return s.ExpiresNanos > nowNanos }
func (s SlotShare) expiresAt() int64       { return s.ExpiresNanos }
func (s SlotShare) version() uint64        { return s.Version }
func (s SlotShare) keptAt(nowNanos int64) bool {
	return s.ExpiresNanos > nowNanos && s.Slots > 0
}

func (s Share) plus(t Share) Share {
	return Share{RateMilliPerSec: satAdd(s.RateMilliPerSec, t.RateMilliPerSec), CapMilli: satAdd(s.CapMilli, t.CapMilli),
		ExpiresNanos: max(s.ExpiresNanos, t.ExpiresNanos)}
}

func (s SlotShare) plus(t SlotShare) SlotShare {
	return SlotShare{Slots: s.Slots + t.Slots, ExpiresNanos: max(s.ExpiresNanos, t.ExpiresNanos)}
}

// find returns where the row of (clientID, incarnation) is or would be in
// a table sorted by holder, and whether it is there.
func (h holders[L, P]) find(clientID string, incarnation uint64) (int, bool) {
	rows := *h.rows
	i := h.search(rows, clientID, incarnation)
	if i == len(rows) {
		return i, false
	}
	c, n := P(&rows[i]).holder()
	return i, c == clientID && n == incarnation
}

// searchLeases and searchSlotLeases are the holders table's search for
// the kinds sorted by (ClientID, Incarnation).
func searchLeases(rows []Lease, clientID string, incarnation uint64) int {
	return sort.Search(len(rows), func(i int) bool {
		return rows[i].ClientID > clientID || (rows[i].ClientID == clientID && rows[i].Incarnation >= incarnation)
	})
}

func searchSlotLeases(rows []SlotLease, clientID string, incarnation uint64) int {
	return sort.Search(len(rows), func(i int) bool {
		return rows[i].ClientID > clientID || (rows[i].ClientID == clientID && rows[i].Incarnation >= incarnation)
	})
}

// findID returns the index of the row with lease ID id held by (clientID,
// incarnation), or -1 (any order).
func (h holders[L, P]) findID(id LeaseID, clientID string, incarnation uint64) int {
	rows := *h.rows
	for i := range rows {
		if P(&rows[i]).leaseID() == id {
			if c, n := P(&rows[i]).holder(); c == clientID && n == incarnation {
				return i
			}
			return -1
		}
	}
	return -1
}

// notBefore refuses a cluster time before the latest operation's.
func (h holders[L, P]) notBefore(nowNanos int64) error {
	if nowNanos < *h.now {
		return fmt.Errorf("%w: cluster time %d ns is before %d ns", ErrTimeBackwards, nowNanos, *h.now)
	}
	return nil
}

// admit is a grant's holder checks at cluster time now: time not
// backwards, a Seq above the existing row's (ErrStaleGrant), room for a
// new row (ErrTooManyLeases). It returns where the row goes and whether it
// replaces one.
func (h holders[L, P]) admit(nowNanos int64, clientID string, incarnation, seq uint64, maxLeases int) (int, bool, error) {
	if err := h.notBefore(nowNanos); err != nil {
		return 0, false, err
	}
	i, exists := h.find(clientID, incarnation)
	if exists {
		if err := staleGrant(clientID, incarnation, seq, P(&(*h.rows)[i]).grantSeq()); err != nil {
			return 0, false, err
		}
	}
	if !exists && len(*h.rows) >= maxLeases {
		return 0, false, tooManyLeases(len(*h.rows))
	}
	return i, exists, nil
}

// staleGrant refuses a grant whose Seq is not above the holder's latest.
func staleGrant(clientID string, incarnation, seq, last uint64) error {
	if seq <= last {
		return fmt.Errorf("%w: %s incarnation %d sent grant %d after grant %d", ErrStaleGrant, clientID, incarnation, seq, last)
	}
	return nil
}

func tooManyLeases(n int) error { return fmt.Errorf("%w: %d leases", ErrTooManyLeases, n) }

// lookup finds the row of lease id held by (clientID, incarnation) at
// cluster time now, for a renewal (renewing: a lease ID the table issued
// is gone, ErrLeaseExpired) or a release (ErrLeaseNotFound).
func (h holders[L, P]) lookup(nowNanos int64, clientID string, incarnation uint64, id LeaseID, renewing bool) (int, error) {
	if err := h.notBefore(nowNanos); err != nil {
		return 0, err
	}
	i, ok := h.find(clientID, incarnation)
	if ok && P(&(*h.rows)[i]).leaseID() == id {
		return i, nil
	}
	if renewing && id > 0 && id < *h.nextID {
		// It existed: expired (and removed), released or replaced.
		return 0, fmt.Errorf("%w: %s %d of %s incarnation %d is gone (expired, released or replaced)", ErrLeaseExpired, h.kind, id, clientID, incarnation)
	}
	return 0, fmt.Errorf("%w: %s incarnation %d %s %d", ErrLeaseNotFound, clientID, incarnation, h.kind, id)
}

// expired refuses to renew lease id, whose own hold ends at until <= now.
func (h holders[L, P]) expired(id LeaseID, until, nowNanos int64) error {
	return fmt.Errorf("%w: %s %d expired at %d ns, now %d ns", ErrLeaseExpired, h.kind, id, until, nowNanos)
}

// takeID assigns the next lease ID.
// appendClients appends the distinct client IDs of the rows, sorted (the
// rows are sorted by holder, so a client's rows are adjacent), to dst.
func (h holders[L, P]) appendClients(dst []string) []string {
	start := len(dst)
	for i := range *h.rows {
		id, _ := P(&(*h.rows)[i]).holder()
		if len(dst) > start && dst[len(dst)-1] == id {
			continue
		}
		dst = append(dst, id)
	}
	return dst
}

func (h holders[L, P]) takeID() LeaseID {
	id := *h.nextID
	*h.nextID++
	return id
}

// put stores row at i: over the row it replaces, or inserted there.
func (h holders[L, P]) put(i int, replaces bool, row L) {
	if replaces {
		(*h.rows)[i] = row
		return
	}
	var zero L
	*h.rows = append(*h.rows, zero)
	copy((*h.rows)[i+1:], (*h.rows)[i:])
	(*h.rows)[i] = row
}

// removeWhere drops every row gone says to, keeping the order, and
// returns their IDs.
func (h holders[L, P]) removeWhere(gone func(P) bool) []LeaseID {
	var ids []LeaseID
	kept := (*h.rows)[:0]
	for i := range *h.rows {
		if p := P(&(*h.rows)[i]); gone(p) {
			ids = append(ids, p.leaseID())
			continue
		}
		kept = append(kept, (*h.rows)[i])
	}
	*h.rows = kept
	return ids
}

// lastHold is the latest holdUntil of any row, or until if later.
func (h holders[L, P]) lastHold(until int64) int64 {
	for i := range *h.rows {
		until = max(until, P(&(*h.rows)[i]).holdUntil())
	}
	return until
}

// overcommitted reports whether rows granted under a larger budget, one
// in force until overUntil (0: none), may still be held: before then, or
// while a row whose hold ended by then is still in the table (Expire has
// not removed it yet).
func (h holders[L, P]) overcommitted(overUntil int64) bool {
	if overUntil == 0 {
		return false
	}
	if overUntil > *h.now {
		return true
	}
	for i := range *h.rows {
		if P(&(*h.rows)[i]).holdUntil() <= overUntil {
			return true
		}
	}
	return false
}

// checkRow verifies row i's place (sorted by holder, one row each) and ID
// (issued: in [1, NextID)).
func (h holders[L, P]) checkRow(i int) error {
	rows := *h.rows
	le := P(&rows[i])
	if i > 0 {
		pc, pn := P(&rows[i-1]).holder()
		c, n := le.holder()
		if pc > c || (pc == c && pn >= n) {
			return fmt.Errorf("%ss out of order at %d", h.kind, i)
		}
	}
	if id := le.leaseID(); id == 0 || id >= *h.nextID {
		return fmt.Errorf("%s %d has an ID outside [1, %d)", h.kind, id, *h.nextID)
	}
	return nil
}

// replacedHolds is rule (h) (S6 for slots), the one place it is coded: a
// grant that replaces a holder's lease at now keeps held what that lease
// held, summed with the new lease's, until it expires. old is the
// replaced lease's own replaced entries (those still kept at now carry
// over); own is its own held terms (the maximum over its versions) until
// its expiry, added if ownLive (it had not expired and holds anything).
// Past maxReplaced entries the oldest two merge (summed, the later
// expiry), which holds at least as much for at least as long.
func replacedHolds[S heldShare[S]](old []S, own S, ownLive bool, nowNanos int64) []S {
	var out []S
	for _, r := range old {
		if r.keptAt(nowNanos) {
			out = append(out, r)
		}
	}
	if ownLive {
		out = append(out, own)
	}
	for len(out) > maxReplaced {
		out[1] = out[0].plus(out[1])
		out = out[1:]
	}
	return out
}

// lastExpiry is the latest expiry among ss, or from if later.
func lastExpiry[S heldShare[S]](ss []S, from int64) int64 {
	for _, s := range ss {
		from = max(from, s.expiresAt())
	}
	return from
}

// dropVersions keeps the superseded versions an acknowledgement of
// version acked does not free: drop says which it frees (rules b, S2).
// acked 0 acknowledges nothing.
func dropVersions[S heldShare[S]](ss []S, acked uint64, drop func(v uint64) bool) []S {
	if acked == 0 {
		return ss
	}
	out := ss[:0]
	for _, s := range ss {
		if !drop(s.version()) {
			out = append(out, s)
		}
	}
	return out
}
