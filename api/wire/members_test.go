package wire_test

import (
	"errors"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

func TestMembersResponseRejects(t *testing.T) {
	ok := wire.MemberInfo{ID: "a", Addr: "h:1", FaultDomain: "d", ProtoVersion: 2, CapacityBytes: 1}
	bad := map[string][]wire.MemberInfo{
		"empty id":      {{Addr: "h:1", FaultDomain: "d", ProtoVersion: 2, CapacityBytes: 1}},
		"empty addr":    {{ID: "a", FaultDomain: "d", ProtoVersion: 2, CapacityBytes: 1}},
		"empty domain":  {{ID: "a", Addr: "h:1", ProtoVersion: 2, CapacityBytes: 1}},
		"zero capacity": {{ID: "a", Addr: "h:1", FaultDomain: "d", ProtoVersion: 2}},
		"zero version":  {{ID: "a", Addr: "h:1", FaultDomain: "d", CapacityBytes: 1}},
		"unknown flags": {{ID: "a", Addr: "h:1", FaultDomain: "d", ProtoVersion: 2, CapacityBytes: 1, Flags: 2}},
		"duplicate id":  {ok, ok},
		"out of order":  {{ID: "b", Addr: "h:1", FaultDomain: "d", ProtoVersion: 2, CapacityBytes: 1}, ok},
	}
	for name, ms := range bad {
		t.Run(name, func(t *testing.T) {
			b := (&wire.MembersResponse{Epoch: 1, Members: ms}).AppendTo(nil)
			wantCode(t, new(wire.MembersResponse).Decode(b), wire.CodeMalformed)
		})
	}
	b := (&wire.MembersResponse{Epoch: 0, Members: []wire.MemberInfo{ok}}).AppendTo(nil)
	wantCode(t, new(wire.MembersResponse).Decode(b), wire.CodeMalformed)
	b = (&wire.MembersResponse{Epoch: 1}).AppendTo(nil)
	b[8] = 0xff // count far beyond the bytes left
	wantCode(t, new(wire.MembersResponse).Decode(b), wire.CodeMalformed)
}

func TestWrongEpochError(t *testing.T) {
	e := &wire.Error{Code: wire.CodeWrongEpoch, Message: "key owned elsewhere", Epoch: 1 << 40}
	got, err := wire.DecodeError(e.AppendTo(nil))
	if err != nil || got.Epoch != 1<<40 || got.Code != wire.CodeWrongEpoch {
		t.Fatalf("got %+v, %v", got, err)
	}
	if !errors.Is(got, &wire.Error{Code: wire.CodeWrongEpoch}) {
		t.Fatal("errors.Is does not match WRONG_EPOCH")
	}
	// The epoch is required: a WRONG_EPOCH without it is malformed.
	short := (&wire.Error{Code: wire.CodeWrongEpoch, Message: "x"}).AppendTo(nil)
	if _, err := wire.DecodeError(short[:len(short)-8]); err == nil {
		t.Fatal("WRONG_EPOCH without an epoch decoded")
	}
	if wire.OpMembers.Since() != wire.Version2 || wire.OpGet.Since() != wire.Version1 || wire.CodeWrongEpoch != 19 {
		t.Fatal("version 2 additions misplaced")
	}
}
