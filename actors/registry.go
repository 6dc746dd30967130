package actors

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
)

// typeInfo is what the registry knows of one actor type.
type typeInfo struct {
	name    string
	ptrType reflect.Type // *T
	cfgType reflect.Type // C
	ctor    reflect.Value
	methods map[string]*methodInfo
	names   []string // sorted method names, for messages
}

// methodInfo describes one callable method.
type methodInfo struct {
	name    string
	fn      reflect.Value // func(*T, context.Context, A) (R, error)
	argType reflect.Type
	resType reflect.Type
	// typed is a compiled invoker installed by the first Call of this method
	// in this process; it skips reflection. Nil until then (and in worker
	// processes that never call the method themselves).
	typed atomic.Pointer[invoker]
}

// invoker decodes the argument, calls the method on obj (a *T) and encodes
// the result. err is the method's own error; wireErr an argument that did
// not decode or a result that did not encode. A panic propagates.
type invoker func(ctx context.Context, obj any, arg []byte) (res []byte, err error, wireErr error)

var (
	ctxType = reflect.TypeFor[context.Context]()
	errType = reflect.TypeFor[error]()
)

// registry holds every registered actor type. Registration normally happens
// in init functions, so it is read far more often than written.
var registry struct {
	sync.RWMutex
	byName map[string]*typeInfo
	byType map[reflect.Type]*typeInfo
	byPC   map[uintptr]*methodInfo // method code address -> method
}

// Register makes actor type T available under name. The constructor builds
// one instance from a config C. Every exported method of *T whose first
// parameter is a context.Context must have the form
//
//	func(ctx context.Context, arg A) (R, error)
//
// with A and R encodable as msgpack (no channels, functions or unsafe
// pointers); such methods become callable. Exported methods that do not take
// a context first are ignored (they are not actor methods).
//
// Register refuses, with an error naming the type and method, a duplicate
// name, a type registered twice, a wrong method signature and an argument,
// result or config type that cannot travel as msgpack.
func Register[T, C any](name string, ctor func(context.Context, C) (*T, error)) error {
	if name == "" {
		return fmt.Errorf("register: empty actor type name: %w", ErrBadSignature)
	}
	if ctor == nil {
		return fmt.Errorf("register %s: nil constructor: %w", name, ErrBadSignature)
	}
	ti := &typeInfo{
		name:    name,
		ptrType: reflect.TypeFor[*T](),
		cfgType: reflect.TypeFor[C](),
		ctor:    reflect.ValueOf(ctor),
		methods: map[string]*methodInfo{},
	}
	if err := checkWireType(ti.cfgType); err != nil {
		return fmt.Errorf("register %s: config type %v: %w", name, ti.cfgType, err)
	}
	byPC := map[uintptr]*methodInfo{}
	for i := 0; i < ti.ptrType.NumMethod(); i++ {
		m := ti.ptrType.Method(i)
		ft := m.Type // includes the receiver
		if ft.NumIn() < 2 || ft.In(1) != ctxType {
			continue // not an actor method
		}
		if ft.NumIn() != 3 || ft.NumOut() != 2 || ft.Out(1) != errType || ft.IsVariadic() {
			return fmt.Errorf("register %s: method %s has signature %v, want func(context.Context, A) (R, error): %w",
				name, m.Name, methodSig(ft), ErrBadSignature)
		}
		mi := &methodInfo{name: m.Name, fn: m.Func, argType: ft.In(2), resType: ft.Out(0)}
		if err := checkWireType(mi.argType); err != nil {
			return fmt.Errorf("register %s: method %s argument %v: %w", name, m.Name, mi.argType, err)
		}
		if err := checkWireType(mi.resType); err != nil {
			return fmt.Errorf("register %s: method %s result %v: %w", name, m.Name, mi.resType, err)
		}
		ti.methods[m.Name] = mi
		ti.names = append(ti.names, m.Name)
		byPC[m.Func.Pointer()] = mi
	}
	sort.Strings(ti.names)

	registry.Lock()
	defer registry.Unlock()
	if registry.byName == nil {
		registry.byName = map[string]*typeInfo{}
		registry.byType = map[reflect.Type]*typeInfo{}
		registry.byPC = map[uintptr]*methodInfo{}
	}
	if _, dup := registry.byName[name]; dup {
		return fmt.Errorf("register %s: %w: an actor type is already registered under that name", name, ErrDuplicate)
	}
	if prev, dup := registry.byType[ti.ptrType]; dup {
		return fmt.Errorf("register %s: %w: Go type %v is already registered as %q", name, ErrDuplicate, ti.ptrType, prev.name)
	}
	registry.byName[name] = ti
	registry.byType[ti.ptrType] = ti
	for pc, mi := range byPC {
		registry.byPC[pc] = mi
	}
	return nil
}

// MustRegister is Register for init functions: it panics if registration
// fails, which is a programming error seen on the first run.
func MustRegister[T, C any](name string, ctor func(context.Context, C) (*T, error)) {
	if err := Register(name, ctor); err != nil {
		panic(err)
	}
}

// Precompile makes this process run method m of a registered actor type
// through a typed invoker, without reflection, as a Call naming m does for
// the process that makes it. A worker process serves calls made elsewhere,
// so it runs the methods nobody precompiled there by reflection, which
// costs more CPU per call (BenchmarkInvokeWorker vs
// BenchmarkInvokeWorkerTyped: about 0.25 us, a tenth of a small call across
// two processes). Programs call it in an init function after Register, for
// the methods called often:
//
//	func init() {
//		actors.MustRegister("Counter", NewCounter)
//		actors.MustPrecompile((*Counter).Add)
//	}
//
// It fails if m is not a method expression, such as (*Counter).Add, of a
// registered actor type.
func Precompile[T, A, R any](m func(*T, context.Context, A) (R, error)) error {
	mi, ok := methodForFunc(m)
	if !ok {
		return fmt.Errorf("precompile %v: %w: the function is not a method expression of a registered actor type, such as (*T).Method", reflect.TypeFor[*T](), ErrNoSuchMethod)
	}
	if mi.typed.Load() == nil {
		mi.typed.Store(typedInvoker(m))
	}
	return nil
}

// MustPrecompile is Precompile for init functions: it panics if m is not a
// method of a registered actor type.
func MustPrecompile[T, A, R any](m func(*T, context.Context, A) (R, error)) {
	if err := Precompile(m); err != nil {
		panic(err)
	}
}

// typedInvoker returns the invoker of method m: it decodes the argument as
// an A and calls m directly.
func typedInvoker[T, A, R any](m func(*T, context.Context, A) (R, error)) *invoker {
	var inv invoker = func(ctx context.Context, obj any, data []byte) ([]byte, error, error) {
		var arg A
		if err := unmarshal(data, &arg); err != nil {
			return nil, nil, fmt.Errorf("argument as %v: %w: %v", reflect.TypeFor[A](), ErrDecode, err)
		}
		res, err := m(obj.(*T), ctx, arg)
		if err != nil {
			return nil, err, nil
		}
		out, err := marshal(res)
		if err != nil {
			return nil, nil, fmt.Errorf("result %v: %w: %v", reflect.TypeFor[R](), ErrEncode, err)
		}
		return out, nil, nil
	}
	return &inv
}

// RegisteredTypes lists the registered actor type names, sorted.
func RegisteredTypes() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.byName))
	for n := range registry.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Methods lists the callable method names of a registered actor type.
func Methods(typeName string) ([]string, error) {
	ti, err := lookupType(typeName)
	if err != nil {
		return nil, err
	}
	return append([]string(nil), ti.names...), nil
}

func lookupType(name string) (*typeInfo, error) {
	registry.RLock()
	ti := registry.byName[name]
	registry.RUnlock()
	if ti == nil {
		return nil, fmt.Errorf("actor type %q: %w (registered: %v)", name, ErrNotRegistered, RegisteredTypes())
	}
	return ti, nil
}

func typeFor(t reflect.Type) *typeInfo {
	registry.RLock()
	defer registry.RUnlock()
	return registry.byType[t]
}

// methodForFunc finds the method that a method expression such as
// (*Counter).Add refers to, through its code address.
func methodForFunc(fn any) (*methodInfo, bool) {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return nil, false
	}
	registry.RLock()
	mi, ok := registry.byPC[v.Pointer()]
	registry.RUnlock()
	return mi, ok
}

func methodSig(ft reflect.Type) string {
	s := "func("
	for i := 1; i < ft.NumIn(); i++ { // skip the receiver
		if i > 1 {
			s += ", "
		}
		s += ft.In(i).String()
	}
	s += ")"
	switch ft.NumOut() {
	case 0:
	case 1:
		s += " " + ft.Out(0).String()
	default:
		s += " ("
		for i := 0; i < ft.NumOut(); i++ {
			if i > 0 {
				s += ", "
			}
			s += ft.Out(i).String()
		}
		s += ")"
	}
	return s
}

// checkWireType reports whether values of t can travel as msgpack and come
// back as the same Go type.
func checkWireType(t reflect.Type) error {
	return checkWire(t, map[reflect.Type]bool{}, t.String())
}

func checkWire(t reflect.Type, seen map[reflect.Type]bool, path string) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128, reflect.Uintptr:
		return fmt.Errorf("%s has kind %s, which cannot travel as msgpack", path, t.Kind())
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return checkWire(t.Elem(), seen, path+"[elem]")
	case reflect.Map:
		if err := checkWire(t.Key(), seen, path+"[key]"); err != nil {
			return err
		}
		return checkWire(t.Elem(), seen, path+"[value]")
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("msgpack") == "-" {
				continue
			}
			if err := checkWire(f.Type, seen, path+"."+f.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
