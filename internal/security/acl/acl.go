package acl

import (
	"errors"
	"fmt"
	"strings"
)

// Right is a set of access rights. Individual rights are distinct bits.
type Right uint8

const (
	// Read allows GET, LOOKUP, STAT and any other operation revealing data
	// or the existence of data.
	Read Right = 1 << iota
	// Write allows PUT, DELETE and other mutations.
	Write
	// Admin allows administrative operations. It does not imply Read or Write.
	Admin

	// None is the empty right set.
	None Right = 0
	all        = Read | Write | Admin
)

// Wildcard is the model value matching every model.
const Wildcard = "*"

// String renders a right set as letters, e.g. "rw", "a", "none".
func (r Right) String() string {
	if r == None {
		return "none"
	}
	var b strings.Builder
	if r&Read != 0 {
		b.WriteByte('r')
	}
	if r&Write != 0 {
		b.WriteByte('w')
	}
	if r&Admin != 0 {
		b.WriteByte('a')
	}
	if r&^all != 0 {
		fmt.Fprintf(&b, "+0x%x", uint8(r&^all))
	}
	return b.String()
}

// Name returns a human-readable name for a right set ("read", "write",
// "admin", or the letter form for combinations).
func (r Right) Name() string {
	switch r {
	case Read:
		return "read"
	case Write:
		return "write"
	case Admin:
		return "admin"
	}
	return r.String()
}

// Has reports whether r contains every right in need.
func (r Right) Has(need Right) bool { return r&need == need }

// Rule grants Rights to Tenant on Model ("*" = any model).
type Rule struct {
	Tenant string
	Model  string
	Rights Right
}

// Policy is an immutable, concurrency-safe set of rules. The zero Policy
// (and a nil *Policy) denies everything.
type Policy struct {
	// tenant -> model -> rights; the model key "*" holds wildcard rights.
	rules map[string]map[string]Right
}

// NewPolicy builds a policy from rules. Rights of multiple rules for the same
// (tenant, model) are merged. It fails on an empty tenant or model, or on
// undefined right bits.
func NewPolicy(rules ...Rule) (*Policy, error) {
	p := &Policy{rules: make(map[string]map[string]Right)}
	for i, r := range rules {
		if r.Tenant == "" {
			return nil, fmt.Errorf("acl: rule %d: empty tenant", i)
		}
		if r.Model == "" {
			return nil, fmt.Errorf("acl: rule %d (tenant %q): empty model (use %q for any)", i, r.Tenant, Wildcard)
		}
		if r.Rights&^all != 0 {
			return nil, fmt.Errorf("acl: rule %d (tenant %q): unknown right bits 0x%x", i, r.Tenant, uint8(r.Rights&^all))
		}
		m := p.rules[r.Tenant]
		if m == nil {
			m = make(map[string]Right)
			p.rules[r.Tenant] = m
		}
		m[r.Model] |= r.Rights
	}
	return p, nil
}

// Rights returns the effective rights of tenant on model.
func (p *Policy) Rights(tenant, model string) Right {
	if p == nil || tenant == "" {
		return None
	}
	m := p.rules[tenant]
	if m == nil {
		return None
	}
	r := m[Wildcard]
	if model != Wildcard {
		r |= m[model]
	}
	return r
}

// ParseRight parses a combination of the letters r, w, a (each at most once).
func ParseRight(s string) (Right, error) {
	if s == "" {
		return None, errors.New("acl: empty rights (want a combination of r, w, a)")
	}
	var r Right
	for _, c := range s {
		var bit Right
		switch c {
		case 'r':
			bit = Read
		case 'w':
			bit = Write
		case 'a':
			bit = Admin
		default:
			return None, fmt.Errorf("acl: invalid right %q in %q (want r, w or a)", c, s)
		}
		if r&bit != 0 {
			return None, fmt.Errorf("acl: duplicate right %q in %q", c, s)
		}
		r |= bit
	}
	return r, nil
}

// ParseRule parses "tenant:model=rights", e.g. "acme:llama-3-8b=rw" or
// "ops:*=a". Surrounding whitespace is ignored. Model names may contain ':'
// (the first ':' separates the tenant); tenants may not contain ':' or '='.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errors.New("acl: empty rule")
	}
	eq := strings.LastIndexByte(s, '=')
	if eq < 0 {
		return Rule{}, fmt.Errorf("acl: rule %q: missing '=rights' (want tenant:model=rights)", s)
	}
	lhs, rights := s[:eq], s[eq+1:]
	tenant, model, ok := strings.Cut(lhs, ":")
	if !ok {
		return Rule{}, fmt.Errorf("acl: rule %q: missing ':' between tenant and model (want tenant:model=rights)", s)
	}
	if tenant == "" {
		return Rule{}, fmt.Errorf("acl: rule %q: empty tenant", s)
	}
	if model == "" {
		return Rule{}, fmt.Errorf("acl: rule %q: empty model (use %q for any)", s, Wildcard)
	}
	if strings.ContainsAny(tenant, " \t=") || strings.ContainsAny(model, " \t=") {
		return Rule{}, fmt.Errorf("acl: rule %q: whitespace or '=' inside tenant or model", s)
	}
	r, err := ParseRight(rights)
	if err != nil {
		return Rule{}, fmt.Errorf("acl: rule %q: %w", s, stripPrefix(err))
	}
	return Rule{Tenant: tenant, Model: model, Rights: r}, nil
}

// prefixStripped drops the "acl: " prefix of a nested error so messages
// read "acl: rule ...: ..." rather than repeating the prefix.
type prefixStripped struct{ err error }

func (p prefixStripped) Error() string { return strings.TrimPrefix(p.err.Error(), "acl: ") }
func (p prefixStripped) Unwrap() error { return p.err }

func stripPrefix(err error) error { return prefixStripped{err} }
