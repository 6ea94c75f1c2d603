package edge

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ration-dev/ration/internal/rpcerr"
)

// Envoy's descriptors are bytes (docs/envoy.md, "Descriptor values").
//
// Envoy copies a header's bytes into a descriptor value as they came,
// but the RateLimitService proto declares it a proto3 string, which
// protobuf refuses to decode unless it is valid UTF-8. grpc-go's codec
// would answer such a call Internal before any handler ran, and Envoy,
// whose failure_mode_deny defaults to false, lets an erroring call
// through with no limit at all (envoyproxy/ratelimit does the same). So
// the edge registers the service with its own handler: the request is
// received as raw bytes (an Empty's unknown fields), decoded by protobuf
// when it can, else by decodeRLSLax, which reads the fields
// ShouldRateLimit uses without the UTF-8 check. protobuf-go has no option
// to skip that check for proto3 strings (UnmarshalOptions has none).

// rlsServiceDesc is rlspb.RateLimitService_ServiceDesc with decodeRLS for
// the codec's decoding: the same service, methods and file.
var rlsServiceDesc = func() grpc.ServiceDesc {
	d := rlspb.RateLimitService_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: rawHandler(rlspb.RateLimitService_ShouldRateLimit_FullMethodName, decodeRLS,
		func(srv any, ctx context.Context, req *rlspb.RateLimitRequest) (any, error) {
			return srv.(rlspb.RateLimitServiceServer).ShouldRateLimit(ctx, req)
		})}}
	return d
}()

// decodeRLS decodes a RateLimitRequest: by protobuf, or when that fails
// (a string that is not UTF-8), by decodeRLSLax. An input neither
// decodes is InvalidArgument.
func decodeRLS(b []byte) (*rlspb.RateLimitRequest, error) {
	req := &rlspb.RateLimitRequest{}
	if err := proto.Unmarshal(b, req); err == nil {
		return req, nil
	}
	req, err := decodeRLSLax(b)
	if err != nil {
		return nil, rpcerr.Errorf(codes.InvalidArgument, "not a RateLimitRequest: %v", err)
	}
	return req, nil
}

// decodeRLSLax decodes the fields of a RateLimitRequest ShouldRateLimit
// reads (domain, hits_addend, and each descriptor's entries, limit,
// hits_addend and is_negative_hits), keeping strings' bytes as they are.
// It follows protobuf's rules for what it reads: the last value of a
// scalar wins, a message field seen twice is merged, a field of an
// unexpected wire type is skipped (an unknown field). Other fields are
// skipped.
func decodeRLSLax(b []byte) (*rlspb.RateLimitRequest, error) {
	req := &rlspb.RateLimitRequest{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			req.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			d, err := decodeDescriptorLax(v)
			if err != nil {
				return fmt.Errorf("descriptor %d: %w", len(req.Descriptors), err)
			}
			req.Descriptors = append(req.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			req.HitsAddend = uint32(x)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return req, nil
}

func decodeDescriptorLax(b []byte) (*ratelimitv3.RateLimitDescriptor, error) {
	d := &ratelimitv3.RateLimitDescriptor{}
	merge := proto.UnmarshalOptions{Merge: true, DiscardUnknown: true}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			en := &ratelimitv3.RateLimitDescriptor_Entry{}
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					en.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					en.Value = string(v)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("entry %d: %w", len(d.Entries), err)
			}
			d.Entries = append(d.Entries, en)
		case num == 2 && typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}
			}
			return merge.Unmarshal(v, d.Limit)
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return merge.Unmarshal(v, d.HitsAddend)
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = x != 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// eachField calls f for every field of the message b: a length-delimited
// field's contents as v, a varint's value as x (other types: neither).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
