package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// The command types and feature switches are in wire.go.

// ErrPreBaseline marks state or a log written by a ration build before
// v0.1.0 with some baseline switch off: this server refuses it rather than
// apply it differently (docs/operations.md, "Compatibility promise").
var ErrPreBaseline = errors.New("pre-0.1.0 data refused")

// preBaseline explains a refusal of data whose switches lack some
// baseline bit (features: the bits it has).
func preBaseline(what string, features uint64) error {
	return fmt.Errorf("%w: %s written by a ration build before v0.1.0 with feature switches %#x off; "+
		"restore it into a pre-0.1.0 cluster, let every switch turn on, save a new snapshot, restore that",
		ErrPreBaseline, what, BaselineFeatures&^features)
}

func (t CommandType) String() string {
	switch t {
	case CmdApplyPolicies:
		return "apply-policies"
	case CmdDeletePolicy:
		return "delete-policy"
	case CmdLeaseBatch:
		return "lease-batch"
	case CmdExpire:
		return "expire"
	case CmdSetFeatures:
		return "set-features"
	case CmdACL:
		return "acl"
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// headerLen is the envelope header: one type byte and the leader-stamped
// cluster time as 8 big-endian bytes.
const headerLen = 9

// ErrCorruptEntry is returned by Decode for an entry that cannot be parsed.
var ErrCorruptEntry = errors.New("fsm: corrupt log entry")

// Encode builds a log entry: the envelope header then the deterministic
// protobuf encoding of msg.
func Encode(t CommandType, clusterTimeNanos int64, msg proto.Message) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerLen, headerLen+len(body))
	out[0] = byte(t)
	binary.BigEndian.PutUint64(out[1:], uint64(clusterTimeNanos))
	return append(out, body...), nil
}

// Envelope is a decoded entry header plus its undecoded body.
type Envelope struct {
	Type             CommandType
	ClusterTimeNanos int64
	Body             []byte
}

// DecodeEnvelope splits an entry into its header and body.
func DecodeEnvelope(data []byte) (Envelope, error) {
	if len(data) < headerLen {
		return Envelope{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorruptEntry, len(data), headerLen)
	}
	t := int64(binary.BigEndian.Uint64(data[1:headerLen]))
	if t < 0 {
		return Envelope{}, fmt.Errorf("%w: negative cluster time", ErrCorruptEntry)
	}
	return Envelope{Type: CommandType(data[0]), ClusterTimeNanos: t, Body: data[headerLen:]}, nil
}

func decodeBody[T any, PT interface {
	*T
	proto.Message
}](body []byte) (PT, error) {
	msg := PT(new(T))
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptEntry, err)
	}
	return msg, nil
}
