package actors

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// Graph is a static graph of actor calls, declared once and compiled into a
// Compiled graph that runs many times with little per-run work: handles,
// methods and the topological order are resolved at compile time, and each
// run only creates one promise per node. Results flow from actor to actor
// (each node's input is the promise of the node before it), never through
// the program that runs the graph.
//
//	g, in := actors.NewGraph[Prompt]()
//	gen := actors.Node(g, "generate", policy, (*Policy).Generate, in)
//	scores := actors.Gather(g, "scores",
//		actors.Node(g, "judge-a", judgeA, (*Judge).Score, gen),
//		actors.Node(g, "judge-b", judgeB, (*Judge).Score, gen))
//	step, err := actors.Compile(g, scores)
//	for ... { out, err := step.Run(ctx, prompt) }
type Graph struct {
	nodes []*graphNode
}

// graphNode is one node of a graph: the input, an actor call or a gather.
type graphNode struct {
	id     int
	name   string
	ref    Ref         // actor calls
	method *methodInfo // actor calls
	inputs []int       // upstream node ids (one for calls, many for gathers)
	gather bool
}

// GraphNode is a typed node of a graph: its value has type T.
type GraphNode[T any] struct {
	g  *Graph
	id int
}

// NewGraph starts a graph whose runs take an input of type In.
func NewGraph[In any]() (*Graph, *GraphNode[In]) {
	g := &Graph{}
	g.nodes = append(g.nodes, &graphNode{id: 0, name: "input"})
	return g, &GraphNode[In]{g: g, id: 0}
}

// Node adds a call of method m on actor h whose argument is the value of in.
// Several nodes may read one node (fan-out).
func Node[T, A, R any](g *Graph, name string, h Handle[T], m func(*T, context.Context, A) (R, error), in *GraphNode[A]) *GraphNode[R] {
	n := &graphNode{id: len(g.nodes), name: name, ref: h.ref, inputs: []int{-1}}
	if mi, err := resolve(h, m); err == nil {
		n.method = mi
	}
	if in != nil && in.g == g {
		n.inputs[0] = in.id
	}
	g.nodes = append(g.nodes, n)
	return &GraphNode[R]{g: g, id: n.id}
}

// Gather adds a fan-in node whose value is the list of the inputs' values,
// in order. It runs in the caller's process and decodes nothing: it joins
// the inputs' msgpack encodings into one msgpack array.
func Gather[R any](g *Graph, name string, ins ...*GraphNode[R]) *GraphNode[[]R] {
	n := &graphNode{id: len(g.nodes), name: name, gather: true}
	for _, in := range ins {
		id := -1
		if in != nil && in.g == g {
			id = in.id
		}
		n.inputs = append(n.inputs, id)
	}
	g.nodes = append(g.nodes, n)
	return &GraphNode[[]R]{g: g, id: n.id}
}

// Compiled is a graph ready to run. Runs may overlap: each has its own
// promises, and each actor serves the runs' calls in order.
type Compiled[In, Out any] struct {
	nodes []*graphNode // the nodes the output needs, in topological order
	out   int          // index of the output in nodes
}

// GraphError is the error of a run in which a node failed; it names the
// first failed node (in topological order). The graph stays usable.
type GraphError struct {
	Node string
	Err  error
}

func (e *GraphError) Error() string { return fmt.Sprintf("graph node %q: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e *GraphError) Unwrap() error { return e.Err }

// ErrGraph: a graph is malformed (a node from another graph, an unresolved
// method, a nil handle).
var ErrGraph = errors.New("malformed graph")

// Compile checks the graph and prepares it to run with out as its result.
// Only the nodes out depends on run.
func Compile[In, Out any](g *Graph, out *GraphNode[Out]) (*Compiled[In, Out], error) {
	if g == nil || out == nil || out.g != g {
		return nil, fmt.Errorf("compile: %w: the output node is not of this graph", ErrGraph)
	}
	if g.nodes[0].name != "input" || len(g.nodes) == 0 {
		return nil, fmt.Errorf("compile: %w: no input node", ErrGraph)
	}
	// Nodes are created after their inputs, so id order is topological;
	// keep those the output needs.
	need := make([]bool, len(g.nodes))
	need[out.id] = true
	for id := out.id; id >= 0; id-- {
		if !need[id] {
			continue
		}
		n := g.nodes[id]
		if id > 0 && !n.gather {
			switch {
			case n.ref == nil:
				return nil, fmt.Errorf("compile: %w: node %q has a zero actor handle", ErrGraph, n.name)
			case n.method == nil:
				return nil, fmt.Errorf("compile: node %q: %w", n.name, ErrNoSuchMethod)
			}
		}
		for _, in := range n.inputs {
			if in < 0 {
				return nil, fmt.Errorf("compile: %w: node %q reads a node of another graph", ErrGraph, n.name)
			}
			need[in] = true
		}
	}
	c := &Compiled[In, Out]{}
	pos := make([]int, len(g.nodes))
	for id, n := range g.nodes {
		if need[id] {
			pos[id] = len(c.nodes)
			cp := *n
			cp.inputs = make([]int, len(n.inputs))
			for i, in := range n.inputs {
				cp.inputs[i] = pos[in]
			}
			c.nodes = append(c.nodes, &cp)
		}
	}
	c.out = pos[out.id]
	return c, nil
}

// Run executes the graph once on in and waits for its output. If a node
// fails, the error is a *GraphError naming it.
func (c *Compiled[In, Out]) Run(ctx context.Context, in In) (Out, error) {
	var zero Out
	proms, err := c.launch(ctx, in)
	if err != nil {
		return zero, err
	}
	data, err := proms[c.out].Wait(ctx)
	if err != nil {
		return zero, c.firstFailure(proms, err)
	}
	var out Out
	if err := unmarshal(data, &out); err != nil {
		return zero, fmt.Errorf("graph output as %v: %w: %v", reflect.TypeFor[Out](), ErrDecode, err)
	}
	return out, nil
}

// Start launches one run and returns its output as a future; the run
// proceeds while the caller does other work (or starts further runs).
func (c *Compiled[In, Out]) Start(ctx context.Context, in In) *Future[Out] {
	proms, err := c.launch(ctx, in)
	if err != nil {
		return failed[Out](err)
	}
	f := &Future[Out]{p: NewPromise()}
	go func() {
		data, err := proms[c.out].Wait(ctx)
		if err != nil {
			err = c.firstFailure(proms, err)
		}
		f.p.Resolve(data, err)
	}()
	return f
}

// launch starts every node of one run and returns the run's promises.
func (c *Compiled[In, Out]) launch(ctx context.Context, in In) ([]Promise, error) {
	data, err := marshal(in)
	if err != nil {
		return nil, fmt.Errorf("graph input %v: %w: %v", reflect.TypeFor[In](), ErrEncode, err)
	}
	proms := make([]Promise, len(c.nodes))
	invs := make([]Invocation, len(c.nodes))
	for i := range proms {
		proms[i].done = make(chan struct{})
	}
	proms[0].Resolve(data, nil)
	for i := 1; i < len(c.nodes); i++ {
		n := c.nodes[i]
		if n.gather {
			go gatherInto(ctx, &proms[i], proms, n.inputs)
			continue
		}
		invs[i] = Invocation{Method: n.method.name, ArgRef: &proms[n.inputs[0]], Ctx: ctx, Reply: &proms[i]}
		n.ref.Invoke(&invs[i])
	}
	return proms, nil
}

// firstFailure finds the earliest node whose own call failed (not merely
// its input), so the error names where the run broke.
func (c *Compiled[In, Out]) firstFailure(proms []Promise, outErr error) error {
	for i := 1; i < len(c.nodes); i++ {
		if _, err, ok := proms[i].Result(); ok && err != nil {
			return &GraphError{Node: c.nodes[i].name, Err: err}
		}
	}
	return outErr // ctx ended before any node failed
}

// gatherInto waits for every input and resolves p with a msgpack array of
// their encodings; the first failed input fails it.
func gatherInto(ctx context.Context, p *Promise, proms []Promise, inputs []int) {
	parts := make([][]byte, len(inputs))
	size := 5
	for i, in := range inputs {
		data, err := proms[in].Wait(ctx)
		if err != nil {
			p.Resolve(nil, fmt.Errorf("gather input %d: %w", i, err))
			return
		}
		parts[i] = data
		size += len(data)
	}
	buf := make([]byte, 0, size)
	switch n := len(parts); {
	case n < 16:
		buf = append(buf, 0x90|byte(n))
	case n < 1<<16:
		buf = append(buf, 0xdc, byte(n>>8), byte(n))
	default:
		buf = append(buf, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	for _, part := range parts {
		buf = append(buf, part...)
	}
	p.Resolve(buf, nil)
}
