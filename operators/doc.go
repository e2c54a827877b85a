// Package operators gives human decisions an identity the decider cannot
// simply type.
//
// # Design
//
// Every operator holds an Ed25519 private key in a file only they can read
// (mode 0600, made by `starter operator keygen --name alice --out alice.key`;
// LoadKey refuses a key file that group or others may read, as ssh does).
// The worker is given an operators file (`worker --operators FILE`, env
// AGENTSAGA_OPERATORS) listing, for each operator, the name, the public key
// and the actions they may take:
//
//	{"operators": [
//	  {"name": "alice", "public_key": "x2Jr…base64…=", "may": ["approve", "resolve"]},
//	  {"name": "bob",   "public_key": "Q0s1…base64…=", "may": ["resolve"]}
//	]}
//
// The operators file holds no secret: only public keys. It must not be
// writable by others (Load refuses a world-writable file), because whoever can
// edit it can add themselves.
//
// The CLI (or any client) signs each decision with the operator's key:
// Sign(key, decision.SigningBytes(workflowID)). The signed bytes are a
// versioned encoding of the workflow ID, the kind of decision and every field
// of the decision except the signature (question id, run id, step,
// fingerprint, answer, note, who, when sent), so a signature answers exactly
// one question of one run of one plan with one answer and cannot be replayed
// onto another question, another run (a reset, or a second run of the same
// workflow ID asking the same question id), another plan or another answer. The workflow's Update validator calls
// Keyring.Verify(by, action, msg, sig): an unknown operator, an operator not
// allowed to take the action, a missing, malformed or wrong signature are
// refused with an error that says what to do, and the decision is rejected
// before it enters the workflow history.
//
// Without an operators file (the dev stack) the Keyring is nil: Verify
// returns ErrUnverified, the typed name is accepted and every record of the
// decision marks it unverified. That is a development convenience, not an
// identity.
//
// # What the signature does and does not do
//
// The signature names the person who decided. It does not decide who may
// talk to Temporal at all: on a secured cluster (mTLS client certificates or
// API keys, with Temporal's authorizer and claim mapper) the caller's Temporal
// credentials authorise who may send Updates and signals to the namespace in
// the first place; give operators' machines credentials that may send
// updates, and planners credentials that may only start workflows. The two
// layers are independent: stolen Temporal credentials alone cannot produce a
// signed decision, and a stolen operator key alone cannot reach the cluster.
// Temporal's client `identity` string is free text chosen by the client and is
// NOT an identity; nothing here relies on it.
//
// # Limits
//
// Operator names are 1 to 64 printable characters (no control characters,
// no spaces at either end, no invisible or formatting characters: see
// CheckIdentity), in one script (CheckScripts: Latin with Cyrillic or Greek
// is refused; Han with Kana, Bopomofo or Hangul, each with Latin, is not).
// Two names are one identity when their Skeletons agree (NFKC, case folded,
// and the Latin look-alikes of Unicode TS #39's confusables that
// confusables.go lists: Cyrillic, Greek, full-width forms): the operators
// file refuses such a pair, and four eyes compares a decider with a plan's
// requester so ("ａｌｉｃｅ" and "аlice" are alice). Public keys are 32-byte Ed25519 keys in standard
// base64; signatures are 64 bytes in standard base64 with canonical padding.
// A public key may belong to one operator only. Revoking an operator is
// removing their entry and restarting the worker; decisions already applied
// stay recorded with the verification they had when they were applied.
package operators
