package grpclimit

import (
	"context"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

type principalKey struct{}

// WithPrincipal returns a context carrying the caller's principal, as the
// application's authentication interceptor established it. Chain that
// interceptor before this package's, and pass the returned context on:
//
//	func auth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
//		tenant, err := verifyToken(ctx) // the application's own check
//		if err != nil {
//			return nil, status.Error(codes.Unauthenticated, "bad token")
//		}
//		return h(grpclimit.WithPrincipal(ctx, tenant), req)
//	}
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, lim.UnaryServerInterceptor()))
//
// Metadata the caller wrote (an "x-tenant" header, say) is never read by
// this package: only what the application vouches for here, or a verified
// TLS client certificate, names a principal.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFromContext returns the principal WithPrincipal put in ctx.
func PrincipalFromContext(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// TLSPrincipal returns the subject (its RFC 2253 string, e.g.
// "CN=replica-1,O=northwind") of the peer's TLS client certificate, but
// only if the handshake verified it (the server's tls.Config.ClientAuth is
// VerifyClientCertIfGiven or RequireAndVerifyClientCert): a certificate
// that was presented but not verified names nobody.
func TLSPrincipal(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false
	}
	var info credentials.TLSInfo
	switch a := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		info = a
	case *credentials.TLSInfo:
		if a == nil {
			return "", false
		}
		info = *a
	default:
		return "", false
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", false
	}
	return chains[0][0].Subject.String(), true
}

// DefaultPrincipal is the principal Config.Principal defaults to: the one
// the application's auth interceptor set with WithPrincipal, else the
// verified TLS client certificate's subject, else "" (anonymous).
func DefaultPrincipal(ctx context.Context) string {
	if p, ok := PrincipalFromContext(ctx); ok {
		return p
	}
	if p, ok := TLSPrincipal(ctx); ok {
		return p
	}
	return ""
}
