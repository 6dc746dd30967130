package collective

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// Member is what a Transport knows of the member it connects.
type Member struct {
	Group string
	// Epoch tells apart the groups one name had: each Create makes a new
	// one, so members of an earlier formation never talk to a later one.
	Epoch  string
	Rank   int
	Size   int
	Actors []string // every rank's actor ID
	Config Config
}

// Transport connects the members of groups whose actors this process
// hosts. Package troupe/runtime/collective's runs over the cluster's
// transport (TLS and the token on TCP, Unix sockets on one host).
type Transport interface {
	// Prepare readies m's endpoint and returns its address for the other
	// members.
	Prepare(ctx context.Context, m Member) (endpoint string, err error)
	// Connect connects m to the other members (endpoints[i] is rank i's)
	// and returns its links once every connection is up.
	Connect(ctx context.Context, m Member, endpoints []string) (Links, error)
	// Abandon releases what Prepare readied when the group is not formed.
	Abandon(m Member)
}

var (
	transportMu sync.Mutex // guards transport
	transport   Transport  = memTransport
)

// SetTransport makes t the process's Transport for the groups formed
// after it. Worker processes set the network's at start; without it
// members meet in this process's memory.
func SetTransport(t Transport) {
	transportMu.Lock()
	defer transportMu.Unlock()
	transport = t
}

func currentTransport() Transport {
	transportMu.Lock()
	defer transportMu.Unlock()
	return transport
}

// ControlPrefix begins the method names of the calls Create makes to the
// members; runtimes hand such calls to Control instead of the actor.
const ControlPrefix = "troupe.collective."

const (
	methodPrepare = ControlPrefix + "prepare"
	methodJoin    = ControlPrefix + "join"
	methodLeave   = ControlPrefix + "leave"
)

// controlMsg is the argument of the control calls.
type controlMsg struct {
	Group     string   `msgpack:"group"`
	Epoch     string   `msgpack:"epoch,omitempty"`
	Rank      int      `msgpack:"rank"`
	Size      int      `msgpack:"size,omitempty"`
	Actors    []string `msgpack:"actors,omitempty"`
	Endpoints []string `msgpack:"endpoints,omitempty"`
	Config    Config   `msgpack:"config"`
}

// pending are the members prepared but not joined yet, by actor and group.
var pending = struct {
	mu sync.Mutex // guards m
	m  map[memberKey]Member
}{m: map[memberKey]Member{}}

// Control handles inv if it is one of the calls Create makes (its method
// begins with ControlPrefix) to the actor in, and reports whether it did;
// the reply goes to inv.Reply. Runtimes call it with every invocation
// they deliver, before the instance sees it. It never blocks.
func Control(inv *actors.Invocation, in *actors.Instance) bool {
	if !strings.HasPrefix(inv.Method, ControlPrefix) {
		return false
	}
	go func() {
		ctx := inv.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		data, err := control(ctx, inv, in.Info())
		inv.Reply.Resolve(data, err)
	}()
	return true
}

func control(ctx context.Context, inv *actors.Invocation, self actors.ActorInfo) ([]byte, error) {
	var m controlMsg
	if err := msgpack.Unmarshal(inv.Arg, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", inv.Method, actors.ErrDecode, err)
	}
	key := memberKey{self.ID, m.Group}
	switch inv.Method {
	case methodPrepare:
		mem := Member{Group: m.Group, Epoch: m.Epoch, Rank: m.Rank, Size: m.Size, Actors: m.Actors, Config: m.Config}
		ep, err := currentTransport().Prepare(ctx, mem)
		if err != nil {
			return nil, err
		}
		pending.mu.Lock()
		old, had := pending.m[key]
		pending.m[key] = mem
		pending.mu.Unlock()
		if had {
			currentTransport().Abandon(old)
		}
		return msgpack.Marshal(ep)
	case methodJoin:
		pending.mu.Lock()
		mem, ok := pending.m[key]
		if ok && mem.Epoch == m.Epoch {
			delete(pending.m, key)
		}
		pending.mu.Unlock()
		if !ok || mem.Epoch != m.Epoch {
			return nil, fmt.Errorf("%w: %q was not prepared for epoch %s on actor %s", ErrNoGroup, m.Group, m.Epoch, self.ID)
		}
		links, err := currentTransport().Connect(ctx, mem, m.Endpoints)
		if err != nil {
			currentTransport().Abandon(mem)
			return nil, err
		}
		g, err := NewGroup(mem.Group, mem.Rank, mem.Size, mem.Actors, links, mem.Config)
		if err != nil {
			links.Close()
			return nil, err
		}
		members.put(self.ID, g)
		return msgpack.Marshal(true)
	case methodLeave:
		pending.mu.Lock()
		mem, ok := pending.m[key]
		delete(pending.m, key)
		pending.mu.Unlock()
		if ok {
			currentTransport().Abandon(mem)
		}
		members.remove(self.ID, m.Group)
		return msgpack.Marshal(true)
	}
	return nil, fmt.Errorf("collective: unknown control call %q", inv.Method)
}

// Forget closes the groups of the actor id and forgets them; runtimes call
// it when the actor dies, so that its peers see it lost at once.
func Forget(id string) {
	var names []string
	members.mu.Lock()
	for k := range members.m {
		if k.actor == id {
			names = append(names, k.group)
		}
	}
	members.mu.Unlock()
	for _, n := range names {
		members.remove(id, n)
	}
	pending.mu.Lock()
	var abandon []Member
	for k, m := range pending.m {
		if k.actor == id {
			abandon = append(abandon, m)
			delete(pending.m, k)
		}
	}
	pending.mu.Unlock()
	for _, m := range abandon {
		currentTransport().Abandon(m)
	}
}

// Create forms the group name of the actors members, in rank order (the
// first is rank 0), and returns once every member has joined it; their
// methods then find it with Of. The members connect to each other
// directly; Create only hands each the others' endpoints. Forming a group
// again with the same name replaces the old one on its members (closing
// it), as after a member restarted. A failure leaves no member in the
// group and names the member at fault.
func Create(ctx context.Context, name string, members ...actors.Ref) error {
	return CreateConfig(ctx, name, Config{}, members...)
}

// CreateConfig is Create with the algorithms' settings.
func CreateConfig(ctx context.Context, name string, cfg Config, members ...actors.Ref) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(members) == 0 {
		return fmt.Errorf("%w: group %q without members", ErrBadArg, name)
	}
	ids := make([]string, len(members))
	seen := map[string]bool{}
	for i, m := range members {
		if m == nil {
			return fmt.Errorf("%w: group %q: member %d is a nil handle", ErrBadArg, name, i)
		}
		ids[i] = m.ID()
		if seen[ids[i]] {
			return fmt.Errorf("%w: group %q: actor %s appears twice", ErrBadArg, name, ids[i])
		}
		seen[ids[i]] = true
	}
	var eb [12]byte
	rand.Read(eb[:])
	epoch := hex.EncodeToString(eb[:])
	base := controlMsg{Group: name, Epoch: epoch, Size: len(members), Actors: ids, Config: cfg}
	endpoints := make([]string, len(members))
	err := each(ctx, name, members, methodPrepare, func(i int) controlMsg {
		m := base
		m.Rank = i
		return m
	}, func(i int, data []byte) error { return msgpack.Unmarshal(data, &endpoints[i]) })
	if err == nil {
		err = each(ctx, name, members, methodJoin, func(i int) controlMsg {
			m := base
			m.Rank, m.Endpoints = i, endpoints
			return m
		}, nil)
	}
	if err != nil {
		Destroy(context.WithoutCancel(ctx), name, members...)
		return err
	}
	return nil
}

// Destroy closes the group name on its members; their pending and later
// calls fail (ErrClosed, or ErrMemberLost on those that see another go).
func Destroy(ctx context.Context, name string, members ...actors.Ref) error {
	return each(ctx, name, members, methodLeave, func(i int) controlMsg { return controlMsg{Group: name, Rank: i} }, nil)
}

// each makes the control call method on every member at once and returns
// the first failure, naming the member.
func each(ctx context.Context, group string, members []actors.Ref, method string, arg func(i int) controlMsg, got func(i int, data []byte) error) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() {
			data, err := msgpack.Marshal(arg(i))
			if err == nil {
				p := actors.NewPromise()
				m.Invoke(&actors.Invocation{Method: method, Arg: data, Ctx: ctx, Reply: p})
				data, err = p.Wait(ctx)
			}
			if err == nil && got != nil {
				err = got(i, data)
			}
			if err != nil {
				errs[i] = &MemberError{Group: group, Rank: i, Actor: m.ID(), Err: fmt.Errorf("%s: %w", strings.TrimPrefix(method, ControlPrefix), err)}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
