package acl

import (
	"strings"
	"testing"
)

func mustParse(t *testing.T, lines ...string) *Policy {
	t.Helper()
	var rules []Rule
	for _, l := range lines {
		r, err := ParseRule(l)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", l, err)
		}
		rules = append(rules, r)
	}
	p, err := NewPolicy(rules...)
	if err != nil {
		t.Fatalf("NewPolicy(%q): %v", lines, err)
	}
	return p
}

func TestRightsAreDistinctBits(t *testing.T) {
	if Read&Write != 0 || Read&Admin != 0 || Write&Admin != 0 {
		t.Fatal("rights overlap")
	}
	if Read == None || Write == None || Admin == None {
		t.Fatal("a right is zero")
	}
	if got := (Read | Admin).String(); got != "ra" {
		t.Fatalf("String = %q", got)
	}
	if None.String() != "none" || Read.Name() != "read" || Write.Name() != "write" || Admin.Name() != "admin" {
		t.Fatal("names")
	}
}

func TestAllowTable(t *testing.T) {
	type tc struct {
		tenant, model string
		need          Right
		want          bool
	}
	policies := []struct {
		name  string
		rules []string
		cases []tc
	}{
		{
			name:  "read-only tenant",
			rules: []string{"viewer:llama-3-8b=r"},
			cases: []tc{
				{"viewer", "llama-3-8b", Read, true},
				{"viewer", "llama-3-8b", Write, false},
				{"viewer", "llama-3-8b", Admin, false},
				{"viewer", "llama-3-8b", Read | Write, false},
				{"viewer", "mistral-7b", Read, false},
			},
		},
		{
			name:  "writer without read",
			rules: []string{"ingest:llama-3-8b=w"},
			cases: []tc{
				{"ingest", "llama-3-8b", Write, true},
				{"ingest", "llama-3-8b", Read, false},
				{"ingest", "llama-3-8b", Admin, false},
			},
		},
		{
			name:  "admin does not imply read or write",
			rules: []string{"ops:*=a"},
			cases: []tc{
				{"ops", "llama-3-8b", Admin, true},
				{"ops", "anything", Admin, true},
				{"ops", "llama-3-8b", Read, false},
				{"ops", "llama-3-8b", Write, false},
				{"ops", "llama-3-8b", Read | Admin, false},
			},
		},
		{
			name:  "admin only where granted",
			rules: []string{"acme:llama-3-8b=rwa", "acme:mistral-7b=rw"},
			cases: []tc{
				{"acme", "llama-3-8b", Admin, true},
				{"acme", "llama-3-8b", Read | Write | Admin, true},
				{"acme", "mistral-7b", Admin, false},
				{"acme", "mistral-7b", Read | Write, true},
				{"acme", "other", Read, false},
			},
		},
		{
			name:  "wildcard model merges with exact rule",
			rules: []string{"acme:*=r", "acme:llama-3-8b=w"},
			cases: []tc{
				{"acme", "llama-3-8b", Read, true},
				{"acme", "llama-3-8b", Write, true},
				{"acme", "mistral-7b", Read, true},
				{"acme", "mistral-7b", Write, false},
				{"acme", "", Read, true},
			},
		},
		{
			name:  "unknown tenant denied",
			rules: []string{"acme:*=rwa"},
			cases: []tc{
				{"mallory", "llama-3-8b", Read, false},
				{"", "llama-3-8b", Read, false},
				{"ACME", "llama-3-8b", Read, false}, // case-sensitive
			},
		},
		{
			name:  "empty policy denies all",
			rules: nil,
			cases: []tc{
				{"acme", "llama-3-8b", Read, false},
				{"acme", "*", Admin, false},
			},
		},
		{
			name:  "literal star model name is not an escalation",
			rules: []string{"acme:llama-3-8b=r"},
			cases: []tc{
				{"acme", "*", Read, false},
			},
		},
	}
	for _, pc := range policies {
		p := mustParse(t, pc.rules...)
		for _, c := range pc.cases {
			if got := p.Rights(c.tenant, c.model).Has(c.need); got != c.want {
				t.Errorf("%s: Rights(%q,%q).Has(%s) = %v, want %v", pc.name, c.tenant, c.model, c.need, got, c.want)
			}
		}
	}
}

func TestNilAndZeroPolicyDeny(t *testing.T) {
	var p *Policy
	if p.Rights("a", "m").Has(Read) {
		t.Fatal("nil policy allowed")
	}
	var z Policy
	if z.Rights("a", "m").Has(Read) {
		t.Fatal("zero policy allowed")
	}
}

func TestNewPolicyValidation(t *testing.T) {
	bad := [][]Rule{
		{{Tenant: "", Model: "m", Rights: Read}},
		{{Tenant: "t", Model: "", Rights: Read}},
		{{Tenant: "t", Model: "m", Rights: 0x80}},
	}
	for _, rs := range bad {
		if _, err := NewPolicy(rs...); err == nil {
			t.Errorf("NewPolicy(%+v) succeeded", rs)
		}
	}
	p, err := NewPolicy(Rule{"t", "m", Read}, Rule{"t", "m", Write})
	if err != nil || p.Rights("t", "m") != Read|Write {
		t.Fatalf("merge: %v %v", p.Rights("t", "m"), err)
	}
}

func TestParseRule(t *testing.T) {
	good := map[string]Rule{
		"acme:llama-3-8b=rw": {"acme", "llama-3-8b", Read | Write},
		"ops:*=a":            {"ops", "*", Admin},
		"  x:m=war  ":        {"x", "m", Read | Write | Admin},
		"t:org/model:v2=r":   {"t", "org/model:v2", Read},
	}
	for in, want := range good {
		got, err := ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":           "empty rule",
		"acme":       "missing '=rights'",
		"acme=rw":    "missing ':'",
		":m=r":       "empty tenant",
		"acme:=r":    "empty model",
		"acme:m=":    "empty rights",
		"acme:m=rx":  "invalid right",
		"acme:m=rr":  "duplicate right",
		"acme:m=R":   "invalid right",
		"ac me:m=r":  "whitespace",
		"acme:m=r=w": "invalid right", // '=' in rights after last '=' split -> lhs "acme:m=r" has '='
	}
	for in, want := range bad {
		_, err := ParseRule(in)
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded", in)
			continue
		}
		if !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), "'='") {
			t.Errorf("ParseRule(%q) error %q lacks %q", in, err, want)
		}
		if strings.Count(err.Error(), "acl:") != 1 {
			t.Errorf("ParseRule(%q) error %q repeats prefix", in, err)
		}
	}
}
