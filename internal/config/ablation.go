package config

import "fmt"

// The hardware ablation knobs and the refused hot-tier erasure coding
// (docs/adr/0017-storage-queue-offload-hypothesis.md and
// docs/adr/0018-no-hot-tier-erasure-coding.md).
//
// ablation_p2p and ablation_dpa name hardware paths this build does not
// have (GPU peer-to-peer DMA; the BlueField's data-path accelerator).
// Enabling one is allowed so that a paired run's config can carry it, but
// it only logs NOT_RUN_HARDWARE at start (internal/dpu, Ablation) and
// changes no stored byte.
//
// hot_erasure_coding exists only to be refused: durability lives in the
// cold tier and the hot tier holds no replicas, so there is nothing for
// erasure coding to protect there.

// HotErasureCodingADR is the decision the refusal of hot_erasure_coding
// names.
const HotErasureCodingADR = "docs/adr/0018-no-hot-tier-erasure-coding.md"

func (c *Config) ablationFields() []field {
	return []field{
		{"ablation_p2p", "GPU peer-to-peer DMA ablation knob: logs NOT_RUN_HARDWARE, changes no byte", (*boolVal)(&c.AblationP2P)},
		{"ablation_dpa", "BlueField DPA ablation knob: logs NOT_RUN_HARDWARE, changes no byte", (*boolVal)(&c.AblationDPA)},
		{"hot_erasure_coding", "refused: the hot tier holds no replicas (" + HotErasureCodingADR + ")", (*boolVal)(&c.HotErasureCoding)},
	}
}

func (c Config) validateAblation() error {
	if c.HotErasureCoding {
		return fmt.Errorf("%w: hot_erasure_coding cannot be enabled: durability lives in the cold tier and the hot tier holds no replicas to encode; see %s", ErrInvalid, HotErasureCodingADR)
	}
	return nil
}
