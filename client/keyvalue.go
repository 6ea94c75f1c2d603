package client

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ration-dev/ration/internal/limits"
)

// Key values on the wire (docs/design.md §3.4, "Key bytes").
//
// A Key holds any bytes: a header or a path may carry bytes that are not
// UTF-8, and a value may be long. The cluster's API carries names and
// values as protobuf strings, which must be valid UTF-8, of at most
// MaxKeyValueLen bytes each. WireKeyValue maps every byte string to one
// the API carries, so every value is a budget of its own, and ordinary
// values (UTF-8, no leading NUL, at most MaxKeyValueLen bytes) keep
// their own name.

// MaxKeyValueLen is the longest key attribute name or value the cluster's
// API accepts, in bytes (the servers' bound, internal/limits).
const MaxKeyValueLen = limits.KeyValueBytes

// MaxKeyAttributes is the most attributes one key may have.
const MaxKeyAttributes = limits.KeyAttributes

// ErrInvalidKey is Limiter.Err's error (wrapped) for a key no cluster can
// lease: an empty policy name, one that is not UTF-8, more than
// MaxKeyAttributes attributes, or (WireLimiter) a name or value that is
// not a wire name. Such a limiter is refused at once (every decision is
// NoLease, with no first-lease wait; WaitN returns the error) and never
// sent, so it cannot fail the batched calls of other keys.
var ErrInvalidKey = errors.New("ration: invalid key")

// keyEscapeMark starts every value WireKeyValue rewrites. No HTTP header
// or gRPC metadata value can start with a NUL byte.
const keyEscapeMark = "\x00"

// WireKeyValue is the name the cluster knows a key attribute name or
// value v by; Client.Limiter and Client.Slots apply it to every name and
// value of a key. It is v itself when v is valid UTF-8, does not start
// with a NUL byte and is at most MaxKeyValueLen bytes. Otherwise it is a
// NUL byte followed by v with '%', NUL and every byte that is not part of
// a valid UTF-8 sequence written as %XX (uppercase hex), when that fits in
// MaxKeyValueLen bytes; else a NUL byte, '#' and the lowercase hex SHA-256
// of v (66 bytes).
//
// The three forms cannot meet: only the last two start with NUL, and an
// escaped form always holds a '%' (v has a byte that is not UTF-8, or a
// leading NUL) while a hashed one never does. The first two are
// injective, the third collision-resistant: distinct values are distinct
// budgets. A caller of the edge's Check API that has bytes which are not
// UTF-8 sends WireKeyValue of them to reach the same budget as an Envoy
// descriptor or a Limiter with those bytes.
func WireKeyValue(v string) string {
	if len(v) <= MaxKeyValueLen && !strings.HasPrefix(v, keyEscapeMark) && utf8.ValidString(v) {
		return v
	}
	if n := escapedLen(v); n <= MaxKeyValueLen {
		return escapeKeyValue(v, n)
	}
	sum := sha256.Sum256([]byte(v))
	return keyEscapeMark + "#" + hex.EncodeToString(sum[:])
}

// escapedLen is the length of v's escaped form, mark included.
func escapedLen(v string) int {
	n := len(keyEscapeMark)
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r == '%', r == 0:
			n += 3
		default:
			n += size
		}
		i += max(size, 1)
	}
	return n
}

func escapeKeyValue(v string, n int) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(n)
	b.WriteString(keyEscapeMark)
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r == '%', r == 0:
			size = 1
			b.WriteByte('%')
			b.WriteByte(hexDigits[v[i]>>4])
			b.WriteByte(hexDigits[v[i]&0xf])
		default:
			b.WriteString(v[i : i+size])
		}
		i += size
	}
	return b.String()
}

// wireKey returns key with every name and value mapped by WireKeyValue:
// key itself when none changes.
func wireKey(key map[string]string) map[string]string {
	same := true
	for k, v := range key {
		if WireKeyValue(k) != k || WireKeyValue(v) != v {
			same = false
			break
		}
	}
	if same {
		return key
	}
	out := make(map[string]string, len(key))
	for k, v := range key {
		out[WireKeyValue(k)] = WireKeyValue(v)
	}
	return out
}

// keyProblem says why no cluster can lease a key of policy with attrs
// (ErrInvalidKey), or nil. Client.Limiter's keys pass wireKey first, so
// only their policy name and attribute count can fail here. Every
// limiter registered (so every key in a request) passed it.
func keyProblem(policy string, attrs map[string]string) error {
	switch {
	case policy == "":
		return fmt.Errorf("%w: empty policy name", ErrInvalidKey)
	case !utf8.ValidString(policy):
		return fmt.Errorf("%w: policy name %q is not UTF-8 (no policy has such a name)", ErrInvalidKey, policy)
	case len(attrs) > MaxKeyAttributes:
		return fmt.Errorf("%w: policy %q: %d key attributes, at most %d", ErrInvalidKey, policy, len(attrs), MaxKeyAttributes)
	}
	for k, v := range attrs {
		for _, s := range [2]string{k, v} {
			if len(s) > MaxKeyValueLen || !utf8.ValidString(s) {
				return fmt.Errorf("%w: policy %q: key attribute %q: %q is not a wire name (UTF-8, at most %d bytes; see WireKeyValue)", ErrInvalidKey, policy, k, s, MaxKeyValueLen)
			}
		}
	}
	return nil
}
