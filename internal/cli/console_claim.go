package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// defaultClaimFor is how long a claim from the console lasts unless renewed
// (--claim-for; at most ledger.MaxClaimFor).
const defaultClaimFor = 15 * time.Minute

// maxClaimBody bounds the body of POST /api/claim and /api/release.
const maxClaimBody = 2 << 10

// consoleClaim is who works a question, as the page shows it.
type consoleClaim struct {
	By    string    `json:"by"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Mine is true when the console's own operator holds it.
	Mine bool `json:"mine"`
}

// claimRequest is the body of POST /api/claim and /api/release.
type claimRequest struct {
	WorkflowID string `json:"workflow_id"`
	QuestionID string `json:"question_id"`
}

// parseClaimRequest reads a claim or release body as strictly as a
// decision's, every field bounded and named.
func parseClaimRequest(body []byte) (claimRequest, error) {
	var r claimRequest
	if len(body) > maxClaimBody {
		return r, badField("body", "the request is %d bytes, the limit is %d", len(body), maxClaimBody)
	}
	if err := plan.CheckJSON(body, maxClaimBody); err != nil {
		return r, badField("body", "the request is not plain JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, badField("body", "the request does not fit: %s", clipText(err.Error(), 200))
	}
	if dec.More() {
		return r, badField("body", "the request holds more than one JSON value")
	}
	for _, f := range []struct {
		name, v string
		limit   int
	}{{"workflow_id", r.WorkflowID, maxConsoleWorkflowID}, {"question_id", r.QuestionID, workflows.MaxQuestionIDLen}} {
		switch {
		case strings.TrimSpace(f.v) == "":
			return r, badField(f.name, "%s is required (at most %d bytes): reload the page", f.name, f.limit)
		case len(f.v) > f.limit:
			return r, badField(f.name, "%s is %d bytes, the limit is %d", f.name, len(f.v), f.limit)
		}
	}
	return r, nil
}

// claimOrRelease answers POST /api/claim and /api/release: the console's
// operator takes (or renews) the question for claimFor, or gives it back.
// Another operator's live claim is answered 409 with that claim.
func (c *console) claimOrRelease(w http.ResponseWriter, r *http.Request, claim bool) {
	if c.ledger == nil {
		consoleError(w, http.StatusConflict, "claims are kept in the ledger, and this console has none: start it with --ledger (or AGENTSAGA_LEDGER) as the workers use")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxClaimBody))
	if err != nil {
		consoleJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("the request is over the limit of %d bytes", maxClaimBody), "field": "body"})
		return
	}
	req, err := parseClaimRequest(body)
	if err != nil {
		consoleJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "field": err.(*fieldError).field})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	var got ledger.QuestionClaim
	if claim {
		got, err = c.ledger.ClaimQuestion(ctx, req.WorkflowID, req.QuestionID, c.operator, c.claimFor)
	} else {
		got, err = c.ledger.ReleaseQuestion(ctx, req.WorkflowID, req.QuestionID, c.operator)
	}
	switch {
	case errors.Is(err, ledger.ErrClaimed):
		consoleJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "claim": c.shownClaim(got)})
		return
	case err != nil:
		consoleJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	if !claim {
		consoleJSON(w, http.StatusOK, map[string]any{"message": fmt.Sprintf("question %s released", req.QuestionID)})
		return
	}
	consoleJSON(w, http.StatusOK, map[string]any{"claim": c.shownClaim(got),
		"message": fmt.Sprintf("question %s is yours until %s (claim it again to keep it)", req.QuestionID, got.Until.UTC().Format("15:04 UTC"))})
}

func (c *console) shownClaim(q ledger.QuestionClaim) *consoleClaim {
	if q.By == "" {
		return nil
	}
	return &consoleClaim{By: q.By, Since: q.Since.UTC(), Until: q.Until.UTC(), Mine: q.By == c.operator}
}

// claims returns the live claims by workflow and question id; nil without
// a ledger.
func (c *console) claims(ctx context.Context) (map[string]ledger.QuestionClaim, error) {
	if c.ledger == nil {
		return nil, nil
	}
	list, err := c.ledger.QuestionClaims(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ledger.QuestionClaim, len(list))
	for _, q := range list {
		out[q.WorkflowID+"\x00"+q.QuestionID] = q
	}
	return out, nil
}

// overrideNote is the note a decision carries into the audit trail when it
// answers a question another operator claims: whose claim it overrides,
// held since and until when. Empty when no one else holds it.
func overrideNote(q ledger.QuestionClaim, operator string) string {
	if q.By == "" || q.By == operator {
		return ""
	}
	return fmt.Sprintf("(overrides the claim of %s, held since %s until %s)", q.By, q.Since.UTC().Format("2006-01-02 15:04 UTC"), q.Until.UTC().Format("15:04 UTC"))
}
