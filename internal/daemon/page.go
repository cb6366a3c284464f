package daemon

import (
	"encoding/json"
	"net/http"
	"os"
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
	view := func() viewJSON { return staticView(cfg, data) }
	if node != nil {
		src.Node = string(node.self.ID)
		view = func() viewJSON { return node.viewJSON(nil) }
	}
	src.Cluster = func() admin.ClusterView {
		v := view()
		out := admin.ClusterView{Self: v.Self, Epoch: v.Epoch, Mode: v.Mode}
		for _, m := range v.Members {
			out.Members = append(out.Members, admin.ClusterMember{ID: m.ID, Addr: m.Addr,
				FaultDomain: m.FaultDomain, CapacityBytes: m.CapacityBytes, Draining: m.Draining})
		}
		return out
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

// staticView is a single node's cluster view (no etcd): itself, the only
// member, at epoch 0 in control mode "static". GET /cluster and the status
// page answer it where a cluster member answers its live view.
func staticView(cfg config.Config, data string) viewJSON {
	domain := cfg.FaultDomain
	if domain == "" { // as a cluster member's (config.Member): the host name
		if h, err := os.Hostname(); err == nil && h != "" {
			domain = h
		} else {
			domain = "default"
		}
	}
	return viewJSON{Self: data, Mode: "static", Members: []memberJSON{{ID: data, Addr: data,
		FaultDomain: domain, ProtoVersion: uint8(cfg.ProtocolMax), CapacityBytes: uint64(cfg.HotCapacity)}}}
}

// staticRoutes registers GET /cluster on a single node, so that tools
// and operators read one endpoint whether or not the node is clustered.
func staticRoutes(h interface {
	HandleView(string, http.HandlerFunc)
}, cfg config.Config, data string) {
	h.HandleView("cluster", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(staticView(cfg, data))
	})
}
