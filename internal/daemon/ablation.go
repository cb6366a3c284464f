package daemon

import (
	"log/slog"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/dpu"
)

// logAblation logs one NOT_RUN_HARDWARE line per enabled hardware ablation
// knob (ablation_p2p, ablation_dpa). That is all a knob does: nothing else
// in the node reads them, so the bytes it stores are the same either way
// (TestAblationKnobsChangeNoStoredByte).
func logAblation(cfg config.Config, log *slog.Logger) {
	for _, n := range (dpu.Ablation{P2P: cfg.AblationP2P, DPA: cfg.AblationDPA}).Notices() {
		log.Warn("ablation knob enabled: "+n.Line(), "knob", n.Knob, "hardware", n.Hardware)
	}
}
