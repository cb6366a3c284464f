package daemon

import (
	"strings"

	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/config"
)

// auditRecent is how many audit events the status page keeps.
const auditRecent = 50

// pageSource is what the admin status page (GET /) shows beyond STAT: the
// node, the cluster view (a single node is its own static one-member
// view), the configured tenants (never their secrets) and the last audit
// events.
func pageSource(cfg config.Config, node *clusterNode, sec *secure, data string, rates *admin.HitRates) admin.PageSource {
	src := admin.PageSource{Node: data, Version: Version, Rates: rates}
	if node != nil {
		src.Node = string(node.self.ID)
		src.Cluster = func() admin.ClusterView {
			v := node.viewJSON(nil)
			out := admin.ClusterView{Self: v.Self, Epoch: v.Epoch, Mode: v.Mode}
			for _, m := range v.Members {
				out.Members = append(out.Members, admin.ClusterMember{ID: m.ID, Addr: m.Addr,
					FaultDomain: m.FaultDomain, CapacityBytes: m.CapacityBytes, Draining: m.Draining})
			}
			return out
		}
	} else {
		src.Cluster = func() admin.ClusterView {
			return admin.ClusterView{Self: data, Mode: "static", Members: []admin.ClusterMember{
				{ID: data, Addr: data, FaultDomain: cfg.FaultDomain, CapacityBytes: uint64(cfg.HotCapacity)}}}
		}
	}
	if cfg.AuditLog != "off" {
		src.Audit = sec.recent
	}
	src.Tenants = func() []admin.TenantRow {
		sec.mu.Lock()
		ts := sec.cur.Tenants // reloads replace the slice, never edit it
		sec.mu.Unlock()
		rows := make([]admin.TenantRow, 0, len(ts))
		for _, t := range ts {
			rights := "*=rw"
			if len(t.Rights) > 0 {
				rights = strings.Join(t.Rights, " ")
			}
			rows = append(rows, admin.TenantRow{Name: t.Name, Rights: rights, CertNames: len(t.CertNames), OpsPerSec: t.OpsPerSec})
		}
		return rows
	}
	return src
}
