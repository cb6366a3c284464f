package policy

import "fmt"

// constructors are the online policies, sorted by name: what
// gpucached's hot_policy may name. A new policy adds its row here.
var constructors = [...]struct {
	name string
	new  func() Policy
}{
	{AdaptiveName, func() Policy { return NewAdaptive() }},
	{ChainTTLName, func() Policy { return NewChainTTL() }},
	{CostName, func() Policy { return NewCost() }},
	{"lru", func() Policy { return NewLRU() }},
	{"prefix", func() Policy { return NewPrefix() }},
}

// New returns a fresh online policy by name (what gpucached's hot_policy
// names). Offline policies (Belady OPT) need the future and are built by
// the simulator, not here.
func New(name string) (Policy, error) {
	for _, c := range constructors {
		if c.name == name {
			return c.new(), nil
		}
	}
	return nil, fmt.Errorf("gpucache/policy: unknown policy %q (known: %v)", name, Names())
}

// Names lists the online policies, sorted.
func Names() []string {
	out := make([]string, len(constructors))
	for i, c := range constructors {
		out[i] = c.name
	}
	return out
}
