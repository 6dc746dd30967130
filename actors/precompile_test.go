package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// pcActor's methods are each run by reflection and through the typed
// invoker Precompile installs; the two must give the same outcome.
type pcActor struct{ calls int }

type pcArg struct {
	Name  string
	Items []int
}

func (a *pcActor) Echo(ctx context.Context, s pcArg) (pcArg, error) {
	a.calls++
	return s, nil
}

func (a *pcActor) Fail(ctx context.Context, msg string) (int, error) {
	return 0, fmt.Errorf("failed: %s", msg)
}

func (a *pcActor) Panic(ctx context.Context, msg string) (int, error) { panic(msg) }

func init() { MustRegister("t-precompile", ctorOf[pcActor]()) }

func TestPrecompileMatchesReflection(t *testing.T) {
	in, err := NewInstance(context.Background(), Spec{Type: "t-precompile", Config: []byte{0x80}}, ActorInfo{ID: "1"}, InstanceHooks{})
	if err != nil {
		t.Fatal(err)
	}
	arg, err := marshal(pcArg{Name: "x", Items: []int{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method string
		arg    []byte
	}{
		{"Echo", arg},
		{"Echo", []byte{0xc1}},      // malformed
		{"Echo", []byte{0xa1, 'x'}}, // wrong type
		{"Fail", []byte{0xa2, 'n', 'o'}},
		{"Panic", []byte{0xa4, 'b', 'o', 'o', 'm'}},
	}
	call := func(method string, arg []byte) ([]byte, error) {
		p := NewPromise()
		in.Invoke(&Invocation{Method: method, Arg: arg, Reply: p})
		return p.Wait(context.Background())
	}
	for _, c := range cases { // an earlier run (-count) precompiled them
		in.ti.methods[c.method].typed.Store(nil)
	}
	var before []string
	for _, c := range cases {
		if in.ti.methods[c.method].typed.Load() != nil {
			t.Fatalf("%s has a typed invoker before Precompile", c.method)
		}
		out, err := call(c.method, c.arg)
		before = append(before, fmt.Sprintf("%x %v", out, errText(err)))
	}
	for _, err := range []error{Precompile((*pcActor).Echo), Precompile((*pcActor).Fail), Precompile((*pcActor).Panic)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		if in.ti.methods[c.method].typed.Load() == nil {
			t.Fatalf("%s has no typed invoker after Precompile", c.method)
		}
		out, err := call(c.method, c.arg)
		if got := fmt.Sprintf("%x %v", out, errText(err)); got != before[i] {
			t.Errorf("%s(%x): typed gives %q, reflection gave %q", c.method, c.arg, got, before[i])
		}
		if i == 0 && (err != nil || !bytes.Equal(out, arg)) {
			t.Errorf("Echo = %x, %v; want %x", out, err, arg)
		}
	}
	if n := in.obj.Interface().(*pcActor).calls; n != 2 {
		t.Errorf("Echo ran %d times, want 2", n)
	}
}

// errText is an error's message without a panic's stack, which differs
// between the two ways of calling.
func errText(err error) string {
	var ce *CallError
	if errors.As(err, &ce) {
		return "panic: " + ce.Panic
	}
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestPrecompileRefusesNonMethods(t *testing.T) {
	notMethod := func(*pcActor, context.Context, int) (int, error) { return 0, nil }
	if err := Precompile(notMethod); !errors.Is(err, ErrNoSuchMethod) {
		t.Errorf("Precompile(func literal) = %v, want ErrNoSuchMethod", err)
	}
}
