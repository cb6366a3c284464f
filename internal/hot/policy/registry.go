package policy

import (
	"fmt"
	"sort"
)

// constructors of the online policies, by name; each policy file registers
// its own in init.
var constructors = map[string]func() Policy{}

// register adds an online policy constructor; called from init.
func register(name string, f func() Policy) { constructors[name] = f }

// New returns a fresh online policy by name (what gpucached's hot_policy
// names). Offline policies (Belady OPT) need the future and are built by
// the simulator, not here.
func New(name string) (Policy, error) {
	f, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("gpucache/policy: unknown policy %q (known: %v)", name, Names())
	}
	return f(), nil
}

// Names lists the online policies, sorted.
func Names() []string {
	out := make([]string, 0, len(constructors))
	for n := range constructors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
