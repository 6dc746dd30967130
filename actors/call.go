package actors

import (
	"context"
	"fmt"
	"reflect"
)

// Handle is a typed reference to an actor of Go type T.
type Handle[T any] struct {
	ref Ref
}

// Ref returns the runtime's reference behind the handle.
func (h Handle[T]) Ref() Ref { return h.ref }

// ID is the actor's unique ID.
func (h Handle[T]) ID() string {
	if h.ref == nil {
		return ""
	}
	return h.ref.ID()
}

// Name is the actor's name, or "".
func (h Handle[T]) Name() string {
	if h.ref == nil {
		return ""
	}
	return h.ref.Name()
}

// IsZero reports whether h refers to no actor.
func (h Handle[T]) IsZero() bool { return h.ref == nil }

// String names the actor for logs.
func (h Handle[T]) String() string {
	if h.ref == nil {
		return "actor(nil)"
	}
	if n := h.ref.Name(); n != "" {
		return fmt.Sprintf("%s(%s)", h.ref.TypeName(), n)
	}
	return fmt.Sprintf("%s(%s)", h.ref.TypeName(), h.ref.ID())
}

// Spawn creates an actor of the type registered as typeName, whose Go type
// must be T, by running its constructor with cfg on a node the runtime
// chooses. It returns once the constructor has succeeded.
func Spawn[T, C any](ctx context.Context, rt Runtime, typeName string, cfg C, opts ...Option) (Handle[T], error) {
	ti, err := lookupType(typeName)
	if err != nil {
		return Handle[T]{}, fmt.Errorf("spawn: %w", err)
	}
	if want := reflect.TypeFor[*T](); ti.ptrType != want {
		return Handle[T]{}, fmt.Errorf("spawn %s: %w: registered as %v, handle wants %v", typeName, ErrTypeMismatch, ti.ptrType, want)
	}
	if got := reflect.TypeFor[C](); got != ti.cfgType {
		return Handle[T]{}, fmt.Errorf("spawn %s: %w: config is %v, constructor takes %v", typeName, ErrTypeMismatch, got, ti.cfgType)
	}
	data, err := marshal(cfg)
	if err != nil {
		return Handle[T]{}, fmt.Errorf("spawn %s: config: %w: %v", typeName, ErrEncode, err)
	}
	spec := Spec{Type: typeName, Config: data}
	for _, o := range opts {
		o(&spec)
	}
	if err := spec.Validate(); err != nil {
		return Handle[T]{}, err
	}
	ref, err := rt.SpawnActor(ctx, spec)
	if err != nil {
		return Handle[T]{}, err
	}
	return Handle[T]{ref: ref}, nil
}

// GetActor finds the live actor named name and checks that its Go type is T.
func GetActor[T any](ctx context.Context, rt Runtime, name string) (Handle[T], error) {
	ref, err := rt.GetActor(ctx, name)
	if err != nil {
		return Handle[T]{}, err
	}
	ti := typeFor(reflect.TypeFor[*T]())
	if ti == nil || ti.name != ref.TypeName() {
		return Handle[T]{}, fmt.Errorf("get actor %q: %w: it is a %s, handle wants %v", name, ErrTypeMismatch, ref.TypeName(), reflect.TypeFor[*T]())
	}
	return Handle[T]{ref: ref}, nil
}

// Kill ends the actor for good, without restart. Pending and later calls
// fail with an *ActorDiedError.
func Kill[T any](ctx context.Context, h Handle[T]) error {
	if h.ref == nil {
		return fmt.Errorf("kill: zero handle")
	}
	return h.ref.Kill(ctx, "killed by the program")
}

// Call invokes method m of the actor with arg and returns the future result.
// m is a method expression such as (*Counter).Add, so the compiler checks
// the argument and result types. Cancelling ctx drops the call if it has not
// started and cancels the method's context if it has.
func Call[T, A, R any](ctx context.Context, h Handle[T], m func(*T, context.Context, A) (R, error), arg A) *Future[R] {
	mi, err := resolve(h, m)
	if err != nil {
		return failed[R](err)
	}
	data, err := marshal(arg)
	if err != nil {
		return failed[R](fmt.Errorf("call %s.%s: argument: %w: %v", h.ref.TypeName(), mi.name, ErrEncode, err))
	}
	c := newCall[R]()
	c.inv = Invocation{Method: mi.name, Arg: data, Ctx: ctx, Reply: &c.p}
	h.ref.Invoke(&c.inv)
	return &c.f
}

// call holds a call's future, promise and invocation in one allocation.
type call[R any] struct {
	f   Future[R]
	p   Promise
	inv Invocation
}

func newCall[R any]() *call[R] {
	c := &call[R]{p: Promise{done: make(chan struct{})}}
	c.f.p = &c.p
	return c
}

// CallRef is Call with the argument given as the future result of another
// call: the callee waits for it, and the value flows to the callee without
// passing through the caller. If that call failed, this one fails with its
// error.
func CallRef[T, A, R any](ctx context.Context, h Handle[T], m func(*T, context.Context, A) (R, error), arg *Future[A]) *Future[R] {
	mi, err := resolve(h, m)
	if err != nil {
		return failed[R](err)
	}
	if arg == nil {
		return failed[R](fmt.Errorf("call %s.%s: nil argument future", h.ref.TypeName(), mi.name))
	}
	c := newCall[R]()
	c.inv = Invocation{Method: mi.name, ArgRef: arg.p, Ctx: ctx, Reply: &c.p}
	h.ref.Invoke(&c.inv)
	return &c.f
}

// resolve finds the method behind a method expression and, the first time,
// installs a typed invoker for it so instances in this process call it
// without reflection.
func resolve[T, A, R any](h Handle[T], m func(*T, context.Context, A) (R, error)) (*methodInfo, error) {
	if h.ref == nil {
		return nil, fmt.Errorf("call: zero handle")
	}
	mi, ok := methodForFunc(m)
	if !ok {
		return nil, fmt.Errorf("call %s: %w: the function is not a method expression of a registered actor type, such as (*T).Method", h.ref.TypeName(), ErrNoSuchMethod)
	}
	if mi.typed.Load() == nil {
		mi.typed.Store(typedInvoker(m))
	}
	return mi, nil
}

// HandleOf wraps a runtime's Ref as a typed handle. Runtimes and transports
// use it; programs get handles from Spawn and GetActor, which check the type.
func HandleOf[T any](ref Ref) Handle[T] { return Handle[T]{ref: ref} }

// FutureOf wraps a promise as a typed future. Runtimes use it for results
// that arrive by other paths.
func FutureOf[R any](p *Promise) *Future[R] { return &Future[R]{p: p} }
