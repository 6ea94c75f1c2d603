package fsm

import (
	"fmt"
	"strings"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// Key quotas (docs/policy.md#max_keys_per_value, docs/security.md#tenant-isolation):
// one value of a token-bucket policy's first key attribute (one tenant, for
// a policy keyed [tenant, ...]) may hold at most policy.KeysPerValue() of
// the policy's live keys, so no value can fill max_keys and shut the
// others out. The rule is checked where a key is created (resolve), from
// the count of live keys sharing the value that every key map keeps
// (cowMap.groups), which is derived from the keys alone and so is the
// same on every replica. The policy's max_keys still bounds the total.

// FeatureKeyQuota: a new key of a token-bucket policy is refused
// (RESOURCE_EXHAUSTED) while the policy already tracks KeysPerValue() keys
// with the same value of its first key attribute, and a policy's
// max_keys_per_value is stored as applied. Off, neither: a new key is
// refused only at max_keys and max_keys_per_value is stored as 0, exactly
// as a server that predates the field applies the same entry (it ignores
// the field), so a mixed cluster keeps equal state hashes. Switched on,
// stored policies take the default cap (max_keys/10) at once.
const FeatureKeyQuota uint64 = 1 << 10

// keyQuotaOn reports whether the key-quota switch is on.
func (s *state) keyQuotaOn() bool { return s.features&FeatureKeyQuota != 0 }

// keyGroup is the part of canonical key ck that names the value of its
// policy's first key attribute, and whether it has one that other keys
// may share: the text before the first '/', which cannot occur inside an
// escaped value (policy.CanonicalKey). A key without '/' (a policy with
// fewer than two key attributes) is alone in its group.
func keyGroup(ck string) (string, bool) {
	i := strings.IndexByte(ck, '/')
	if i < 0 {
		return "", false
	}
	return ck[:i], true
}

// storedPolicy is p as the state keeps it: without max_keys_per_value
// while the switch is off (see FeatureKeyQuota).
func (s *state) storedPolicy(p policy.Policy) policy.Policy {
	if !s.keyQuotaOn() {
		p.MaxKeysPerValue = 0
	}
	return p
}

// checkKeyQuota refuses a new key ck of p when its first attribute's
// value already holds KeysPerValue() live keys.
func (s *state) checkKeyQuota(p policy.Policy, ck string) error {
	if !s.keyQuotaOn() || s.fault == faultKeyQuotaIgnored {
		return nil
	}
	g, ok := keyGroup(ck)
	if !ok {
		return nil
	}
	if n, limit := int64(s.keys[p.Name].group(g)), p.KeysPerValue(); n >= limit {
		return fmt.Errorf("%w: policy %q already tracks %d keys whose %s is %q, its max_keys_per_value=%d; keys with other values are unaffected",
			rpcerr.ErrResourceExhausted, p.Name, n, p.Key[0], g, limit)
	}
	return nil
}
