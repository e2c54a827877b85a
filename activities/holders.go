package activities

import "github.com/agentsaga/agentsaga/ledger"

// ErrClashUnseen: the call's override approval was given on a card that did
// not show every operation holding the guard scope now (one started after
// the card was drawn). Final; the tool was not called: the workflow asks
// again with a fresh card.
const ErrClashUnseen = "ClashUnseen"

// cardHolders returns the keys of the operations of ops (a guard scope's,
// newest first) that hold the scope, key excluded, and others with every
// such holder added that it lacks: the card lists each holder the permit
// will name, however many other operations the scope has.
func cardHolders(ops []ledger.Operation, key string, others []ledger.Operation) ([]string, []ledger.Operation) {
	listed := make(map[string]bool, len(others))
	for _, op := range others {
		listed[op.Key] = true
	}
	var holders []string
	for _, op := range ops {
		if op.Key == key || !holdsScope(op) {
			continue
		}
		holders = append(holders, op.Key)
		if !listed[op.Key] {
			others = append(others, op)
			listed[op.Key] = true
		}
	}
	return holders, others
}
