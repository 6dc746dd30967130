package actors

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

type okActor struct{}

func (*okActor) Ping(ctx context.Context, s string) (string, error) { return s, nil }
func (*okActor) String() string                                     { return "ignored: no context" }

type noErrActor struct{}

func (*noErrActor) Ping(ctx context.Context, s string) string { return s }

type twoArgActor struct{}

func (*twoArgActor) Ping(ctx context.Context, a, b int) (int, error) { return a + b, nil }

type chanArgActor struct{}

func (*chanArgActor) Ping(ctx context.Context, c chan int) (int, error) { return 0, nil }

type nested struct{ F func() }
type funcResultActor struct{}

func (*funcResultActor) Ping(ctx context.Context, _ int) (nested, error) { return nested{}, nil }

type variadicActor struct{}

func (*variadicActor) Ping(ctx context.Context, xs ...int) (int, error) { return 0, nil }

func ctorOf[T any]() func(context.Context, struct{}) (*T, error) {
	return func(context.Context, struct{}) (*T, error) { return new(T), nil }
}

func TestRegisterRefusesBadTypes(t *testing.T) {
	cases := []struct {
		name string
		err  error
		is   error
		want string
	}{
		{"no error result", Register("t-noerr", ctorOf[noErrActor]()), ErrBadSignature, "method Ping has signature func(context.Context, string) string"},
		{"two arguments", Register("t-twoarg", ctorOf[twoArgActor]()), ErrBadSignature, "method Ping"},
		{"variadic", Register("t-variadic", ctorOf[variadicActor]()), ErrBadSignature, "method Ping"},
		{"channel argument", Register("t-chan", ctorOf[chanArgActor]()), nil, "method Ping argument chan int"},
		{"func inside result", Register("t-func", ctorOf[funcResultActor]()), nil, "nested.F has kind func"},
		{"config with a channel", Register("t-cfg", func(context.Context, chan int) (*okActor, error) { return nil, nil }), nil, "config type chan int"},
		{"empty name", Register("", ctorOf[okActor]()), ErrBadSignature, "empty actor type name"},
		{"nil constructor", Register[okActor, int]("t-nil", nil), ErrBadSignature, "nil constructor"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || (c.is != nil && !errors.Is(c.err, c.is)) {
			t.Errorf("%s: err = %v; want %q", c.name, c.err, c.want)
		}
	}
	if _, err := lookupType("t-noerr"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("a refused type was registered: %v", err)
	}
}

// Registrations that tests make once per process, so -count=N reruns them.
var (
	registerOK   = sync.OnceValue(func() error { return Register("t-ok", ctorOf[okActor]()) })
	registerInst = sync.OnceValue(func() error { return Register("t-inst", ctorOf[instActor]()) })
)

func TestRegisterRefusesDuplicates(t *testing.T) {
	if err := registerOK(); err != nil {
		t.Fatal(err)
	}
	if err := Register("t-ok", ctorOf[instActor2]()); !errors.Is(err, ErrDuplicate) {
		t.Errorf("same name: %v", err)
	}
	if err := Register("t-ok-again", ctorOf[okActor]()); !errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), `registered as "t-ok"`) {
		t.Errorf("same type: %v", err)
	}
	names, err := Methods("t-ok")
	if err != nil || len(names) != 1 || names[0] != "Ping" {
		t.Errorf("Methods = %v, %v; want [Ping] (String has no context and is not an actor method)", names, err)
	}
	if _, err := Methods("t-missing"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Methods of a missing type: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustRegister of a duplicate did not panic")
			}
		}()
		MustRegister("t-ok", ctorOf[okActor]())
	}()
}

func TestInstanceRefusesMalformedInvocations(t *testing.T) {
	if err := registerInst(); err != nil {
		t.Fatal(err)
	}
	in, err := NewInstance(context.Background(), Spec{Type: "t-inst", Config: []byte{0x80}}, ActorInfo{ID: "1"}, InstanceHooks{})
	if err != nil {
		t.Fatal(err)
	}
	call := func(inv *Invocation) error {
		inv.Reply = NewPromise()
		in.Invoke(inv)
		_, err := inv.Reply.Wait(context.Background())
		return err
	}
	if err := call(&Invocation{Method: "Nope", Arg: []byte{0x01}}); !errors.Is(err, ErrNoSuchMethod) {
		t.Errorf("unknown method: %v", err)
	}
	if err := call(&Invocation{Method: "Double", Arg: []byte{0xc1}}); !errors.Is(err, ErrDecode) {
		t.Errorf("malformed argument: %v", err)
	}
	if err := call(&Invocation{Method: "Double", Arg: []byte{0xa1, 'x'}}); !errors.Is(err, ErrDecode) {
		t.Errorf("argument of the wrong type: %v", err)
	}
	if err := call(&Invocation{Method: "Double", Arg: []byte{0x02}}); err != nil {
		t.Errorf("good call: %v", err)
	}
	if _, err := NewInstance(context.Background(), Spec{Type: "t-inst", Config: []byte{0xc1}}, ActorInfo{}, InstanceHooks{}); !errors.Is(err, ErrDecode) {
		t.Errorf("malformed config: %v", err)
	}
	if _, err := NewInstance(context.Background(), Spec{Type: "t-none"}, ActorInfo{}, InstanceHooks{}); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("unregistered type: %v", err)
	}
}

type instActor struct{}

func (*instActor) Double(ctx context.Context, x int) (int, error) { return 2 * x, nil }

func TestPromiseResolvesOnce(t *testing.T) {
	p := NewPromise()
	if _, _, ok := p.Result(); ok {
		t.Fatal("fresh promise reports a result")
	}
	if !p.Resolve([]byte{1}, nil) || p.Resolve(nil, errors.New("late")) {
		t.Fatal("Resolve did not resolve exactly once")
	}
	if d, err, ok := p.Result(); !ok || err != nil || d[0] != 1 {
		t.Fatalf("Result = %v %v %v", d, err, ok)
	}
}

// FuzzInvocationArgument feeds arbitrary bytes as a call's argument: the
// instance must answer with a result or an error, never panic.
func FuzzInvocationArgument(f *testing.F) {
	_ = Register("t-fuzz", ctorOf[fuzzActor]())
	in, err := NewInstance(context.Background(), Spec{Type: "t-fuzz", Config: []byte{0x80}}, ActorInfo{}, InstanceHooks{})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{{0x80}, {0x81, 0xa1, 'A', 0x01}, {0xc1}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0x92, 0x01}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := NewPromise()
		in.Invoke(&Invocation{Method: "Take", Arg: data, Reply: p})
		p.Wait(context.Background())
	})
}

type fuzzArg struct {
	A int
	B []string
	C map[string]float64
	D *fuzzArg
}
type fuzzActor struct{}

func (*fuzzActor) Take(ctx context.Context, a fuzzArg) (int, error) { return a.A, nil }

type instActor2 struct{}
