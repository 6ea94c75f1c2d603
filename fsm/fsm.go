package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/acl"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/protobuf/proto"
)

// MaxKeysPerOp is the most keys of one operation (internal/limits). The
// FSM enforces it, and limits.CheckCaller, on every operation as a second
// line: the coordinator checks them before proposing.
const MaxKeysPerOp = limits.KeysPerRequest

// Response kinds recorded for idempotent retries.
const (
	kindLease   uint32 = 1
	kindRelease uint32 = 2
)

// OpResult is the outcome of one client RPC inside a lease batch: exactly
// one of Lease, Release and Err is set. Err is an RPC-level failure (stale
// sequence, malformed caller); per-key failures are inside the response.
type OpResult struct {
	Lease   *api.LeaseResponse
	Release *api.ReleaseResponse
	Err     error
}

// Result is what Apply returns for every command.
type Result struct {
	// Err is a whole-command failure (e.g. a policy that fails validation).
	Err error
	// Ops holds one result per op of a lease batch, in order.
	Ops []OpResult
	// Expired counts the leases an expire command removed;
	// ExpiredByPolicy splits it by policy name (a retired policy's under
	// its old name). Neither is part of the state.
	Expired         int
	ExpiredByPolicy map[string]int
}

// expired counts n leases of policy removed by an expire command.
func (r *Result) expired(policy string, n int) {
	if n == 0 {
		return
	}
	r.Expired += n
	if r.ExpiredByPolicy == nil {
		r.ExpiredByPolicy = map[string]int{}
	}
	r.ExpiredByPolicy[policy] += n
}

type clientRecord struct {
	incarnation uint64
	seq         uint64
	kind        uint32
	response    []byte
	lastSeen    int64
	// id and pos: the record's client ID and its place in the clients
	// index (index.go); derived, not replicated.
	id  string
	pos int
}

type keyLedger struct {
	// ledger is changed only through state.mut, and gen is the cow
	// generation it was installed at (cow.go).
	ledger *lease.Ledger
	gen    uint64
	// item is the ledger's entry in the due index and holders the client
	// IDs it is listed under in the holders index (index.go).
	item    dueItem
	holders []string
}

// state is everything the FSM replicates.
type state struct {
	clusterTime int64
	// digest chains every applied command (see chainDigest).
	digest   []byte
	policies map[string]policy.Policy
	keys     map[string]*ledgerMap // live policy -> canonical key -> ledger
	clients  map[string]*clientRecord
	// retired remembers budgets that outlived their definitions: deleted
	// policies' ledgers, and floors left by keying changes (retire.go).
	retired map[string]*retiredPolicy
	// fault is a negative control's broken rule (not replicated).
	fault fault
	// features holds the switches turned on (FeatureXxx bits).
	features uint64
	// restoreHoldUntil and idGeneration: see restore.go.
	restoreHoldUntil int64
	idGeneration     uint64
	// ACL tokens by accessor ID, and whether bootstrap has run (acl.go).
	aclBootstrapped bool
	aclTokens       map[string]*acl.Token
	// win holds the leased fixed windows (window.go).
	win windowState
	// slots holds the concurrency keys (slots.go).
	slots slotState
	// idx is derived from the rest (index.go): never serialized.
	idx index
	// cow is the snapshots' copy-on-write bookkeeping (cow.go).
	cow *cowCtx
	// ref, in tests only, replaces the indexed expire and revoke by
	// reference scans that apply the same rule (index_test.go).
	ref *referenceImpl
}

// referenceImpl is a test's stand-in for the indexed selections.
type referenceImpl struct {
	expire func(s *state, t, through, retention int64) (*Result, error)
	revoke func(s *state, t int64, clientID string, incarnation uint64)
}

func newState() *state {
	return &state{
		policies:  map[string]policy.Policy{},
		keys:      map[string]*ledgerMap{},
		clients:   map[string]*clientRecord{},
		retired:   map[string]*retiredPolicy{},
		fault:     stateFault(),
		aclTokens: map[string]*acl.Token{},
		idx:       newIndex(),
		cow:       &cowCtx{},
	}
}

// FSM implements raft.FSM.
type FSM struct {
	mu  sync.RWMutex
	st  *state
	log *slog.Logger
	// index is the Raft index of the last command applied (0 after a
	// restore until the next one): StateHash reports it with the hash.
	index uint64
	// aclVersion counts ACL entries applied and restores (ACLVersion).
	aclVersion atomic.Uint64
	// baseline mirrors st.baselineOn() for BaselineOn, without the lock.
	baseline atomic.Bool
}

var _ raft.FSM = (*FSM)(nil)

// chainDigest is SHA-256(prev ‖ index ‖ data): the digest of every command
// a state machine applied, in order. It is replicated state (snapshots
// carry it), so replicas that applied the same log agree on it, and one
// that applied an entry the log does not hold (such as the test-only
// faults.AckBeforeCommit, which applies before committing) differs for
// good. StateHash covers it.
func chainDigest(prev []byte, index uint64, data []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], index)
	h.Write(idx[:])
	h.Write(data)
	return h.Sum(prev[:0:0])
}

// New returns an empty FSM. A nil logger discards.
func New(logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &FSM{st: newState(), log: logger}
}

// Apply implements raft.FSM. It panics on an entry it cannot decode or a
// command type it does not know (see the package doc): those are bugs or a
// version skew that must stop the server, not inputs to reject.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	env, err := DecodeEnvelope(l.Data)
	if err != nil {
		panic(fmt.Sprintf("fsm: log index %d: %v", l.Index, err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index = l.Index
	f.st.digest = chainDigest(f.st.digest, l.Index, l.Data)
	// Cluster time never goes backwards, whatever the leader stamped.
	t := max(env.ClusterTimeNanos, f.st.clusterTime)
	f.st.clusterTime = t
	if env.Type != CmdSetFeatures && !f.st.baselineOn() {
		// Only a log from before v0.1.0 has an entry before the baseline's:
		// stop rather than apply it otherwise than its servers did.
		panic(fmt.Sprintf("fsm: log index %d (%s): %v", l.Index, env.Type, preBaseline("raft log", f.st.features)))
	}
	res, err := f.dispatch(env, t, l.Index)
	if err != nil {
		if errors.Is(err, ErrCorruptEntry) {
			panic(fmt.Sprintf("fsm: log index %d (%s): %v", l.Index, env.Type, err))
		}
		return &Result{Err: err}
	}
	return res
}

func (f *FSM) dispatch(env Envelope, t int64, index uint64) (*Result, error) {
	switch env.Type {
	case CmdApplyPolicies:
		cmd, err := decodeBody[api.ApplyPoliciesCommand](env.Body)
		if err != nil {
			return nil, err
		}
		return f.st.applyPolicies(t, cmd)
	case CmdDeletePolicy:
		cmd, err := decodeBody[api.DeletePolicyCommand](env.Body)
		if err != nil {
			return nil, err
		}
		return f.st.deletePolicy(t, cmd.GetName())
	case CmdLeaseBatch:
		cmd, err := decodeBody[api.LeaseBatchCommand](env.Body)
		if err != nil {
			return nil, err
		}
		return f.st.leaseBatch(t, cmd), nil
	case CmdExpire:
		cmd, err := decodeBody[api.ExpireCommand](env.Body)
		if err != nil {
			return nil, err
		}
		through := cmd.GetExpireThroughNanos()
		if through <= 0 || through > t {
			through = t
		}
		return f.st.expire(t, through, cmd.GetClientRetentionNanos())
	case CmdSetFeatures:
		cmd, err := decodeBody[api.SetFeaturesCommand](env.Body)
		if err != nil {
			return nil, err
		}
		if unknown := cmd.GetFeatures() &^ KnownFeatures; unknown != 0 {
			panic(fmt.Sprintf("fsm: feature switches %#x are unknown to this server, which is older than the log; upgrade it", unknown))
		}
		if cmd.GetInitialWindowPolicies() != nil || (f.st.features|cmd.GetFeatures())&BaselineFeatures != BaselineFeatures {
			// Deferred initial policies, or a baseline switch left off: a
			// leader before v0.1.0 wrote this entry.
			panic(fmt.Sprintf("fsm: log index %d (%s): %v", index, env.Type, preBaseline("raft log", f.st.features|cmd.GetFeatures())))
		}
		f.st.features |= cmd.GetFeatures()
		f.baseline.Store(true)
		f.st.windowsSwitched(t, cmd.GetWallUnixNanos())
		return &Result{}, nil
	case CmdWindowClock:
		cmd, err := decodeBody[api.WindowClockCommand](env.Body)
		if err != nil {
			return nil, err
		}
		return f.st.windowClock(t, cmd.GetWallUnixNanos(), cmd.GetSlew(), cmd.GetMaxStepNanos())
	case CmdACL:
		cmd, err := decodeBody[api.ACLCommand](env.Body)
		if err != nil {
			return nil, err
		}
		defer f.aclVersion.Add(1)
		return f.st.applyACL(cmd)
	}
	if env.Type&IgnorableFlag != 0 {
		f.log.Warn("skipping unknown ignorable command", "type", uint8(env.Type))
		return &Result{}, nil
	}
	panic(fmt.Sprintf("fsm: unknown command type %d: this server is older than the log; upgrade it", uint8(env.Type)))
}

func ledgerConfig(p policy.Policy) lease.LedgerConfig {
	return lease.LedgerConfig{
		RateMilliPerSec: p.RateMilliPerSec,
		CapacityMilli:   p.BurstMilli,
		StartFull:       p.StartFull,
		MaxLeases:       int(p.MaxLeasesPerKey),
		DriftPPM:        p.DriftPPM,
		RatePeriodNanos: p.RatePeriodNanos,
	}
}

// ledgerConfigFor is ledgerConfig with the policy's max_debt while
// FeatureDebt is on (off: 0, as a server that predates it applies it).
func (s *state) ledgerConfigFor(p policy.Policy) lease.LedgerConfig {
	cfg := ledgerConfig(p)
	if s.debt() {
		cfg.MaxDebtMilli = p.MaxDebtMilli
	}
	return cfg
}

// debt reports whether FeatureDebt is on: max_debt and released debts
// apply (rule k, docs/design.md §4.1).
func (s *state) debt() bool { return s.features&FeatureDebt != 0 }

func (s *state) applyPolicies(t int64, cmd *api.ApplyPoliciesCommand) (*Result, error) {
	ps := make([]policy.Policy, 0, len(cmd.GetPolicies()))
	for _, spec := range cmd.GetPolicies() {
		p, err := policy.FromProto(spec)
		if err != nil {
			// The leader validated it; a stored spec that fails validation
			// means versions disagree. Refuse the whole command, change nothing.
			return nil, fmt.Errorf("%w: %w", rpcerr.ErrInvalid, err)
		}
		ps = append(ps, p)
	}
	// First pass: refuse the whole command, changing nothing, if any policy
	// would start fresh budgets while leases granted under its previous
	// keying are live (checkChange).
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Name] {
			return nil, fmt.Errorf("%w: policy %q is listed twice in one command", rpcerr.ErrInvalid, p.Name)
		}
		seen[p.Name] = true
		for _, kd := range kinds {
			if err := kd.checkChange(s, t, p); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range ps {
		// Every kind installs p; a failure (a token bucket's reconfigure)
		// is reported after the others have, as they do not depend on it.
		var first error
		for _, kd := range kinds {
			if err := kd.install(s, t, p); err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return nil, first
		}
	}
	return &Result{}, nil
}

func sameKeying(a, b policy.Policy) bool {
	if a.Algorithm != b.Algorithm || a.StartFull != b.StartFull || len(a.Key) != len(b.Key) {
		return false
	}
	for i := range a.Key {
		if a.Key[i] != b.Key[i] {
			return false
		}
	}
	return true
}

// deletePolicy removes a policy. Its budgets are retired, not dropped
// (retire.go): they grant and renew nothing more, are kept until they are
// indistinguishable from fresh ones, and come back if the policy is
// re-created with the same keying.
func (s *state) deletePolicy(t int64, name string) (*Result, error) {
	p, ok := s.policies[name]
	if !ok {
		return nil, fmt.Errorf("%w: policy %q", rpcerr.ErrNotFound, name)
	}
	delete(s.policies, name)
	s.retire(t, p)
	return &Result{}, nil
}

// sortedKeys returns m's keys in order, for deterministic iteration.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// checkCaller applies the idempotency rules. It returns the recorded
// response when this is a retry of the client's latest request, and newer
// when the caller is a newer incarnation than the recorded one (whose
// leases the caller must revoke once the request is known to be valid).
func (s *state) checkCaller(c *api.Caller, kind uint32, n int) (dup []byte, newer bool, err error) {
	dup, newer, err = s.checkCallerOnly(c, kind)
	if err != nil || dup != nil {
		return dup, newer, err
	}
	return nil, newer, checkKeys(n)
}

func (s *state) checkCallerOnly(c *api.Caller, kind uint32) ([]byte, bool, error) {
	if err := limits.CheckCaller(c); err != nil {
		return nil, false, err
	}
	rec, ok := s.clients[c.GetClientId()]
	if !ok {
		return nil, false, nil
	}
	switch {
	case c.GetIncarnation() < rec.incarnation:
		return nil, false, fmt.Errorf("%w: client %q incarnation %d is older than %d; a restarted process must use a larger incarnation", rpcerr.ErrOlderIncarnation, c.GetClientId(), c.GetIncarnation(), rec.incarnation)
	case c.GetIncarnation() > rec.incarnation:
		return nil, true, nil
	case c.GetSeq() == rec.seq:
		if kind != rec.kind {
			return nil, false, fmt.Errorf("%w: client %q reused seq %d for a different call; use a seq greater than %d", rpcerr.ErrStale, c.GetClientId(), c.GetSeq(), rec.seq)
		}
		return rec.response, false, nil
	case c.GetSeq() < rec.seq:
		return nil, false, fmt.Errorf("%w: client %q seq %d is older than %d; use a seq greater than %d", rpcerr.ErrStale, c.GetClientId(), c.GetSeq(), rec.seq, rec.seq)
	}
	return nil, false, nil
}

// begin runs the checks every lease op starts with. A retry returns the
// recorded answer (and refreshes the record's age). A valid request from a
// newer incarnation of the client releases the older incarnations' leases
// (without credit: their tokens are lost): a client ID belongs to one live
// process, so a newer incarnation means the older process is gone.
func (s *state) begin(t int64, c *api.Caller, kind uint32, n int) ([]byte, error) {
	dup, newer, err := s.checkCaller(c, kind, n)
	if err != nil {
		return nil, err
	}
	if dup != nil {
		s.seen(s.clients[c.GetClientId()], t)
		return dup, nil
	}
	if newer {
		s.revoke(t, c.GetClientId(), c.GetIncarnation())
	}
	return nil, nil
}

// revoke frees the leases of clientID's incarnations below incarnation in
// every kind, through their holder indexes (index.go, windowindex.go).
func (s *state) revoke(t int64, clientID string, incarnation uint64) {
	for _, kd := range kinds {
		kd.revoke(s, t, clientID, incarnation)
	}
}

func (s *state) record(t int64, c *api.Caller, kind uint32, resp proto.Message) {
	b, err := recordBytes(resp)
	if err != nil {
		panic(fmt.Sprintf("fsm: marshal recorded response: %v", err))
	}
	s.setClient(c.GetClientId(), &clientRecord{incarnation: c.GetIncarnation(), seq: c.GetSeq(), kind: kind, response: b, lastSeen: t})
}

func (s *state) leaseBatch(t int64, cmd *api.LeaseBatchCommand) *Result {
	res := &Result{Ops: make([]OpResult, len(cmd.GetOps()))}
	for i, op := range cmd.GetOps() {
		switch {
		case op.GetAcquire() != nil:
			res.Ops[i].Lease, res.Ops[i].Err = s.acquire(t, op.GetAcquire())
		case op.GetRenew() != nil:
			res.Ops[i].Lease, res.Ops[i].Err = s.renew(t, op.GetRenew())
		case op.GetRelease() != nil:
			res.Ops[i].Release, res.Ops[i].Err = s.release(t, op.GetRelease())
		default:
			res.Ops[i].Err = fmt.Errorf("%w: empty lease op", rpcerr.ErrInvalid)
		}
	}
	return res
}

func keyError(err error) *api.KeyError {
	return &api.KeyError{Code: uint32(rpcerr.Code(err)), Message: err.Error(), Kind: rpcerr.Kind(err)}
}

// recordBytes marshals what the idempotency record of an answer keeps.
// The record is replicated, snapshotted and hashed, so it keeps only
// ration's own stable values (FeatureStableRecords): each key error's
// kind, never its message or gRPC code (rewording a message, or mapping an
// error to another code, must not make two versions' states differ);
// answerForm derives them again for a retry. The codes and messages are
// cleared for the marshal and put back after it, rather than marshalling
// a clone: resp is this apply's own answer, not yet returned, so nothing
// else reads it meanwhile, and the bytes are the clone's (deep-copying a
// 1024-key answer by reflection was a tenth of a renewal's apply).
func recordBytes(resp proto.Message) ([]byte, error) {
	var errs []*api.KeyError
	switch r := resp.(type) {
	case *api.LeaseResponse:
		for _, kl := range r.GetLeases() {
			if e := kl.GetError(); e != nil {
				errs = append(errs, e)
			}
		}
	case *api.ReleaseResponse:
		for _, rr := range r.GetResults() {
			if e := rr.GetError(); e != nil {
				errs = append(errs, e)
			}
		}
	}
	type shown struct {
		code uint32
		msg  string
	}
	kept := make([]shown, len(errs))
	for i, e := range errs {
		kept[i] = shown{e.Code, e.Message}
		e.Code, e.Message = 0, ""
	}
	defer func() {
		for i, e := range errs {
			e.Code, e.Message = kept[i].code, kept[i].msg
		}
	}()
	return proto.MarshalOptions{Deterministic: true}.Marshal(resp)
}

// answerForm fills in, for a retry answered from a record, the code and
// message of each key error the record keeps only the kind of.
func answerForm(errs ...*api.KeyError) {
	for _, e := range errs {
		if e != nil && e.GetKind() != api.ErrorKind_ERROR_KIND_UNSPECIFIED && e.GetCode() == 0 && e.GetMessage() == "" {
			e.Code, e.Message = uint32(rpcerr.KindCode(e.GetKind())), rpcerr.KindMessage(e.GetKind())
		}
	}
}

// resolve finds the policy and canonical key of a requested key, creating
// the key's ledger when create is set.
func (s *state) resolve(t int64, k *api.Key, create bool) (policy.Policy, string, *keyLedger, error) {
	p, ok := s.policies[k.GetPolicy()]
	if !ok {
		return p, "", nil, fmt.Errorf("%w: policy %q (apply it with rationctl policy apply)", rpcerr.ErrNotFound, k.GetPolicy())
	}
	if p.Algorithm.IsWindow() {
		return p, "", nil, windowNotLeasable(p) // leased in window.go, or not at all
	}
	if err := p.Leasable(); err != nil {
		return p, "", nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	ck, err := p.CanonicalKey(k.GetAttributes())
	if err != nil {
		return p, "", nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	kl := s.keys[p.Name].at(ck)
	if kl != nil || !create {
		if kl == nil {
			return p, ck, nil, fmt.Errorf("%w: policy %q has no key %q", lease.ErrLeaseNotFound, p.Name, ck)
		}
		return p, ck, kl, nil
	}
	if err := s.roomFor(t, p, ck); err != nil {
		return p, ck, nil, err
	}
	pool, _ := s.startPool(t, p)
	l, err := lease.NewLedgerWithPool(s.ledgerConfigFor(p), t, pool)
	if err != nil {
		return p, ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	if err := s.afterRestore(t, l); err != nil {
		return p, ck, nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	l = withFault(l)
	if s.keys[p.Name] == nil {
		s.keys[p.Name] = s.newLedgerMap()
	}
	kl = newKeyLedger(dueLive, p.Name, ck, l)
	kl.gen = s.cow.gen
	s.keys[p.Name].set(ck, kl)
	s.touch(kl)
	return p, ck, kl, nil
}

// Early renewal. A lease that holds a superseded version an
// acknowledgement would free is asked to renew after MinEarlyRenewNanos
// (its client renews once it has installed the answer, acknowledging it).
// A new lease, and one waiting for a share others still hold, renew after
// renew_after/EarlyRenewDivisor, but never sooner than MinEarlyRenewNanos.
// Neither is ever later than renew_after, and both stop once the key's
// shares have converged, so a key cannot turn into a renewal storm.
const (
	EarlyRenewDivisor  = 8
	MinEarlyRenewNanos = int64(50 * time.Millisecond)
)

// renewSpeed says how soon an answer asks for the next renewal.
type renewSpeed uint8

const (
	renewNormal renewSpeed = iota // the policy's renew_after
	renewSoon                     // renew_after/EarlyRenewDivisor
	ackSoon                       // MinEarlyRenewNanos
)

// speedOf is how soon a renewal's answer asks for the next one.
func speedOf(g lease.Grant) renewSpeed {
	switch {
	case g.AckSoon:
		return ackSoon
	case g.RenewSoon:
		return renewSoon
	}
	return renewNormal
}

// renewAfter is the renew_after_nanos of an answer.
func renewAfter(p policy.Policy, g lease.Grant, speed renewSpeed) int64 {
	ra := min(p.RenewAfterNanos, g.TTLNanos)
	switch speed {
	case renewSoon:
		ra = min(ra, max(ra/EarlyRenewDivisor, MinEarlyRenewNanos))
	case ackSoon:
		ra = min(ra, MinEarlyRenewNanos)
	}
	return ra
}

func grantProto(p policy.Policy, ck string, g lease.Grant, speed renewSpeed) *api.Grant {
	out := grantFields(p, ck, g, speed)
	if p.RatePeriodNanos != 0 {
		// The exact share per period, and for clients that do not know
		// periods the share per second, rounded down (safe).
		out.RateMilliPerPeriod, out.RatePeriodNanos = g.RateMilliPerSec, p.RatePeriodNanos
		out.RateMilliPerSec = lease.MulDiv(g.RateMilliPerSec, lease.NanosPerSecond, p.RatePeriodNanos)
	}
	return out
}

func grantFields(p policy.Policy, ck string, g lease.Grant, speed renewSpeed) *api.Grant {
	return &api.Grant{
		LeaseId:                 uint64(g.LeaseID),
		RateMilliPerSec:         g.RateMilliPerSec,
		CapMilli:                g.CapMilli,
		StartMilli:              g.StartMilli,
		TopUpMilli:              g.TopUpMilli,
		DebtAllowanceMilli:      g.DebtAllowanceMilli,
		TtlNanos:                g.TTLNanos,
		Version:                 g.Version,
		RenewAfterNanos:         renewAfter(p, g, speed),
		DriftPpm:                p.DriftPPM,
		FailureMode:             string(p.Failure),
		FallbackRateMilliPerSec: p.FallbackRateMilliPerSec,
		Shadow:                  p.Shadow,
		CanonicalKey:            ck,
		// The client maps every key with the same values of these to one
		// limiter, so that it is one holder of one budget (docs/design.md
		// §3.4 item 7).
		KeyAttributes:    append([]string(nil), p.Key...),
		KeyAttributesSet: true,
		PolicyBurstMilli: p.BurstMilli,
	}
}

// checkDemand bounds a key's reported demand (INVALID_ARGUMENT outside):
// rates and bursts must not be negative (any larger value means "as much
// as is fair" and is capped by the budget), and the largest cost must fit
// in [0, lease.MaxCapacityMilli], as the client's costs do.
func checkDemand(d *api.Demand) error {
	if d.GetRateMilliPerSec() < 0 || d.GetBurstMilli() < 0 {
		return fmt.Errorf("%w: demands must not be negative (rate %d, burst %d milli-tokens)", rpcerr.ErrInvalid, d.GetRateMilliPerSec(), d.GetBurstMilli())
	}
	if m := d.GetMaxCostMilli(); m < 0 || m > lease.MaxCapacityMilli {
		return fmt.Errorf("%w: demand max_cost_milli %d is outside [0, %d]", rpcerr.ErrInvalid, m, lease.MaxCapacityMilli)
	}
	return nil
}

func checkKeys(n int) error {
	if n == 0 {
		return fmt.Errorf("%w: no keys in the request", rpcerr.ErrInvalid)
	}
	if n > MaxKeysPerOp {
		return fmt.Errorf("%w: %d keys in one request, more than %d", rpcerr.ErrInvalid, n, MaxKeysPerOp)
	}
	return nil
}

func leaseErr(p policy.Policy, ck string, err error) error {
	switch {
	case errors.Is(err, lease.ErrTooManyLeases):
		return fmt.Errorf("policy %q key %q: max_leases_per_key=%d reached: %w", p.Name, ck, p.MaxLeasesPerKey, err)
	case errors.Is(err, lease.ErrLeaseNotFound), errors.Is(err, lease.ErrLeaseExpired):
		return fmt.Errorf("%w; acquire a new lease", err)
	}
	return err
}

func (s *state) acquire(t int64, req *api.AcquireRequest) (*api.LeaseResponse, error) {
	c := req.GetCaller()
	seen := map[string]bool{}
	return s.leaseOp(t, c, len(req.GetKeys()), func(i int) *api.KeyLease { return s.acquireKey(t, c, req.GetKeys()[i], seen) })
}

func (s *state) acquireKey(t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	// Check what the ledger would refuse before resolve creates a key, so a
	// bad request cannot use up max_keys.
	if err := checkDemand(k.GetDemand()); err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	return s.kindOf(k.GetKey()).acquire(s, t, c, k, seen)
}

// tokenAcquire grants a token-bucket lease (kinds.go).
func (s *state) tokenAcquire(t int64, c *api.Caller, k *api.AcquireKey, seen map[string]bool) *api.KeyLease {
	// (resolve itself checks the policy and key before it creates a key.)
	p, ck, kl, err := s.resolve(t, k.GetKey(), true)
	if err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	if seen[p.Name+"\x00"+ck] {
		return &api.KeyLease{Error: keyError(fmt.Errorf("%w: key %s/%s is listed twice in one request", rpcerr.ErrInvalid, p.Name, ck))}
	}
	seen[p.Name+"\x00"+ck] = true
	l := s.mut(kl)
	g, err := l.Grant(t, lease.GrantRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), Seq: c.GetSeq(),
		Weight:                p.Weight(c.GetClientId()),
		DemandRateMilliPerSec: k.GetDemand().GetRateMilliPerSec(),
		DemandBurstMilli:      k.GetDemand().GetBurstMilli(),
		DemandMaxCostMilli:    k.GetDemand().GetMaxCostMilli(),
		TTLNanos:              p.LeaseDurationNanos,
		LeftoverBurst:         s.leftoverBurst(),
	})
	s.touch(kl)
	// A new lease renews early once: the shares of its key just changed.
	return s.markContended(keyLease(p, ck, g, err, renewSoon), l)
}

// markContended sets answer a's Grant.contended from the key's ledger l
// after the grant or renewal (FeatureContended; lease.Ledger.Contended).
func (s *state) markContended(a *api.KeyLease, l *lease.Ledger) *api.KeyLease {
	if g := a.GetGrant(); g != nil && s.features&FeatureContended != 0 {
		g.Contended = l.Contended()
	}
	return a
}

// baselineOn reports whether every switch of the v0.1.0 baseline is on.
func (s *state) baselineOn() bool { return s.features&BaselineFeatures == BaselineFeatures }

// leftoverBurst reports whether the budget's unclaimed burst goes to its
// holders (FeatureLeftoverBurst; rule (i), which moves the tokens of the
// cushions it cuts and raises, is in the baseline).
func (s *state) leftoverBurst() bool { return s.features&FeatureLeftoverBurst != 0 }

// faultAckAnyCut makes every token-bucket renewal apply as with
// FeatureQuietAck off: any cut asks for an early acknowledgement (the
// rule's negative control, the old behaviour).
const faultAckAnyCut fault = 0x49

var _ = registerFault(faultAckAnyCut, "faultAckAnyCut")

// keyLease is one key's answer to an acquire or renewal; speed says how
// soon to renew.
func keyLease(p policy.Policy, ck string, g lease.Grant, err error, speed renewSpeed) *api.KeyLease {
	if err != nil {
		return &api.KeyLease{Error: keyError(leaseErr(p, ck, err))}
	}
	return &api.KeyLease{Grant: grantProto(p, ck, g, speed)}
}

// leaseOp runs the shared shape of Acquire and Renew: idempotency checks,
// one answer per key, and the record for retries.
func (s *state) leaseOp(t int64, c *api.Caller, n int, perKey func(i int) *api.KeyLease) (*api.LeaseResponse, error) {
	if dup, err := s.begin(t, c, kindLease, n); err != nil || dup != nil {
		return unmarshalLease(dup, err)
	}
	resp := &api.LeaseResponse{ClusterTimeNanos: t, Leases: make([]*api.KeyLease, n)}
	for i := range n {
		resp.Leases[i] = perKey(i)
	}
	s.record(t, c, kindLease, resp)
	return resp, nil
}

func (s *state) renew(t int64, req *api.RenewRequest) (*api.LeaseResponse, error) {
	c := req.GetCaller()
	return s.leaseOp(t, c, len(req.GetKeys()), func(i int) *api.KeyLease { return s.renewKey(t, c, req.GetKeys()[i]) })
}

func (s *state) renewKey(t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	if err := checkDemand(k.GetDemand()); err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	return s.kindOf(k.GetKey()).renew(s, t, c, k)
}

// tokenRenew renews a token-bucket lease (kinds.go).
func (s *state) tokenRenew(t int64, c *api.Caller, k *api.RenewKey) *api.KeyLease {
	clamped := k.GetClampedMilli()
	if clamped < 0 || clamped > lease.MaxCapacityMilli {
		return &api.KeyLease{Error: keyError(fmt.Errorf("%w: clamped_milli %d is outside [0, %d]", rpcerr.ErrInvalid, clamped, lease.MaxCapacityMilli))}
	}
	var debtClamped int64
	if s.debt() {
		if debtClamped = k.GetDebtClampedMilli(); debtClamped < 0 || debtClamped > lease.MaxCapacityMilli {
			return &api.KeyLease{Error: keyError(fmt.Errorf("%w: debt_clamped_milli %d is outside [0, %d]", rpcerr.ErrInvalid, debtClamped, lease.MaxCapacityMilli))}
		}
	}
	p, ck, kl, err := s.resolve(t, k.GetKey(), false)
	if err != nil {
		return &api.KeyLease{Error: keyError(err)}
	}
	l := kl.ledger // the negative control changes it in place
	if !s.has(faultRenewSkipsCopy) {
		l = s.mut(kl)
	}
	g, err := l.Renew(t, lease.RenewRequest{
		ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(), LeaseID: lease.LeaseID(k.GetLeaseId()),
		Weight:                p.Weight(c.GetClientId()),
		DemandRateMilliPerSec: k.GetDemand().GetRateMilliPerSec(),
		DemandBurstMilli:      k.GetDemand().GetBurstMilli(),
		DemandMaxCostMilli:    k.GetDemand().GetMaxCostMilli(),
		TTLNanos:              p.LeaseDurationNanos,
		AckedVersion:          k.GetAckedVersion(),
		ClampedMilli:          clamped,
		LeftoverBurst:         s.leftoverBurst(),
		QuietAck:              s.features&FeatureQuietAck != 0 && !s.has(faultAckAnyCut),
		DebtClampedMilli:      debtClamped,
	})
	s.touchDue(kl) // a renewal adds and removes no lease: the holders stay
	return s.markContended(keyLease(p, ck, g, err, speedOf(g)), l)
}

func (s *state) release(t int64, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	c := req.GetCaller()
	if dup, err := s.begin(t, c, kindRelease, len(req.GetKeys())); err != nil || dup != nil {
		if err != nil {
			return nil, err
		}
		out := &api.ReleaseResponse{}
		if err := proto.Unmarshal(dup, out); err != nil {
			panic(fmt.Sprintf("fsm: recorded response: %v", err))
		}
		for _, rr := range out.GetResults() {
			answerForm(rr.GetError())
		}
		return out, nil
	}
	resp := &api.ReleaseResponse{ClusterTimeNanos: t, Results: make([]*api.ReleaseResult, len(req.GetKeys()))}
	for i, k := range req.GetKeys() {
		resp.Results[i] = s.kindOf(k.GetKey()).release(s, t, c, k)
	}
	s.record(t, c, kindRelease, resp)
	return resp, nil
}

// tokenRelease ends a token-bucket lease (kinds.go).
func (s *state) tokenRelease(t int64, c *api.Caller, k *api.ReleaseKey) *api.ReleaseResult {
	r := &api.ReleaseResult{}
	_, _, kl, err := s.resolve(t, k.GetKey(), false)
	if err == nil {
		var rr lease.ReleaseResult
		req := lease.ReleaseRequest{
			ClientID: c.GetClientId(), Incarnation: c.GetIncarnation(),
			LeaseID: lease.LeaseID(k.GetLeaseId()), UnspentMilli: k.GetUnspentMilli(),
		}
		if s.debt() {
			req.DebtMilli = k.GetDebtMilli()
		}
		rr, err = s.mut(kl).Release(t, req)
		if !s.has(faultIndexSkipsRelease) {
			s.touch(kl)
		}
		r.CreditedMilli = rr.CreditedMilli
	}
	if err != nil {
		r.Error = keyError(err)
	}
	return r
}

func unmarshalLease(dup []byte, err error) (*api.LeaseResponse, error) {
	if err != nil {
		return nil, err
	}
	out := &api.LeaseResponse{}
	if err := proto.Unmarshal(dup, out); err != nil {
		panic(fmt.Sprintf("fsm: recorded response: %v", err))
	}
	for _, kl := range out.GetLeases() {
		answerForm(kl.GetError())
	}
	return out, nil
}

// expire removes due leases in every ledger (retired ones included),
// collects ledgers that are indistinguishable from fresh ones (no leases,
// pool full) and floors that have lapsed, and forgets idempotency records
// of clients with no leases not seen for retention: every kind in turn,
// each visiting only what is due (its due index), stopping at an error.
func (s *state) expire(t, through, retention int64) (*Result, error) {
	res := &Result{}
	for _, kd := range kinds {
		if err := kd.expire(s, t, through, retention, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Snapshot implements raft.FSM: a point-in-time capture whose cost under
// the lock does not grow with the number of keys (cow.go, capture.go);
// Persist encodes it while apply continues.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &snapshot{c: f.st.capture(f)}, nil
}

// Restore implements raft.FSM: it builds a new state from the stream,
// checks it, and swaps it in under the write lock.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := importState(rc)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.mu.Lock()
	st.fault = f.st.fault
	st.ref = f.st.ref
	f.st = st
	f.index = 0
	f.aclVersion.Add(1)
	f.baseline.Store(st.baselineOn())
	f.mu.Unlock()
	return nil
}
