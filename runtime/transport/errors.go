package transport

import (
	"context"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"troupe/runtime/api"
)

// Status returns a gRPC status error with code and err's message that
// carries err in api's error codec (msgpack in a status detail), so the
// client side gets back an error for which errors.Is holds for every
// sentinel err wrapped. Servers made by NewServer do this for every
// handler error that is not a status already; handlers that want another
// code than Unknown call Status themselves.
func Status(code codes.Code, err error) error {
	st := status.New(code, err.Error())
	if b, merr := msgpack.Marshal(api.Encode(err)); merr == nil {
		if d, derr := st.WithDetails(wrapperspb.Bytes(b)); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// FromStatus returns err, a gRPC call's error, with the error its status
// carries in api's codec: errors.Is and errors.As see the sender's
// sentinels and structured errors, and status.Code still gives the code.
// Connections made by Dial do this for every unary call.
func FromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		bv, ok := d.(*wrapperspb.BytesValue)
		if !ok {
			continue
		}
		var e api.Error
		if msgpack.Unmarshal(bv.Value, &e) == nil {
			return &statusError{err: err, st: st, cause: e.Err()}
		}
	}
	return err
}

// statusError is a gRPC error with the sender's error decoded.
type statusError struct {
	err   error // as gRPC returned it
	st    *status.Status
	cause error // the sender's error, decoded
}

func (e *statusError) Error() string { return e.err.Error() }

// GRPCStatus lets status.Code and status.FromError see the status.
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the sender's decoded error.
func (e *statusError) Unwrap() error { return e.cause }

// errorInterceptor encodes a handler's plain error with Status, choosing
// the code gRPC would have chosen (Canceled and DeadlineExceeded for the
// context's errors, Unknown otherwise).
func errorInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	if _, ok := status.FromError(err); ok {
		return resp, err
	}
	return resp, Status(status.FromContextError(err).Code(), err)
}

// decodeInterceptor applies FromStatus to a unary call's error.
func decodeInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return FromStatus(err)
	}
	return nil
}
