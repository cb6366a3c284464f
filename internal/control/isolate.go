package control

import (
	"fmt"
	"math"
)

// Plan is a fault-domain isolation worked out against one view, before
// anything changes. Applying it is one transaction: compare the epoch with
// From, remove every victim, set the epoch to To.
type Plan struct {
	Domain    string
	From      uint64   // epoch of the view the plan was made against
	To        uint64   // epoch after the plan: From + len(Victims)
	Victims   []Member // every member of Domain, sorted by ID
	Remaining []Member // the members left, sorted by ID
}

// PlanIsolate plans removing every member of domain from v.
//
// Epoch cost: one increment per victim. Each removed member is one
// membership change (exactly as if it had left on its own), so isolating a
// domain of k members moves the epoch from e to e+k in a single transaction;
// the intermediate epochs are never published. Charging per victim makes
// the budget check meaningful: a domain of k members needs k increments.
//
// epochBudget is how many increments are still available (for example
// math.MaxUint64 - v.Epoch()); it is capped at what the epoch itself can
// still take. The whole victim set is checked against it before anything
// changes: if it is short, PlanIsolate returns ErrEpochOverflow and no plan,
// so members, domains and epoch are left as they are. With the exact
// budget, the plan removes every victim.
func PlanIsolate(v View, domain string, epochBudget uint64) (Plan, error) {
	if domain == "" {
		return Plan{}, fmt.Errorf("%w: empty fault domain", ErrUnknownDomain)
	}
	var victims, remaining []Member
	for _, m := range v.Members() {
		if m.FaultDomain == domain {
			victims = append(victims, m)
		} else {
			remaining = append(remaining, m)
		}
	}
	if len(victims) == 0 {
		return Plan{}, fmt.Errorf("%w: %q", ErrUnknownDomain, domain)
	}
	budget := min(epochBudget, math.MaxUint64-v.Epoch())
	need := uint64(len(victims))
	if need > budget {
		return Plan{}, fmt.Errorf("%w: isolating domain %q needs %d epoch increments (one per member), %d left at epoch %d",
			ErrEpochOverflow, domain, need, budget, v.Epoch())
	}
	return Plan{Domain: domain, From: v.Epoch(), To: v.Epoch() + need, Victims: victims, Remaining: remaining}, nil
}

// View is the view the plan leads to.
func (p Plan) View() (View, error) { return NewView(p.To, p.Remaining) }
