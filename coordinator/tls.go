package coordinator

import (
	"context"

	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// serverCall reports whether a call says it comes from another server: it
// was forwarded (ForwardedMetadataKey) or is one server's share of a
// fan-out (FanoutMetadataKey).
func serverCall(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(ForwardedMetadataKey)) > 0 || len(md.Get(FanoutMetadataKey)) > 0
}

// FanoutMetadataKey marks a call one server makes on every other as its
// share of a cluster-wide admin operation (keyring).
const FanoutMetadataKey = "ration-fanout"

// checkServerPeer refuses a server-to-server call whose peer certificate
// does not name a server (with VerifyServerHostname): a client
// certificate from the same CA cannot pose as a forwarding server.
func checkServerPeer(ctx context.Context, name string) error {
	if !serverCall(ctx) {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			if tlsutil.HasDNSName(ti.State.PeerCertificates[0], name) == nil {
				return nil
			}
		}
	}
	return rpcerr.Errorf(codes.PermissionDenied, "a server-to-server call needs a server's certificate (naming %s)", name)
}

func serverOnlyUnary(name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := checkServerPeer(ctx, name); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func serverOnlyStream(name string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := checkServerPeer(ss.Context(), name); err != nil {
			return err
		}
		return h(srv, ss)
	}
}
