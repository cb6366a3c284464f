package policy

import (
	"fmt"
	"strings"
)

// CostModel prices the prefill of a block of prompt tokens: what a hit on
// the block saves the engine. A token costs
//
//	2·Params + 4·Layers·Hidden·n
//
// floating-point operations, n being the number of tokens it attends to
// (itself and every token before it): 2 FLOPs per parameter for the
// matrix products of the projections and the MLP (one multiply and one
// add per weight), and, in each layer, the query's dot products with n
// keys and the weighted sum of n values, 2·Hidden·n FLOPs each. A block at
// position p (0 = first) of t tokens, in a chain of blockTokens-token
// blocks, therefore costs
//
//	2·Params·t + 4·Layers·Hidden·AttentionCost(p, t, blockTokens)
//
// FLOPs (BlockFLOPs). The linear part dominates until a token's context
// reaches Params / (2·Layers·Hidden) tokens (Crossover): 30,632 for
// Llama-3-8B, 53,864 for Llama-3-70B. Grouped-query attention shrinks
// the key and value projections, which Params already counts, not the
// attention products. The embedding lookup, the norms, the softmax and
// the final logits are left out: together under 1% of the layer FLOPs of
// these shapes, and the logits are computed for the last token only.
//
// The model with Params 0 (AttentionOnly) is the attention work alone, the
// measure the trace simulator used before the models were added.
type CostModel struct {
	// Name is the configuration name (hot_cost_model), e.g. "llama-3-8b".
	Name string
	// Params is the number of parameters, Layers the number of
	// transformer layers and Hidden the model (residual) width.
	Params float64
	Layers uint32
	Hidden uint32
}

// The named cost models. Parameter counts are the published ones
// (8.03 B and 70.6 B, embeddings included, untied output head); layer
// counts and widths are those of the models' config.json.
var (
	// Llama3_8B is Llama-3-8B (and 3.1-8B): 32 layers, width 4,096.
	Llama3_8B = CostModel{Name: "llama-3-8b", Params: 8.03e9, Layers: 32, Hidden: 4096}
	// Llama3_70B is Llama-3-70B (and 3.1-70B, 3.3-70B): 80 layers,
	// width 8,192.
	Llama3_70B = CostModel{Name: "llama-3-70b", Params: 70.6e9, Layers: 80, Hidden: 8192}
	// AttentionOnly counts the attention work alone, in token-pairs
	// (AttentionCost): the per-token linear cost is left out.
	AttentionOnly = CostModel{Name: "attention", Params: 0, Layers: 1, Hidden: 1}
)

// DefaultCostModel is the model Cost weighs blocks by unless told
// otherwise (NewCost, hot_cost_model's default).
var DefaultCostModel = Llama3_8B

// costModels are the named models, sorted by name.
var costModels = [...]CostModel{AttentionOnly, Llama3_70B, Llama3_8B}

// CostModels lists the named models' names, sorted.
func CostModels() []string {
	out := make([]string, len(costModels))
	for i, m := range costModels {
		out[i] = m.Name
	}
	return out
}

// CostModelByName returns the named model.
func CostModelByName(name string) (CostModel, error) {
	for _, m := range costModels {
		if m.Name == name {
			return m, nil
		}
	}
	return CostModel{}, fmt.Errorf("gpucache/policy: unknown cost model %q (known: %s)", name, strings.Join(CostModels(), ", "))
}

// TokenFLOPs is the cost of one token that attends to n tokens.
func (m CostModel) TokenFLOPs(n float64) float64 {
	return 2*m.Params + 4*float64(m.Layers)*float64(m.Hidden)*n
}

// BlockFLOPs is the cost of the block at position p holding t tokens in a
// chain of blockTokens-token blocks: the sum of TokenFLOPs over its tokens.
// For AttentionOnly it is 4·AttentionCost(p, t, blockTokens).
func (m CostModel) BlockFLOPs(p, t, blockTokens uint32) float64 {
	return 2*m.Params*float64(t) + 4*float64(m.Layers)*float64(m.Hidden)*AttentionCost(p, t, blockTokens)
}

// Crossover is the context length, in tokens, at which a token's attention
// costs as much as its linear part: Params / (2·Layers·Hidden); 0 for
// AttentionOnly.
func (m CostModel) Crossover() float64 {
	return m.Params / (2 * float64(m.Layers) * float64(m.Hidden))
}
