package cold_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

var errInjected = errors.New("injected")

func TestMemFaultBefore(t *testing.T) {
	ctx := t.Context()
	m := cold.NewMem()
	m.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpPut && key == "deny" {
			return errInjected
		}
		return nil
	})
	if err := m.Put(ctx, "deny", []byte("x"), cold.PutOptions{}); !errors.Is(err, errInjected) {
		t.Fatalf("Put with a before-fault: %v, want the injected error", err)
	}
	if err := m.Put(ctx, "allow", []byte("x"), cold.PutOptions{}); err != nil {
		t.Fatalf("Put of another key: %v", err)
	}
	m.SetFault(nil)
	if _, err := m.Head(ctx, "deny"); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("a failed-before Put left an object: Head = %v", err)
	}
}

func TestMemFaultAfterCommits(t *testing.T) {
	ctx := t.Context()
	m := cold.NewMem()
	m.SetFaultAfter(func(_ context.Context, op, _ string) error {
		if op == cold.OpPut {
			return errInjected
		}
		return nil
	})
	err := m.Put(ctx, "ambiguous", []byte("committed"), cold.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, errInjected) {
		t.Fatalf("Put with an after-fault: %v, want the injected error", err)
	}
	// The write took effect although the caller saw an error: a retry of the
	// conditional Put now finds the key taken.
	err = m.Put(ctx, "ambiguous", []byte("retry"), cold.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, cold.ErrExists) {
		t.Fatalf("retried conditional Put: %v, want ErrExists", err)
	}
	m.SetFaultAfter(nil)
	dst := make([]byte, len("committed"))
	if err := m.RangeGet(ctx, "ambiguous", 0, dst); err != nil || string(dst) != "committed" {
		t.Fatalf("RangeGet = %q, %v; want the committed body", dst, err)
	}
}

func TestMemCalls(t *testing.T) {
	ctx := t.Context()
	m := cold.NewMem()
	m.SetFault(func(_ context.Context, op, _ string) error {
		if op == cold.OpHead {
			return errInjected
		}
		return nil
	})
	_ = m.Put(ctx, "k", []byte("v"), cold.PutOptions{})
	_, _ = m.Head(ctx, "k")
	_, _ = m.Head(ctx, "k")
	_ = m.List(ctx, "", func(cold.ObjectInfo) error { return nil })
	got := m.Calls()
	want := map[string]int{cold.OpPut: 1, cold.OpHead: 2, cold.OpList: 1}
	for op, n := range want {
		if got[op] != n {
			t.Errorf("Calls()[%s] = %d, want %d", op, got[op], n)
		}
	}
	if got[cold.OpRangeGet] != 0 || got[cold.OpDelete] != 0 {
		t.Errorf("Calls() = %v, want no RangeGet or Delete", got)
	}
	got[cold.OpPut] = 99 // a copy: must not change the store's counters
	m.ResetCalls()
	if c := m.Calls(); len(c) != 0 {
		t.Fatalf("after ResetCalls: %v", c)
	}
	if k := m.Keys(); len(k) != 1 || k[0] != "k" {
		t.Fatalf("Keys() = %q", k)
	}
}

func TestMemFaultGetsOperationContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	m := cold.NewMem()
	// A slow store: the fault blocks until the operation's context ends.
	m.SetFault(func(ctx context.Context, _, _ string) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if _, err := m.Head(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Head with a blocking fault: %v, want context.Canceled", err)
	}
}

func TestMemDoesNotAliasBuffers(t *testing.T) {
	ctx := t.Context()
	m := cold.NewMem()
	body := []byte("original")
	if err := m.Put(ctx, "k", body, cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	copy(body, "CHANGED!")
	dst := make([]byte, len(body))
	if err := m.RangeGet(ctx, "k", 0, dst); err != nil || !bytes.Equal(dst, []byte("original")) {
		t.Fatalf("RangeGet = %q, %v; Mem kept the caller's buffer", dst, err)
	}
}
