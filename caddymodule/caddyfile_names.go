package caddymodule

import (
	"encoding/json"
	"fmt"

	"github.com/freqcap/caddy-freqcap/internal/answer"

	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// namedCapSetsKey keeps, in the adaptation's State, the named cap sets
// met so far: their settings and where they are.
const namedCapSetsKey = "frequency_cap.named"

type namedCapSet struct {
	signature string
	at        string // file:line
}

// adaptDefaults fills in every default that Provision may fill in (see
// fillDefaults, provisionAnswer, compileBatch), whether or not the
// handler's other settings would have it filled: compared so, two
// handlers the load takes for one are never told apart here (the load
// still refuses the ones it tells apart that this takes for one).
func (h *Handler) adaptDefaults() {
	h.fillDefaults()
	if h.Answer == "" {
		h.Answer = answer.Default
	}
	if h.StatusCode == 0 && h.Answer == answer.Default {
		h.StatusCode = DefaultStatusCode
	}
	if h.Batch == "" {
		h.Batch = BatchReject
	}
	if h.MaxBatch == 0 {
		h.MaxBatch = DefaultMaxBatch
	}
	if h.Answer == SpliceExpo && h.Batch == BatchDrop {
		h.Splice = SpliceExpo
	}
}

// checkNameUnique refuses a cap set named as one met earlier in the same
// Caddyfile with other settings, naming both lines. The load refuses it
// too (register), but without a line, the check spanning blocks. The same
// settings under one name (a snippet imported in several routes) are one
// cap set. here is the block's file:line. Settings are compared with
// every default filled in (adaptDefaults), so an explicit default is no
// difference. Named routes are adapted with a State of their own: only the load sees them.
func checkNameUnique(h httpcaddyfile.Helper, handler *Handler, here string) error {
	if handler.Name == "" || handler.Name == DefaultName {
		return nil // unnamed cap sets are only warned about (register)
	}
	filled := *handler
	filled.adaptDefaults()
	signature, err := json.Marshal(&filled)
	if err != nil {
		return err
	}
	seen, _ := h.State[namedCapSetsKey].(map[string]namedCapSet)
	if seen == nil {
		seen = map[string]namedCapSet{}
		h.State[namedCapSetsKey] = seen
	}
	if prev, ok := seen[handler.Name]; ok && prev.signature != string(signature) {
		return fmt.Errorf("%s: frequency_cap named %s has other settings than the one at %s; give each cap set a name of its own (metrics, the admin API and the console tell them apart by it), or one set of settings (a snippet imported where it is used) to share its counts", here, handler.Name, prev.at)
	}
	if _, ok := seen[handler.Name]; !ok {
		seen[handler.Name] = namedCapSet{signature: string(signature), at: here}
	}
	return nil
}
