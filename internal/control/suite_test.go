package control_test

import (
	"testing"

	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/control/membershiptest"
)

func TestStaticMembershipSuite(t *testing.T) {
	membershiptest.Run(t, func(t *testing.T, members ...control.Member) membershiptest.Cluster {
		s, err := control.NewStatic(members...)
		if err != nil {
			t.Fatal(err)
		}
		return membershiptest.Cluster{M: s}
	})
}

func TestMemoryMembershipSuite(t *testing.T) {
	membershiptest.Run(t, func(t *testing.T, members ...control.Member) membershiptest.Cluster {
		m, err := control.NewMemory(1, members...)
		if err != nil {
			t.Fatal(err)
		}
		return membershiptest.Cluster{M: m, Changes: memoryChanger{m}}
	})
}

type memoryChanger struct{ m *control.Memory }

func (c memoryChanger) Join(_ *testing.T, m control.Member) error {
	_, err := c.m.Join(m)
	return err
}

func (c memoryChanger) Leave(_ *testing.T, id control.MemberID) error {
	_, err := c.m.Leave(id)
	return err
}

func (c memoryChanger) Drain(_ *testing.T, id control.MemberID) error {
	_, err := c.m.Drain(id)
	return err
}
