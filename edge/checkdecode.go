package edge

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// A Check's policy names and key attributes are proto3 strings, so a
// caller that sends bytes that are not UTF-8 (a C++ or Java client does
// not check) would be answered Internal by grpc-go's codec before any
// handler ran: to a caller that fails open, an error it lets through. The
// edge registers Admission with its own handler, like Envoy's service
// (rlsdecode.go): the request arrives as raw bytes and a request
// protobuf refuses is INVALID_ARGUMENT naming the cause and the fix (send
// the value's client.WireKeyValue; docs/envoy.md, "The Check API").

// admissionServiceDesc is api.Admission_ServiceDesc with decodeCheck for
// the codec's decoding.
var admissionServiceDesc = func() grpc.ServiceDesc {
	d := api.Admission_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "Check", Handler: rawHandler(api.Admission_Check_FullMethodName, decodeCheck,
		func(srv any, ctx context.Context, req *api.CheckRequest) (any, error) {
			return srv.(api.AdmissionServer).Check(ctx, req)
		})}}
	return d
}()

// rawHandler is a generated unary handler with decode for the codec's
// decoding: the request arrives as an Empty's unknown fields (its bytes
// as they came) and decode turns them into the request or an error.
func rawHandler[Req any](method string, decode func([]byte) (Req, error), call func(srv any, ctx context.Context, req Req) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		var raw emptypb.Empty
		if err := dec(&raw); err != nil {
			return nil, err // not even a message's framing: grpc-go answers Internal
		}
		in, err := decode(raw.ProtoReflect().GetUnknown())
		if err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(srv, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) { return call(srv, ctx, req.(Req)) })
	}
}

// decodeCheck decodes a CheckRequest; one protobuf refuses (a string that
// is not UTF-8, a broken field) is InvalidArgument.
func decodeCheck(b []byte) (*api.CheckRequest, error) {
	req := &api.CheckRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, rpcerr.Errorf(codes.InvalidArgument,
			"not a CheckRequest: %v (policy names and key attributes are UTF-8; send other bytes as their client.WireKeyValue, docs/envoy.md \"The Check API\")", err)
	}
	return req, nil
}
