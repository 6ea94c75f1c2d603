package acl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// MetadataKey is the gRPC metadata key a token travels in, as
// "Bearer <secret>".
const MetadataKey = "authorization"

// Bearer is a token secret sent with every call (grpc.PerRPCCredentials).
// It does not require transport security, so ACLs work on a loopback
// cluster without TLS; anywhere else, use TLS too (rationd warns), or the
// secret crosses the network in the clear.
type Bearer string

var _ credentials.PerRPCCredentials = Bearer("")

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return false }

// DialOption sends token with every call; "" sends none. A token that
// does not parse is refused here, with a message that does not repeat it.
func DialOption(token string) (grpc.DialOption, error) {
	if token == "" {
		return nil, nil
	}
	if _, err := ParseSecret(token); err != nil {
		return nil, err
	}
	return grpc.WithPerRPCCredentials(Bearer(token)), nil
}

// LoadToken is the one reading of a token given as text or as a file
// (flags, or the environment variables callers default them to): at most
// one of them, the file's content trimmed, and parsed, so a malformed
// token is refused at start with a message that does not repeat it. ""
// when neither is given.
func LoadToken(token, file string) (string, error) {
	if token != "" && file != "" {
		return "", errors.New("give the ACL token once: as text or as a file, not both")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return "", nil
	}
	if _, err := ParseSecret(token); err != nil {
		return "", fmt.Errorf("ACL token: %w", err)
	}
	return token, nil
}
