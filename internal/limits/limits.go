// Package limits holds the bounds on what one request, key or caller may
// carry, shared by the servers (lease, fsm, coordinator, policy) and the
// client, so that each is written once; and the one check of a lease
// request's caller that the coordinator (before proposing) and the FSM
// (applying, a second line) both run.
//
// It imports only the wire types: every other package of ration may
// import it.
package limits

import (
	"errors"
	"fmt"

	"github.com/ration-dev/ration/api"
)

const (
	// ClientIDBytes is the longest client ID (a caller's, and one in a
	// policy's weights.clients), in bytes.
	ClientIDBytes = 256
	// KeyValueBytes is the longest key attribute name or value, in bytes.
	KeyValueBytes = 256
	// KeyAttributes is the most attributes one key may have.
	KeyAttributes = 32
	// KeysPerRequest is the most keys one lease request may name: the
	// FSM's bound on one operation, and the coordinator's default
	// (Config.MaxKeysPerRequest).
	KeysPerRequest = 1024
	// RequestBytes is the coordinator's default bound on one request's
	// size (Config.MaxRequestBytes).
	RequestBytes = 4 << 20
	// PolicyNameBytes is the longest policy name.
	PolicyNameBytes = 63
)

// The edge's bounds on one call (rationd edge).
const (
	// Descriptors bounds the descriptors of one ShouldRateLimit call.
	Descriptors = 64
	// DescriptorEntries bounds the entries of one descriptor.
	DescriptorEntries = 16
	// CheckItems bounds the items of one Check call.
	CheckItems = 64
)

// The bounds on one ACL token, so one entry cannot bloat every server.
const (
	ACLTokens          = 4096 // tokens in the cluster
	ACLAccessorIDBytes = 64
	ACLTokenNameBytes  = 256
	ACLTokenBindings   = 256
	ACLBindingMatches  = 32
	ACLTokenClientIDs  = 256
	ACLTokenTextBytes  = 512 // a binding's policy, a match's attribute or value, a client ID pattern
)

// ErrInvalid is the error a request out of these bounds wraps. It is
// internal/rpcerr's ErrInvalid (InvalidArgument), defined here so that
// this package needs no other.
var ErrInvalid = errors.New("invalid argument")

// CheckCaller checks a lease request's caller: a client ID of 1 to
// ClientIDBytes bytes and a seq of at least 1. The error wraps ErrInvalid.
func CheckCaller(c *api.Caller) error {
	switch {
	case c.GetClientId() == "":
		return fmt.Errorf("%w: caller.client_id is required", ErrInvalid)
	case len(c.GetClientId()) > ClientIDBytes:
		return fmt.Errorf("%w: caller.client_id is %d bytes, more than %d", ErrInvalid, len(c.GetClientId()), ClientIDBytes)
	case c.GetSeq() == 0:
		return fmt.Errorf("%w: caller.seq must be at least 1", ErrInvalid)
	}
	return nil
}
